"""ddq: a durable delivery queue (outbox) for MicroPython boards and CPython gateways.

A port of the C DurableDeliveryQueue (DDQ): the same directory format byte for byte, the same state
machine and status codes (as exceptions). Enqueue a message; claim it with a lease; send it; ack it
only after the far end confirmed, or retry it with a delay, or quarantine it with a reason.

    import ddq
    with ddq.Queue("outbox") as q:
        q.enqueue(b"reading 1")
        c = q.claim(30000)
        q.ack(c.seq)          # after the far end confirmed

Where each public operation's body lives (port/; ddq.py names every other file in its one
table, `_PARTS`, and loads it by one rule, `_part`: DESIGN §4.1, §13). A part's functions take
the queue as an argument: the public ones below are attached to Queue at their first call, the
others are called through their module (`_part("ddq_compact").compact_now(q, ...)`); nothing
private is attached. The state a module owns is written by that module alone
(tools/state_owners.py, DESIGN §13 "State and its owners"):

    ddq.py          enqueue claim read read_into ack retry sync durable_seq close,
                    check_record segment_name, PosixStorage (but lock), the errors
    ddq_recover.py  open (Queue(...)'s options, directory, lock, recovery), recover,
                    PosixStorage.lock, decode_manifest; dropped after each call on a small heap
    ddq_compact.py  compact purge encode_manifest parse_segment_name, the compaction an
                    enqueue needs, the cleanup of a directory, queue.index at close
    ddq_extra.py    stats items oldest_available lapsed claim_seq claim_ordered reason
                    quarantine save_index, Stats Item
    ddq_admit.py    libddq's admission rule (window 0, the default): loaded at open, kept
                    as Queue._adm (admit plan_items plan_add)
    ddq_hold.py     the hold admission rule (window > 0): loaded at open, kept as Queue._adm
                    (hold room cut)
    ddq_reclaim.py  staged reclamation (reclaim_step > 0): Reclaim, the reclamation state
                    (Queue._rm; None for reclaim_step 0), written by its own methods alone
    ddq_index.py    queue.index (index_bytes; optional: without it an open replays the log)
    ddq_cut.py      a crashed tail cut's leftover (optional: without it such an open refuses)
    ddq_salvage.py  on_corrupt="salvage"

The queue's state, one object a role, each written by its owner alone (recovery builds the
writer and the index at open; tools/state_owners.py checks every write in `make lint`):

    Queue._o    the options (ddq_recover.Options): limits, sync policy, storage, directory,
                the reused record buffer; set by the open (ddq_recover "open") alone
    Queue._log  the writer (_Log, banner "writer"): the generation's segments, the seqs'
                ends, the unsynced copies; ddq.py
    Queue._ix   the index (_Index, banner "index"): states, lengths, history, the counts; ddq.py
    Queue._rm   the reclamation state (ddq_reclaim.Reclaim; None for reclaim_step 0)
    Queue._adm  the admission rule the open chose: the module ddq_admit or ddq_hold
    the rest    each with one owner (tools/state_owners.py ATTRS), the open building all:
                the lifecycle (_closed, _lock) and the read buffer (_rbuf): ddq.py; the
                salvage counts (_salv): ddq_recover (ddq_salvage swaps them out around its
                recovery); what a publication replaces (_ix, _swept, _has_manifest):
                ddq_compact (adopt); what queue.index covers (_ixcov): ddq_index; the
                admission plan and room (_plan, _slack, _hd): the admission rule (the plan
                also built by the index's load, the publication and enqueue's hold branch)

Reading order, one file a role: open is ddq_recover.py (banner "open": init, then "recovery":
recover); enqueue, claim, ack, retry and close are ddq.py (banner "queue"), which asks the
admission rule (ddq_admit.py or ddq_hold.py) before an enqueue, appends through the writer and
moves items in the index; a compaction an enqueue needs is ddq_compact.py ("compaction").

A part a queue's options need that is missing is an IOFailure at open, naming the file and what
needs it [O22]. A MemoryError inside any operation is NoMemory; one that struck after a record
was appended fail-stops the queue (the disk holds the state before the call or after it) [O23].

Format: see docs/SPEC.md §2-§6. Design: docs/DESIGN.md.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause (the C DDQ's licence; no code copied).

import gc
import os
import struct
import sys
import time
from array import array

# ============================================================================ compat
# Each probe is named by what it gives. _MP is a feature probe (ticks exist only on MicroPython);
# mypy's two passes read it as a compile-time flag (mypy_cpython.ini, mypy_mpy.ini).
_MP = hasattr(time, "ticks_ms")
# A heap of at most 128 KiB (the board budget of DESIGN §4.1; gc.mem_free exists where the
# heap is a fixed budget) drops the open-time code after each open (DESIGN §4.1).
_HEAP = 0 < getattr(gc, "mem_free", int)() + getattr(gc, "mem_alloc", int)() < 135168
del gc  # (each module global costs a board's heap: DESIGN §4.1)
if _MP:
    from micropython import const as const  # re-exported: the optional modules import it
else:
    const = int  # (a function would be compiled into a board's .mpy too)


# A const the compiler folds: MicroPython compiles no byte of an `if TYPE_CHECKING:` block (a
# plain False would load each block's code and names into a board's heap); mypy reads it as True.
TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, Optional, Union

    Buf = Union[bytes, bytearray, memoryview]

    from ddq_extra import Item, Stats
    from ddq_reclaim import Reclaim
    from ddq_recover import Options


# CRC-32/ISO-HDLC on both interpreters, running form included (SPEC §2); binascii itself is not
# kept as a global (each module global costs a board's heap: DESIGN §4.1).
_crc: "Callable[..., int]" = __import__("binascii").crc32


def _import(name: str) -> "Any":
    # Optional modules of the platform (fcntl, socket, json, hashlib): present on some ports
    # only. (ddq's own parts beside ddq.py load by _part, below.)
    try:
        return __import__(name)
    except ImportError:
        return None


def _wall_ms(
    e: int = 946684800000 if hasattr(time, "gmtime") and time.gmtime(0)[0] == 2000 else 0,
) -> int:
    # Default clock: wall-clock Unix-epoch ms (SPEC §2); e: what a port whose epoch is 2000 adds,
    # found once (a default, not a module global: each global costs a board's heap). A port
    # without gmtime (no calendar: MicroPython's stock qemu firmware) cannot say its epoch: its
    # time() is taken as Unix; an application that knows better passes clock=. A port with no
    # time() at all (upstream ports/qemu) reads 0, which the call that reads it refuses [T4].
    if hasattr(time, "time_ns"):
        return int(time.time_ns()) // 1000000 + e
    return int(getattr(time, "time", int)() * 1000) + e


# ============================================================================ format
# Records: SPEC §3 [F1]-[F9]. All integers little-endian.
_REC_FMT = "<IHHQQIIII"  # magic version type seq arg payload_length record_length crc reserved
_REC_MAGIC = const(0x31475144)  # b"DQG1"
_REC_COMMIT = 0x54494D43  # b"CMIT" (over 2**30: not a const on 32-bit boards)
_FTR_FMT = "<II"  # commit record_length
# The header's fields by offset (SPEC §3.1 [F1]; magic at 0); the footer is at _HDR + plen. The
# modules beside ddq.py that read fields by byte keep copies (a const folds in its own module
# only): tests/host/test_host_index.py holds every copy equal to these.
_R_VER = const(4)  # u16 version
_R_TYPE = const(6)  # u16 type
_R_SEQ = const(8)  # u64 seq
_R_ARG = const(16)  # u64 arg, per type
_R_PLEN = const(24)  # u32 payload_length
_R_RLEN = const(28)  # u32 record_length
_R_CRC = const(32)  # u32 crc (SPEC §3.2 [F2])
_R_RES = const(36)  # u32 reserved, zero
_HDR = const(40)  # the payload
_MIN_REC = const(48)  # header + footer
_VERSION = const(1)
# Record types: SPEC §4 [F10]; arg and payload per type.
_T_DATA = const(1)  # payload: the message; arg 0
_T_CLAIM = const(2)  # arg: lease_until_ms, not 0; no payload
_T_ACK = const(3)  # arg 0, no payload
_T_RETRY = const(4)  # arg: not_before_ms; no payload
_T_QUAR = const(5)  # payload: the reason; arg 0
_T_STATE = const(6)  # payload: a STATE snapshot (below); arg 0
# STATE payload: SPEC §4.1 [F11]; 24 bytes: state attempts lease_until_ms not_before_ms.
_STATE_FMT = "<IIQQ"
_STATE_LEN = const(24)
_STATE_REC = const(72)
# Item states, as on disk (STATE payload) and in RAM.
_AVAILABLE = const(1)  # claimable once not_before_ms is due
_CLAIMED = const(2)  # leased until lease_until_ms
_ACKED = const(3)  # delivered (never in a STATE payload)
_QUARANTINED = const(4)  # set aside with a reason
# Manifest: SPEC §5 [M1]-[M8]; 48 bytes.
_MAN_FMT = (
    "<IHHQQIIQ"  # magic version size generation next_seq segment_count item_count end_offset
)
_MAN_MAGIC = 0x4D514444  # b"DDQM"
_MAN_SIZE = const(48)
_M_CRC = const(40)  # its crc field: a crc32 of the bytes before it
# Names: SPEC §6 [N1]-[N5].
_MARKER = "queue.format"
_MANIFEST = "queue.manifest"
_MANIFEST_TMP = "queue.manifest.tmp"
# queue.lock and a cut's <segment>.reserve: in port/ddq_recover.py, which alone uses them.
# Recovery index: SPEC §12.1 [X1]-[X8]; a ddq-only file C DDQ ignores [N5].
_INDEX = "queue.index"
_INDEX_TMP = "queue.index.tmp"
# Its layout lives in port/ddq_index.py, imported only when a queue needs it.
# Limits: SPEC §7.
_MAX_REASON = const(4096)
_MAX_LEASE_MS = const(604800000)
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_SCAN_RECORDS = const(4000000)
_UNSYNCED_MAX = const(256)  # sync="none": RAM copies of unsynced payloads before a sync [D3]
_UNSYNCED_BYTES = const(16384)  # ... and their bytes: a board's heap holds them [D3]
_IO_LOOPS = const(1048576)
_ENOENT = const(2)
_EIO = const(5)
_EEXIST = const(17)

STATES = ("", "available", "claimed", "acked", "quarantined")


# ============================================================================ errors
# Every error class is made at its first use and kept (each class costs ~300 B of a board's
# heap, and a sender that never fails never raises one; DESIGN §4.1): `ddq.Full`, `from ddq
# import Full` and _E("Full") make the class once and keep it in the module. Same names, codes
# and base class (Error, itself an Exception) whoever asks first [O21].
_ERRORS = (
    "Error",
    -1,
    "InvalidArgument",
    -1,
    "IOFailure",
    -2,
    "Corrupt",
    -3,
    "Locked",
    -4,
    "NoMemory",
    -5,
    "TooLarge",
    -6,
    "Full",
    -7,
    "NotFound",
    -8,
    "BadState",
    -9,
    "BufferTooSmall",
    -10,
    "Limit",
    -11,
)  # each name, then its code [O19]


def _E(name: str) -> "Any":
    g = globals()
    c = g.get(name)
    if c is None:
        d: "dict[str, Any]" = {"code": _ERRORS[_ERRORS.index(name) + 1]}
        if name == "BufferTooSmall":
            d["needed"] = 0
        elif name == "IOFailure":
            d["errno"] = 0
        c = g[name] = type(name, (Exception,) if name == "Error" else (_E("Error"),), d)
    return c


# The messages of the errors ddq.py raises: one string (one object in a board's heap, where each
# string constant cost 40-70 B: DESIGN §4.1), its entries split by "|". The _X_ consts name the
# entries, in order; the class is named where the error is raised (_err, below).
_MSG = (
    "queue is closed"
    "|queue is fail-stopped: call recover() or reopen"
    "|clock returned %r; want wall-clock ms > 0 (or pass clock=)"
    "|%s must be an int in %d..%d"
    "|%s must be bytes, bytearray or memoryview"
    "|payload of %d bytes over max_payload_bytes %d"
    "|record larger than segment_bytes"
    "|sequence space exhausted"
    "|admission reserve exhausted"
    "|max_items reached"
    "|segment limit reached"
    "|segment limit reached and compaction gave no room"
    "|attempts exhausted"
    "|not_before overflows"
    "|no item %r"
    "|item %d is %s, not claimed"
    "|buffer of %d bytes; need %d"
    "|bad record header"
    "|payload over max_payload_bytes"
    "|bad record length"
    "|bad commit footer"
    "|crc mismatch"
    "|record field rule broken"
    "|record of seq %d outside %s"
    "|short record"
    "|record is not the expected one"
    "|%s at %s offset %d (seq %d)"
    "|DATA record of seq %d not found in %s"
    "|heap exhausted"
)
_X_CLOSED = const(0)
_X_STOPPED = const(1)
_X_CLOCK = const(2)
_X_INT = const(3)
_X_BYTES = const(4)
_X_PAYLOAD = const(5)
_X_RECORD = const(6)
_X_SEQS = const(7)
_X_RESERVE = const(8)
_X_ITEMS = const(9)
_X_SEGS = const(10)
_X_SEGS_FULL = const(11)
_X_ATTEMPTS = const(12)
_X_NB = const(13)
_X_NO_ITEM = const(14)
_X_NOT_CLAIMED = const(15)
_X_BUFFER = const(16)
_X_HEADER = const(17)
_X_OVER = const(18)
_X_LENGTH = const(19)
_X_FOOTER = const(20)
_X_CRC = const(21)
_X_FIELDS = const(22)
_X_OUTSIDE = const(23)
_X_SHORT = const(24)
_X_OTHER = const(25)
_X_AT = const(26)
_X_NO_DATA = const(27)
_X_NOMEM = const(28)


def _err(name: str, m: "Any", *a: "Any") -> "Any":
    # The one way a queue module (ddq.py and the parts of _PARTS) makes a ddq error, so grep finds
    # each by its class: raise _err("NotFound", _X_NO_ITEM, seq). m is an _X_ index into _MSG or
    # a message str, formatted with a when a is given; the class is made by _E at its first use.
    if isinstance(m, int):
        i = 0
        for _ in range(m):
            i = _MSG.index("|", i) + 1
        j = _MSG.find("|", i)
        m = _MSG[i : j if j > 0 else len(_MSG)]
    return _E(name)(m % a if a else m)


if TYPE_CHECKING:  # what the classes are, for the type checkers (docs/API.md documents them)

    class Error(Exception):
        """Base class of ddq errors; `.code` is the DDQ status value."""

        code = -1

    class InvalidArgument(Error):
        """Raised for a bad type or range of an option or argument; nothing changed."""

        code = -1

    class IOFailure(Error):
        """Raised when storage failed, and while the queue is fail-stopped (until recover())."""

        code, errno = -2, 0

    class Corrupt(Error):
        """Raised when a record, the manifest or the directory breaks the format rules."""

        code = -3

    class Locked(Error):
        """Raised when another Queue (this process or another) holds the directory."""

        code = -4

    class NoMemory(Error):
        """Raised when the heap ran out inside an operation (MemoryError); fail-stopped if it
        had appended a record (`stats().failed`), else nothing changed [O23]."""

        code = -5

    class TooLarge(Error):
        """Raised for a payload, reason or record over its limit."""

        code = -6

    class Full(Error):
        """Raised when the admission reserve or max_items refuses an enqueue; nothing stored."""

        code = -7

    class NotFound(Error):
        """Raised for an unknown sequence, or an acked item already reclaimed."""

        code = -8

    class BadState(Error):
        """Raised when the operation is not allowed from the item's current state."""

        code = -9

    class BufferTooSmall(Error):
        """Raised by read_into for a buffer smaller than the payload; `.needed` says how big."""

        code, needed = -10, 0

    class Limit(Error):
        """Raised when a count, segment or arithmetic limit is reached."""

        code = -11


