"""ddq_recover: recovery of a ddq.Queue (SPEC §12), loaded by Queue.recover() and dropped after.

Opening a queue, and recover() after a fail-stop, rebuild every piece of RAM state from the
directory: the manifest, the segments of its generation replayed record by record, a torn tail
cut. The code runs once per open, so ddq imports it for the call and removes it from
sys.modules again: a board does not keep its bytecode in the heap while the queue runs
(DESIGN §4, §13).

Format: see docs/SPEC.md §12 [R1]-[R20]; design: docs/DESIGN.md §7.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import os
import struct
import sys

from ddq import (
    _E,
    _INDEX,
    _INDEX_TMP,
    _MAN_FMT,
    _MAN_MAGIC,
    _MANIFEST,
    _MANIFEST_TMP,
    _MARKER,
    _MP,
    _REC_FMT,
    _U32,
    _U64,
    PosixStorage,
    _bytes_arg,
    _crc,
    _err,
    _import,
    _Index,
    _io_failure,
    _Log,
    _opt,
    _part,
    _wall_ms,
    check_record,
    const,
    segment_name,
)

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

    from ddq import Buf, Queue

# ============================================================================ recovery
# ddq's values that recovery reads, by group (ddq.py's format section names each): a MicroPython
# const folds in its own module only (tests/host/test_host_index.py holds them equal to ddq's).
_REC_MAGIC = const(0x31475144)  # a record's header, read by byte (SPEC §3.1 [F1])
_VERSION = const(1)
_R_VER = const(4)
_R_TYPE = const(6)
_R_SEQ = const(8)
_R_ARG = const(16)
_R_PLEN = const(24)
_R_RLEN = const(28)
_R_CRC = const(32)
_R_RES = const(36)
_HDR = const(40)
_MIN_REC = const(48)
_CRC_FMT = "<HHQQII"  # the header's bytes _R_VER.._R_CRC (version .. record_length) [F2]
_T_DATA = const(1)  # the types the replay applies (SPEC §4 [F10])
_T_CLAIM = const(2)
_T_ACK = const(3)
_T_RETRY = const(4)
_T_QUAR = const(5)
_T_STATE = const(6)
_STATE_FMT = "<IIQQ"  # a STATE snapshot and the states it sets (SPEC §4.1 [F11])
_STATE_LEN = const(24)
_AVAILABLE = const(1)
_CLAIMED = const(2)
_ACKED = const(3)
_QUARANTINED = const(4)
_MAN_SIZE = const(48)  # the manifest read at open, its crc field (SPEC §5 [M1])
_M_CRC = const(40)
_MAX_REASON = const(4096)  # bounds of the replay (SPEC §7.1, §12 [R4]) and its errno
_SCAN_RECORDS = const(4000000)
_IO_LOOPS = const(1048576)
_EIO = const(5)
_CS = const(8)  # ddq._Index's chunk of items: its log2 and mask (ddq.py)
_CM = const(255)
_LV_I = const(0)  # a live entry's fields (ddq._Index.live), then a hist entry's (.hist)
_LV_ATT = const(1)
_LV_LEASE = const(2)
_LV_NB = const(3)
_HS_ATT = const(0)
_HS_NB = const(1)
# Recovery's running state, two lists handed down the replay: cp, the manifest's snapshot
# boundary (segments, items, end offset of its last segment, next_seq) [R8]; st, what the
# replay has seen: that boundary, a STATE snapshot of the last item, its reason pending.
_CP_SEGS = const(0)
_CP_ITEMS = const(1)
_CP_END = const(2)
_CP_NEXT = const(3)
_ST_SEEN = const(0)
_ST_SNAP = const(1)
_ST_REASON = const(2)
# Names: SPEC §6 [N1]; a tail cut where truncate is missing is staged as <segment>.reserve: a
# name libddq refuses while it is non-empty and not its segment [R12][R21] (older ddq staged
# <segment>.cut [R22]).
_LOCK = "queue.lock"
_CUT = ".reserve"


def recover(self: "Queue") -> None:
    """Rebuild all state from disk; the only way out of fail-stop [R1]-[R18]."""
    if self._closed:
        raise _err("IOFailure", "queue is closed")
    self._fail()  # (abandons a staged generation too)
    _reset(self)
    salv = None  # on_corrupt="salvage" [K9], once N7 passed: a special file is never salvaged
    try:
        fs = self._o.fs
        names = listdir(self)
        _regular(self, names)
        salv = self._salv
        cp, seen, gen, mcrc = _manifest(self, fs)
        # [R12][R22] finish a tail cut staged by copy + rename (no truncate on MicroPython).
        cut = False
        for name in names:
            if name.endswith(_CUT) or name.endswith(".cut"):
                seg = name[: name.rfind(".")]
                if _part("parse_segment_name")(seg):  # (in ddq_compact: rare here)
                    try:  # only after a crash inside a cut (import heap)
                        m = _part("ddq_cut")
                    except _E("IOFailure") as x:  # R22: refused, nothing changed
                        raise _err("Corrupt", "%s: %s [R22]", name, x.args[0])
                    m.leftover(self, name, seg, gen)
                    cut = True
        if cut:
            names = listdir(self)
        log = self._log  # the writer _reset made, for generation gen
        log.gen = gen
        nseg, dirty = _segments(self, names, gen)
        names = []  # the replay holds no name: a board's heap gets the listing's room back
        if self._has_manifest and nseg < cp[_CP_SEGS]:
            raise _err("Corrupt", "fewer segments than the manifest names")
        if not nseg:
            self._new_segment(log, False)
        st = [seen, False, False]  # [_ST_SEEN, _ST_SNAP, _ST_REASON]
        start = -1
        if nseg and self._o.ix_bytes and fs.kind(self._path(_INDEX)) == 1:  # a stat, no import
            try:
                m = _part("ddq_index")
            except (
                MemoryError,
                _E("IOFailure"),
            ):  # no room for it, or not installed: replay [X5][X9]
                m = None
            if m is not None:
                start = m.load(self, nseg, cp, mcrc)
        loaded = self._ix.n if start >= 0 else -1
        if start >= 0:
            st[_ST_SEEN] = self.index_used = True
        if len(log.sizes) < nseg:
            try:
                _replay(self, nseg, cp, st, start)
            except _E("Corrupt"):
                if start < 0:
                    raise
                # [X10] the records after the index do not apply to its state: a cache miss, so
                # replay everything (once: no index, no salvage inside; damage is reported then)
                kept, self._o.ix_bytes, self._salv = (self._o.ix_bytes, self._salv), 0, None
                try:
                    return recover(self)
                finally:
                    self._o.ix_bytes, self._salv = kept
        if not st[_ST_SEEN]:
            raise _err("Corrupt", "the manifest's snapshot boundary was never reached")
        _finish(self, fs, log, gen, nseg, cp, dirty, loaded)
    except OSError as e:
        self._fail()
        raise _io_failure(e, "recovery")
    except BaseException as e:
        self._fail()
        if isinstance(e, MemoryError):
            raise self._oom()  # NoMemory; fail-stopped, the disk as it was [O23]
        if not (salv and isinstance(e, _E("Corrupt"))):
            raise
        try:  # [N7] the names salvage opens, before it opens one (a FIFO would block it)
            _regular(self, listdir(self), str(e) + "; ")
        except OSError as x:
            raise _io_failure(x, "salvage")
        _part("ddq_salvage").in_place(self, e)  # [K9] repairs the directory, then recovers it


def _manifest(self: "Queue", fs: "Any") -> "tuple[list[int], bool, int, int]":
    """queue.format and queue.manifest checked, a FAT cut's manifest tmp adopted [R3][R14]:
    the snapshot boundary cp, whether it is seen already (no manifest), the generation and
    the manifest's CRC."""
    marker = fs.kind(self._path(_MARKER))
    if marker not in (0, 1) or (marker == 1 and fs.size(self._path(_MARKER)) != 0):
        raise _err("Corrupt", "queue.format is not an empty regular file")
    mpath = self._path(_MANIFEST)
    mk = fs.kind(mpath)
    if mk == 0 and marker == 1 and fs.kind(self._path(_MANIFEST_TMP)) == 1:
        # [R14] FAT renames over a file by remove + rename: a cut between leaves only the
        # synced tmp. Adopt it when it is a valid manifest; otherwise the manifest is lost.
        try:
            decode_manifest(_read_small(self, self._path(_MANIFEST_TMP), _MAN_SIZE + 1))
        except _E("Corrupt"):
            raise _err("Corrupt", "queue.manifest missing and queue.manifest.tmp invalid")
        fs.rename(self._path(_MANIFEST_TMP), mpath)
        fs.sync_dir(self._o.dir)
        mk = 1
    cp = [0, 0, 0, 1]  # the snapshot boundary: [_CP_SEGS, _CP_ITEMS, _CP_END, _CP_NEXT]
    seen = True
    gen = mcrc = 0
    if mk == 0:
        if marker == 1:
            raise _err("Corrupt", "queue.manifest missing but queue.format present [R3]")
    else:
        if mk != 1:
            raise _err("Corrupt", "queue.manifest is not a regular file")
        mb = _read_small(self, mpath, _MAN_SIZE + 1)
        gen, nxt, segs, items, end = decode_manifest(mb)
        mcrc = _crc(mb[0:_M_CRC])  # = its CRC field (a crc32 over its own CRC is a constant)
        if (
            nxt == 0
            or segs == 0
            or segs > self._o.max_segs
            or items > self._o.max_items
            or end > self._o.seg_bytes
            or (gen != 0 and marker != 1)
        ):
            raise _err("Corrupt", "queue.manifest fields out of range for these options")
        cp = [segs, items, end, nxt]
        seen = False
        self._has_manifest = True
    return cp, seen, gen, mcrc


