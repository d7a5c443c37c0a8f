"""ddq_index: the recovery index (queue.index) of a ddq queue, loaded only when a queue needs it.

ddq.Queue imports this module when its log reaches index_bytes (to write the index at close,
after a compaction or on save_index()) or when a queue.index is present at open (to adopt it).
A board whose logs never reach index_bytes never loads it; without this module a queue simply
replays its whole log at open (the index is derived data, SPEC §12.1 [X1]-[X8]).

    import ddq
    q = ddq.Queue("outbox", index_bytes=65536)
    ...
    q.save_index()   # imports ddq_index; the next open replays only what follows

Format: see docs/SPEC.md §12.1.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import struct
from array import array

import ddq
from ddq import const  # the const shim, once (ddq compat)

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Generator

# ============================================================================ recovery index
# ddq's values that the index reads, by group (ddq.py's format section names each): a MicroPython
# const folds in its own module only (tests/host/test_host_index.py holds them equal to ddq's).
_REC_MAGIC = const(0x31475144)  # a record's header, for the cross-checks [X10] (SPEC §3.1 [F1])
_VERSION = const(1)
_R_TYPE = const(6)
_R_RLEN = const(28)
_HDR = const(40)
_MIN_REC = const(48)
_T_DATA = const(1)  # the records an entry points at (SPEC §4 [F10])
_T_QUAR = const(5)
_AVAILABLE = const(1)  # the states a column holds (SPEC §4.1 [F11])
_CLAIMED = const(2)
_ACKED = const(3)
_QUARANTINED = const(4)
_M_CRC = const(40)  # the manifest's crc field, which the header holds [X2] (SPEC §5 [M1])
_MAX_REASON = const(4096)  # bounds of a load (SPEC §7.1, §12 [R4]) and its errno
_IO_LOOPS = const(1048576)
_SCAN_RECORDS = const(4000000)
_EIO = const(5)
_CH = const(256)  # ddq._Index's column chunk: items per chunk, its log2 and mask (ddq.py)
_CS = const(8)
_CM = const(255)
_LV_I = const(0)  # a live entry's fields (ddq._Index.live), then a hist entry's, as saved
_LV_ATT = const(1)
_LV_LEASE = const(2)
_LV_NB = const(3)
_HS_ATT = const(0)
_HS_NB = const(1)
_CP_SEGS = const(0)  # recovery's snapshot boundary, as ddq_recover hands it to load()
_CP_ITEMS = const(1)
_CP_END = const(2)
_CP_NEXT = const(3)
# The header: SPEC §12.1 [X2]. magic version reserved abi manifest_crc generation next_seq, then
# 16 u32: items fresh available claimed acked quarantined live hist reasons segments plan_segs
# plan_off max_payload flags body_crc header_crc
_IX_FMT = "<IHHIIQQIIIIIIIIIIIIIIII"
_IX_MAGIC = 0x49514444  # b"DDQI"
_IX_SIZE = const(96)
_IX_NO_PLAN = 0xFFFFFFFF
# The body's entries [X2]: a segment's (crc, size, first record_length), u32 each; an item's five
# columns (seq u64, segment u16, offset u32, length u32, state u8); the offset column after the
# first two; a live entry (seq u64, attempts u32, lease u64, not_before u64); a hist entry (seq
# u64, attempts u32, not_before u64) and a reason's (seq u64, segment, offset, length u32).
_IX_SEG = const(12)
_IX_ITEM = const(19)
_IX_OFFS = const(10)
_IX_LIVE = const(28)
_IX_HIST = const(20)


def abi() -> int:
    """The index columns are stored in native order and width [X2]: the writer's ABI tag."""
    return ddq._crc(bytes(array("Q", [1])) + bytes(array("H", [1])) + bytes(array("I", [1])))


