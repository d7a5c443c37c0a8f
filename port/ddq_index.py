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
import time
from array import array

import ddq

_MP = hasattr(time, "ticks_ms")  # a feature probe; mypy's two passes read it as a flag
if _MP:
    from micropython import const
else:

    def const(x: int) -> int:
        return x


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Item states as in ddq (SPEC §4.1 [F11]); tests/test_index.py holds them equal to ddq's.
_AVAILABLE = const(1)
_CLAIMED = const(2)
_IO_LOOPS = const(1048576)
_EIO = const(5)
# The header: SPEC §12.1 [X2]. magic version reserved abi manifest_crc generation next_seq, then
# 16 u32: items fresh available claimed acked quarantined live hist reasons segments plan_segs
# plan_off max_payload flags body_crc header_crc
_IX_FMT = "<IHHIIQQIIIIIIIIIIIIIIII"
_IX_MAGIC = 0x49514444  # b"DDQI"
_IX_SIZE = const(96)
_IX_NO_PLAN = 0xFFFFFFFF


def abi() -> int:
    """The index columns are stored in native order and width [X2]: the writer's ABI tag."""
    return ddq._crc(bytes(array("Q", [1])) + bytes(array("H", [1])) + bytes(array("I", [1])))


def _parts(q: "ddq.Queue") -> "list[Any]":
    # The body of queue.index in order [X2]: segments, the five index columns, live, hist,
    # reasons. Sweeps are undone: the file holds the durable state, as a replay would [X3].
    ix, log, n = q._ix, q._log, q._ix.n
    segs = bytearray(12 * len(log.ck))
    for k in range(len(log.ck)):
        struct.pack_into("<III", segs, 12 * k, log.ck[k][0], log.ck[k][1], log.ck[k][2])
    st = ix.st[0:n]
    live = bytearray(28 * len(ix.live))
    k = 0
    for s, e in ix.live.items():
        lease = q._swept.get(s, e[2])
        if s in q._swept:
            st[e[0]] = _CLAIMED
        struct.pack_into("<QIQQ", live, k, s, e[1], lease, e[3])
        k += 28
    hist = bytearray(20 * len(ix.hist))
    k = 0
    for s, h in ix.hist.items():
        struct.pack_into("<QIQ", hist, k, s, h[0], h[1])
        k += 20
    rs = bytearray(20 * len(ix.reasons))
    k = 0
    for s, r in ix.reasons.items():
        struct.pack_into("<QIII", rs, k, s, r[0], r[1], r[2])
        k += 20
    # The columns as views: crc32 reads them in place; each is copied only while written.
    return [segs, memoryview(ix.seq)[0:n], memoryview(ix.sg)[0:n], memoryview(ix.off)[0:n],
            memoryview(ix.ln)[0:n], st, live, hist, rs]


def _plan_key(q: "ddq.Queue") -> int:
    # flags bits 8-31: the options the admission plan was computed with [X2].
    k = struct.pack("<III", q._seg_bytes, q._max_segs, q.reason_budget)
    return ddq._crc(k) & 0xFFFFFF00


def _header(q: "ddq.Queue", parts: "list[Any]", body: int, mcrc: int) -> bytearray:
    ix, log, p = q._ix, q._log, q._plan
    pay = max(memoryview(ix.ln)[0:ix.n]) if ix.n else 0
    for r in ix.reasons.values():
        pay = max(pay, r[2])
    sw = len(q._swept)
    b = bytearray(_IX_SIZE)
    struct.pack_into(_IX_FMT, b, 0, _IX_MAGIC, 1, 0, abi(), mcrc, log.gen, q._next, ix.n,
                     ix.fresh, q._n_avail - sw, q._n_claimed + sw, q._n_acked,
                     q._n_quar, len(ix.live), len(ix.hist), len(ix.reasons), len(log.ck),
                     _IX_NO_PLAN if p is None else p[0], 0 if p is None else p[1], pay,
                     _plan_key(q) | (1 if q._has_manifest else 0), body, 0)
    struct.pack_into("<I", b, _IX_SIZE - 4, ddq._crc(memoryview(b)[0:_IX_SIZE - 4]))
    return b