def _io_failure(e: "Optional[BaseException]", what: str) -> "IOFailure":
    err: "IOFailure" = _err("IOFailure", what + (": " + repr(e) if e is not None else ""))
    err.errno = getattr(e, "errno", 0) or 0
    return err


# ============================================================================ codec
class Claim:
    """A claimed item: deliver it, then ack, retry or quarantine it by seq."""

    if not _MP:  # MicroPython ignores __slots__: the tuple would only cost a board's heap
        __slots__ = ("seq", "attempts", "payload_len", "lease_until_ms")

    # Queue sets every field (no __init__: a function object costs a board's heap).
    seq: int
    attempts: int
    payload_len: int
    lease_until_ms: int


def segment_name(generation: int, index: int) -> str:
    """Return the file name of segment `index` of `generation` [N2][N3]."""
    s = "segment-%020d.log" % _opt(index, 0, _U64, "index")  # [O24]
    return "generation-%020d-" % generation + s if _opt(generation, 0, _U64, "gen") else s


def check_record(
    mv: "Buf", p: int, seg_bytes: int, max_payload: int, _framed: bool = False
) -> "tuple[int, int, int, int]":
    """Validate the whole record at mv[p:]; return (type, seq, arg, payload_len) [F2]-[F11].

    Raises Corrupt (without position; the caller adds segment and offset)."""
    # The one record check: reads', salvage's, and the replay's on CPython (_framed: the byte
    # view and offset the replay framed; skipping the argument checks saves 14 % of a replayed
    # record's time there). MicroPython's replay inlines its rules (a call allocates ~255 B a
    # record: DESIGN §13); tests/test_record_verdicts.py holds that copy equal to this.
    if not _framed:
        mv = _bytes_arg(mv, "mv")  # a buffer holding a header at p, else InvalidArgument [O24]
        _opt(p, 0, len(mv) - _MIN_REC, "p")
    magic, ver, typ, seq, arg, plen, rlen, crc, res = struct.unpack_from(_REC_FMT, mv, p)
    if magic != _REC_MAGIC or ver != _VERSION or res != 0 or typ < _T_DATA or typ > _T_STATE:
        raise _err("Corrupt", _X_HEADER)
    if plen > max_payload and not (typ == _T_STATE and plen == _STATE_LEN):
        raise _err("Corrupt", _X_OVER)
    if rlen != _MIN_REC + plen or rlen > seg_bytes or rlen > len(mv) - p:  # (no footer past mv)
        raise _err("Corrupt", _X_LENGTH)
    commit, rlen2 = struct.unpack_from(_FTR_FMT, mv, p + _HDR + plen)
    if commit != _REC_COMMIT or rlen2 != rlen:
        raise _err("Corrupt", _X_FOOTER)
    c = _crc(mv[p + _R_VER : p + _R_CRC])  # [F2]
    c = _crc(mv[p + _R_RES : p + _HDR], c)
    if plen:
        c = _crc(mv[p + _HDR : p + _HDR + plen], c)
    if c != crc:
        raise _err("Corrupt", _X_CRC)
    if (
        seq == 0
        or (typ == _T_DATA and arg != 0)
        or (typ == _T_CLAIM and (arg == 0 or plen))
        or (typ == _T_ACK and (arg or plen))
        or (typ == _T_RETRY and plen)
        or (typ == _T_QUAR and (arg or plen > _MAX_REASON))
        or (typ == _T_STATE and (arg or plen != _STATE_LEN))
    ):
        raise _err("Corrupt", _X_FIELDS)
    return typ, seq, arg, plen