def _segments(self: "Queue", names: "list[str]", gen: int) -> "tuple[int, bool]":
    """Generation gen's segment count, all of 0..n-1 present, and whether the listing holds
    a name clean removes."""
    # One listing per open (each costs its names): generation gen's segments by their
    # index, read in place (parse_segment_name's rules, without its slices and tuple); any
    # other segment or tmp name only flags the directory for clean, which decides [R16].
    pre, w = ("segment-", 8) if gen == 0 else ("generation-%020d-segment-" % gen, 40)
    ids: "list[int]" = []
    dirty = False
    for name in names:
        if name.startswith(pre) and len(name) == w + 24 and name.endswith(".log"):
            try:
                b = name.encode()  # its digits as ints: no str per char
            except ValueError:  # (CPython: an undecodable byte in the name)
                b = b""
            i = 0 if len(b) == w + 24 else -1
            for j in range(w, w + 20):
                c = b[j] - 48 if i >= 0 else -1
                if c < 0 or c > 9:
                    i = -1
                    break
                i = i * 10 + c
            if i < 0 or i > _U64:
                dirty = True
                continue
            ids.append(i)
            if len(ids) > self._o.max_segs:
                raise _err("Limit", "more segments than max_segments")
        elif (
            name == _MANIFEST_TMP
            or name == _INDEX_TMP
            or name.startswith("segment-")
            or name.startswith("generation-")
        ):
            dirty = True
    ids.sort()
    for k in range(len(ids)):
        if ids[k] != k:
            raise _err("Corrupt", "segment %d of generation %d is missing", k, gen)
    nseg = len(ids)
    return nseg, dirty