def save(q: "ddq.Queue") -> None:
    """Write queue.index for the synced log of q (OSError on a storage error) [X1]."""
    fs, log = q._fs, q._log
    try:
        for k in range(len(log.sizes)):  # [X4] extend each segment's running CRC
            if k == len(log.ck):
                log.ck.append([0, 0, 0])
            c, size = log.ck[k], log.sizes[k]
            if c[1] < size:
                path = q._path(ddq.segment_name(log.gen, k))
                if c[1] == 0 and k > 0:  # its first record_length, for F7 [X5]
                    c[2] = struct.unpack_from("<I", q._read_small(path, 32), 28)[0]
                c[0], c[1] = crc_span(q, path, c[1], size, c[0]), size
    finally:
        q._rbuf = bytearray(0)
    mcrc = 0
    if q._has_manifest:
        mcrc = ddq._crc(q._read_small(q._path(ddq._MANIFEST), 49)[0:40])
    parts = _parts(q)
    body = 0
    for b in parts:
        body = ddq._crc(b, body)
    tmp = q._path(ddq._INDEX_TMP)
    if fs.kind(tmp) != 0:
        fs.remove(tmp)
    h = fs.open(tmp, "wb")
    try:
        fs.write(h, _header(q, parts, body, mcrc))
        for j in range(len(parts)):
            if len(parts[j]):  # a typed view's len() counts items: write its bytes
                fs.write(h, bytes(parts[j]) if 1 <= j <= 4 else parts[j])
        fs.sync(h)
    finally:
        fs.close(h)
    fs.rename(tmp, q._path(ddq._INDEX))  # old or new index, never a torn one [X1]
    fs.sync_dir(q._dir)
    q._ixcov = [log.gen] + log.sizes


def load(q: "ddq.Queue", nsegs: int, cp: "list[int]", mcrc: int, fits: "list[int]") -> int:
    """Adopt queue.index when it matches the directory; return where to resume the last
    covered segment, or -1 (and change nothing) to replay everything [X5]."""
    fs, path = q._fs, q._path(ddq._INDEX)
    try:
        if fs.kind(path) != 1:
            return -1
        h = fs.open(path, "rb")
    except OSError:
        return -1
    try:
        return _adopt(q, h, fs.size(path), nsegs, cp, mcrc, fits)
    except (OSError, ddq.Error, ValueError, IndexError, MemoryError):
        return -1
    finally:
        fs.close(h)