def _body(q: "ddq.Queue") -> "Generator[Any, None, None]":
    # The body of queue.index in order [X2]: segments, the five columns (as RAM derives them, in
    # chunks of at most _CH items), live, hist, reasons. Sweeps are undone: the file holds the
    # durable state, as a replay would [X3]. Called twice (crc, then write): nothing is kept.
    log, n = q._log, q._ix.n
    b = bytearray(_IX_SEG)
    for k in range(len(log.ck)):
        struct.pack_into("<III", b, 0, log.ck[k][0], log.ck[k][1], log.ck[k][2])
        yield b
    sw = q._swept
    w: "list[Any]" = [0, 0, None]  # the offset walk: segment, position, open handle
    try:
        yield from _columns(q, n, sw, w)
    finally:
        if w[2] is not None:
            q._o.fs.close(w[2])
    yield from _entries(q, sw)


def _columns(
    q: "ddq.Queue", n: int, sw: "dict[int, int]", w: "list[Any]"
) -> "Generator[Any, None, None]":
    ix = q._ix
    for col in range(5):
        sg = r = 0
        for c in range(len(ix.col)):
            i0 = c << _CS
            m = min(_CH, n - i0)
            if col == 0:  # seq: along the runs
                a = array("Q", bytes(8 * m))
                for t in range(m):
                    while r + 1 < len(ix.ro) and ix.ro[r + 1] <= i0 + t:
                        r += 1
                    a[t] = ix.rs[r] + i0 + t - ix.ro[r]
                yield a
            elif col == 1:  # segment: along the first item of each segment
                a = array("H", bytes(2 * m))
                for t in range(m):
                    while sg + 1 < len(ix.sfo) and ix.sfo[sg + 1] <= i0 + t:
                        sg += 1
                    a[t] = sg
                yield a
            elif col == 2:  # offset: RAM does not keep it; one walk of the record headers
                a = array("I", bytes(4 * m))
                for t in range(m):
                    a[t] = _next_data(q, w)
                yield a
            elif col == 3:  # payload length: u32 in the file
                a = array("I", bytes(4 * m))
                for t in range(m):
                    a[t] = ix.length(i0 + t)
                yield a
            else:  # state: u8 in the file
                st = bytearray(m)
                for t in range(m):
                    st[t] = ix.state(i0 + t)
                if sw:
                    for s, e in ix.live.items():
                        if s in sw and e[_LV_I] >> _CS == c:
                            st[e[_LV_I] & _CM] = _CLAIMED
                yield st


def _entries(q: "ddq.Queue", sw: "dict[int, int]") -> "Generator[Any, None, None]":
    # The live entries, the hist entries and the reasons [X2].
    ix = q._ix
    for d, w in ((ix.live, _IX_LIVE), (ix.hist, _IX_HIST), (ix.reasons, _IX_HIST)):
        if not d:
            continue
        b = bytearray(w * len(d))
        k = 0
        for s, e in d.items():
            if d is ix.live:
                lease = sw.get(s, e[_LV_LEASE])
                struct.pack_into("<QIQQ", b, k, s, e[_LV_ATT], lease, e[_LV_NB])
            elif d is ix.hist:
                struct.pack_into("<QIQ", b, k, s, e[_HS_ATT], e[_HS_NB])
            else:  # segment index, offset, length
                struct.pack_into("<QIII", b, k, s, e[0], e[1], e[2])
            k += w
        yield b


def _next_data(q: "ddq.Queue", w: "list[Any]") -> int:
    # The offset of the next DATA record of the (synced) log in log order, one header read a
    # record; w = [segment, position, open handle or None] carries the walk between calls.
    log, hb = q._log, q._o.rec  # the record buffer's header: no append runs while indexing
    mv = memoryview(hb)[0:_HDR]
    for _ in range(_SCAN_RECORDS):
        k: int = w[0]
        pos: int = w[1]
        if k >= len(log.sizes):
            break
        if pos >= log.sizes[k]:
            if w[2] is not None:
                q._o.fs.close(w[2])
                w[2] = None
            w[0], w[1] = k + 1, 0
            continue
        if w[2] is None:
            w[2] = q._o.fs.open(q._path(ddq.segment_name(log.gen, k)), "rb")
        rlen = (
            struct.unpack_from("<I", hb, _R_RLEN)[0] if q._read_exact(w[2], pos, mv) == _HDR else 0
        )
        if rlen < _MIN_REC:
            break
        w[1] = pos + rlen
        if hb[_R_TYPE] == _T_DATA and hb[_R_TYPE + 1] == 0:  # a DATA record (type: u16)
            return pos
    raise OSError(_EIO, "the log has fewer DATA records than the index has items")