# ============================================================================ storage
class PosixStorage:
    """The one seam to the file system: open/write/read/sync/list/rename/remove/lock.

    Tests swap in a fault-injecting or crash-recording object with the same methods. rename is
    atomic on POSIX and LittleFS and is remove + rename on FAT (SPEC §8 [S4])."""

    _held: "list[str]" = []  # directories locked by this process (in-process exclusion)

    def __init__(self) -> None:
        self.can_truncate = hasattr(os, "truncate")
        self._fsync = getattr(os, "fsync", None)
        self._fdopen = getattr(os, "fdopen", None)
        if self._fdopen is not None:
            g = getattr  # (not in the MicroPython stubs)
            self._flags = (
                g(os, "O_WRONLY"),
                g(os, "O_CREAT"),
                g(os, "O_APPEND"),
                g(os, "O_TRUNC"),
            )

    def open(self, path: str, mode: str) -> "Any":
        if mode != "rb" and self._fdopen is not None:
            # Files only the owner can read (C DDQ creates 0600): queued payloads are private.
            w, c, a, t = self._flags
            return self._fdopen(os.open(path, w | c | (a if mode == "ab" else t), 0o600), mode)
        return open(path, mode)

    def write(self, f: "Any", buf: "Buf") -> None:
        n = f.write(buf)
        if n is not None and n != len(buf):
            raise OSError(_EIO, "short write")

    def read_into(self, f: "Any", offset: int, buf: "Any") -> int:
        f.seek(offset)
        return int(f.readinto(buf) or 0)

    def sync(self, f: "Any") -> None:
        # The one durability primitive [S2]: flush is the commit on MicroPython's VFSs (LittleFS
        # lfs_file_sync, FAT f_sync, unix fsync); CPython needs os.fsync after it.
        f.flush()
        if self._fsync is not None:
            self._fsync(f.fileno())

    def close(self, f: "Any") -> None:
        f.close()

    def size(self, path: str) -> int:
        return int(os.stat(path)[6])

    def kind(self, path: str) -> int:
        try:
            mode = os.stat(path)[0]
        except OSError as e:
            if e.errno == _ENOENT:
                return 0
            raise
        if mode & 0o170000 == 0o040000:
            return 2
        return 1 if mode & 0o170000 == 0o100000 else 3

    # The plain os calls: os's own functions (a method each would cost a board's heap).
    listdir = staticmethod(os.listdir)
    rename = staticmethod(os.rename)
    remove = staticmethod(os.remove)

    def mkdir(self, path: str) -> None:
        if self._fdopen is not None:
            getattr(os, "mkdir")(path, 0o700)  # noqa: B009 (MicroPython's mkdir takes no mode)
        else:
            os.mkdir(path)

    def sync_dir(self, path: str) -> None:
        # POSIX needs a directory fsync after create/rename/unlink [S3]; MicroPython has none
        # (LittleFS commits directory operations atomically by itself).
        if self._fsync is not None and hasattr(os, "O_RDONLY"):
            fd = os.open(path, os.O_RDONLY)
            try:
                self._fsync(fd)
            finally:
                os.close(fd)

    def truncate(self, path: str, size: int) -> None:
        # Where the os has it (can_truncate); durable through the one primitive, sync [S2].
        os.truncate(path, size)
        f = open(path, "ab")
        try:
            self.sync(f)
        finally:
            f.close()

    def lock(self, path: str) -> "Any":
        return _part("lock", self, path)  # [L1][L2] its body: port/ddq_recover.py

    def unlock(self, token: "Any") -> None:
        key, f, held = token
        if key in PosixStorage._held:
            PosixStorage._held.remove(key)
        try:
            f.close()  # closing the descriptor releases flock
        finally:
            if held is not None:
                held.close()


