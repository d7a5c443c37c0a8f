"""ddq_compact: compaction and publication for ddq.Queue (SPEC §11), loaded on first use.

compact(), purge() and the compaction an enqueue or a write needs when admission or the segment
limit refuses: the items not acked are copied into generation g+1, which the manifest's rename
publishes, and g is deleted. ddq.py's one table (`_PARTS`) names the public ones (compact, purge:
Queue methods, attached at their first call); the rest are functions over the queue that their
callers reach through the one loader, `_part("ddq_compact").NAME(q, ...)`: compact_now (the
compaction an enqueue needs), copy_item, publish, prepare_format, clean, index_update. A queue
that never compacts never loads them (DESIGN §4.1, §13).

Format: see docs/SPEC.md §11 [C1]-[C12]; design: docs/DESIGN.md §3, §5.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import struct

from ddq import (
    _E,
    _INDEX,
    _INDEX_TMP,
    _MAN_FMT,
    _MAN_MAGIC,
    _MANIFEST,
    _MANIFEST_TMP,
    _MARKER,
    _U64,
    _crc,
    _err,
    _Index,
    _io_failure,
    _Log,
    _opt,
    _part,
    const,
    segment_name,
)

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Optional

    from ddq import Queue


# ============================================================================ directory
# The names of the directory and its cleanup, shared with recovery (which loads this module
# only when its listing names something to remove): kept out of ddq.py, they cost a board's heap
# only once a queue compacts or a crash left something behind (DESIGN §4.1).
def parse_segment_name(name: str) -> "Optional[tuple[int, int]]":
    """Return (generation, index) for a segment file name, or None [N2][N3][N4]."""
    if not isinstance(name, str):
        raise _err("InvalidArgument", "name: not a str")  # [O24]
    if len(name) == 32 and name[:8] == "segment-" and name[28:] == ".log":
        gd, d = "0", name[8:28]
    elif (
        len(name) == 64
        and name[:11] == "generation-"
        and name[31:40] == "-segment-"
        and name[60:] == ".log"
    ):
        gd, d = name[11:31], name[40:60]
    else:
        return None
    for c in gd + d:  # ASCII digits only: str.isdigit() accepts other scripts on CPython
        if c < "0" or c > "9":
            return None
    g, i = int(gd), int(d)
    if (g == 0 and len(gd) > 1) or g > _U64 or i > _U64:  # generation 0: the legacy name only
        return None
    return g, i


def clean(self: "Queue") -> None:
    """Delete the manifest tmp and every segment of another generation [R16]."""
    fs, removed, gen = self._o.fs, False, self._log.gen
    names = self._o.fs.listdir(self._o.dir)
    if len(names) > self._o.max_segs * 8 + 1024:  # (as ddq_recover.listdir)
        raise _err("Limit", "too many directory entries in " + self._o.dir)
    for name in names:
        pg = parse_segment_name(name)
        if name in (_MANIFEST_TMP, _INDEX_TMP) or (pg is not None and pg[0] != gen):
            p = self._path(name)
            if fs.kind(p) != 1:
                raise _err("Corrupt", "not a regular file: " + name)
            fs.remove(p)
            removed = True
    if removed:
        fs.sync_dir(self._o.dir)


# ============================================================================ recovery index
def index_update(self: "Queue") -> None:
    # [X1] at close and after a compaction: write the index when the log holds index_bytes
    # or more and the file does not already cover it; otherwise leave no stale index behind.
    # ddq_index is imported only here and when an index exists at open. Errors cost speed.
    # (Here, not in ddq.py: a queue opened with index_bytes=0 never needs it.)
    log = self._log
    try:
        if self._o.ix_bytes and sum(log.sizes) >= self._o.ix_bytes:
            if self._ixcov != [log.gen] + list(log.sizes):
                # (a board may ship without it, an IOFailure caught below: open replays [X9])
                _part("ddq_index").save(self)
        elif self._o.ix_bytes and self._o.fs.kind(self._path(_INDEX)) == 1:
            self._o.fs.remove(self._path(_INDEX))
            self._o.fs.sync_dir(self._o.dir)
    except Exception:  # noqa: BLE001 (optional: MemoryError or a cut must not keep the lock)
        pass


# ============================================================================ compaction
# ddq's values that a compaction reads, by group (ddq.py's format section names each): a
# MicroPython const folds in its own module only (tests/host/test_host_index.py holds them equal).
_MIN_REC = const(48)  # the sizes of a record and of a STATE record (SPEC §3.4)
_STATE_REC = const(72)
_T_DATA = const(1)  # the types a compaction writes into g+1 (SPEC §4 [F10])
_T_QUAR = const(5)
_T_STATE = const(6)
_STATE_FMT = "<IIQQ"  # a STATE snapshot and the states it keeps (SPEC §4.1 [F11])
_AVAILABLE = const(1)
_ACKED = const(3)
_QUARANTINED = const(4)
_MAN_SIZE = const(48)  # the manifest it publishes, and its crc field (SPEC §5 [M1])
_M_CRC = const(40)
_EEXIST = const(17)  # the errno of a manifest tmp already there


def compact(self: "Queue") -> bool:
    """Reclaim acked items and collapse history into a new generation now [C1].

    Returns False when the new generation would not be smaller (nothing changes)."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        self._alive()
        try:
            compact_now(self, 0, 0)
        except _E("Full"):
            if self._rm is not None:
                try:
                    self._rm.fresh(self, 0, 0)  # C DDQ's queue may have compacted [C14]
                except _E("Full"):
                    pass
            return False
        if self._rm is not None:
            self._rm.mirror(self)  # as C DDQ's queue would be now [C14]
        return True
    except MemoryError:
        raise self._oom()


