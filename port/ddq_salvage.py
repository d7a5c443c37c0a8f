"""ddq_salvage: build a new, valid queue from every intact record of a damaged one.

A damaged queue directory makes ddq.Queue() raise Corrupt (fail-stop, SPEC R13). salvage()
reads it without changing it and writes a fresh generation into a new directory: every DATA
record whose CRC holds, with its seq and payload, in the state its intact control records
give it; an item whose deciding records may be lost comes back available (a possible
duplicate, never a loss). Acked items are dropped, as a compaction drops them; next_seq
never goes back. Optional module: `import ddq` never loads it.

    import ddq_salvage
    report = ddq_salvage.salvage("outbox", "outbox.salvaged", segment_bytes=65536)
    report["status"]     # "clean", "salvaged_with_loss" or "nothing_usable"

Format and rules: docs/SPEC.md §15 [K1]-[K8].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import binascii
import struct

import ddq
from ddq import const  # the const shim, once (ddq compat)

TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any, Optional

# ============================================================================ salvage
# ddq's values that salvage reads, by group (ddq.py's format section names each; a MicroPython
# const folds in its own module only: tests/host/test_host_index.py holds them equal to ddq's).
_REC_FMT = "<IHHQQIIII"  # a record's header and footer, by field (SPEC §3.1 [F1])
_REC_MAGIC = 0x31475144
_MAGIC_BYTES = b"DQG1"
_REC_COMMIT = 0x54494D43
_R_VER = const(4)  # the header fields it checks by offset
_R_CRC = const(32)
_R_RES = const(36)
_HDR = const(40)
_MIN_REC = const(48)
_T_DATA = const(1)  # the types whose rules decide an item's state (SPEC §4 [F10])
_T_CLAIM = const(2)
_T_ACK = const(3)
_T_RETRY = const(4)
_T_QUAR = const(5)
_T_STATE = const(6)
_AVAILABLE = const(1)  # the states salvage decides for each seq (SPEC §4.1 [F11])
_CLAIMED = const(2)
_ACKED = const(3)
_QUARANTINED = const(4)
_MAN_SIZE = const(48)  # a manifest's size (SPEC §5 [M1])
_MAX_SEQ = 0xFFFFFFFFFFFFFFFF
_PLAUSIBLE_SEQ = 1 << 48  # a damaged manifest's next_seq is trusted only below this [K5]
_MAX_GEN = 0xFFFFFFFFFFFFFFFF
_CHUNK = const(2048)
_LOST_REASON = b"ddq salvage: reason record lost"
_SCAN_RECORDS = const(4000000)  # the R4 bound per segment

# Item fields (a list per seq): log position, path index, offset, payload length, state,
# attempts, lease_until_ms, not_before_ms, reason path index (-1: none), reason offset,
# reason length, generation, uncertain.
_POS = const(0)
_PI = const(1)
_OFF = const(2)
_PLEN = const(3)
_ST = const(4)
_ATT = const(5)
_LEASE = const(6)
_NB = const(7)
_RPI = const(8)
_ROFF = const(9)
_RLEN = const(10)
_GEN = const(11)
_UNC = const(12)  # 1: the records deciding its state may be lost or out of order

_DEFAULTS = (
    ("segment_bytes", 4194304, 256, 67108864),
    ("max_payload_bytes", 1048576, 1, 67108816),
    ("max_items", 100000, 1, 1000000),
    ("max_segments", 1024, 1, 4096),
)


def _crc(data: "Any", value: int = 0) -> int:
    return int(binascii.crc32(data, value))


def _read_at(fs: "Any", h: "Any", off: int, n: int) -> bytearray:
    # n bytes at off through the storage seam (fewer at the end of the file).
    b = bytearray(n)
    mv = memoryview(b)
    got = 0
    for _ in range(n // 512 + 8):  # bounded: a short read ends the loop
        k = fs.read_into(h, off + got, mv[got:])
        if not k:
            break
        got += k
        if got >= n:
            break
    return b if got == n else b[0:got]  # (a bytearray: no copy of a record read whole)


def _options(opts: "dict[str, Any]") -> "tuple[int, int, int, int]":
    out = []
    for name, default, lo, hi in _DEFAULTS:
        v = opts.get(name, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > hi:
            raise ddq._err("InvalidArgument", "%s must be an int in %d..%d", name, lo, hi)
        out.append(v)
    if out[1] > out[0] - _MIN_REC:
        raise ddq._err("InvalidArgument", "max_payload_bytes must be at most segment_bytes - 48")
    return out[0], out[1], out[2], out[3]


def encode_record(typ: int, seq: int, arg: int, payload: "Any") -> bytes:
    """One whole record (header, payload, footer) with its CRC [F1]-[F3]."""
    plen = len(payload)
    rlen = _MIN_REC + plen
    h = bytearray(_HDR)
    struct.pack_into(_REC_FMT, h, 0, _REC_MAGIC, 1, typ, seq, arg, plen, rlen, 0, 0)
    c = _crc(memoryview(h)[_R_RES:_HDR], _crc(memoryview(h)[_R_VER:_R_CRC]))  # [F2]
    if plen:
        c = _crc(payload, c)
    struct.pack_into("<I", h, _R_CRC, c)
    return bytes(h) + bytes(payload) + struct.pack("<II", _REC_COMMIT, rlen)


class _Scan:
    """The state of one salvage: what was read, where the damage is, the items found."""

    def __init__(self, fs: "Any", sb: int, mp: int) -> None:
        self.fs = fs
        self.sb = sb
        self.mp = mp
        self.pos = 0  # log position counter (records and damage events, in read order)
        self.paths: "list[str]" = []
        self.names: "list[str]" = []
        self.damaged: "list[list[Any]]" = []
        self.missing: "list[str]" = []
        self.torn = 0
        self.last_damage: "dict[int, int]" = {}  # generation -> position of its last damage
        self.items: "dict[int, dict[int, list[int]]]" = {}  # generation -> seq -> fields
        self.acked: "dict[int, set[int]]" = {}  # generation -> seqs with an intact ACK
        # records met before their DATA (generation -> seq -> its QUARANTINE's place or None)
        self.early: "dict[int, dict[int, Optional[list[int]]]]" = {}
        self.last_data: "dict[int, int]" = {}  # generation -> seq of its last DATA
        # generation -> the seq its next DATA must have where R5 makes DATA contiguous (in
        # generation 0, and after a manifest's boundary): a larger one follows lost records
        self.expect: "dict[int, int]" = {}
        self.misordered: "list[list[Any]]" = []
        self.after = 0  # seq of the DATA just read, across segments (a STATE follows only it, R7)
        self.seen: "set[int]" = set()  # every seq an intact record names
        self.max_seq = 0
        self.records = 0
        self.orphans = 0  # intact control records whose DATA is lost
        self.dups = 0
        self.frame = 0  # set by _valid: the length of a record whose header and footer agree

    def damage(self, gen: int, name: str, start: int, end: int) -> None:
        self.damaged.append([name, start, end])
        self.event(gen)

    def event(self, gen: int) -> None:
        # Whatever came before in this generation may have lost the records after it.
        self.after = 0
        self.pos += 1
        self.last_damage[gen] = self.pos

    def _valid(self, f: "Any", p: int, size: int) -> "Optional[tuple[int, int, int, int, int]]":
        # The record at p if it is whole and valid (F2-F10): (type, seq, arg, plen, rlen).
        self.frame = 0
        if size - p < _MIN_REC:
            return None
        h = _read_at(self.fs, f, p, _HDR)
        if len(h) < _HDR:
            return None
        magic, ver, typ, seq, arg, plen, rlen, crc, res = struct.unpack_from(_REC_FMT, h, 0)
        if (
            magic != _REC_MAGIC
            or ver != 1
            or rlen != _MIN_REC + plen
            or rlen > self.sb
            or p + rlen > size
        ):
            return None
        if _read_at(self.fs, f, p + rlen - 8, 8) != struct.pack("<II", _REC_COMMIT, rlen):
            return None  # no footer where the header says: read no more of it (linear, R4)
        self.frame = rlen  # header and footer agree: a record, whatever its CRC says
        rec = _read_at(self.fs, f, p, rlen)
        if len(rec) != rlen:
            return None
        try:
            typ, seq, arg, plen = ddq.check_record(memoryview(rec), 0, self.sb, self.mp)
        except ddq.Corrupt:
            return None
        if typ == _T_DATA and seq == _MAX_SEQ:
            return None
        if typ == _T_STATE:
            st, _, lease, _ = struct.unpack_from("<IIQQ", rec, _HDR)
            if st not in (_AVAILABLE, _CLAIMED, _QUARANTINED) or (lease != 0) != (st == _CLAIMED):
                return None
        self.frame = 0
        return typ, seq, arg, plen, rlen

    def _find(self, f: "Any", start: int, size: int) -> int:
        # The offset of the next valid record at or after start, or -1 (resynchronisation).
        # Linear in the bytes after start: a candidate costs its header and footer (8 B read
        # where the header says it ends); only one whose footer agrees is read whole, and when
        # that one is not valid (a damaged record) the search goes on after its end: a record
        # never begins inside another one (F7), so no byte is CRC-checked twice.
        q = start
        for _ in range(size // 45 + 2):  # each turn moves q on by >= 45 bytes
            if q > size - _MIN_REC:
                return -1
            b = _read_at(self.fs, f, q, _CHUNK)
            i = 0
            nxt = q + _CHUNK - 3
            for _ in range(len(b)):
                i = b.find(_MAGIC_BYTES, i)
                if i < 0:
                    break
                if self._valid(f, q + i, size) is not None:
                    return q + i
                if self.frame:
                    nxt = q + i + self.frame
                    break
                i += 1
            if len(b) < _CHUNK and nxt == q + _CHUNK - 3:
                return -1
            q = nxt
        return -1

    def _torn(self, f: "Any", p: int, size: int) -> bool:
        # R10/R11: the crash shapes of a last segment's end; not damage.
        n = size - p
        if n < _HDR:
            return True
        h = _read_at(self.fs, f, p, _HDR)
        magic, ver, _, _, _, _, rlen, _, _ = struct.unpack_from(_REC_FMT, h, 0)
        if magic == _REC_MAGIC and ver == 1 and _MIN_REC <= rlen <= self.sb and p + rlen > size:
            return True
        if magic == _REC_MAGIC and ver == 1 and p + rlen == size and rlen >= _MIN_REC:
            ft = _read_at(self.fs, f, size - 8, 8)
            if ft in (b"\x00" * 8, b"\xff" * 8):
                return True
        q = p
        first = -1
        for _ in range(n // _CHUNK + 2):
            b = _read_at(self.fs, f, q, _CHUNK)
            if not b:
                break
            if first < 0:
                first = b[0]
                if first not in (0, 0xFF):
                    return False
            if b.count(bytes((first,))) != len(b):
                return False
            q += len(b)
        return True

    def segment(self, gen: int, idx: int, path: str, last: bool, boundary: int, cseq: int) -> None:
        """Read one segment record by record, resynchronising after damage [K2]; from boundary
        on, DATA seqs are contiguous from cseq (0: no such boundary here)."""
        name = ddq.segment_name(gen, idx)
        pi = len(self.paths)
        self.paths.append(path)
        self.names.append(name)
        items = self.items.setdefault(gen, {})
        acked = self.acked.setdefault(gen, set())
        early = self.early.setdefault(gen, {})
        fs = self.fs
        size = fs.size(path)
        self.pos += 1
        f = fs.open(path, "rb")
        try:
            p = 0
            for _ in range(_SCAN_RECORDS):
                if p >= size:
                    break
                if cseq and p >= boundary:
                    self.expect[gen] = cseq
                    cseq = 0
                r = self._valid(f, p, size)
                if r is None:
                    q = self._find(f, p + (self.frame or 1), size)  # (past a damaged record)
                    if q < 0:
                        if last and p >= boundary and self._torn(f, p, size):
                            self.torn += size - p
                        else:
                            self.damage(gen, name, p, size)
                        break
                    self.damage(gen, name, p, q)
                    p = q
                    continue
                typ, seq, arg, plen, rlen = r
                self.pos += 1
                self.records += 1
                self.seen.add(seq)
                if seq > self.max_seq and seq < _MAX_SEQ:  # 2^64-1 names no item (F6)
                    self.max_seq = seq
                it = items.get(seq)
                if (
                    it is not None
                    and typ != _T_DATA
                    and not _legal(typ, it[_ST], it[_RPI], seq == self.after)
                ):
                    # R6/R7 forbid this transition here: a record before it is lost or the log
                    # is out of order (a segment copied or doubled): handled like damage
                    self.misordered.append([name, p, p + rlen])
                    self.event(gen)
                    it[_UNC] = 1
                self.after = seq if typ == _T_DATA else 0
                if typ == _T_DATA:
                    unc = 0
                    if seq <= self.last_data.get(gen, 0):
                        # R5: DATA seqs only grow within a generation; a log out of order (a
                        # segment copied, swapped, doubled) may hide records: like damage
                        self.misordered.append([name, p, p + rlen])
                        self.event(gen)
                        unc = 1
                    else:
                        self.last_data[gen] = seq
                        e = self.expect.get(gen, 0)
                        if e:
                            if seq > e:
                                self.event(gen)  # R5: seqs e..seq-1 lost, records with them
                            self.expect[gen] = seq + 1
                    if it is not None:
                        self.dups += 1  # the first one found is kept
                    else:
                        it = items[seq] = [
                            self.pos,
                            pi,
                            p,
                            plen,
                            _AVAILABLE,
                            0,
                            0,
                            0,
                            -1,
                            0,
                            0,
                            gen,
                            unc,
                        ]
                        if seq in early:  # records about it came first: out of order
                            it[_UNC] = 1
                            ql = early[seq]
                            if ql is not None:
                                it[_ST] = _QUARANTINED
                                it[_RPI], it[_ROFF], it[_RLEN] = ql[0], ql[1], ql[2]
                elif typ == _T_ACK:
                    acked.add(seq)
                    if it is not None:
                        it[_ST] = _ACKED
                elif it is None:
                    self.orphans += 1
                    if typ == _T_QUAR and early.get(seq) is None:
                        early[seq] = [pi, p, plen]
                    elif seq not in early:
                        early[seq] = None
                elif typ == _T_QUAR and it[_ST] != _ACKED and it[_RPI] < 0:
                    it[_ST] = _QUARANTINED  # after a CLAIM, or after a STATE saying so (R7)
                    it[_LEASE] = 0
                    it[_RPI] = pi
                    it[_ROFF] = p
                    it[_RLEN] = plen
                elif it[_ST] in (_ACKED, _QUARANTINED):
                    pass  # terminal: a later CLAIM/RETRY/STATE cannot undo an ack or quarantine
                elif typ == _T_CLAIM:
                    it[_ST] = _CLAIMED
                    it[_LEASE] = arg
                elif typ == _T_RETRY:
                    it[_ST] = _AVAILABLE
                    it[_ATT] = min(it[_ATT] + 1, 0xFFFFFFFF)
                    it[_LEASE] = 0
                    it[_NB] = arg
                elif typ == _T_STATE:
                    b = _read_at(self.fs, f, p + _HDR, 24)
                    st, att, lease, nb = struct.unpack_from("<IIQQ", b, 0)
                    it[_ST] = st
                    it[_ATT] = att
                    it[_LEASE] = lease
                    it[_NB] = nb
                p += rlen
            else:
                raise ddq._err("Limit", "more than %d records in %s", _SCAN_RECORDS, name)
            if boundary > size:
                self.damage(gen, name, size, boundary)  # the manifest's boundary lies past the end
        finally:
            fs.close(f)


def _legal(typ: int, st: int, reason: int, after_data: bool) -> bool:
    # The transitions R6 and R7 allow (reason: the item's QUARANTINE place, -1 none yet).
    if typ == _T_CLAIM:
        return st == _AVAILABLE or st == _CLAIMED
    if typ == _T_ACK or typ == _T_RETRY:
        return st == _CLAIMED
    if typ == _T_QUAR:
        return st == _CLAIMED or (st == _QUARANTINED and reason < 0)
    return after_data  # STATE right after its DATA


def _read_manifest(
    fs: "Any", path: "Optional[str]"
) -> "tuple[str, Optional[tuple[int, int, int, int, int]], int]":
    # ("ok"/"missing"/"damaged", decoded or None, a plausible next_seq from a damaged one or 0).
    k = 0 if path is None else fs.kind(path)
    if k == 0 or path is None:
        return "missing", None, 0
    if k != 1:
        return "damaged", None, 0
    f = fs.open(path, "rb")
    try:
        b = _read_at(fs, f, 0, _MAN_SIZE + 1)
    finally:
        fs.close(f)
    try:
        return "ok", ddq.decode_manifest(b), 0
    except ddq.Corrupt:
        pass
    nxt = 0
    if len(b) >= 24:
        nxt = struct.unpack_from("<Q", b, 16)[0]
        if nxt >= _PLAUSIBLE_SEQ:
            nxt = 0
    return "damaged", None, nxt


def _merge(rs: "list[list[int]]") -> "list[list[int]]":
    out: "list[list[int]]" = []
    for lo, hi in sorted(rs):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return out


def _minus(rs: "list[list[int]]", drop: "list[Any]") -> "list[list[int]]":
    # The ranges rs without the seqs of drop: sorted disjoint ranges [a, b], or sorted seqs (a
    # seq x is the range [x, x]).
    out: "list[list[int]]" = []
    for lo, hi in rs:
        for d in drop:
            if isinstance(d, int):
                a = b = d
            else:
                a, b = d
            if b < lo or a > hi:
                continue
            if a > lo:
                out.append([lo, a - 1])
            lo = b + 1
        if lo <= hi:
            out.append([lo, hi])
    return out


def _gaps(have: "list[int]", lo: int, hi: int) -> "list[list[int]]":
    # The ranges of lo..hi-1 not in the sorted list have.
    out: "list[list[int]]" = []
    prev = lo - 1
    for s in have:
        if s >= hi:
            break
        if s < lo:
            continue
        if s > prev + 1:
            out.append([prev + 1, s - 1])
        prev = s
    if hi - 1 > prev:
        out.append([prev + 1, hi - 1])
    return out


def salvage(src: str, dst: str, **options: "Any") -> "dict[str, Any]":
    """Write into the new directory dst a fresh generation holding every intact item of src.

    src is only read. dst must not exist; it is created, written, synced, and committed by
    its manifest last. Options are the queue's (segment_bytes, max_payload_bytes, max_items,
    max_segments must be at least the writer's, R15; storage: the queue's storage seam, default
    ddq.PosixStorage(); others are ignored here). Returns the report (SPEC §15 [K6]); status
    "nothing_usable" writes nothing."""
    sb, mp, mi, ms = _options(options)
    fs = options.get("storage") or ddq.PosixStorage()
    if not isinstance(src, str) or not isinstance(dst, str):
        raise ddq._err("InvalidArgument", "src and dst must be str paths")
    src = src.rstrip("/") or "/"
    dst = dst.rstrip("/") or "/"
    if fs.kind(src) != 2:
        raise ddq._err("InvalidArgument", "not a directory: " + src)
    if fs.kind(dst) != 0:
        raise ddq._err("InvalidArgument", "exists: " + dst)
    names = fs.listdir(src)
    if len(names) > ms * 8 + 1024:
        raise ddq._err("Limit", "more than %d directory entries", ms * 8 + 1024)
    entries = {}
    for n in names:
        entries[n] = src + "/" + n
    report, sc, kept, final = _plan(fs, entries, src, dst, sb, mp, ms)
    if report["output"] is None:
        return report
    if len(kept) > mi:
        raise ddq._err("Full", "%d items exceed max_items %d", len(kept), mi)
    _write(sc, fs, dst, report["generation"], report["next_seq"], kept, final, sb, ms)
    return report


def _plan(
    fs: "Any", entries: "dict[str, str]", src: str, dst: "Optional[str]", sb: int, mp: int, ms: int
) -> "tuple[dict[str, Any], _Scan, list[int], dict[int, list[int]]]":
    # Scan the files entries names (directory name -> path to read) [K2]-[K3] and decide what a
    # salvage keeps: (report [K6], the scan, kept seqs, their fields). Writes nothing.
    sc = _Scan(fs, sb, mp)
    segs: "dict[int, dict[int, str]]" = {}
    cuts: "list[tuple[int, int, str]]" = []
    for n in entries:
        k = 8 if n.endswith(".reserve") else 4 if n.endswith(".cut") else 0
        cut = k != 0
        parsed = ddq.parse_segment_name(n[:-k] if cut else n)
        if parsed is None or fs.kind(entries[n]) != 1:
            continue
        if k == 8 and not fs.size(entries[n]):
            continue  # an empty .reserve holds no record (libddq's spare)
        if cut:
            cuts.append((parsed[0], parsed[1], entries[n]))
        else:
            segs.setdefault(parsed[0], {})[parsed[1]] = entries[n]
    for g, i, p in cuts:  # R22: a staged cut whose segment is missing stands for it
        if i not in segs.get(g, {}):
            segs.setdefault(g, {})[i] = p
    mstate, man, dmg_next = _read_manifest(fs, entries.get("queue.manifest"))
    tstate, tman, _ = _read_manifest(fs, entries.get("queue.manifest.tmp"))
    # A manifest over these limits (M2) is not trusted to select anything (R15 would refuse it).
    if man is not None and (man[2] > ms or man[4] > sb):
        dmg_next = man[1] if man[1] < _PLAUSIBLE_SEQ else 0
        mstate, man = "damaged", None
    if tman is not None and (tman[2] > ms or tman[4] > sb):
        tstate, tman = "damaged", None
    mk = entries.get("queue.format")
    marker = mk is not None and fs.kind(mk) == 1
    if mstate == "missing" and tstate == "ok" and marker:
        mstate, man = "tmp", tman  # R14: the tmp was to become the manifest
    if man is not None:
        gens = [man[0]]
    else:
        gens = sorted(segs)
    # The other generations on disk (K2): an older one a cut or a lost write left, a staging;
    # read for the items the selected one lacks (newest first), their damage reported apart.
    extra = [g for g in sorted(segs, reverse=True) if g not in gens]
    nd = nm = nmis = 0
    for g in gens + extra:
        if g == (extra[0] if extra else -1):
            nd, nm, nmis = len(sc.damaged), len(sc.misordered), len(sc.missing)
        have = segs.get(g, {})
        top = max(have) if have else -1
        nseg = man[2] if man is not None and g == man[0] else 0  # the selected one's count
        top = max(top, nseg - 1)
        idset = set(have)
        if nseg:
            idset.add(nseg - 1)
        if g == 0 and g in gens:
            sc.expect[0] = 1  # generation 0 holds every seq from 1 (R5)
        ids = sorted(idset)
        prev = -1
        for i in ids:  # bounded by the directory's entries (no range over a forged id)
            if i > prev + 1:  # ids prev+1 .. i-1 are missing: one damage event, names capped
                for j in range(prev + 1, min(i, prev + 1 + 64)):
                    sc.missing.append(ddq.segment_name(g, j))
                sc.damage(g, ddq.segment_name(g, prev + 1), 0, -(i - prev - 1))
            prev = i
            path = have.get(i)
            name = ddq.segment_name(g, i)
            if path is None:  # the manifest's last segment
                sc.missing.append(name)
                sc.damage(g, name, 0, -1)
                continue
            boundary = cseq = 0
            if man is not None and nseg and i == nseg - 1:
                boundary = man[4]
                cseq = man[1] if g != 0 else 0
            sc.segment(g, i, path, i == top, boundary, cseq)
        # F7 is not checked: a segment shorter than a writer's segment_bytes allows is a state
        # ddq's own writes reach (a rotation whose record a cut lost, then appends after the
        # reopen; a writer reopened with another segment_bytes), never damage by itself [K2].
    odmg: "dict[str, Any]" = {"damaged": [], "out_of_order": [], "segments_missing": []}
    if extra:
        odmg = {
            "damaged": sc.damaged[nd:],
            "out_of_order": sc.misordered[nm:],
            "segments_missing": sc.missing[nmis:],
        }
        del sc.damaged[nd:]
        del sc.misordered[nm:]
        del sc.missing[nmis:]

    # Merge the generations read: an ACK or a QUARANTINE anywhere is final; a state the
    # generations disagree on, or one that damage after its DATA may hide, becomes AVAILABLE.
    final: "dict[int, list[int]]" = {}
    reset: "list[int]" = []
    acked_all: "set[int]" = set()
    for g in gens + extra:
        acked_all.update(sc.acked.get(g, set()))  # an ACK anywhere is final
    dropped = 0
    conflicts: "set[int]" = set()
    for g in gens:
        ld = sc.last_damage.get(g, 0)
        for seq, it in sc.items.get(g, {}).items():
            if seq in acked_all or it[_ST] == _ACKED:
                continue
            if it[_ST] != _QUARANTINED and it[_POS] < ld:
                it[_UNC] = 1  # records after its DATA are lost
            for g2 in gens:
                if g2 != g and seq in sc.early.get(g2, {}):
                    it[_UNC] = 1  # records about it in another generation, before any DATA there
                    ql = sc.early[g2][seq]
                    if ql is not None and it[_ST] != _QUARANTINED:
                        it[_ST] = _QUARANTINED
                        it[_LEASE] = 0
                        it[_RPI], it[_ROFF], it[_RLEN] = ql[0], ql[1], ql[2]
            other = final.get(seq)
            if other is None:
                final[seq] = it
            elif other[_ST] == _QUARANTINED:
                pass
            elif it[_ST] == _QUARANTINED:
                final[seq] = it
            elif other[_ST : _NB + 1] != it[_ST : _NB + 1]:
                conflicts.add(seq)
    for g in extra:
        # An item only another generation holds: its state there may be stale (reset, a possible
        # duplicate), a QUARANTINE final (uncertain); the selected generation's state wins.
        for seq, it in sc.items.get(g, {}).items():
            other = final.get(seq)
            if (
                seq in acked_all
                or it[_ST] == _ACKED
                or (other is not None and (other[_ST] == _QUARANTINED or it[_ST] != _QUARANTINED))
            ):
                continue
            it[_UNC] = 1
            final[seq] = it
    for g in gens + extra:
        for seq, it in sc.items.get(g, {}).items():
            if (seq in acked_all or it[_ST] == _ACKED) and seq not in final:
                dropped += 1
    quar_unc: "list[int]" = []
    for seq in sorted(final):
        it = final[seq]
        if it[_ST] == _QUARANTINED and (
            it[_UNC] or it[_POS] < sc.last_damage.get(it[_GEN], 0) or it[_RPI] < 0
        ):
            quar_unc.append(seq)  # final, but its attempts, not_before or reason may be short
        if it[_ST] != _QUARANTINED and (it[_UNC] or seq in conflicts):
            reset.append(seq)
            it[_ST] = _AVAILABLE
            it[_LEASE] = 0
            it[_NB] = 0
    kept = sorted(final)
    dropped_seqs: "set[int]" = set()
    for g in gens + extra:
        for seq in sc.items.get(g, {}):
            if seq not in final:
                dropped_seqs.add(seq)

    # next_seq never goes back [K5].
    next_seq = sc.max_seq + 1
    if man is not None:
        next_seq = max(next_seq, man[1])
    if tman is not None:
        next_seq = max(next_seq, tman[1])
    next_seq = max(next_seq, dmg_next, 1)

    # Seqs known lost [K6]: a seq some intact record names whose DATA is gone and that no
    # intact ACK settles; in generation 0 and after a manifest's boundary every seq below the
    # highest seen had its DATA in the log, so a gap there is lost too. Gaps in a snapshot
    # prefix may be acked items a compaction dropped: reported as uncertain.
    have_data = sorted(set(kept) | dropped_seqs)
    points: "set[int]" = set()
    for s in sc.seen:
        if s not in final and s not in dropped_seqs and s not in acked_all:
            points.add(s)
    uncertain: "list[list[int]]" = []
    exact_from = 1
    if man is not None and man[0] != 0:
        exact_from = man[1]
        uncertain = _gaps(have_data, 1, man[1])
    elif man is None and any(g != 0 for g in gens):
        exact_from = sc.max_seq + 1
        uncertain = _gaps(have_data, 1, sc.max_seq + 1)
    # ranges, never one entry per seq: a forged seq near 2^64 must not cost memory
    lost = _minus(_gaps(have_data, exact_from, sc.max_seq + 1), sorted(acked_all))
    snapshot_lost = -1
    if man is not None and man[0] != 0:
        in_prefix = 0
        for s in have_data:
            if s < man[1]:
                in_prefix += 1
        # the prefix held man[3] items; some of those seen here may have been acked after it
        snapshot_lost = max(0, man[3] - in_prefix)
        width = 0
        for r in uncertain:
            width += r[1] - r[0] + 1
        if snapshot_lost == 0:
            uncertain = []  # every item of the snapshot is here: the gaps are compacted acks
        elif width == snapshot_lost:
            lost = lost + uncertain  # every gap is a lost item: exact
            uncertain = []
    lost = _merge(lost + [[x, x] for x in points])
    uncertain = _minus(uncertain, lost)
    lost_count = 0
    for r in lost:
        lost_count += r[1] - r[0] + 1
    usable = sc.records > 0 or man is not None
    loss = (
        bool(quar_unc)
        or bool(sc.damaged)
        or bool(sc.misordered)
        or lost_count > 0
        or bool(reset)
        or mstate == "damaged"
        or snapshot_lost > 0
        or (man is None and (marker or any(g != 0 for g in gens)))
    )  # K7, K13
    status = "nothing_usable" if not usable else ("salvaged_with_loss" if loss else "clean")
    gen = 1
    if gens or extra:
        gen = max(gens + extra) + 1
    if tman is not None:
        gen = max(gen, tman[0] + 1)
    if gen > _MAX_GEN:
        gen = 1  # dst is a new directory: any generation >= 1 is fresh there
    report: "dict[str, Any]" = {
        "status": status,
        "source": src,
        "output": dst if usable else None,
        "manifest": mstate,
        "generations_read": gens + extra,
        "segments_read": sc.names,
        "segments_missing": sc.missing,
        "damaged": sc.damaged,
        "out_of_order": sc.misordered,
        "torn_tail_bytes": sc.torn,
        "records_intact": sc.records,
        "orphan_records": sc.orphans,
        "duplicate_data": sc.dups,
        "kept": len(kept),
        "dropped_acked": dropped,
        "reset": reset,
        "quarantined_uncertain": quar_unc,
        "lost_seqs": lost,
        "lost_count": lost_count,
        "snapshot_items_lost": snapshot_lost,
        "uncertain_gaps": uncertain,
        "next_seq": next_seq,
        "generation": gen,
        "other_generations": odmg,
    }
    return report, sc, kept, final


def _copy(sc: _Scan, files: "dict[int, Any]", pi: int, off: int, typ: int, seq: int) -> bytearray:
    # Re-read and re-validate a record of the source (R19), return its payload.
    fs = sc.fs
    f = files.get(pi)
    if f is None:
        f = files[pi] = fs.open(sc.paths[pi], "rb")
    r = sc._valid(f, off, fs.size(sc.paths[pi]))
    if r is None or r[0] != typ or r[1] != seq:
        raise ddq._err("Corrupt", "%s changed at offset %d during salvage", sc.names[pi], off)
    return _read_at(fs, f, off + _HDR, r[3])


def _layout(kept: "list[int]", final: "dict[int, list[int]]", sb: int) -> "tuple[int, int]":
    # (segments, bytes) _stage will write: the same packing, nothing read or written.
    n, off, total = 1, 0, 0
    for seq in kept:
        it = final[seq]
        st = it[_ST]
        lens = [_MIN_REC + it[_PLEN]]
        if st != _AVAILABLE or it[_ATT] or it[_LEASE] or it[_NB]:
            lens.append(_MIN_REC + 24)
        if st == _QUARANTINED:
            lens.append(_MIN_REC + (it[_RLEN] if it[_RPI] >= 0 else len(_LOST_REASON)))
        for rl in lens:
            if off + rl > sb:
                n += 1
                off = 0
            off += rl
            total += rl
    return n, total


def _stage(
    sc: _Scan,
    dst: str,
    gen: int,
    kept: "list[int]",
    final: "dict[int, list[int]]",
    sb: int,
    ms: int,
) -> "tuple[int, int]":
    # Generation gen in dst: the kept items in seq order as a compaction writes them (C1), each
    # segment synced and closed (C4); returns (segment count, end offset of the last record).
    fs = sc.fs
    files: "dict[int, Any]" = {}
    idx = 0
    off = 0
    out = fs.open(dst + "/" + ddq.segment_name(gen, 0), "wb")
    try:
        for seq in kept:
            it = final[seq]
            recs = [
                encode_record(_T_DATA, seq, 0, _copy(sc, files, it[_PI], it[_OFF], _T_DATA, seq))
            ]
            st, att, lease, nb = it[_ST], it[_ATT], it[_LEASE], it[_NB]
            if st != _AVAILABLE or att or lease or nb:
                recs.append(
                    encode_record(_T_STATE, seq, 0, struct.pack("<IIQQ", st, att, lease, nb))
                )
            if st == _QUARANTINED:
                reason: "Any" = _LOST_REASON
                if it[_RPI] >= 0:
                    reason = _copy(sc, files, it[_RPI], it[_ROFF], _T_QUAR, seq)
                recs.append(encode_record(_T_QUAR, seq, 0, reason))
            for r in recs:
                if off + len(r) > sb:
                    fs.sync(out)
                    fs.close(out)
                    out = None
                    idx += 1
                    if idx >= ms:
                        raise ddq._err(
                            "Limit", "the salvaged items need more than max_segments segments"
                        )
                    out = fs.open(dst + "/" + ddq.segment_name(gen, idx), "wb")
                    off = 0
                fs.write(out, r)
                off += len(r)
        fs.sync(out)
    finally:
        if out is not None:
            fs.close(out)
        for f in files.values():
            fs.close(f)
    return idx + 1, off


def _put(fs: "Any", d: str, name: str, data: bytes) -> None:
    # A small file written whole, synced and closed, its name made durable (S3).
    h = fs.open(d + "/" + name, "wb")
    try:
        if data:
            fs.write(h, data)
        fs.sync(h)
    finally:
        fs.close(h)
    fs.sync_dir(d)


def _publish(fs: "Any", d: str, gen: int, next_seq: int, segs: int, items: int, end: int) -> None:
    # C5: the manifest through its tmp (written, synced, closed), renamed over queue.manifest:
    # the commit point; the directory synced (S3).
    _put(fs, d, "queue.manifest.tmp", ddq.encode_manifest(gen, next_seq, segs, items, end))
    fs.rename(d + "/queue.manifest.tmp", d + "/queue.manifest")
    fs.sync_dir(d)


def _write(
    sc: _Scan,
    fs: "Any",
    dst: str,
    gen: int,
    next_seq: int,
    kept: "list[int]",
    final: "dict[int, list[int]]",
    sb: int,
    ms: int,
) -> None:
    # A fresh generation in a new directory: the marker first (from here on a cut leaves a
    # directory recovery calls Corrupt, R3, never segments it would open as an empty generation
    # 0 and delete, R16), the segments (synced), then the manifest by tmp + rename, the commit
    # point; the directory is synced after each step (C4, C5, S3) [K4].
    fs.mkdir(dst)
    _put(fs, dst, "queue.format", b"")
    segs, end = _stage(sc, dst, gen, kept, final, sb, ms)
    fs.sync_dir(dst)
    _publish(fs, dst, gen, next_seq, segs, len(kept), end)


# ============================================================================ in place
# on_corrupt="salvage" (SPEC §15 [K9]-[K12], DESIGN §14): recovery's Corrupt salvages the
# directory in place. Every step through the queue's storage seam, under its lock:
#   1. salvage.intent ("ddq salvage <tag>\n", synced): from here the sources may be aside
#   2. the segment sources (segments read, staged cuts) renamed aside to salvaged-<tag>-<name>,
#      the selected generation's segment 0 first, the directory synced, and a rerun reads the
#      aside files as their names; 3. queue.format made (a damaged one aside first). 3 comes
#      first where the manifest is not valid: a state without a manifest is Corrupt by the
#      marker (R3); with a valid one, by segment 0 gone (R4), so 2 comes first (a marker made
#      good first would let a directory whose only damage it was open half-salvaged)
#   4. a damaged manifest and a manifest tmp renamed aside, the directory synced
#   5. generation gen (> every one on disk) staged, segments synced; the report written
#   6. the manifest published by tmp + rename: the commit point (R14 adopts the tmp on FAT)
#   7. salvage.intent removed; recovery then opens gen and deletes what R16 deletes
_INTENT = "salvage.intent"
_ASIDE = "salvaged-"
_REPORT = "salvage-report-"
_ROOM = ".salvaged"  # the sibling directory when the disk bound leaves no room in place


def _intent(fs: "Any", d: str, names: "list[str]") -> int:
    # The tag of an unfinished in-place salvage, or -1. A torn intent (it is synced before
    # anything else changes, so nothing else changed) is removed.
    if _INTENT not in names:
        return -1
    f = fs.open(d + "/" + _INTENT, "rb")
    try:
        b = _read_at(fs, f, 0, 48)
    finally:
        fs.close(f)
    t = b[12:-1]
    ok = b[0:12] == b"ddq salvage " and b[-1:] == b"\n" and 0 < len(t) <= 20
    for c in t:
        ok = ok and 48 <= c <= 57
    if ok and int(t) <= _MAX_GEN:
        return int(t)
    fs.remove(d + "/" + _INTENT)
    fs.sync_dir(d)
    return -1


def _left(n: str) -> int:
    # The length of a staged tail cut's suffix (R12, R22: .reserve, an older ddq's .cut), or 0.
    return 8 if n[-8:] == ".reserve" else 4 if n[-4:] == ".cut" else 0


def _selected(fs: "Any", d: str) -> int:
    # The generation recovery would select from a valid manifest (or the tmp R14 adopts), or -1.
    st, man, _ = _read_manifest(fs, d + "/queue.manifest")
    if man is not None:
        return man[0]
    if st == "missing" and fs.kind(d + "/queue.format") == 1:
        man = _read_manifest(fs, d + "/queue.manifest.tmp")[1]
        if man is not None:
            return man[0]
    return -1


def _aside(fs: "Any", d: str, name: str, pre: str) -> "Optional[str]":
    # Rename d/name to d/<pre><name>; None when that name is taken (the file is then left to
    # what replaces or deletes it: the publish, R16).
    if fs.kind(d + "/" + pre + name) != 0:
        return None
    fs.rename(d + "/" + name, d + "/" + pre + name)
    return pre + name


def _text(rep: "dict[str, Any]") -> bytes:
    js = ddq._import("json")
    return (js.dumps(rep) if js is not None else repr(rep)).encode() + b"\n"


def in_place(q: "Any", err: "Any") -> None:
    """Queue(..., on_corrupt="salvage"): recovery raised err (Corrupt). Salvage the directory
    in place [K9]-[K11], or into <dir>.salvaged when the disk bound leaves no room (then raise
    Corrupt naming it), then recover it; stats() counts the salvage [K12]."""
    try:
        rep = _in_place(q, q._o.fs, q._o.dir, err)
    except OSError as e:
        raise ddq._err("IOFailure", "salvage in place: %r", e)
    s, q._salv = q._salv, None  # this recovery raises whatever it finds
    try:
        q.recover()
    finally:
        q._salv = s
    s[0] += 1
    s[1] += rep["lost_count"]
    q.salvage_report = rep


def _in_place(q: "Any", fs: "Any", d: str, err: "Any") -> "dict[str, Any]":
    sb, mp, mi, ms = q._o.seg_bytes, q._o.max_payload, q._o.max_items, q._o.max_segs
    names = fs.listdir(d)  # (inside recovery, whose listdir bounded it: no import back)
    tag = _intent(fs, d, names)
    sel = _selected(fs, d)
    if tag >= 0 and sel >= tag:  # published: the intent outlived its commit [K10]
        fs.remove(d + "/" + _INTENT)
        fs.sync_dir(d)
        tag = -1
    # Unpublished with a valid manifest (of a generation below tag): generations >= tag are
    # an earlier attempt's staging, deleted below. Without a valid manifest that is not
    # certain (the intent may have outlived a publish the manifest then lost): read them too.
    sure = tag >= 0 and sel >= 0
    entries: "dict[str, str]" = {}
    stale: "list[str]" = []
    top = -1
    for n in names:
        if n[0 : len(_ASIDE)] == _ASIDE or n == _INTENT or n[0 : len(_REPORT)] == _REPORT:
            continue
        pg = ddq.parse_segment_name(n[: -_left(n)] if _left(n) else n)
        if pg is not None:
            top = max(top, pg[0])
            if sure and pg[0] >= tag:
                stale.append(n)
                continue
        entries[n] = d + "/" + n
    if tag >= 0:  # a rerun reads the sources where step 3 put them
        pre = "%s%d-" % (_ASIDE, tag)
        for n in names:
            if n[0 : len(pre)] == pre:
                entries[n[len(pre) :]] = d + "/" + n
    rep, sc, kept, final = _plan(fs, entries, d, d, sb, mp, ms)
    if rep["output"] is None:
        raise err  # nothing usable: fail-stop, nothing changed
    gen = max(rep["generation"], top + 1, tag)
    if gen > _MAX_GEN:
        raise err
    nsegs, nbytes = _layout(kept, final, sb)
    held = 0  # the bytes of the generations read (aside or not; an earlier attempt's not counted)
    for i in range(len(sc.paths)):
        pg = ddq.parse_segment_name(sc.names[i])
        if pg is not None and (tag < 0 or pg[0] < tag):
            held += fs.size(sc.paths[i])
    if nsegs > ms or len(kept) > mi or held + nbytes > 2 * ms * sb:
        # No room within the bound C9 [K11]: a new directory beside it, the queue fail-stopped.
        dst = d + _ROOM
        if fs.kind(dst) != 0:
            raise ddq._err("Corrupt", "%s; no room to salvage in place and %s exists", err, dst)
        rep["output"] = dst
        _write(sc, fs, dst, rep["generation"], rep["next_seq"], kept, final, sb, 4096)
        raise ddq._err("Corrupt", "%s; no room to salvage in place: salvaged into %s", err, dst)
    rep["generation"] = gen
    if tag < 0:  # 1.
        tag = gen
        _put(fs, d, _INTENT, ("ddq salvage %d\n" % tag).encode())
    pre = "%s%d-" % (_ASIDE, tag)
    aside = [n for n in names if n[0 : len(pre)] == pre]
    for n in stale:
        fs.remove(d + "/" + n)
    srcs = []  # 2.
    for path in sc.paths:
        n = path[len(d) + 1 :]
        if path == d + "/" + n and n[0 : len(_ASIDE)] != _ASIDE and n not in srcs:
            srcs.append(n)
    for n in names:  # a staged tail cut not read: recovery would refuse it beside a moved segment
        k = _left(n)
        if k and n not in srcs and n not in stale and ddq.parse_segment_name(n[:-k]) is not None:
            srcs.append(n)
    man = []  # 4. (after the marker: without a manifest, only the marker makes a state Corrupt)
    if rep["manifest"] == "damaged" and entries.get("queue.manifest") == d + "/queue.manifest":
        man.append("queue.manifest")
    if fs.kind(d + "/queue.manifest.tmp") != 0:
        man.append("queue.manifest.tmp")
    # The marker before the segments unless the manifest is valid: without one only the marker
    # makes a state Corrupt (R3); with one, segment 0 gone makes it so (R4), and a damaged marker
    # made good first would let a directory whose only damage it was open half-salvaged.
    for n in (srcs + [""] if rep["manifest"] == "ok" else [""] + srcs) + man:
        if not n:  # 3. (the sources before it are aside: segment 0 first)
            fs.sync_dir(d)
            mk = fs.kind(d + "/queue.format")
            if mk != 1 or fs.size(d + "/queue.format") != 0:
                if mk != 0:
                    a = _aside(fs, d, "queue.format", pre)
                    if a is not None:
                        aside.append(a)
                    else:
                        fs.remove(d + "/queue.format")
                _put(fs, d, "queue.format", b"")
            continue
        a = _aside(fs, d, n, pre)
        if a is not None:
            aside.append(a)
            for i in range(len(sc.paths)):  # _stage reads the records where they are now
                if sc.paths[i] == d + "/" + n:
                    sc.paths[i] = d + "/" + a
        elif n == "queue.manifest.tmp":
            fs.remove(d + "/" + n)  # C5: no tmp before the publish
    fs.sync_dir(d)
    segs, end = _stage(sc, d, gen, kept, final, sb, ms)  # 5.
    fs.sync_dir(d)
    rep["in_place"] = True
    rep["aside"] = aside
    _put(fs, d, "%s%d.json" % (_REPORT, tag), _text(rep))
    _publish(fs, d, gen, rep["next_seq"], segs, len(kept), end)  # 6. the commit point
    fs.remove(d + "/" + _INTENT)  # 7.
    fs.sync_dir(d)
    return rep