def _plan_key(q: "ddq.Queue") -> int:
    # flags bits 8-31: the options the admission plan was computed with [X2].
    k = struct.pack("<III", q._o.seg_bytes, q._o.max_segs, q.reason_budget)
    return ddq._crc(k) & 0xFFFFFF00


def _header(q: "ddq.Queue", body: int, mcrc: int) -> bytearray:
    ix, log, p = q._ix, q._log, q._plan
    pay = 0
    for i in range(ix.n):
        pay = max(pay, ix.length(i))
    for r in ix.reasons.values():
        pay = max(pay, r[2])
    sw = len(q._swept)
    b = bytearray(_IX_SIZE)
    struct.pack_into(
        _IX_FMT,
        b,
        0,
        _IX_MAGIC,
        1,
        0,
        abi(),
        mcrc,
        log.gen,
        q._log.next,
        ix.n,
        ix.fresh,
        ix.avail - sw,
        ix.claimed + sw,
        ix.acked,
        ix.quar,
        len(ix.live),
        len(ix.hist),
        len(ix.reasons),
        len(log.ck),
        _IX_NO_PLAN if p is None else p[0],
        0 if p is None else p[1],
        pay,
        _plan_key(q) | (1 if q._has_manifest else 0),
        body,
        0,
    )
    struct.pack_into("<I", b, _IX_SIZE - 4, ddq._crc(memoryview(b)[0 : _IX_SIZE - 4]))
    return b


def save(q: "ddq.Queue") -> None:
    """Write queue.index for the synced log of q (OSError on a storage error) [X1]."""
    fs, log = q._o.fs, q._log
    try:
        for k in range(len(log.sizes)):  # [X4] extend each segment's running CRC
            if k == len(log.ck):
                log.ck.append([0, 0, 0])
            c, size = log.ck[k], log.sizes[k]
            if c[1] < size:
                path = q._path(ddq.segment_name(log.gen, k))
                if c[1] == 0 and k > 0:  # its first record_length, for F7 [X5]
                    h = fs.open(path, "rb")
                    try:
                        if q._read_exact(h, 0, q._o.mv_hdr) != len(q._o.mv_hdr):
                            raise OSError(_EIO, "short read in " + path)
                    finally:
                        fs.close(h)
                    c[2] = struct.unpack_from("<I", q._o.rec, _R_RLEN)[0]  # (no append runs here)
                c[0], c[1] = crc_span(q, path, c[1], size, c[0]), size
    finally:
        q._buf(0)  # the read buffer, sized for the CRC pass, is dropped
    mcrc = 0
    if q._has_manifest:
        mcrc = crc_span(q, q._path(ddq._MANIFEST), 0, _M_CRC, 0)
    body = 0
    g = _body(q)
    try:
        for b in g:
            body = ddq._crc(b, body)
    finally:
        g.close()  # its finally closes the offset walk's segment
    tmp = q._path(ddq._INDEX_TMP)
    if fs.kind(tmp) != 0:
        fs.remove(tmp)
    h = fs.open(tmp, "wb")
    try:
        fs.write(h, _header(q, body, mcrc))
        g = _body(q)
        try:
            for b in g:
                if len(b):  # a typed chunk's len() counts items: write its bytes
                    fs.write(h, b if isinstance(b, bytearray) else bytes(b))
        finally:
            g.close()
        fs.sync(h)
    finally:
        fs.close(h)
    fs.rename(tmp, q._path(ddq._INDEX))  # old or new index, never a torn one [X1]
    fs.sync_dir(q._o.dir)
    q._ixcov = [log.gen] + list(log.sizes)