def purge(self: "Queue", seqs: "list[int]") -> int:
    """Drop quarantined items (payload and reason) through a new generation; return how many.

    ddq extension [C10]: the snapshot simply omits them (gaps are legal in a snapshot), so
    C DDQ reads the result; their sequences are never reused."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        self._alive()
        drop = []
        try:  # [O24]
            it = iter(seqs)
        except TypeError:
            raise _err("InvalidArgument", "seqs: not iterable")
        for s in it:
            i = self._find(s)
            if self._ix.state(i) != _QUARANTINED:
                raise _err("BadState", "item %d is not quarantined", s)
            if s not in drop:
                drop.append(s)
        if drop:
            compact_now(self, 0, 0, drop)
            if self._rm is not None:
                self._rm.mirror(self)  # [C14]
        return len(drop)
    except MemoryError:
        raise self._oom()


def publish(
    self: "Queue",
    gen: int,
    nxt: int,
    segs: int,
    items: int,
    end: int,
    done: "Optional[list[bool]]" = None,
) -> None:
    # Commit point of a generation [C5]: tmp written, synced and closed, renamed over the
    # manifest (atomic on POSIX and LittleFS; remove + rename on FAT, see [R14]), dir synced.
    fs, tmp, man = self._o.fs, self._path(_MANIFEST_TMP), self._path(_MANIFEST)
    if fs.kind(tmp) != 0:
        raise OSError(_EEXIST, "exists: " + tmp)
    h = fs.open(tmp, "wb")
    try:
        fs.write(h, encode_manifest(gen, nxt, segs, items, end))
        fs.sync(h)
    finally:
        fs.close(h)
    try:
        fs.rename(tmp, man)
    except OSError:
        if fs.kind(tmp) == 1 and fs.kind(man) == 1:  # nothing moved: forget the tmp
            fs.remove(tmp)
            fs.sync_dir(self._o.dir)
        elif done is not None:
            # The rename took effect after all, or FAT removed the old manifest first and
            # the tmp is the manifest now [R14]: the new generation may be the published one.
            done[0] = True
        raise
    if done is not None:
        done[0] = True  # from here on the new generation is (or may be) the published one
    fs.sync_dir(self._o.dir)


def adopt(self: "Queue", new: "_Log", nix: "_Index", plan: "Optional[list[int]]") -> None:
    # The queue takes a published generation (compact_now, ddq_reclaim's publication) [C6]:
    # the writer (the same object: callers' references stay good) takes new's segments, nix is
    # the index, the old generation's handle is closed, and the admission plan is the copy's,
    # built as it copied (enqueue drops it under the hold rule, which keeps none).
    old = self._log
    h = old.h
    old.adopt(new)
    self._ix = nix
    try:
        self._o.fs.close(h)
    except OSError:
        pass
    self._has_manifest = True
    self._plan = plan


def prepare_format(self: "Queue") -> None:
    # The prelude of every compaction, whole (compact_now) or staged (ddq_reclaim.start): the log
    # synced (a manifest never points past unsynced bytes, and a copy reads g from the files),
    # on the first compaction a manifest for generation 0 published, then the marker created
    # [C2] (this order keeps an interrupted migration readable in the old format), and what is
    # left of older generations removed; a failure fail-stops the queue [C7].
    fs, log = self._o.fs, self._log
    try:
        if log.dirty:
            self._sync_h()
        if not self._has_manifest:
            publish(self, log.gen, self._log.next, len(log.sizes), self._ix.n, log.off)
            self._has_manifest = True
        k = fs.kind(self._path(_MARKER))
        if k == 0:
            h = fs.open(self._path(_MARKER), "wb")
            try:
                fs.sync(h)
            finally:
                fs.close(h)
            fs.sync_dir(self._o.dir)
        elif k != 1 or fs.size(self._path(_MARKER)) != 0:
            raise _err("Corrupt", "queue.format not empty")
        clean(self)
    except OSError as e:
        self._fail()
        raise _io_failure(e, "compaction")
    except _E("Corrupt"):
        self._fail()
        raise


def compact_now(
    self: "Queue", reserve: int, required: int, drop: "Optional[list[int]]" = None
) -> None:
    """Copy unacked items into generation g+1 and publish it; Full when no benefit [C3]-[C8]."""
    if self._rm is not None:  # a staged generation gives way to the full copy, and its
        self._rm.drop(self, True)  # clean deletes what is left of a replaced one [C13]
    if self._log.h is None:
        raise _err("IOFailure", "queue is fail-stopped")
    if required and not self._ix.acked:
        raise _err("Full", "max_items reached and nothing is acked")
    if self._log.gen >= _U64:
        raise _err("Limit", "generations exhausted")
    prepare_format(self)
    old, ix, fs = self._log, self._ix, self._o.fs
    new, nix = _Log(old.gen + 1), _Index(self._o.tc)
    published = [False]
    try:
        self._new_segment(new, True)
        plan: "Optional[list[int]]" = [0, 0]  # the admission plan of the copy, as it goes
        for i in range(ix.n):
            s = ix.state(i)
            if s == _ACKED:
                continue
            seq = ix.seq(i)
            if drop and seq in drop:
                continue
            a, lease, nb = ix.history(seq)
            r = ix.reasons.get(seq)
            plan = copy_item(self, old, new, nix, i, seq, ix.length(i), s, a, lease, nb, r, plan)
        if (
            sum(new.sizes) >= sum(old.sizes)
            or nix.n > self._o.max_items - required
            or (len(new.sizes) >= self._o.max_segs and new.off + reserve > self._o.seg_bytes)
        ):
            raise _err("Full", "compaction: no benefit")
        fs.sync(new.h)
        new.synced = new.off
        new.dirty = False
        fs.sync_dir(self._o.dir)
        publish(self, new.gen, self._log.next, len(new.sizes), nix.n, new.off, published)
    except BaseException as e:
        if published[0] and new.h is not None:
            try:
                fs.close(new.h)  # kept on disk, not adopted: recover() reopens it
            except OSError:
                pass
        if not published[0]:
            try:
                if new.h is not None:
                    fs.close(new.h)
                for k in range(len(new.sizes)):
                    fs.remove(self._path(segment_name(new.gen, k)))
                if new.sizes:
                    fs.sync_dir(self._o.dir)
            except OSError as e2:
                self._fail()
                raise _io_failure(e2, "discarding staged generation")
        if isinstance(e, _E("Limit")):  # the copy needs more segments than allowed: no benefit
            raise _err("Full", "the copy does not fit max_segments")
        if isinstance(e, _E("Full")):
            raise
        self._fail()  # an uncertain publication: recover before writing again [C7]
        if isinstance(e, OSError):
            raise _io_failure(e, "compaction")
        raise
    # Adopt the published generation, then delete the old one's segments [C6], by name one at
    # a time: clean's listing of both generations was a compaction's peak on a board's heap.
    og, ks = old.gen, range(len(old.sizes))
    adopt(self, new, nix, plan)
    self._swept = {}  # the STATE snapshots made the RAM sweeps durable
    try:
        for k in ks:
            p = self._path(segment_name(og, k))
            if fs.kind(p) == 1:
                fs.remove(p)
        fs.sync_dir(self._o.dir)
    except OSError as e:
        self._fail()
        raise _io_failure(e, "compaction")  # (after the publication)
    index_update(self)  # [X1] so a power cut later replays only what follows


def copy_item(
    self: "Queue",
    old: _Log,
    new: _Log,
    nix: "_Index",
    i: int,
    seq: int,
    ln: int,
    s: int,
    a: int,
    lease: int,
    nb: int,
    r: "Optional[list[int]]",
    plan: "Optional[list[int]]",
    data: "Any" = None,
) -> "Optional[list[int]]":
    # Item i of old into a staged generation in state s: DATA, a STATE unless it is in its
    # default state, its reason [C4]; returns the copy's admission plan so far (§5). data: its
    # payload already read (ddq_reclaim's scan), else read here.
    if data is None:
        data = self._data(old, i, seq, ln)  # (g is synced up to what is copied)
    self._append(new, _T_DATA, seq, 0, data, True)
    nix.add(seq, len(new.sizes) - 1, ln)
    j = nix.n - 1
    nix.put(j, s)
    if s != _AVAILABLE or a or lease or nb:
        sb = self._o.state_buf
        struct.pack_into(_STATE_FMT, sb, 0, s, a, lease, nb)
        self._append(new, _T_STATE, seq, 0, sb, True)
        nix.set_history(j, a, lease, nb)
    if plan is not None and not (
        self._place(plan, _MIN_REC + ln)
        and self._place(plan, _STATE_REC)
        and self._place(plan, _MIN_REC + (r[2] if r is not None else self.reason_budget))
    ):
        plan = None
    if r is not None:
        why = self._read_record(old, r[0], r[1], _T_QUAR, seq, r[2])
        roff = self._append(new, _T_QUAR, seq, 0, why, True)
        nix.reasons[seq] = [len(new.sizes) - 1, roff, r[2]]
    return plan


def encode_manifest(gen: int, next_seq: int, segs: int, items: int, end: int) -> bytes:
    """Return the 48-byte manifest [M1]."""
    for v in (gen, next_seq, segs, items, end):  # [O24]
        _opt(v, 0, _U64, "field")
    _opt(segs | items, 0, 0xFFFFFFFF, "field")  # (two u32 fields)
    b = bytearray(_MAN_SIZE)
    struct.pack_into(_MAN_FMT, b, 0, _MAN_MAGIC, 1, _MAN_SIZE, gen, next_seq, segs, items, end)
    struct.pack_into("<II", b, _M_CRC, _crc(memoryview(b)[0:_M_CRC]), 0)
    return bytes(b)