def _finish(
    self: "Queue",
    fs: "Any",
    log: "_Log",
    gen: int,
    nseg: int,
    cp: "list[int]",
    dirty: bool,
    loaded: int,
) -> None:
    """After the replay: the writer on its last segment, durable, the directory cleaned,
    the admission plan rebuilt."""
    if nseg > 1 and nseg > cp[_CP_SEGS] and not log.sizes[-1]:
        # [R23] An empty last segment past the manifest's boundary: a rotation whose record
        # never became durable (a power cut or ENOSPC after W3's create, or its torn record
        # cut to nothing). It holds nothing; removed, the next record goes where the lost
        # one would not fit, or rotates again: F7's rotations stay explained. (Durable by
        # the directory sync below; until then either state is this one.)
        fs.close(log.h)
        log.h = None
        fs.remove(self._path(segment_name(gen, nseg - 1)))
        log.sizes = log.sizes[0 : nseg - 1]  # (an array: no pop on MicroPython)
        del log.ck[nseg - 1 :]
        log.h = fs.open(self._path(segment_name(gen, nseg - 2)), "ab")
        log.off = log.synced = log.sizes[-1]
    fs.sync(self._log.h)  # what a crashed writer left in the page cache is durable [D4]
    fs.sync_dir(self._o.dir)  # the selected generation is durable before anything is deleted
    if dirty:  # else the listing held nothing clean removes, and nothing since adds it
        _part("ddq_compact").clean(self)
    log.durable = log.next - 1
    if self._o.win:  # the hold rule keeps no plan (port/ddq_admit.py)
        self._plan = None
    elif loaded < 0:
        self._plan = self._adm.plan_items(self)
    else:  # the saved plan is an upper bound like any cached one (DESIGN §5) [X5]
        for i in range(loaded, self._ix.n):
            self._adm.plan_add(self, self._ix.length(i))
    self._rbuf = bytearray(0)  # the replay window is not kept (64 KiB on big segments)
    if self._rm is not None:
        self._rm.mirror(self)  # the shadow starts from g [C14]


def listdir(self: "Queue") -> "list[str]":
    """The directory's names; Limit past max_segments * 8 + 1024 of them (a directory that
    was filled to stall the open)."""
    o = self._o
    names: "list[str]" = o.fs.listdir(o.dir)
    if len(names) > o.max_segs * 8 + 1024:
        raise _err("Limit", "too many directory entries in " + o.dir)
    return names


def _bad(fs: "Any", p: str, t: int, dirs: "Any" = "") -> bool:
    # True when p is a link, FIFO, device or socket [N7] (a directory is left to the rules that
    # read the name): lstat where the os has it (a link is a link), else the listing's entry
    # type t (MicroPython's stat follows links; its ilistdir does not), else the storage's kind.
    lst = getattr(os, "lstat", None)
    if lst is not None:
        try:
            t = lst(p)[0]
        except OSError:
            t = 0
    if t:
        t &= 0o170000
        return t != 0o100000 and (dirs or t != 0o040000)  # dirs: a directory too
    return bool(fs.kind(p) > (1 if dirs else 2))


def _regular(self: "Queue", names: "list[str]", why: str = "") -> None:
    # [N7] Before anything in the directory is opened: no entry named like a queue file is a
    # link or a special file (a FIFO would block the open, a link read or append outside).
    # (MicroPython: the listing gives each type, so a LittleFS or FAT entry costs no stat.)
    # why: "<the Corrupt in-place salvage is about to repair>; " [K9]: then the names salvage
    # reads and writes (salvage.intent, salvaged-*, salvage-report-*) are checked instead, a
    # directory too, and a bad one raises that Corrupt, naming it, with nothing changed.
    fs, d = self._o.fs, self._o.dir
    if not isinstance(fs, PosixStorage):
        return
    il = getattr(os, "ilistdir", None)
    src: "Any" = names if il is None else il(d)
    for e in src:
        n, t = (e, 0) if il is None else (e[0], e[1])
        if (
            n[:7] == "salvage"
            if why
            else n[:6] == "queue." or n[:8] == "segment-" or n[:11] == "generation-"
        ) and _bad(fs, d + "/" + n, t, why):
            raise _err("Corrupt", why + n + " is not a regular file [N7]")


def _read_small(self: "Queue", path: str, n: int) -> bytes:
    b = bytearray(n)
    fs = self._o.fs
    h = fs.open(path, "rb")
    try:
        got = self._read_exact(h, 0, memoryview(b))
    finally:
        fs.close(h)
    return bytes(b[0:got])


def _checkpoint(self: "Queue", sg: int, pos: int, cp: "list[int]", st: "list[bool]") -> None:
    # [R8] the manifest's snapshot boundary: counts must match when the replay reaches it.
    if not st[_ST_SEEN] and sg + 1 == cp[_CP_SEGS]:
        if pos > cp[_CP_END]:
            raise _err("Corrupt", "a record crosses the snapshot boundary")
        if pos == cp[_CP_END]:
            if (
                self._ix.n != cp[_CP_ITEMS]
                or self._log.next > cp[_CP_NEXT]
                or st[_ST_REASON]
                or (self._log.gen == 0 and self._log.next != cp[_CP_NEXT])
            ):
                raise _err("Corrupt", "snapshot boundary does not match the manifest")
            self._log.next = cp[_CP_NEXT]
            st[_ST_SEEN] = True


def _uniform(self: "Queue", h: "Any", start: int, end: int) -> bool:
    # ddq extension [R11]: a tail of only 0x00 or only 0xFF is an append that never reached
    # the medium (or erased flash), so it is torn, not corrupt.
    b = bytearray(256)
    mv = memoryview(b)
    first = -1
    pos = start
    for _ in range(_IO_LOOPS):
        if pos >= end:
            break
        n = self._read_exact(h, pos, mv[0 : min(256, end - pos)])
        if n <= 0:
            return False
        for k in range(n):
            v = b[k]
            if first < 0:
                if v not in (0, 255):
                    return False
                first = v
            elif v != first:
                return False
        pos += n
    return True