def load(q: "ddq.Queue", nsegs: int, cp: "list[int]", mcrc: int) -> int:
    """Adopt queue.index when it matches the directory; return where to resume the last
    covered segment, or -1 (and change nothing) to replay everything [X5]."""
    fs, path = q._o.fs, q._path(ddq._INDEX)
    try:
        if fs.kind(path) != 1:
            return -1
        h = fs.open(path, "rb")
    except OSError:
        return -1
    try:
        return _adopt(q, h, fs.size(path), nsegs, cp, mcrc)
    except Exception:  # whatever a changed index makes the decoding raise: a cache miss [X10]
        return -1
    finally:
        fs.close(h)


def _adopt(q: "ddq.Queue", h: "Any", size: int, nsegs: int, cp: "list[int]", mcrc: int) -> int:
    fs, log = q._o.fs, q._log
    hb = bytearray(_IX_SIZE)
    if q._read_exact(h, 0, memoryview(hb)) != _IX_SIZE:
        return -1
    (
        magic,
        ver,
        res,
        ab,
        mc,
        gen,
        nxt,
        n,
        fresh,
        na,
        nc,
        nk,
        nq,
        nlive,
        nhist,
        nrs,
        ns,
        p0,
        p1,
        pay,
        flags,
        body,
        hcrc,
    ) = struct.unpack(_IX_FMT, hb)
    if (
        magic != _IX_MAGIC
        or ver != 1
        or hcrc != ddq._crc(memoryview(hb)[0 : _IX_SIZE - 4])
        or ab != abi()
        or gen != log.gen
        or mc != mcrc
        or (flags & 1) != q._has_manifest
        or ns == 0
        or ns > nsegs
        or n > q._o.max_items
        or pay > q._o.max_payload
        or na + nc + nk + nq != n
        or fresh > n
        or size
        != _IX_SIZE + _IX_SEG * ns + _IX_ITEM * n + _IX_LIVE * nlive + _IX_HIST * (nhist + nrs)
        or res
        or flags & 0xFE
        or nrs != nq
    ):
        return -1
    # [X10] next_seq against the manifest: the items from its item_count on are the ones
    # appended after its boundary, consecutive from its next_seq (R5, R8); cp is (0, 0, 0, 1)
    # without a manifest: seqs 1 .. n.
    if n < cp[_CP_ITEMS] or nxt != cp[_CP_NEXT] + n - cp[_CP_ITEMS]:
        return -1
    if crc_span(q, q._path(ddq._INDEX), _IX_SIZE, size, 0) != body:
        return -1
    ck: "list[list[int]]" = []
    b = bytearray(_IX_SEG)
    for k in range(ns):
        if q._read_exact(h, _IX_SIZE + _IX_SEG * k, memoryview(b)) != _IX_SEG:
            return -1
        crc, sz, first = struct.unpack_from("<III", b, 0)
        real = fs.size(q._path(ddq.segment_name(gen, k)))
        if sz > q._o.seg_bytes or real < sz or (k < ns - 1 and real != sz) or (first and not k):
            return -1
        ck.append([crc, sz, first])
    if q._has_manifest and (
        ns < cp[_CP_SEGS] or (ns == cp[_CP_SEGS] and ck[ns - 1][1] < cp[_CP_END])
    ):
        return -1  # [R8] the index must lie past the manifest's boundary
    if not prefix_ok(q, gen, ck):
        return -1
    big = 0  # [F7] as the replay checks it: a broken rotation sends it there, to name it
    snap = cp[_CP_SEGS] if gen else 0
    for k in range(1, ns):
        # (an empty segment: no first record)
        if ck[k][1] and (not ck[k - 1][1] or (k < snap and ck[k - 1][1] + ck[k][2] <= big)):
            return -1
        big = max(big, ck[k - 1][1])
    # The columns, read together in pieces of _CH items into the chunked index (no allocation
    # of a whole column) [X2]: seqs must increase and segments must not go back.
    nix = ddq._Index(q._o.tc)
    ro, rsq, sfo, mx = nix.ro, nix.rs, nix.sfo, q._o.max_payload
    pos = _IX_SIZE + _IX_SEG * ns
    prev = sgp = 0
    # [X10] what the columns hold, against the header: items by state (cnt[1..4]), the largest
    # length, plain available items below fresh (claim would never reach them: bf, less those
    # with a live entry below)
    cnt = [0, 0, 0, 0, 0]
    pmax = bf = 0
    for i0 in range(0, n, _CH):
        m = min(_CH, n - i0)
        cols: "list[Any]" = []
        for tc, w, base in (("Q", 8, 0), ("H", 2, 8), ("I", 4, 14), ("B", 1, 18)):  # no offset
            b = bytearray(w * m)
            if q._read_exact(h, pos + base * n + w * i0, memoryview(b)) != w * m:
                return -1
            cols.append(array(tc, b) if w > 1 else b)
        sq, sgc, lnc, stc = cols
        # _Index.add and put without their calls: the piece is one chunk of the index; a run
        # starts where seqs are not consecutive, a segment where the segment column moves.
        lo, hi = min(lnc), max(lnc)
        if hi > mx:
            return -1
        pmax = max(pmax, hi)
        # the chunk's one length; else one byte an item over the lowest (within 256 of it),
        # else the lengths themselves (base 0): _Index.add's forms, _CH slots each
        la: "Any" = None
        if hi - lo > 255:
            la = array(q._o.tc, lnc if m == _CH else bytes(_CH * (2 if q._o.tc == "H" else 4)))
            for t in range(m if m < _CH else 0):
                la[t] = lnc[t]
            lo = 0
        elif lo != hi:
            la = bytearray(_CH)
            for t in range(m):
                la[t] = lnc[t] - lo
        nix.cl.append(lo)
        nix.lv.append(la)
        ch = bytearray(_CH >> 2)  # states: all AVAILABLE (0)
        nix.col.append(ch)
        if (
            m == _CH
            and sgp <= sgc[0] == min(sgc) == max(sgc) < ns
            and max(stc) == _AVAILABLE == min(stc)
            and sq[0] > prev
        ):
            # The common piece: one segment, every item available (checked by C loops):
            # only the seqs are walked.
            if not i0 or sgc[0] != sgp:
                while len(sfo) <= sgc[0]:
                    sfo.append(i0)
            if not i0:  # the first item starts the first run
                ro.append(0)
                rsq.append(sq[0])
                prev = sq[0] - 1
            for t in range(m):
                s = sq[t]
                if s != prev + 1:
                    if s <= prev:
                        return -1
                    ro.append(i0 + t)
                    rsq.append(s)
                prev = s
            sgp = sgc[0]
            nix.n, nix.last = i0 + m, prev
            cnt[_AVAILABLE] += m
            if i0 < fresh:
                bf += min(m, fresh - i0)
            continue
        for t in range(m):
            s, sg, v = sq[t], sgc[t], stc[t]
            if s <= prev or sg < sgp or sg >= ns or v < _AVAILABLE or v > 4:
                return -1
            if s != prev + 1 or not i0 + t:
                ro.append(i0 + t)
                rsq.append(s)
            if sg != sgp or not i0 + t:
                while len(sfo) <= sg:
                    sfo.append(i0 + t)
            ch[t >> 2] |= (v - 1) << ((t & 3) << 1)
            prev, sgp = s, sg
            cnt[v] += 1
            if v == _AVAILABLE and i0 + t < fresh:
                bf += 1
        nix.n, nix.last = i0 + m, prev
    if cnt[1] != na or cnt[2] != nc or cnt[3] != nk or cnt[4] != nq:
        return -1
    # [X10] the seqs against the manifest's boundary (next_seq checked above)
    if (n > cp[_CP_ITEMS] and (nix.seq(cp[_CP_ITEMS]) != cp[_CP_NEXT] or prev != nxt - 1)) or (
        n and n == cp[_CP_ITEMS] and prev >= cp[_CP_NEXT]
    ):
        return -1
    live, hist = bytearray(_IX_LIVE * nlive), bytearray(_IX_HIST * nhist)
    rs = bytearray(_IX_HIST * nrs)
    pos += _IX_ITEM * n
    for b in (live, hist, rs):
        if len(b) and q._read_exact(h, pos, memoryview(b)) != len(b):
            return -1
        pos += len(b)
    nix.n, nix.fresh = n, fresh
    lc = 0
    for k in range(nlive):
        s, a, lease, nb = struct.unpack_from("<QIQQ", live, _IX_LIVE * k)
        i = nix.find(s)
        v = nix.state(i) if i >= 0 else 0
        if v != _AVAILABLE and v != _CLAIMED:
            return -1
        if v == _CLAIMED:
            lc += 1
        elif i < fresh:
            bf -= 1
        nix.live[s] = [i, a, lease, nb, -1]
    # [X10] every claimed item has its live entry (its lease), no plain available item lies
    # below fresh, no entry twice
    if lc != nc or bf or len(nix.live) != nlive:
        return -1
    for k in range(nhist):
        s, a, nb = struct.unpack_from("<QIQ", hist, _IX_HIST * k)
        i = nix.find(s)
        if i >= 0 and nix.state(i) < _ACKED:  # history of a terminal item only
            return -1
        nix.hist[s] = [a, nb]
    for k in range(nrs):
        s, sg, off, ln = struct.unpack_from("<QIII", rs, _IX_HIST * k)
        i = nix.find(s)
        if i < 0 or nix.state(i) != _QUARANTINED or ln > _MAX_REASON or sg >= ns:
            return -1
        pmax = max(pmax, ln)
        nix.reasons[s] = [sg, off, ln]
    if len(nix.reasons) != nrs or pay != pmax:
        return -1
    if not _log_ok(q, h, nix, ck, _IX_SIZE + _IX_SEG * ns + _IX_OFFS * n):
        return -1
    # Adopt: the covered segments but the last are whole; the last resumes its replay.
    q._ix, q._log.next = nix, nxt
    nix.avail, nix.claimed, nix.acked, nix.quar = na, nc, nk, nq  # (the columns': adopted whole)
    # The plan depends on the options (not stored, M8): another writer's is not used [X5].
    ok = p0 != _IX_NO_PLAN and flags & 0xFFFFFF00 == _plan_key(q)
    q._plan = [p0, p1] if ok else None
    log.ck = ck
    for k in range(ns - 1):
        log.sizes.append(ck[k][1])
    q._ixcov = [gen] + [e[1] for e in ck]
    return int(ck[-1][1])