# ============================================================================ index
# RAM metadata per retained item, in seq order (DESIGN §4). Per item only what admission needs
# at once and the log cannot give without a walk: its state and its payload length, in chunks
# of _CH items: a column grows by one chunk, never by copying (no allocation over 4 KiB, no
# reopen churn). A chunk keeps each item's state - 1 in 2 bits (4 a byte, a bytearray of
# _CH // 4) and one payload length for all its items (cl) while they are alike, the common case
# (fixed-size telemetry); its first differing length gives it a column of lengths (lv): one
# byte an item over the base cl while they lie within 256 of it, else an array(tc) of the
# lengths themselves (cl 0). Lengths never change after the append.
# Derived: seqs come in runs of consecutive values (one run for all that was appended since the
# last compaction; a gap only where a compaction dropped acked items), each segment keeps the
# index of its first item, so a seq and a segment are a binary search over short lists; the
# offset of a DATA record is found by walking its segment's headers (Queue._data), from the
# last item located when that lies before it, and a claimed item keeps it in its live entry.
# Items with history (attempts, lease, not_before) live in small dicts keyed by seq, so a
# fresh item costs nothing more.
_CH = const(256)  # items per chunk: 64 B of states, lengths none, 256 B, 512 B (u16) or 1 KiB
_CS = const(8)  # log2(_CH)
_CM = const(255)
# A live entry's fields (_Index.live: seq -> list), and a hist entry's (_Index.hist). The
# modules beside ddq.py that read them keep copies (test_host_index.py holds them equal).
_LV_I = const(0)  # the item's index
_LV_ATT = const(1)  # attempts
_LV_LEASE = const(2)  # lease_until_ms; 0 when not claimed (or its lease swept)
_LV_NB = const(3)  # not_before_ms
_LV_OFF = const(4)  # the offset of its DATA record in its segment, -1 until a read found it
_HS_ATT = const(0)  # attempts
_HS_NB = const(1)  # not_before_ms
# The hint (_Index.hint): the item Queue._data located last.
_HN_I = const(0)  # its index
_HN_OFF = const(1)  # the offset of its DATA record
_HN_SEG = const(2)  # its segment; -1: none yet