def _replay(self: "Queue", nseg: int, cp: "list[int]", st: "list[bool]", start: int) -> None:
    # One pass over each segment from the first queue.index does not cover (from offset start
    # in it when start > 0), all in this one call: MicroPython puts a frame of more than 11
    # words on the heap at each call, ~1 KB for this one (DESIGN §4). Each record is framed
    # (magic, version, length), checked in place (a memoryview window, no copy: check_record,
    # or on MicroPython its rules inlined, below) and applied; DATA inline, the rest through
    # _apply. A torn tail is cut [R10][R11]; the boundary checked [R8]. nseg: the generation's
    # segments. cp, st: the boundary and what the replay has seen (_CP_*, _ST_*; DESIGN §13).
    fs, log = self._o.fs, self._log
    o = self._o
    seg_bytes, max_payload, max_items = o.seg_bytes, o.max_payload, o.max_items
    index = self._ix
    live, hist = index.live, index.hist
    # The chunk and run lists grow in place (append): these stay the index's own lists.
    chunk_states, seg_first, run_index, run_seq, chunk_len, chunk_lens = (
        index.col,
        index.sfo,
        index.ro,
        index.rs,
        index.cl,
        index.lv,
    )
    items = index.n  # mirrors index.n: only DATA adds items
    last_seq = index.last  # the last item's seq
    compacted, u64 = log.gen != 0, _U64  # a generation > 0 starts with a compaction's snapshot
    unpack, pack, crc32 = struct.unpack_from, struct.pack_into, _crc
    # The crc scratch (a 40-byte header and its views) and the payload views by window offset
    # (payload_views, below), made once per recovery.
    crc_header = bytearray(_HDR)
    crc_fields = memoryview(crc_header)[_R_VER:_R_CRC]
    crc_reserved = memoryview(crc_header)[_R_RES:_HDR]
    payload_views: "dict[int, memoryview]" = {}
    window_buf = None  # the window's buffer: the views are of it
    window = crc_fields
    window_len = 0
    # Each segment's path in one allocation (segment_name then _path: three); its name, for a
    # message, is the path's tail (name_at: where it starts).
    name_at = len(o.dir) + 1
    path_fmt = (o.dir.replace("%", "%%") + "/") + (
        "segment-%020d.log"
        if not compacted
        else "generation-%020d-segment-" % log.gen + "%020d.log"
    )
    first_seg = len(log.sizes)
    largest = 0  # [F7] the largest segment before the previous one (sizes[0 .. seg-2])
    snap_segs = cp[_CP_SEGS] if compacted else 0  # [F7] segments 1 .. snap_segs-1: one
    # compaction wrote them
    for k in range(first_seg - 1):
        if log.sizes[k] > largest:
            largest = log.sizes[k]
    for seg in range(first_seg, nseg):
        if seg > first_seg and seg > 1 and log.sizes[seg - 2] > largest:
            largest = log.sizes[seg - 2]
        last = seg == nseg - 1
        path = path_fmt % seg
        size = fs.size(path)
        if size > seg_bytes:
            raise _err("Corrupt", "%s is larger than segment_bytes", path[name_at:])
        if not st[_ST_SEEN] and seg + 1 == cp[_CP_SEGS]:
            _checkpoint(self, seg, 0, cp, st)
        boundary = seg + 1 == cp[_CP_SEGS]  # only this segment holds the manifest's boundary [R8]
        swept = self._swept
        # The read window: a quarter segment, 1 KiB to 64 KiB (a board's 4 KiB segments: one
        # 1 KiB allocation, found where a 2 KiB one was not in a 64 KiB heap reopened a few
        # times; a record longer than the window gets a window of its own length).
        want = max(min(size, 65536, max(seg_bytes >> 2, 1024)), _MIN_REC)
        if window_buf is not self._rbuf or window_len < want:
            window = self._buf(want)
            window_len = len(window)
            if window_buf is not self._rbuf:
                payload_views.clear()
                window_buf = self._rbuf
        pos = start if seg == first_seg and start > 0 else 0
        win_start = win_end = pos  # the window holds the bytes win_start..win_end of the file
        torn = False
        done = 0  # records applied: replayed_records [X6]
        handle = fs.open(path, "rb")
        try:
            for _ in range(_SCAN_RECORDS):
                if pos >= size:
                    break
                left = size - pos
                need = left if left < _HDR else _HDR
                if pos + need > win_end:
                    # Read into the whole window itself: no slice (an object each, and
                    # _read_exact's heap frame) but after a short read (its loop, then).
                    win_start = pos
                    want = window_len if window_len < left else left
                    got = fs.read_into(handle, pos, window)
                    if got > want:  # (the file holds no more than its size, but trust no count)
                        got = want
                    win_end = pos + got
                    if 0 < got < want:
                        win_end += self._read_exact(handle, win_end, window[got:want])
                    if win_end - pos < need:
                        raise OSError(_EIO, "short read in " + path[name_at:])
                if left < _HDR:  # [R10] short tail
                    if last and st[_ST_SEEN]:
                        torn = True
                        break
                    raise _err("Corrupt", "short record at %s offset %d", path[name_at:], pos)
                # The frame: magic, version and a length that fits, so the record's end is known
                # before its rules are (a torn tail's shapes, R10/R11).
                at = pos - win_start
                if _MP:
                    # Fields by byte on MicroPython: unpack_from parses its format and builds a
                    # 9-tuple per record (88 B churn, ~6 us); these make no object (~2 us).
                    magic = (
                        window[at]
                        | window[at + 1] << 8
                        | window[at + 2] << 16
                        | window[at + 3] << 24
                    )
                    ver = window[at + _R_VER] | window[at + _R_VER + 1] << 8
                    field = at + _R_RLEN
                    rlen = (
                        window[field]
                        | window[field + 1] << 8
                        | window[field + 2] << 16
                        | window[field + 3] << 24
                    )
                else:
                    magic, ver, _t, _s, _a, _p, rlen, _c, _r = unpack(_REC_FMT, window, at)
                if magic != _REC_MAGIC or ver != _VERSION or rlen < _MIN_REC or rlen > seg_bytes:
                    if last and st[_ST_SEEN] and _uniform(self, handle, pos, size):
                        torn = True
                        break
                    raise _err("Corrupt", "bad record header at %s offset %d", path[name_at:], pos)
                if rlen > left:  # [R10] declared length runs past the end
                    if last and st[_ST_SEEN]:
                        torn = True
                        break
                    raise _err("Corrupt", "truncated record at %s offset %d", path[name_at:], pos)
                if pos + rlen > win_end:  # the record runs past the window: refill from pos
                    window = self._buf(rlen)
                    window_len = len(window)
                    if window_buf is not self._rbuf:
                        payload_views.clear()
                        window_buf = self._rbuf
                    win_start = pos
                    want = window_len if window_len < left else left
                    win_end = pos + self._read_exact(
                        handle, pos, window[0 : rlen if rlen > want else want]
                    )
                    if win_end - pos < rlen:
                        raise OSError(_EIO, "short read in " + path[name_at:])
                    at = 0
                err = ""
                if not _MP:
                    # The record's rules [F2]-[F11]: check_record itself (port/ddq.py, codec).
                    try:
                        typ, seq, arg, plen = check_record(
                            window, at, seg_bytes, max_payload, True
                        )
                    except _E("Corrupt") as x:
                        err = x.args[0]
                else:
                    # check_record's rules inlined, in its order [F2]-[F11] (magic, version and
                    # the length's bound: framed above). Its call allocates ~255 B a record on
                    # MicroPython (a 9-tuple, a 2-tuple, three views): bench row 5r (new), a
                    # reopen of 3,000 items allocates 113,765 B so, 1,647,090 B calling it
                    # (74x what it keeps; a board's heap collects every few hundred records).
                    # tests/test_record_verdicts.py holds this copy equal to check_record over
                    # generated valid and damaged records (DESIGN §13).
                    field = at + _R_TYPE
                    typ = window[field] | window[field + 1] << 8
                    field = at + _R_SEQ
                    seq = (
                        window[field]
                        | window[field + 1] << 8
                        | window[field + 2] << 16
                        | window[field + 3] << 24
                        | window[field + 4] << 32
                        | window[field + 5] << 40
                        | window[field + 6] << 48
                        | window[field + 7] << 56
                    )
                    field = at + _R_ARG
                    arg = (
                        window[field]
                        | window[field + 1] << 8
                        | window[field + 2] << 16
                        | window[field + 3] << 24
                        | window[field + 4] << 32
                        | window[field + 5] << 40
                        | window[field + 6] << 48
                        | window[field + 7] << 56
                    )
                    field = at + _R_PLEN
                    plen = (
                        window[field]
                        | window[field + 1] << 8
                        | window[field + 2] << 16
                        | window[field + 3] << 24
                    )
                    field = at + _R_CRC
                    crc = (
                        window[field]
                        | window[field + 1] << 8
                        | window[field + 2] << 16
                        | window[field + 3] << 24
                    )
                    field = at + _R_RES  # reserved: 0 iff its four bytes are
                    reserved = (
                        window[field] | window[field + 1] | window[field + 2] | window[field + 3]
                    )
                    if reserved != 0 or typ < _T_DATA or typ > _T_STATE:
                        err = "bad record header"  # (magic and version: framed above)
                    elif plen > max_payload and not (typ == _T_STATE and plen == _STATE_LEN):
                        err = "payload over max_payload_bytes"
                    elif rlen != _MIN_REC + plen:  # (rlen <= seg_bytes: framed above)
                        err = "bad record length"
                    else:
                        footer = at + _HDR + plen
                        # The footer by byte: "CMIT" then record_length, no tuple, no big int.
                        if (
                            window[footer] != 0x43
                            or window[footer + 1] != 0x4D
                            or window[footer + 2] != 0x49
                            or window[footer + 3] != 0x54
                            or rlen
                            != window[footer + 4]
                            | window[footer + 5] << 8
                            | window[footer + 6] << 16
                            | window[footer + 7] << 24
                        ):
                            err = "bad commit footer"
                        else:
                            # crc over bytes 4..32: the fields just read, packed again into
                            # crc_header (no slice of the window); the reserved bytes: zero
                            # (checked above); then the payload: one view, none for a control
                            # record.
                            pack(_CRC_FMT, crc_header, _R_VER, ver, typ, seq, arg, plen, rlen)
                            crc_now = crc32(crc_reserved, crc32(crc_fields))
                            if plen:
                                # A window is always refilled from a record's start, so with
                                # records of like sizes the same offsets recur: a view per offset
                                # is kept (a slice per record was most of a replay's churn).
                                if len(payload_views) > 64:
                                    payload_views.clear()
                                view = payload_views.get(at)
                                if view is None or len(view) != plen:
                                    view = payload_views[at] = window[at + _HDR : footer]
                                crc_now = crc32(view, crc_now)
                            if crc_now != crc:
                                err = "crc mismatch"
                            elif (
                                seq == 0
                                or (typ == _T_DATA and arg != 0)
                                or (typ == _T_CLAIM and (arg == 0 or plen))
                                or (typ == _T_ACK and (arg or plen))
                                or (typ == _T_RETRY and plen)
                                or (typ == _T_QUAR and (arg or plen > _MAX_REASON))
                                or (typ == _T_STATE and (arg or plen != _STATE_LEN))
                            ):
                                err = "record field rule broken"
                if err:
                    if last and st[_ST_SEEN] and _uniform(self, handle, pos + rlen - 8, size):
                        torn = True  # [R11] the footer and all after it never reached the medium
                        break
                    raise _err("Corrupt", "%s at %s offset %d", err, path[name_at:], pos)
                if (
                    pos == 0
                    and seg > 0
                    and (
                        not log.sizes[seg - 1]
                        or (seg < snap_segs and log.sizes[seg - 1] + rlen <= largest)
                    )
                ):
                    # [F7] a writer rotates only out of a segment that holds a record, where the
                    # next record did not fit in its segment_bytes W (R15 held W >= every segment
                    # then): end + that record > every earlier segment, whatever W each open had.
                    # Only inside a snapshot is k's first record that record: past it libddq
                    # (no R23) may have appended to the empty segment a lost rotation left [V3].
                    raise _err(
                        "Corrupt",
                        "segment %d of generation %d ends early (lost its end)",
                        seg - 1,
                        log.gen,
                    )
                if typ == _T_DATA:  # [R5] appended in seq order (_apply's rules for the rest)
                    prefix = compacted and not st[_ST_SEEN]
                    if (
                        seq >= u64
                        or (items and seq <= last_seq)
                        or (not prefix and seq != log.next)
                        or (prefix and st[_ST_REASON])
                    ):
                        raise _err(
                            "Corrupt",
                            "DATA sequence out of order at %s offset %d (seq %d)",
                            path[name_at:],
                            pos,
                            seq,
                        )
                    if items >= max_items:
                        raise _err(
                            "Full", "more items than max_items; reopen with the writer's limits"
                        )
                    # _Index.add without its call (a heap frame each) while the item joins a
                    # chunk whose items all have its length: a run starts where seqs are not
                    # consecutive, a segment's first item (state bits 0 already: AVAILABLE).
                    # A new chunk, or a length the chunk has not had (rare): add itself.
                    chunk = items >> _CS
                    if (
                        chunk < len(chunk_states)
                        and chunk_lens[chunk] is None
                        and chunk_len[chunk] == plen
                    ):
                        if not items or seq != last_seq + 1:
                            run_index.append(items)
                            run_seq.append(seq)
                        while len(seg_first) <= seg:
                            seg_first.append(items)
                        index.n = items + 1
                        index.last = seq
                        index.avail += 1
                    else:
                        index.add(seq, seg, plen)  # (counts it available)
                    items += 1
                    last_seq = seq
                    if seq >= log.next:
                        log.next = seq + 1
                    st[_ST_SNAP] = False
                else:
                    entry = live.get(seq)  # an item with history knows its index
                    item = entry[_LV_I] if entry is not None else index.find(seq)
                    if item >= 0:
                        states = chunk_states[item >> _CS]  # the item's state byte, its bits
                        byte, shift = (item & _CM) >> 2, (item & 3) << 1
                        state = (states[byte] >> shift & 3) + 1
                    else:
                        state = 0
                    # The two common transitions outside a snapshot, as _apply would make them
                    # (_move, then _Index.set_history), without three calls; the rest: _apply.
                    if (
                        typ == _T_ACK
                        and state == _CLAIMED
                        and entry is not None
                        and (st[_ST_SEEN] or not compacted)
                        and not swept
                    ):
                        attempts, not_before = entry[_LV_ATT], entry[_LV_NB]
                        index.claimed -= 1
                        index.acked += 1
                        states[byte] ^= ((_CLAIMED - 1) ^ (_ACKED - 1)) << shift
                        del live[seq]
                        if attempts or not_before:
                            hist[seq] = [attempts, not_before]
                        else:
                            hist.pop(seq, None)
                    elif (
                        typ == _T_CLAIM
                        and (state == _AVAILABLE or state == _CLAIMED)
                        and (st[_ST_SEEN] or not compacted)
                        and not swept
                    ):
                        if state == _AVAILABLE:
                            index.avail -= 1
                            index.claimed += 1
                        states[byte] ^= ((state - 1) ^ (_CLAIMED - 1)) << shift
                        if entry is None:
                            old = hist.pop(seq, None)
                            if old is None:
                                live[seq] = [item, 0, arg, 0, -1]
                            else:
                                live[seq] = [item, old[_HS_ATT], arg, old[_HS_NB], -1]
                        else:
                            hist.pop(seq, None)
                            entry[_LV_LEASE] = arg
                    else:
                        try:
                            _apply(
                                self, seg, pos, typ, seq, arg, plen, window, at, st, item, entry
                            )
                        except _E("Corrupt") as x:
                            raise _err(
                                "Corrupt",
                                "%s at %s offset %d (seq %d)",
                                x.args[0],
                                path[name_at:],
                                pos,
                                seq,
                            )
                pos += rlen
                done += 1
                if boundary and not st[_ST_SEEN]:
                    _checkpoint(self, seg, pos, cp, st)
            else:
                raise _err("Limit", "too many records in " + path[name_at:])
        finally:
            self.replayed_records += done
            fs.close(handle)
        if torn:
            log.tail += size - pos
            size = pos
            _cut(self, path, size)
        log.sizes.append(size)
        if last:
            log.h = fs.open(path, "ab")
            log.off = log.synced = size