def _log_ok(q: "ddq.Queue", h: "Any", nix: "Any", ck: "list[list[int]]", offs: int) -> bool:
    # [X10] the index against the records it points at, a header read each: the first and the
    # last item of every run of seqs and of every segment is a DATA record with its seq and
    # length at the offset the index stores (offs: where that column starts in h); every reason
    # is the QUARANTINE record it names; and from the last item's record to the covered end the
    # records follow each other to each covered size with no DATA among them (so next_seq lies
    # past every seq the covered bytes hold, and the end is a record boundary).
    n, ro, sfo = nix.n, nix.ro, nix.sfo
    at: "list[int]" = []
    for r in range(len(ro)):
        at.append(ro[r])
        at.append((ro[r + 1] if r + 1 < len(ro) else n) - 1)
    for k in range(len(sfo)):
        e = sfo[k + 1] if k + 1 < len(sfo) else n
        if e > sfo[k]:
            at.append(sfo[k])
            at.append(e - 1)
    at.sort()
    w: "list[Any]" = [-1, None, bytearray(_HDR)]  # the open segment: index, handle; a header
    ob = bytearray(4)
    try:
        last = p = -1
        for i in at:
            if i == p:  # (a run's end may be a segment's too)
                continue
            p = i
            if q._read_exact(h, offs + 4 * i, memoryview(ob)) != 4:
                return False
            sg, off = nix.at(sfo, i), array("I", ob)[0]
            r = _rec(q, w, sg, off, ck)
            if r is None or r[0] != _T_DATA or r[1] != nix.seq(i) or r[2] != nix.length(i):
                return False
            last = off + r[3]
        for s, e in nix.reasons.items():
            r = _rec(q, w, e[0], e[1], ck)
            if r is None or r[0] != _T_QUAR or r[1] != s or r[2] != e[2]:
                return False
        sg = nix.at(sfo, n - 1) if n else 0
        pos = last if n else 0
        for _ in range(_SCAN_RECORDS):
            if pos == ck[sg][1]:
                if sg + 1 == len(ck):
                    return True
                sg, pos = sg + 1, 0
                continue
            r = _rec(q, w, sg, pos, ck)
            if r is None or r[0] == _T_DATA:
                return False
            pos += r[3]
        return False
    finally:
        if w[1] is not None:
            q._o.fs.close(w[1])