class _Index:
    if __debug__:  # (as _Log's)
        __slots__ = (
            "n",
            "tc",
            "ro",
            "rs",
            "last",
            "sfo",
            "col",
            "cl",
            "lv",
            "live",
            "hist",
            "reasons",
            "fresh",
            "hint",
            "avail",
            "claimed",
            "acked",
            "quar",
        )

    def __init__(self, tc: str) -> None:
        self.n = 0  # items
        self.tc = tc  # array typecode of the lengths, "H" or "I"
        self.ro: "list[int]" = []  # per run of consecutive seqs: the index of its first item
        self.rs: "list[int]" = []  # and its seq
        self.last = 0  # the seq of the last item
        # per segment: the index of its first item (the items before it); an array, as the
        # segment sizes: 4 bytes a segment, so 1,024 segments stay in one 4 KiB allocation
        self.sfo: "Any" = array("I")
        # Per chunk: the states (bytearray, item i at bits (i & 3) * 2 of byte (i & _CM) >> 2),
        # a base length (cl), and None while every item has that length, else each item's
        # length less the base (lv: a bytearray, or an array(tc) with base 0).
        self.col: "list[bytearray]" = []
        self.cl: "Any" = array(tc)
        self.lv: "list[Any]" = []

        # live: non-terminal items with history, seq -> [_LV_I, _LV_ATT, _LV_LEASE, _LV_NB,
        #   _LV_OFF] (index, attempts, lease_until, not_before, DATA offset or -1)
        self.live: "dict[int, list[int]]" = {}
        # hist: terminal items with history, seq -> [_HS_ATT, _HS_NB] (attempts, not_before)
        self.hist: "dict[int, list[int]]" = {}
        # reasons: quarantined items, seq -> [segment index, offset, length]
        self.reasons: "dict[int, list[int]]" = {}
        self.fresh = 0  # every index below is not a plain available item
        self.hint = [-1, 0, -1]  # [_HN_I, _HN_OFF, _HN_SEG]: none located yet
        # The items in each state: add and put keep them (recovery's replay too, inline)
        self.avail = self.claimed = self.acked = self.quar = 0

    def add(self, seq: int, sg: int, ln: int) -> None:
        n = self.n
        c, j = n >> _CS, n & _CM
        if c == len(self.col):
            self.col.append(bytearray(_CH >> 2))  # states 0: AVAILABLE
            self.cl.append(ln)
            self.lv.append(None)
        a, b = self.lv[c], self.cl[c]
        if (ln != b) if a is None else ((ln - b) >> 8 != 0 and isinstance(a, bytearray)):
            # The chunk's first differing length: one byte an item over a base, centred on
            # the two lengths; a length outside base .. base + 255: the lengths as they are.
            o = max(0, (b + ln + 1) // 2 - 128)
            if a is None and (b - o) >> 8 == 0 == (ln - o) >> 8:
                w: "Any" = bytearray(_CH)
            else:
                w, o = array(self.tc, bytes(_CH * (2 if self.tc == "H" else 4))), 0
            for k in range(j):
                w[k] = b - o + (0 if a is None else a[k])
            self.lv[c] = a = w
            self.cl[c] = b = o
        if a is not None:
            a[j] = ln - b
        if not n or seq != self.last + 1:
            self.ro.append(n)
            self.rs.append(seq)
        while len(self.sfo) <= sg:
            self.sfo.append(n)
        self.last = seq
        self.n = n + 1
        self.avail += 1

    def state(self, i: int) -> int:
        return (self.col[i >> _CS][(i & _CM) >> 2] >> ((i & 3) << 1) & 3) + 1

    def length(self, i: int) -> int:
        a = self.lv[i >> _CS]
        return int(self.cl[i >> _CS] + (0 if a is None else a[i & _CM]))

    def put(self, i: int, state: int) -> None:
        a, b, s = self.col[i >> _CS], (i & _CM) >> 2, (i & 3) << 1
        self.count((a[b] >> s & 3) + 1, -1)
        self.count(state, 1)
        a[b] = a[b] & ~(3 << s) | (state - 1) << s

    def count(self, state: int, d: int) -> None:
        if state == _AVAILABLE:
            self.avail += d
        elif state == _CLAIMED:
            self.claimed += d
        elif state == _ACKED:
            self.acked += d
        else:
            self.quar += d

    def skip(self) -> int:
        # The first index that may be a fresh item (a plain available one): the cursor, moved
        # past those that are not (claim, claim_ordered; DESIGN §4).
        f, live = self.fresh, self.live
        while f < self.n and (self.state(f) != _AVAILABLE or self.seq(f) in live):
            f += 1
        self.fresh = f
        return f

    def at(self, a: "Any", x: int) -> int:
        # The index of the last value <= x in the ascending a (a[0] <= x): a binary search.
        lo, k = 0, len(a) - 1
        while lo < k:
            m = (lo + k + 1) >> 1
            if a[m] <= x:
                lo = m
            else:
                k = m - 1
        return k

    def seq(self, i: int) -> int:
        ro = self.ro
        k = len(ro) - 1
        if ro[k] > i:  # not in the last run (rare)
            k = self.at(ro, i)
        return self.rs[k] + i - ro[k]

    def find(self, seq: int) -> int:
        rs = self.rs
        k = len(rs) - 1
        if k < 0 or seq < rs[0] or seq > self.last:
            return -1
        if rs[k] > seq:
            k = self.at(rs, seq)
        i = self.ro[k] + seq - rs[k]
        return i if i < (self.ro[k + 1] if k + 1 < len(rs) else self.n) else -1

    def history(self, seq: int) -> "tuple[int, int, int]":
        e = self.live.get(seq)
        if e is not None:
            return e[_LV_ATT], e[_LV_LEASE], e[_LV_NB]
        h = self.hist.get(seq)
        if h is not None:
            return h[_HS_ATT], 0, h[_HS_NB]
        return 0, 0, 0

    def set_history(self, i: int, attempts: int, lease: int, nb: int) -> None:
        s = self.seq(i)
        if self.state(i) in (_AVAILABLE, _CLAIMED):
            self.hist.pop(s, None)
            e = self.live.get(s)
            if e is None:
                self.live[s] = [i, attempts, lease, nb, -1]
            else:
                e[_LV_ATT], e[_LV_LEASE], e[_LV_NB] = attempts, lease, nb
        else:
            self.live.pop(s, None)
            if attempts or nb:
                self.hist[s] = [attempts, nb]
            else:
                self.hist.pop(s, None)


# ============================================================================ writer
# The writer's state (Queue._log): the generation's segments, the seqs' ends, the unsynced
# copies; written here alone. Its appends and syncs are Queue's methods (below, "writing").
class _Log:
    """The segments of one generation as the writer sees them. The queue's own (Queue._log) is
    the writer besides: the seqs' ends, the unsynced copies and the count of appended records.
    Written by ddq.py alone, and built by recovery (ddq_recover, ddq_index); a compaction's new
    generation is handed over by adopt (DESIGN §13 "State and its owners")."""

    if __debug__:  # (CPython's; a board's -O3 build has no tuple: as ddq_reclaim.Build's)
        __slots__ = (
            "gen",
            "sizes",
            "off",
            "h",
            "dirty",
            "synced",
            "ck",
            "next",
            "durable",
            "tail",
            "unsynced",
            "ubase",
            "ub",
            "nap",
            "w0",
        )

    # The writer's own fields (the queue's log alone; set by ddq_recover._reset, which builds it):
    next: int  # the seq of the next enqueue
    durable: int  # durable_seq [D4]
    tail: int  # the bytes the last recovery cut off as torn tails [R10]
    # sync="none": payloads of the DATA records not synced yet [D7], the seq of the first
    # (consecutive seqs: an enqueue appends, every sync clears) and their bytes [D3]
    unsynced: "list[bytes]"
    ubase: int
    ub: int
    nap: int  # records appended (to any generation): Queue._oom [O23]
    w0: int  # nap at the last mark (_alive)

    def __init__(self, gen: int) -> None:
        self.gen = gen
        self.sizes: "Any" = array("I")  # per segment (u32: segment_bytes <= 64 MiB)
        # per segment: [crc32 of bytes 0..n, n, the record_length of its first record]
        self.ck: "list[list[int]]" = []
        self.off = 0
        self.h: "Any" = None
        self.dirty = False
        self.synced = 0  # the last segment is durable (and visible to a new reader) up to here

    def mark(self) -> None:
        # An operation starts: RAM matches the log here (Queue._oom) [O23].
        self.w0 = self.nap

    def adopt(self, new: "_Log") -> None:
        # The writer takes over new's segments: a published generation (compaction) [C6].
        self.gen = new.gen
        self.sizes = new.sizes
        self.ck = new.ck
        self.off = new.off
        self.h = new.h
        self.dirty = new.dirty
        self.synced = new.synced


# ============================================================================ queue
def _opt(v: "Any", lo: int, hi: int, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > hi:
        raise _err("InvalidArgument", _X_INT, name, lo, hi)
    return v


def _bytes_arg(v: "Any", name: str) -> "Buf":
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, memoryview) and getattr(v, "itemsize", 1) != 1:
        return bytes(v)  # len() of a wide view counts items, not bytes
    if isinstance(v, (bytes, bytearray, memoryview)):
        return v
    raise _err("InvalidArgument", _X_BYTES, name)


class Queue:
    """A DDQ directory opened for delivery; see the module docstring.

    sync: "always" syncs every record before the call returns (C DDQ's rule); "ack" leaves CLAIM
    and RETRY records to the next sync (a power cut may forget a claim or a retry, never an
    enqueue, ack or quarantine); "none" syncs only on sync(), rotation, compaction and close
    (durable_seq tells how far enqueues are durable). SPEC §9 [D1]-[D4]."""

    if TYPE_CHECKING:  # the options, as ddq_recover.init takes them (docs/API.md)

        def __init__(
            self,
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
        ) -> None: ...

    else:

        def __init__(self, *a, **k):
            # Options, the directory, the lock, then recovery: port/ddq_recover.py (init). The
            # defaults live there only: here they would cost a board's heap for nothing.
            # NoMemory (and Error) made while the heap has room: _oom makes one when the heap
            # ran out, where making the class (and growing ddq's globals) could fail [O23].
            # Here, before ddq_recover loads, it sits below the hole that module's drop leaves.
            _E("NoMemory")
            try:
                _part("init", self, *a, **k)
            except MemoryError:  # (init released the lock) [O23]
                raise _err("NoMemory", _X_NOMEM)

    # Attributes, set by ddq_recover.init and _reset (annotations alone compile to nothing).
    # The queue's state lives in a few objects, each written by one module (DESIGN §13 "State
    # and its owners"; tools/state_owners.py, in `make lint`, checks it):
    _o: "Options"  # the options, set once at open: ddq_recover.init alone
    _log: _Log  # the writer: ddq.py alone (recovery builds it; a compaction hands it over)
    _ix: "_Index"  # the index and its counts: ddq.py alone (recovery builds it; a compaction
    # makes a new one, which it keeps its own counts in)
    # reclaim_step > 0: the reclamation state (ddq_reclaim.Reclaim, written there alone), else
    # None: compaction runs whole in the call that needs it, as C DDQ's (DESIGN §12) [C13]
    _rm: "Optional[Reclaim]"
    # The admission rule the open chose by window, a module kept for every enqueue and claim
    # (no lookup in _PARTS): ddq_hold (hold, room, cut) for window > 0, else ddq_admit (admit,
    # plan_items, plan_add) [H1]
    _adm: "Any"
    # The rest, each with its owner (tools/state_owners.py ATTRS): the lifecycle and the read
    # buffer (ddq.py), the salvage counts (ddq_recover), what a publication replaces
    # (ddq_compact), queue.index's cover (ddq_index), the admission plan and room (_adm's).
    _closed: bool
    _lock: "Any"
    _hd: "Optional[list[int]]"  # hold: [unacked DATA bytes (upper bound), stamp n, acked, gen]
    _salv: "Any"  # on_corrupt="salvage": [salvaged, lost], else None [K9]
    clock: "Callable[[], int]"
    reason_budget: int
    _rbuf: bytearray  # the read buffer (reads, the replay's window)
    _has_manifest: bool
    _plan: "Optional[list[int]]"  # cached worst-case compacted plan [segs, off]
    _swept: "dict[int, int]"  # seq -> lease of a claim expired in RAM only [T2]
    _ixcov: "Optional[list[int]]"  # [generation, sizes...] queue.index covers
    replayed_records: int  # records the last recovery read and applied [X6]
    index_used: bool  # the last recovery started from queue.index [X6]
    _slack: int  # admission's room left at the last enqueue, in bytes (-1: unknown)

    # ------------------------------------------------------------------ state
    def _path(self, name: str) -> str:
        return self._o.dir + "/" + name

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *a: "Any") -> None:
        self.close()

    def _alive(self) -> None:
        log = self._log
        log.w0 = log.nap  # (RAM matches the log here: _oom)
        if self._closed:
            raise _err("IOFailure", _X_CLOSED)
        if log.h is None:
            raise _err("IOFailure", _X_STOPPED)

    def _fail(self) -> None:
        # Fail-stop [R20]: drop the writable handle; only stats/recover/close work until recover().
        if self._rm is not None:
            self._rm.drop(self)  # a staged generation abandoned [C13]
        log = self._log
        h, log.h = log.h, None
        if h is not None:
            try:
                self._o.fs.close(h)
            except OSError:
                pass

    def _oom(self) -> "Any":
        # MemoryError inside an operation [O23]: NoMemory. If a record was appended since the
        # last _alive() (RAM matched the log there), RAM may not match it now: fail-stop (R20).
        log = self._log
        if log.nap != log.w0:
            self._fail()
        return _err("NoMemory", _X_NOMEM)

    def _now(self) -> int:
        now = self.clock()
        if not isinstance(now, int) or now <= 0 or now > _U64:
            raise _err("IOFailure", _X_CLOCK, now)
        return now

    def _move(self, i: int, state: int, attempts: int, lease: int, nb: int) -> None:
        ix, staged = self._ix, self._rm
        if staged is not None and staged.bld is not None:
            staged.cow(self, i)  # not copied yet: its state at P0 kept [C13]
        if self._swept:
            self._swept.pop(ix.seq(i), None)
        ix.put(i, state)  # (the counts too)
        ix.set_history(i, attempts, lease, nb)

    # ------------------------------------------------------------------ writing
    def _sync_h(self) -> None:
        log = self._log
        try:
            self._o.fs.sync(log.h)
        except OSError as e:
            self._fail()
            raise _io_failure(e, "sync")
        log.dirty = False
        log.synced = log.off
        log.durable = log.next - 1
        log.unsynced.clear()
        log.ub = 0

    def _new_segment(self, log: _Log, staging: bool) -> None:
        p, o = self._path(segment_name(log.gen, len(log.sizes))), self._o
        if o.fs.kind(p) != 0:  # C creates with O_EXCL; the lock makes check-then-create safe
            raise OSError(_EEXIST, "segment exists: " + p)
        log.h = o.fs.open(p, "ab")
        log.sizes.append(0)
        log.off = log.synced = 0
        if not staging:
            o.fs.sync_dir(o.dir)

    def _append(
        self, log: _Log, typ: int, seq: int, arg: int, payload: "Optional[Buf]", staging: bool
    ) -> int:
        """Encode and append one record to log; return its offset [W1]-[W3]. No compaction here."""
        plen = len(payload) if payload is not None else 0
        total = _MIN_REC + plen
        w, o = self._log, self._o
        w.nap += 1  # (a MemoryError from here on fail-stops the operation: _oom)
        fs = o.fs
        if log.off > 0 and log.off + total > o.seg_bytes:
            # Records never straddle segments [F7]: sync and close the full one, open the next.
            if len(log.sizes) >= o.max_segs:
                raise _err("Limit", _X_SEGS)
            if log is w:
                self._sync_h()  # (on a storage error: fail-stop, IOFailure)
            else:
                fs.sync(log.h)
                log.dirty = False
            h, log.h = log.h, None
            fs.close(h)
            self._new_segment(log, staging)
        rec = o.rec
        struct.pack_into(_REC_FMT, rec, 0, _REC_MAGIC, _VERSION, typ, seq, arg, plen, total, 0, 0)
        struct.pack_into(_FTR_FMT, rec, _HDR, _REC_COMMIT, total)
        c = _crc(o.mv_crc2, _crc(o.mv_crc1))
        if payload is not None and plen:
            c = _crc(payload, c)
        struct.pack_into("<I", rec, _R_CRC, c)
        off = log.off
        h = log.h
        if payload is not None and plen:
            # Header, payload, footer: three writes and no copy of the payload (STYLE 6).
            fs.write(h, o.mv_hdr)
            fs.write(h, payload)
            fs.write(h, o.mv_ftr)
        else:
            fs.write(h, rec)
        log.off = off + total
        log.sizes[-1] = log.off
        log.dirty = True
        return off

    def _write(self, typ: int, seq: int, arg: int, payload: "Optional[Buf]", sync: bool) -> int:
        """Append a record to the active generation, compacting first when the segment limit
        is reached [W4]; fail-stop on any storage error [R20]."""
        self._alive()
        total, o = _MIN_REC + (len(payload) if payload is not None else 0), self._o
        if total > o.seg_bytes:
            raise _err("TooLarge", _X_RECORD)
        if self._rm is not None:  # a staged generation's step before this record [C13][C14]
            self._rm.write(self, total, typ)
        log = self._log  # (a compaction hands the writer the new generation: the same object)
        if log.off > 0 and log.off + total > o.seg_bytes and len(log.sizes) >= o.max_segs:
            try:
                _compact(self, total, 0)
            except _E("Full"):
                raise _err("Limit", _X_SEGS_FULL)
        try:
            off = self._append(log, typ, seq, arg, payload, False)
        except OSError as e:
            self._fail()
            raise _io_failure(e, "write")
        if sync:
            self._sync_h()
        return off

    # ------------------------------------------------------------------ reading
    def _read_exact(self, h: "Any", off: int, mv: memoryview) -> int:
        got, n = 0, len(mv)
        for _ in range(_IO_LOOPS):
            if got >= n:
                break
            k = self._o.fs.read_into(h, off + got, mv[got:] if got else mv)
            if k <= 0:
                break
            got += k
        return got

    def _buf(self, n: int) -> memoryview:
        # The read buffer, at least n bytes; 0 drops it (after a part sized it for a window).
        if len(self._rbuf) < n or not n:
            self._rbuf = bytearray(n)
        return memoryview(self._rbuf)

    def _read_record(
        self, log: _Log, sg: int, off: int, typ: int, seq: int, ln: int, f: "Any" = None
    ) -> memoryview:
        """Re-read and validate one whole record; return a view of its payload [R19]. f: the
        segment already open for reading (kept open), else it is opened and closed here."""
        name = segment_name(log.gen, sg)
        if sg >= len(log.sizes) or off + _MIN_REC + ln > log.sizes[sg]:
            raise _err("Corrupt", _X_OUTSIDE, seq, name)
        if log is self._log and sg == len(log.sizes) - 1 and off + _MIN_REC + ln > log.synced:
            # A fresh reader sees only committed bytes (LittleFS; CPython's buffer): an unsynced
            # DATA record is served from RAM (sync="none"), anything else syncs first [D7].
            k = seq - log.ubase
            if typ == _T_DATA and 0 <= k < len(log.unsynced):
                return memoryview(log.unsynced[k])
            if log.h is not None:
                self._sync_h()
        total, o = _MIN_REC + ln, self._o
        mv = self._buf(total)
        try:
            h = f if f is not None else o.fs.open(self._path(name), "rb")
            try:
                got = self._read_exact(h, off, mv[0:total])
            finally:
                if f is None:
                    o.fs.close(h)
        except OSError as e:
            raise _io_failure(e, "read " + name)
        try:
            if got != total:
                raise _err("Corrupt", _X_SHORT)
            t, s, _a, pl = check_record(mv, 0, o.seg_bytes, o.max_payload)
            if t != typ or s != seq or pl != ln:
                raise _err("Corrupt", _X_OTHER)
        except _E("Corrupt") as e:
            raise _err("Corrupt", _X_AT, e.args[0], name, off, seq)
        return mv[_HDR : _HDR + ln]

    def _data(self, log: _Log, i: int, seq: int, ln: int) -> memoryview:
        """Return a view of item i's payload: from RAM while a fresh reader could not see it yet
        [D7]; else from its DATA record, whose offset its live entry caches or a walk of its
        segment's record headers finds: from the last item located (the hint) when that lies
        before it in the same segment, else from the segment's start (DESIGN §4)."""
        k = seq - log.ubase if log is self._log else -1  # (the writer's alone)
        if 0 <= k < len(log.unsynced):
            return memoryview(log.unsynced[k])
        ix = self._ix
        hint, sfo = ix.hint, ix.sfo
        k = hint[_HN_SEG]  # the segment: the hint's, when i lies in it after the hint
        if k < 0 or hint[_HN_I] > i or (k + 1 < len(sfo) and sfo[k + 1] <= i):
            k = ix.at(sfo, i)  # the last segment whose first item index is <= i
        e = ix.live.get(seq)
        if e is not None and e[_LV_OFF] >= 0:
            return self._read_record(log, k, e[_LV_OFF], _T_DATA, seq, ln)
        # j: the index of the next DATA record found at or after pos
        j, pos = (
            (hint[_HN_I], hint[_HN_OFF])
            if hint[_HN_SEG] == k and hint[_HN_I] <= i
            else (sfo[k], 0)
        )
        end = log.sizes[k]
        name = segment_name(log.gen, k)
        mv = self._o.mv_hdr  # the record buffer's header: no append runs during a walk
        try:
            h = self._o.fs.open(self._path(name), "rb")
        except OSError as x:
            raise _io_failure(x, "read " + name)
        try:
            for _ in range(_SCAN_RECORDS):
                try:
                    got = self._read_exact(h, pos, mv) if pos + _MIN_REC <= end else 0
                except OSError as x:
                    raise _io_failure(x, "read " + name)
                if got != _HDR:
                    break
                magic, _v, typ, s, _a, _p, rlen, _c, _r = struct.unpack_from(_REC_FMT, mv, 0)
                if magic != _REC_MAGIC or rlen < _MIN_REC:
                    break
                if typ == _T_DATA:
                    if j == i:
                        if s != seq:
                            break
                        hint[_HN_I], hint[_HN_OFF], hint[_HN_SEG] = i, pos, k
                        if e is not None:
                            e[_LV_OFF] = pos
                        return self._read_record(log, k, pos, _T_DATA, seq, ln, h)
                    j += 1
                pos += rlen
        finally:
            self._o.fs.close(h)
        raise _err("Corrupt", _X_NO_DATA, seq, name)

    def _find(self, seq: "Any") -> int:
        self._alive()
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise _err("NotFound", _X_NO_ITEM, seq)
        e = self._ix.live.get(seq)  # an item with history knows its index: no binary search
        i = e[_LV_I] if e is not None else self._ix.find(seq)
        if i < 0:
            raise _err("NotFound", _X_NO_ITEM, seq)
        return i

    def read_into(self, seq: int, buf: "Any") -> int:
        """Copy the payload of any retained item into buf; return its length [O12]."""
        try:
            i = self._find(seq)
            try:  # a writable buffer of bytes, else InvalidArgument and nothing read [O24]
                memoryview(buf)[0:0] = b""
            except (TypeError, ValueError):
                raise _err("InvalidArgument", _X_BYTES, "buf (writable)")
            ix = self._ix
            n: int = ix.length(i)
            if len(buf) < n:
                e = _err("BufferTooSmall", _X_BUFFER, len(buf), n)
                e.needed = n
                raise e
            buf[0:n] = self._data(self._log, i, seq, n)
            return n
        except MemoryError:
            raise self._oom()

    def read(self, seq: int) -> bytes:
        """Return the payload of any retained item, in any state [O12]."""
        try:
            i = self._find(seq)
            ix = self._ix
            return bytes(self._data(self._log, i, seq, ix.length(i)))
        except MemoryError:
            raise self._oom()

    # ------------------------------------------------------------------ operations
    def enqueue(self, payload: "Buf") -> int:
        """Append a DATA record; return its seq, durable before return unless sync="none" [O1]."""
        try:
            self._alive()
            payload = _bytes_arg(payload, "payload")
            n, o, w = len(payload), self._o, self._log  # (w: the writer, across a compaction)
            if n > o.max_payload:
                raise _err("TooLarge", _X_PAYLOAD, n, o.max_payload)
            if w.next >= _U64:
                raise _err("Full", _X_SEQS)
            ix, adm = self._ix, self._adm  # adm: the admission rule the open chose [H1]
            if o.win:  # the hold rule, port/ddq_hold.py [H2]
                if ix.n >= o.max_items:  # as A6: compact with one acked item required
                    _compact(self, _MIN_REC + n, 1)
                adm.hold(self, n)
            elif self._rm is not None:
                self._rm.admit(self, n)  # the inline generation's answer, then g's room [C14]
            elif not adm.admit(self, n) or ix.n >= o.max_items:
                _compact(self, _MIN_REC + n, 1 if ix.n >= o.max_items else 0)
                if not adm.admit(self, n):
                    raise _err("Full", _X_RESERVE)
            ix = self._ix
            if ix.n >= o.max_items:
                raise _err("Full", _X_ITEMS)
            if self._rm is not None and self._rm.due(self, n):
                self._rm.start(self)  # stage g+1 over the next calls (DESIGN §12) [C13]
            seq = w.next
            self._write(_T_DATA, seq, 0, payload, o.sync_ack)
            self._ix.add(seq, len(w.sizes) - 1, n)  # (available: counted)
            w.next = seq + 1
            if not w.dirty:
                w.durable = seq
            elif not o.sync_ack:  # keep what a reader could not see yet (group commit only)
                u = w.unsynced  # the unsynced DATA records: consecutive seqs from ubase
                if not u:
                    w.ubase = seq
                u.append(payload if isinstance(payload, bytes) else bytes(payload))
                w.ub += n
                if len(u) >= _UNSYNCED_MAX or w.ub >= _UNSYNCED_BYTES:
                    self._sync_h()  # [D3] the RAM copies stay a small table, not one big block
            if o.win:  # the hold rule keeps no plan (port/ddq_admit.py)
                self._plan = None
            else:
                adm.plan_add(self, n)
            return seq
        except MemoryError:
            raise self._oom()

    def claim(self, lease_ms: int) -> "Optional[Claim]":
        """Claim the first ready item, skipping claimed and backing-off ones; None if none [O2]."""
        try:
            self._alive()
            _opt(lease_ms, 1, _MAX_LEASE_MS, "lease_ms")
            now = self._now()
            ix = self._ix
            best, best_seq = -1, 0
            f, live = ix.skip(), ix.live  # the first item that may be fresh (DESIGN §4)
            for s, e in live.items():
                self._sweep(e, now)
                i = e[_LV_I]
                if ix.state(i) == _AVAILABLE and (e[_LV_NB] <= now or e[_LV_NB] - now > _U32):
                    if best < 0 or s < best_seq:
                        best, best_seq = i, s
            win = self._o.win
            # the first fresh item, unless the hold rule has no room for its history [H3]
            if f < ix.n and (not win or len(live) < win or self._adm.room(self)):
                fs = ix.seq(f)
                if best < 0 or fs < best_seq:
                    best, best_seq = f, fs
            if best < 0:
                return None
            return self._take(best_seq, now + lease_ms, best)
        except MemoryError:
            raise self._oom()

    def _take(self, seq: int, lease: int, i: int) -> Claim:
        gen, c = self._log.gen, Claim()  # (made first: no MemoryError after the write)
        self._write(_T_CLAIM, seq, lease, None, self._o.sync_all)
        ix = self._ix
        if self._log.gen != gen:
            i = ix.find(seq)  # the write compacted first: the item moved
        attempts, _l, nb = ix.history(seq)
        self._move(i, _CLAIMED, attempts, lease, nb)
        c.seq, c.attempts, c.payload_len, c.lease_until_ms = seq, attempts, ix.length(i), lease
        return c

    def _sweep(self, e: "list[int]", now: int) -> None:
        # An expired lease goes back to AVAILABLE in RAM only; nothing is written [T2]. A lease
        # further ahead than the longest legal one means the clock went back: expired [T3].
        i = e[_LV_I]
        if self._ix.state(i) == _CLAIMED and (
            e[_LV_LEASE] <= now or e[_LV_LEASE] - now > _MAX_LEASE_MS
        ):
            self._ix.put(i, _AVAILABLE)  # (the counts too)
            self._swept[self._ix.seq(i)] = e[_LV_LEASE]  # on disk it is still claimed [X3]
            e[_LV_LEASE] = 0

    def _claimed(self, seq: int, done: int) -> int:
        # A claimed item always has a live entry holding its index: no binary search [O7].
        log = self._log
        log.w0 = log.nap  # (as _alive: an operation on an item starts here)
        e = self._ix.live.get(seq) if isinstance(seq, int) else None
        if e is not None and self._ix.state(e[_LV_I]) == _CLAIMED and log.h is not None:
            return e[_LV_I]
        i = self._find(seq)
        s = self._ix.state(i)
        if s == done:
            return -1
        if s != _CLAIMED:
            raise _err("BadState", _X_NOT_CLAIMED, seq, STATES[s])
        return i

    def ack(self, seq: int) -> bool:
        """Mark a claimed item delivered; False if it was already acked [O4]."""
        try:
            if self._claimed(seq, _ACKED) < 0:
                return False
            self._write(_T_ACK, seq, 0, None, self._o.sync_ack)
            e = self._ix.live[seq]  # (a compaction inside the write may have moved the item)
            self._move(e[_LV_I], _ACKED, e[_LV_ATT], 0, e[_LV_NB])
            return True
        except MemoryError:
            raise self._oom()

    def retry(self, seq: int, delay_ms: int) -> None:
        """Return a claimed item to AVAILABLE after delay_ms; attempts += 1 [O5]."""
        try:
            self._claimed(seq, 0)
            _opt(delay_ms, 0, _U32, "delay_ms")
            attempts, _l, nb = self._ix.history(seq)
            if attempts >= _U32:
                raise _err("Limit", _X_ATTEMPTS)
            nb = self._now() + delay_ms
            if nb > _U64:
                raise _err("Limit", _X_NB)
            self._write(_T_RETRY, seq, nb, None, self._o.sync_all)
            self._move(self._ix.live[seq][_LV_I], _AVAILABLE, attempts + 1, 0, nb)
        except MemoryError:
            raise self._oom()

    def sync(self) -> int:
        """Make every record written so far durable; return durable_seq [D3]."""
        try:
            self._alive()
            log = self._log
            if log.dirty:
                self._sync_h()
            return log.durable
        except MemoryError:
            raise self._oom()

    @property
    def durable_seq(self) -> int:
        """The highest seq whose enqueue is durable (every lower one is too) [D4]."""
        return self._log.durable

    def close(self) -> None:
        """Sync and close the queue and release the lock; idempotent."""
        if self._closed:
            return
        self._closed = True
        err: "Any" = None  # an OSError, or _X_NOMEM
        try:  # whatever is raised here (a cut surfacing as another exception), the lock goes
            if self._rm is not None:
                self._rm.finish(self)  # a staged generation dropped, a replaced one deleted
            log = self._log
            if log.h is not None and log.dirty:
                try:
                    self._o.fs.sync(log.h)
                    log.dirty = False
                except OSError as e:
                    err = e
            if err is None and log.h is not None and self._o.ix_bytes:
                try:
                    # [X1] (ddq_compact: loaded here only with an index)
                    _part("ddq_compact").index_update(self)
                except MemoryError:  # no heap to load it: no index, the next open replays [X9]
                    pass
        except MemoryError:  # (closed all the same: what is on disk opens) [O23]
            err = _X_NOMEM
        finally:
            try:
                self._fail()
            finally:
                tok, self._lock = self._lock, None
                if tok is not None:
                    self._o.fs.unlock(tok)
        if err is not None:
            raise _err("NoMemory", err) if err == _X_NOMEM else _io_failure(err, "sync at close")

    # ------------------------------------------------------------------ admission (SPEC §10)
    # libddq's rule, A1-A6, lives in port/ddq_admit.py (a queue with window > 0, as every
    # board profile opens, never loads it: SPEC §10.1); next-fit placement stays here for the
    # compactions' plans.
    def _place(self, plan: "list[int]", n: int) -> bool:
        # Next-fit placement of one record [A2]; False when it needs more than max_segments.
        o = self._o
        if plan[0] == 0 or plan[1] + n > o.seg_bytes:
            if plan[0] >= o.max_segs:
                return False
            plan[0] += 1
            plan[1] = 0
        plan[1] += n
        return True

    # ------------------------------------------------------------------ the parts' methods
    # The public methods whose bodies live beside ddq.py (_PARTS, below), attached to the class
    # at their first call; declared here for mypy (MicroPython compiles no byte of this block).
    if TYPE_CHECKING:
        # port/ddq_compact.py (SPEC §11):
        def compact(self) -> bool: ...
        def purge(self, seqs: "list[int]") -> int: ...

        # port/ddq_recover.py: rebuild all state from disk [R1]
        def recover(self) -> None: ...

        # port/ddq_extra.py:
        def stats(self) -> "Stats": ...
        def items(self) -> "Iterator[Item]": ...
        def oldest_available(self) -> "Optional[int]": ...
        def lapsed(self, now: int) -> "list[tuple[int, int]]": ...
        def claim_seq(self, seq: int, lease_ms: int) -> Claim: ...
        def claim_ordered(self, lease_ms: int) -> "Optional[Claim]": ...
        def reason(self, seq: int) -> bytes: ...
        def save_index(self) -> None: ...
        def quarantine(self, seq: int, reason: "Buf" = b"") -> bool: ...