def _cut(self: "Queue", path: str, size: int) -> None:
    """Remove a torn tail: truncate where possible, else copy the prefix and rename [R12]."""
    fs = self._o.fs
    if getattr(fs, "can_truncate", False):
        fs.truncate(path, size)
        return
    if not size:  # nothing to keep: emptied in place, no leftover name [R12]
        h = fs.open(path, "wb")
        try:
            fs.sync(h)
        finally:
            fs.close(h)
        return
    tmp = path + _CUT  # [R12] libddq refuses the directory while this holds records [R21]
    if fs.kind(tmp) != 0:
        fs.remove(tmp)
    mv = self._buf(min(max(size, 1), 1024))
    src = fs.open(path, "rb")
    try:
        dst = fs.open(tmp, "wb")
        try:
            pos = 0
            for _ in range(_IO_LOOPS):
                if pos >= size:
                    break
                n = self._read_exact(src, pos, mv[0 : min(len(mv), size - pos)])
                if n <= 0:
                    raise OSError(_EIO, "short read while cutting " + path)
                fs.write(dst, mv[0:n])
                pos += n
            fs.sync(dst)
        finally:
            fs.close(dst)
    finally:
        fs.close(src)
    fs.rename(tmp, path)  # the commit point of the cut [S4]
    fs.sync_dir(self._o.dir)