def _adopt(q: "ddq.Queue", h: "Any", size: int, nsegs: int, cp: "list[int]", mcrc: int,
           fits: "list[int]") -> int:
    fs, log = q._fs, q._log
    hb = bytearray(_IX_SIZE)
    if q._read_exact(h, 0, memoryview(hb)) != _IX_SIZE:
        return -1
    (magic, ver, _r, ab, mc, gen, nxt, n, fresh, na, nc, nk, nq, nlive, nhist, nrs, ns,
     p0, p1, pay, flags, body, hcrc) = struct.unpack(_IX_FMT, hb)
    if magic != _IX_MAGIC or ver != 1 or hcrc != ddq._crc(memoryview(hb)[0:_IX_SIZE - 4]) \
            or ab != abi() or gen != log.gen or mc != mcrc or (flags & 1) != \
            q._has_manifest or ns == 0 or ns > nsegs or n > q._max_items \
            or pay > q._max_payload or na + nc + nk + nq != n or fresh > n \
            or size != _IX_SIZE + 12 * ns + 19 * n + 28 * nlive + 20 * (nhist + nrs):
        return -1
    pos, c = _IX_SIZE, 0
    parts: "list[Any]" = []
    for k in (12 * ns, 8 * n, 2 * n, 4 * n, 4 * n, n, 28 * nlive, 20 * nhist, 20 * nrs):
        b = bytearray(k)
        if k and q._read_exact(h, pos, memoryview(b)) != k:
            return -1
        c = ddq._crc(b, c)
        pos += k
        # a column becomes its array at once: one column's bytes are extra, never all [X2]
        j = len(parts)
        parts.append(array("QHII"[j - 1], b) if 1 <= j <= 4 else b)
    if c != body:
        return -1
    segs, live, hist, rs = parts[0], parts[6], parts[7], parts[8]
    nix = ddq._Index()
    nix.seq, nix.sg, nix.off, nix.ln, nix.st = parts[1], parts[2], parts[3], parts[4], parts[5]
    ck: "list[list[int]]" = []
    for k in range(ns):
        crc, sz, first = struct.unpack_from("<III", segs, 12 * k)
        real = fs.size(q._path(ddq.segment_name(gen, k)))
        if sz > q._seg_bytes or real < sz or (k < ns - 1 and real != sz):
            return -1
        ck.append([crc, sz, first])
    if q._has_manifest and (ns < cp[0] or (ns == cp[0] and ck[ns - 1][1] < cp[2])):
        return -1  # [R8] the index must lie past the manifest's boundary
    if not prefix_ok(q, gen, ck):
        return -1
    nix.n, nix.fresh = n, fresh
    for k in range(nlive):
        s, a, lease, nb = struct.unpack_from("<QIQQ", live, 28 * k)
        i = nix.find(s)
        if i < 0 or nix.st[i] not in (_AVAILABLE, _CLAIMED):
            return -1
        nix.live[s] = [i, a, lease, nb]
    for k in range(nhist):
        s, a, nb = struct.unpack_from("<QIQ", hist, 20 * k)
        nix.hist[s] = [a, nb]
    for k in range(nrs):
        s, sg, off, ln = struct.unpack_from("<QIII", rs, 20 * k)
        nix.reasons[s] = [sg, off, ln]
    # Adopt: the covered segments but the last are whole; the last resumes its replay.
    q._ix, q._next = nix, nxt
    q._n_avail, q._n_claimed, q._n_acked, q._n_quar = na, nc, nk, nq
    # The plan depends on the options (not stored, M8): another writer's is not used [X5].
    ok = p0 != _IX_NO_PLAN and flags & 0xFFFFFF00 == _plan_key(q)
    q._plan = [p0, p1] if ok else None
    log.ck = ck
    for k in range(ns - 1):
        log.sizes.append(ck[k][1])
    for k in range(1, ns):
        if ck[k][1]:  # an empty segment (a crash after its creation) has no first record
            fits.append(ck[k - 1][1] + ck[k][2])
    q._ixcov = [gen] + [e[1] for e in ck]
    return int(ck[-1][1])


def prefix_ok(q: "ddq.Queue", gen: int, ck: "list[list[int]]") -> bool:
    """[X4] one sequential read + crc32 of every covered byte: any change to the prefix sends
    recovery back to the full replay, which names the damage."""
    for k in range(len(ck)):
        if crc_span(q, q._path(ddq.segment_name(gen, k)), 0, ck[k][1], 0) != ck[k][0]:
            return False
    return True


def crc_span(q: "ddq.Queue", path: str, pos: int, end: int, c: int) -> int:
    """The running crc32 c extended over bytes pos..end-1 of a file: one sequential read."""
    mv = q._buf(min(max(end - pos, 1), 65536))
    h = q._fs.open(path, "rb")
    try:
        for _ in range(_IO_LOOPS):
            if pos >= end:
                break
            n = q._read_exact(h, pos, mv[0:min(len(mv), end - pos)])
            if n <= 0:
                raise OSError(_EIO, "short read in " + path)
            c = ddq._crc(mv[0:n], c)
            pos += n
    finally:
        q._fs.close(h)
    return c