# ============================================================================ parts
# Every part of Queue that lives beside ddq.py, in one table, loaded by one rule (_part; DESIGN
# §4.1, §13) [O21][O22]; MicroPython's asyncio package is the pattern (its _attrs table, read
# by a module __getattr__). Each module beside ddq.py -> the public names it gives, each between
# spaces: a Queue method is attached to the class at its first use (Queue.__getattr__), a module
# attribute (ddq.Item) is read through the module's __getattr__ (PEP 562). A part's other
# functions take the queue (and what else they work on) as arguments and are called through
# their module, `_part("ddq_compact").index_update(q)`: nothing private is attached to Queue,
# and no name here starts with "_" (tools/check_imports.py, in `make lint`). The admission rule
# (ddq_admit or ddq_hold, by window) is loaded once at open and kept as Queue._adm. A module
# without names is used whole (ddq_reclaim, say). "-": open-time code, run by _part and, in a
# heap of at most 128 KiB (_HEAP), dropped after the call (DESIGN §4.1). The open checks the
# files its options need (ddq_recover's _find) [O22].
_PARTS = {
    "ddq_recover": "- init recover lock decode_manifest ",  # Queue(...), PosixStorage.lock
    "ddq_compact": " compact purge parse_segment_name encode_manifest ",
    "ddq_extra": " stats items oldest_available lapsed claim_seq claim_ordered reason"
    " save_index quarantine Item Stats ",
    "ddq_admit": "",  # window 0: libddq's rule (SPEC §10), Queue._adm
    "ddq_hold": "",  # window > 0 (SPEC §10.1), Queue._adm
    "ddq_reclaim": "",  # reclaim_step > 0: its Reclaim is Queue._rm (DESIGN §12)
    "ddq_index": "",  # optional: without it an open replays the log [X9]
    "ddq_cut": "",  # optional: without it an open with a cut's leftover refuses [R22]
    "ddq_salvage": "",  # on_corrupt="salvage" [K9]
    "ddq_fat": " key ",  # lock's key on FAT [L3]
}