def _apply(
    self: "Queue",
    sg: int,
    off: int,
    typ: int,
    seq: int,
    arg: int,
    plen: int,
    mv: memoryview,
    p: int,
    st: "list[bool]",
    i: int,
    e: "Optional[list[int]]",
) -> None:
    """Apply one valid non-DATA record in log order: DDQ's replay rules [R6][R7] (_replay
    applies DATA [R5]). i: the item's index or -1; e: its live entry, if any."""
    ix = self._ix
    prefix = self._log.gen != 0 and not st[_ST_SEEN]
    if i < 0:
        raise _err("Corrupt", "record for unknown seq")
    s = ix.state(i)
    if e is not None:
        a, lease, nb = e[_LV_ATT], e[_LV_LEASE], e[_LV_NB]
    else:
        h = ix.hist.get(seq)
        if h is not None:
            a, lease, nb = h[_HS_ATT], 0, h[_HS_NB]
        else:
            a = lease = nb = 0
    if typ == _T_STATE and prefix and i == ix.n - 1 and not st[_ST_SNAP]:
        state, a, lease, nb = struct.unpack_from(_STATE_FMT, mv, p + _HDR)
        if state not in (_AVAILABLE, _CLAIMED, _QUARANTINED) or (state == _CLAIMED) != (
            lease != 0
        ):
            raise _err("Corrupt", "bad STATE snapshot")
        self._move(i, state, a, lease, nb)
        st[_ST_SNAP] = True
        st[_ST_REASON] = state == _QUARANTINED
    elif (
        typ == _T_QUAR
        and prefix
        and s == _QUARANTINED
        and st[_ST_SNAP]
        and st[_ST_REASON]
        and i == ix.n - 1
    ):
        ix.reasons[seq] = [sg, off, plen]
        st[_ST_REASON] = False
    elif prefix:
        raise _err("Corrupt", "record not allowed inside a snapshot")
    elif typ == _T_CLAIM and s in (_AVAILABLE, _CLAIMED):
        self._move(i, _CLAIMED, a, arg, nb)
    elif typ == _T_ACK and s == _CLAIMED:
        self._move(i, _ACKED, a, 0, nb)
    elif typ == _T_RETRY and s == _CLAIMED and a < _U32:
        self._move(i, _AVAILABLE, a + 1, 0, arg)
    elif typ == _T_QUAR and s == _CLAIMED:
        self._move(i, _QUARANTINED, a, 0, nb)
        ix.reasons[seq] = [sg, off, plen]
    else:
        raise _err("Corrupt", "illegal transition")