def _rec(q: "ddq.Queue", w: "list[Any]", sg: int, pos: int, ck: "list[list[int]]") -> "Any":
    # (type, seq, payload length, record length) of a record header at pos of covered segment sg
    # whose record lies inside the covered bytes, else None. w: the open segment, kept.
    if sg >= len(ck) or pos + _MIN_REC > ck[sg][1]:
        return None
    if w[0] != sg:
        if w[1] is not None:
            q._o.fs.close(w[1])
            w[1] = None
        w[1] = q._o.fs.open(q._path(ddq.segment_name(q._log.gen, sg)), "rb")
        w[0] = sg
    hb = w[2]
    if q._read_exact(w[1], pos, memoryview(hb)) != _HDR:
        return None
    magic, ver, typ, seq, _a, plen, rlen, _c, _r = struct.unpack_from(ddq._REC_FMT, hb, 0)
    if magic != _REC_MAGIC or ver != _VERSION or rlen != _MIN_REC + plen or pos + rlen > ck[sg][1]:
        return None
    return typ, seq, plen, rlen


def prefix_ok(q: "ddq.Queue", gen: int, ck: "list[list[int]]") -> bool:
    """[X4] one sequential read + crc32 of every covered byte: any change to the prefix sends
    recovery back to the full replay, which names the damage; and [X10] each covered
    segment's first record_length (read on the way) is the one the index stores for F7."""
    fl: "list[int]" = []
    for k in range(len(ck)):
        if crc_span(q, q._path(ddq.segment_name(gen, k)), 0, ck[k][1], 0, fl) != ck[k][0]:
            return False
        if len(fl) == k:  # an empty segment: no first record
            fl.append(0)
        if k and fl[k] != ck[k][2]:
            return False
    return True


def crc_span(q: "ddq.Queue", path: str, pos: int, end: int, c: int, fl: "Any" = None) -> int:
    """The running crc32 c extended over bytes pos..end-1 of a file: one sequential read.
    fl: a list to append the record_length of the file's first record to (pos 0)."""
    mv = q._buf(min(max(end - pos, 1), 65536, max(q._o.seg_bytes >> 2, 1024)))  # as the replay's
    h = q._o.fs.open(path, "rb")
    try:
        for _ in range(_IO_LOOPS):
            if pos >= end:
                break
            n = q._read_exact(h, pos, mv[0 : min(len(mv), end - pos)])
            if n <= 0:
                raise OSError(_EIO, "short read in " + path)
            if fl is not None and not pos:
                fl.append(struct.unpack_from("<I", mv, _R_RLEN)[0] if n >= _R_RLEN + 4 else 0)
            c = ddq._crc(mv[0:n], c)
            pos += n
    finally:
        q._o.fs.close(h)
    return c