def _part(name: str, *a: "Any", **k: "Any") -> "Any":
    # The one loading rule: import the module beside ddq.py that gives name (or that is name;
    # AttributeError if none) and return name from it. A name of a "-" module is never handed
    # out: called with arguments, _part calls it and, in a small heap, drops the module after;
    # without, it returns a function that does that. A missing file is an IOFailure naming it
    # and what needs it: name, or for a whole module the reason of the open's check, a[0] [O22].
    m, w = "", " " + name + " "  # (each name stands between spaces: one allocation a call)
    for p in _PARTS:
        if p == name or w in _PARTS[p]:
            m = p
    if not m:
        raise AttributeError(name)
    run = _PARTS[m].startswith("-")
    if run and not a:
        return lambda *b, **c: _part(name, *b, **c)
    try:
        mod = __import__(m)
    except ImportError:
        mod = None
    if mod is None:  # (MicroPython imports a module that sys.modules holds as None as None)
        w = a[0] if a and m == name else name
        raise _err("IOFailure", "ddq: port file %s.py missing (needed by %s)", m, w)
    if m == name:
        return mod
    if not run:
        return getattr(mod, name)
    try:
        return getattr(mod, name)(*a, **k)
    finally:
        if _HEAP:
            sys.modules.pop(m, None)


def _compact(q: Queue, reserve: int, required: int) -> None:
    # A compaction the queue's writes need [W4][A6]. In a small heap its module is dropped after
    # it until the next (as open-time code), unless a method of it is attached to Queue.
    _part("ddq_compact").compact_now(q, reserve, required)
    d = Queue.__dict__
    if _HEAP and "compact" not in d and "purge" not in d:
        sys.modules.pop("ddq_compact", None)


def _getattr(self: "Optional[Queue]", name: str) -> "Any":
    # Queue.__getattr__ (self: the queue) and the module's __getattr__ (self None): a public name
    # the table gives a module (a Queue method is attached to the class); the error classes: _E.
    if name in _ERRORS:
        return _E(name)
    if name in _PARTS:  # a module beside ddq.py is not an attribute
        raise AttributeError(name)
    v = _part(name)
    if self is None:
        return v
    setattr(Queue, name, v)  # the next use finds it in the class
    return getattr(self, name)


setattr(Queue, "__getattr__", _getattr)  # noqa: B010 (mypy must not see a catch-all __getattr__)


def __getattr__(name: str) -> "Any":
    return _getattr(None, name)