# ============================================================================ open
# Queue(...): the options (Options, set here alone), the directory, the lock; recover above.
class Options:
    """A queue's options (Queue._o), set once at open, by init alone: the limits, the admission
    rule, the sync policy, the storage and the directory, and the reused record buffer with its
    views (STYLE 6). Defined here, beside the code that sets them: `import ddq` does not pay
    for the class (DESIGN §13 "State and its owners")."""

    seg_bytes: int
    max_payload: int
    max_items: int
    max_segs: int
    ix_bytes: int  # 0: no queue.index (recover sets 0 for its replay of everything [X10])
    win: int  # the hold rule's claims in flight; 0: libddq's admission (SPEC §10.1) [H1]
    ev: int  # the hold rule's quarantine evidence budget, bytes [H1]
    tc: str  # the index column's typecode (DESIGN §4)
    sync_all: bool
    sync_ack: bool
    fs: "Any"
    dir: str
    rec: bytearray  # one reused 48-byte record buffer and its views (STYLE 6)
    mv_hdr: memoryview
    mv_ftr: memoryview
    mv_crc1: memoryview
    mv_crc2: memoryview
    state_buf: bytearray
    pl: "tuple[list[int], list[int]]"  # scratch plans for admission


def init(
    self: "Queue",
    path: str,
    segment_bytes: int = 4194304,
    max_payload_bytes: int = 1048576,
    max_items: int = 100000,
    max_segments: int = 1024,
    clock: "Optional[Callable[[], int]]" = None,
    storage: "Any" = None,
    sync: str = "always",
    index_bytes: int = 1048576,
    reclaim_step: int = 0,
    on_corrupt: str = "raise",
    window: int = 0,
    evidence_bytes: int = 1024,
) -> None:
    # Queue(...)'s options and their defaults (ddq.Queue.__init__ passes them on as given).
    # [O22] The parts every queue needs (the open's own, ddq_recover, is here), found first: a
    # missing file is an IOFailure naming it and what needs it. (First: the stats' short-lived
    # strings then sit below what the open keeps, not among it; in 128 KiB that was 17 % of
    # the items, bench row 5c.)
    _find("ddq_compact", "compaction")
    _find("ddq_extra", "stats, items, quarantine")
    self._closed = True
    self._lock = None
    if not isinstance(path, str) or not path or len(path) >= 4096:
        raise _err("InvalidArgument", "path must be a non-empty str shorter than 4096")
    self._o = Options()
    o = self._o  # (set here alone, as given; the state's owners: DESIGN §13)
    o.seg_bytes = _opt(segment_bytes, 256, 64 * 1048576, "segment_bytes")
    o.max_payload = _opt(max_payload_bytes, 1, segment_bytes - _MIN_REC, "max_payload_bytes")
    o.max_items = _opt(max_items, 1, 1000000, "max_items")
    o.max_segs = _opt(max_segments, 1, 4096, "max_segments")
    o.ix_bytes = _opt(index_bytes, 0, _U64, "index_bytes")
    # Records a call copies into a generation staged over many calls; 0: compaction runs
    # whole in the call that needs it, as C DDQ's (DESIGN §12) [C13].
    step = _opt(reclaim_step, 0, 4096, "reclaim_step")
    self._rm = None  # the reclamation state, ddq_reclaim's (imported only for step > 0) [C13]
    # The hold rule (SPEC §10.1, port/ddq_hold.py): room for `window` claims in flight and
    # `evidence_bytes` of quarantine evidence instead of libddq's reserve per item; 0: libddq's.
    o.win = _opt(window, 0, 65535, "window")
    o.ev = _opt(evidence_bytes, 0, _U32, "evidence_bytes")
    # The index's lengths: u16 where every payload length fits 16 bits, else u32 (§4).
    o.tc = "H" if o.max_payload <= 65535 else "I"
    if clock is not None and not callable(clock):
        raise _err("InvalidArgument", "clock must be callable")
    if sync not in ("always", "ack", "none"):
        raise _err("InvalidArgument", "sync must be 'always', 'ack' or 'none'")
    for n in dir(PosixStorage) if storage is not None else ():  # [O24] an instance with
        # every method of the seam (PosixStorage's public names; truncate is optional, S8)
        if n[0] != "_" and n != "truncate":
            if isinstance(storage, type) or not callable(getattr(storage, n, None)):
                raise _err("InvalidArgument", "storage: an object with the storage seam's methods")
    # "salvage": recovery's Corrupt salvages in place (ddq_salvage, loaded only then) [K9]
    self._salv = [0, 0] if on_corrupt == "salvage" else None
    if not self._salv and on_corrupt != "raise":
        raise _err("InvalidArgument", "on_corrupt")
    o.sync_all = sync == "always"
    o.sync_ack = sync != "none"
    self.clock = clock if clock is not None else _wall_ms
    o.fs = storage if storage is not None else PosixStorage()
    o.dir = path.rstrip("/") or "/"
    self.reason_budget = min(o.max_payload, _MAX_REASON)
    # One reused 48-byte record buffer and its views: no allocation per record (STYLE 6).
    o.rec = bytearray(_MIN_REC)
    mv = memoryview(o.rec)
    o.mv_hdr, o.mv_ftr = mv[0:_HDR], mv[_HDR:_MIN_REC]
    o.mv_crc1, o.mv_crc2 = mv[4:32], mv[36:40]
    o.state_buf = bytearray(_STATE_LEN)
    o.pl = ([0, 0], [0, 0])  # scratch plans for admission: no allocation per enqueue
    self._rbuf = bytearray(0)
    _reset(self)
    # [O22] and those these options need, before anything on disk changes.
    # The admission rule, chosen once by window: its module, kept for every enqueue and claim.
    if o.win:
        self._adm = _part("ddq_hold", "window > 0")
    else:
        self._adm = _part("ddq_admit", "window 0: libddq's admission")
    if self._salv:
        _find("ddq_salvage", "on_corrupt='salvage'")
    if step:
        self._rm = _part("ddq_reclaim", "reclaim_step > 0").Reclaim(step)
    fs, d = o.fs, o.dir
    k = fs.kind(d)
    if k == 0:
        try:
            fs.mkdir(d)
            j = d.rfind("/")
            fs.sync_dir(d[:j] or "/" if j >= 0 else ".")  # the new entry [S3]
        except OSError as e:
            raise _io_failure(e, "mkdir " + d)
    elif k != 2:
        raise _err("InvalidArgument", "not a directory: " + d)
    try:
        self._lock = fs.lock(d)
    except OSError as e:
        raise _io_failure(e, "lock")
    self._closed = False
    try:
        recover(self)
    except BaseException:
        self._closed = True
        try:
            self._fail()
        finally:
            tok, self._lock = self._lock, None
            if tok is not None:
                fs.unlock(tok)
        raise


def _found(path: str) -> bool:
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def _find(m: str, why: str) -> None:
    # The part m as a file (a stat: its code is not loaded): beside ddq's own file, with its
    # extension (one stat, which finds it in an install as flash or mip lays it out), else as
    # m.py or m.mpy in any sys.path entry, else by a real import (a frozen module has no file);
    # a missing one is ddq._part's IOFailure naming m and why it is needed [O22].
    f = getattr(sys.modules.get("ddq"), "__file__", "")
    k = f.rfind(".")
    if k > 0 and _found(f[: f.rfind("/") + 1] + m + f[k:]):
        return
    for p in sys.path:
        if _found((p or ".") + "/" + m + ".py") or _found((p or ".") + "/" + m + ".mpy"):
            return
    _part(m, why)


def _reset(self: "Queue") -> None:
    staged = self._rm
    if staged is not None:  # the reclamation state anew (_fail dropped its build) [C13]
        self._rm = staged.__class__(staged.units)
    self._ix = _Index(self._o.tc)
    log = _Log(0)  # the writer (ddq._Log's own fields; recovery builds it)
    log.next = 1  # the seq of the next enqueue
    log.durable = log.tail = 0
    log.unsynced = []  # sync="none": DATA payloads not yet synced
    log.ub = log.ubase = 0  # their bytes [D3], the first one's seq
    log.nap = log.w0 = 0  # records appended: Queue._oom [O23]
    self._log = log
    self._has_manifest = False
    self._plan = None  # cached worst-case compacted plan [segs, off]
    self._hd = None  # the hold rule's DATA bytes, recounted at first use [H2]
    self._swept = {}  # seq -> lease of a claim expired in RAM only [T2]
    self._ixcov = None  # [generation, sizes...] queue.index covers
    self.replayed_records = 0  # records the last recovery read and applied [X6]
    self.index_used = False  # the last recovery started from queue.index [X6]
    self._slack = -1  # admission's room left at the last enqueue, in bytes (-1: unknown)


def lock(self: "PosixStorage", path: str) -> "Any":
    # flock on queue.lock excludes C DDQ too [L1]; on the MicroPython unix port an abstract
    # unix socket named after the directory does the same and dies with its process [L2].
    # An absolute path without ".", ".." or doubled slashes: one lock key per directory [L3].
    p = path if path[:1] == "/" else os.getcwd() + "/" + path
    out: "list[str]" = []
    for part in p.split("/"):
        if part == "..":
            if out:
                out.pop()
        elif part and part != ".":
            out.append(part)
    key = "/" + "/".join(out)
    if key in PosixStorage._held:
        raise _err("Locked", "locked by this process: " + path)
    if _bad(self, path + "/" + _LOCK, 0):  # [N7] before the open: a FIFO would block it
        raise _err("Corrupt", _LOCK + " is not a regular file [N7]")
    f = self.open(path + "/" + _LOCK, "ab")
    held = None
    fcntl = _import("fcntl")
    try:
        st = os.stat(path)
        if not st[1] and self.kind(path + "/QUEUE.LOCK") == 1:
            # [L3] A directory of this process alone (inode 0: LittleFS, FAT) whose names fold
            # case: FAT, where one directory has many spellings. Its key is FatFs's reading
            # (port/ddq_fat.py: the rule costs a board's heap only on FAT).
            key = _part("key")(p, path, f)
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            socket = _import("socket")
            # Only a host directory (VfsPosix: a real inode) can be shared with another
            # process; LittleFS/FAT report inode 0 and belong to this process alone.
            if st[1] and socket is not None and hasattr(socket, "AF_UNIX"):
                held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                # device and inode of the directory, and queue.lock's inode: what flock locks
                # (L1), so a holder left by a deleted directory whose inode came back to a new
                # one does not lock the new directory out
                lk = os.stat(path + "/" + _LOCK)[1]
                name = b"\0ddq-%d-%d-%d" % (st[2], st[1], lk)
                held.bind(struct.pack("<H", socket.AF_UNIX) + name)
    except OSError as e:
        f.close()
        if held is not None:
            held.close()
        raise _err("Locked", "locked by another process: %s (%r)", path, e)
    PosixStorage._held.append(key)
    return (key, f, held)


def decode_manifest(b: "Buf") -> "tuple[int, int, int, int, int]":
    """Decode a manifest [M2]: (generation, next_seq, segment_count, item_count, end_offset).

    Raises Corrupt if it breaks a rule."""
    b = _bytes_arg(b, "manifest")  # [O24]
    if len(b) != _MAN_SIZE:
        raise _err("Corrupt", "manifest size")
    magic, ver, size, gen, nxt, segs, items, end = struct.unpack_from(_MAN_FMT, b, 0)
    crc, res = struct.unpack_from("<II", b, _M_CRC)
    if (
        magic != _MAN_MAGIC
        or ver != 1
        or size != _MAN_SIZE
        or res != 0
        or crc != _crc(memoryview(b)[0:_M_CRC])
    ):
        raise _err("Corrupt", "manifest header or crc")
    return gen, nxt, segs, items, end
