"""fsck, step 1 of 4, format: constants, record and manifest decoding, queue.index decoding, and
the Report (with its Items) the later steps fill.

Written from docs/SPEC.md's tables (records §3, record types §4, manifest §5, names §6, options
§7.1, the recovery index §12.1), never from port/ddq.py: see the package docstring. decode_record
re-implements the port's one record check (ddq.check_record, which recovery, reads and salvage
share) on purpose, as an independent checker: tests/host/test_host_fsck.py holds the two readings
of SPEC §3.3 to one verdict on the same directories, so it imports nothing of the port's.
"""

import bisect
import errno
import os
import re
import stat
import struct
import zlib
from typing import Any

from .. import options
from ..errors import HostError

JSON = dict[str, Any]
Options = dict[str, int]

# -------------------------------------------------------- format constants (SPEC §3, §5, §6, §7.1)

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1

REC_MAGIC = b"DQG1"  # 0x31475144 little-endian, SPEC §3.1
REC_VERSION = 1
REC_HEADER = 40
REC_FOOTER = 8
REC_MIN = 48
REC_COMMIT = b"CMIT"  # 0x54494D43, SPEC §3.1
# magic(4s) version(H) type(H) seq(Q) arg(Q) payload_length(I) record_length(I) crc(I) reserved(I)
REC_HEADER_FMT = "<4sHHQQIIII"
FOOTER_FMT = "<4sI"

T_DATA, T_CLAIM, T_ACK, T_RETRY, T_QUARANTINE, T_STATE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {1: "DATA", 2: "CLAIM", 3: "ACK", 4: "RETRY", 5: "QUARANTINE", 6: "STATE"}

STATE_PAYLOAD = 24  # SPEC §4.1: state(I) attempts(I) lease_until_ms(Q) not_before_ms(Q)
STATE_FMT = "<IIQQ"
MAX_REASON = 4096

MAN_MAGIC = b"DDQM"  # 0x4D514444, SPEC §5
MAN_SIZE = 48
# magic version size generation next_seq segment_count item_count end_offset crc reserved
MAN_FMT = "<4sHHQQIIQII"

S_AVAILABLE, S_CLAIMED, S_ACKED, S_QUARANTINED = 1, 2, 3, 4
STATE_NAMES = {1: "available", 2: "claimed", 3: "acked", 4: "quarantined"}

DEFAULT_OPTIONS = options.DEFAULTS  # SPEC §7.1: a table of numbers, not ddq.py
OPTION_RANGES = options.RANGES

LOCK_NAME = "queue.lock"
FORMAT_NAME = "queue.format"
MANIFEST_NAME = "queue.manifest"
MANIFEST_TMP = "queue.manifest.tmp"
# [0-9], not \d: names are ASCII (SPEC N4, N7); \d takes other scripts' digits, which int() reads.
LEGACY_RE = re.compile(r"^segment-([0-9]{20})\.log$")
GEN_RE = re.compile(r"^generation-([0-9]{20})-segment-([0-9]{20})\.log$")
CUT_SUFFIX = ".cut"  # SPEC R22: an older ddq's staged tail cut
RESERVE_SUFFIX = ".reserve"  # SPEC R12/R21: ddq's staged tail cut; also libddq's spare (N6)

# SPEC §12.1 X2: the recovery index (ddq extension). A 96-byte header: magic version reserved abi
# manifest_crc generation next_seq, then 16 u32: items fresh available claimed acked quarantined
# live_count hist_count reason_count segment_count plan_segments plan_offset max_payload flags
# body_crc header_crc. All little-endian except the five columns of the body (native order).
INDEX_NAME = "queue.index"
INDEX_TMP = "queue.index.tmp"  # a leftover of an interrupted write: recovery deletes it (R16)
IX_MAGIC = b"DDQI"  # 0x49514444
IX_HEADER = 96
IX_FMT = "<4sHHIIQQ16I"
IX_FIELDS = (
    "magic version reserved abi manifest_crc generation next_seq items fresh available claimed "
    "acked quarantined live_count hist_count reason_count segment_count plan_segments plan_offset "
    "max_payload flags body_crc header_crc"
).split()
IX_SEG, IX_LIVE, IX_HIST, IX_REASON = 12, 28, 20, 20  # entry sizes; the columns take 19 per item
# abi: crc32 of the value 1 as u64, u16, u32 in the writer's native order: the two byte orders.
IX_ABI = {
    zlib.crc32(struct.pack("<QHI", 1, 1, 1)) & 0xFFFFFFFF: "<",
    zlib.crc32(struct.pack(">QHI", 1, 1, 1)) & 0xFFFFFFFF: ">",
}

OK, TORN, CORRUPT = 0, 1, 2
VERDICT_NAMES = {OK: "clean", TORN: "torn-tail", CORRUPT: "corrupt"}


# SPEC N7: an entry whose name begins with one of these is opened by ddq, so must be a regular
# file.
QUEUE_PREFIXES = ("queue.", "segment-", "generation-")
_TYPE_NAMES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def not_regular(path: str) -> str | None:
    """None when path is a regular file (lstat: a link is a link) or missing, else what it is
    ("a FIFO, not a regular file"). Opens nothing (SPEC N7)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return "%s, not a regular file" % _TYPE_NAMES.get(stat.S_IFMT(mode), "not a regular file")


class FileBytes:
    """A file's bytes as read_file read them: its data extents only (SEEK_DATA/SEEK_HOLE), each
    held as bytes; a hole reads as zeros without being read or held. len() is the file's size;
    a slice (step 1) or an index gives bytes / an int, holes zero-filled. So the work and memory
    a sparse file costs follow the bytes it holds (st_blocks), not its apparent size."""

    def __init__(self, size: int, extents: list[tuple[int, bytes]]) -> None:
        self.size = size
        self.extents = extents  # (offset, bytes), in order, not overlapping
        self._starts = [o for o, _d in extents]

    def __len__(self) -> int:
        return self.size

    def held(self) -> int:
        """The bytes of data actually read and held."""
        return sum(len(d) for _o, d in self.extents)

    def _range(self, a: int, b: int) -> bytes:
        if b <= a:
            return b""
        out = bytearray(b - a)
        for o, d in self.extents[max(bisect.bisect_right(self._starts, a) - 1, 0) :]:
            if o >= b:
                break
            lo, hi = max(a, o), min(b, o + len(d))
            if lo < hi:
                out[lo - a : hi - a] = d[lo - o : hi - o]
        return bytes(out)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            a, b, step = k.indices(self.size)
            if step != 1:
                raise ValueError("FileBytes slices have step 1")
            return self._range(a, b)
        i = k + self.size if k < 0 else k
        if not 0 <= i < self.size:
            raise IndexError(k)
        return self._range(i, i + 1)[0]

    def __bytes__(self) -> bytes:
        return self._range(0, self.size)

    def uniform_from(self, start: int) -> bool:
        """True when bytes start.. the end are there and all 0x00 or all 0xFF (a hole is 0x00),
        looking at the data extents only."""
        zeros = ones = True
        data = 0
        for o, d in self.extents:
            if o + len(d) <= start:
                continue
            part = d[max(start - o, 0) :]
            data += len(part)
            zeros = zeros and part.count(0) == len(part)
            ones = ones and part.count(0xFF) == len(part)
        if data < self.size - start:
            ones = False
        return self.size > start and (zeros or ones)

    def nonzero_end(self) -> int:
        """The offset just past the last byte that is not 0x00 (0: none)."""
        for o, d in reversed(self.extents):
            n = len(d.rstrip(b"\0"))
            if n:
                return o + n
        return 0


_CHUNK = 1 << 20


def _extents(fd: int, size: int) -> list[tuple[int, bytes]]:
    # The data regions of [0, size) (a filesystem without SEEK_DATA: one, the whole file),
    # each read in chunks; a hole is skipped, never read.
    out: list[tuple[int, bytes]] = []
    off = 0
    while off < size:
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
            h = min(os.lseek(fd, d, os.SEEK_HOLE), size)
        except AttributeError:
            d, h = off, size
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data past off: the rest is a hole
                break
            d, h = off, size
        if d >= size:
            break
        buf = bytearray()
        while d + len(buf) < h:
            got = os.pread(fd, min(_CHUNK, h - d - len(buf)), d + len(buf))
            if not got:
                break
            buf += got
        if buf:
            out.append((d, bytes(buf)))
        off = max(h, d + 1)
    return out


def read_file(path: str, limit: int, bound: str) -> tuple[FileBytes | None, str | None]:
    """(the bytes of path as FileBytes, None), or (None, why) when it is not a regular file of
    at most limit bytes (bound names the limit, e.g. "segment_bytes (4096)"). Looks before it
    reads: lstat, then an open that neither follows a link nor blocks on a FIFO, fstat; then
    only its data extents, so no file costs more memory or time than the options allow, nor
    more than the bytes it truly holds."""
    why = not_regular(path)
    if why is not None:
        return None, why
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        return None, "unreadable (%s)" % (e.strerror or e)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size > limit:
            return None, "%d bytes, larger than %s" % (st.st_size, bound)
        return FileBytes(st.st_size, _extents(fd, st.st_size)), None
    except OSError as e:
        return None, "unreadable (%s)" % (e.strerror or e)
    finally:
        os.close(fd)


def read_entry(path: str, limit: int, bound: str) -> tuple[bytes | None, str | None]:
    """read_file's bytes as one bytes object (a small file: the manifest, the index)."""
    fb, why = read_file(path, limit, bound)
    return (None, why) if fb is None else (bytes(fb), None)


def leftover_end(left: Any) -> int:
    """The offset just past the last non-zero byte of a staged cut (bytes or FileBytes)."""
    if isinstance(left, FileBytes):
        return left.nonzero_end()
    return len(left.rstrip(b"\0"))


def index_limit(opts: Options) -> int:
    """The largest queue.index these options can describe (SPEC X2): its header, a segment entry
    per segment and, per item, its columns and at most one live, history and reason entry."""
    return (
        IX_HEADER
        + IX_SEG * opts["max_segments"]
        + (19 + IX_LIVE + IX_HIST + IX_REASON) * opts["max_items"]
    )


class NotAQueue(HostError):
    """The directory holds no segment, manifest or format marker."""


def check_options(opts: dict[str, Any] | None) -> Options:
    """Fill defaults and range-check (SPEC §7.1). Returns a new dict or raises ValueError."""
    out = dict(DEFAULT_OPTIONS)
    for k, v in (opts or {}).items():
        if k in out and v is not None:
            if type(v) is not int:  # (int() truncates 4096.9 and overflows on infinity)
                raise ValueError("%s=%r is not an integer" % (k, v))
            out[k] = v
    for k, (lo, hi) in OPTION_RANGES.items():
        if not lo <= out[k] <= hi:
            raise ValueError("%s=%d outside %d..%d" % (k, out[k], lo, hi))
    if out["max_payload_bytes"] > out["segment_bytes"] - REC_MIN:
        raise ValueError("max_payload_bytes must be <= segment_bytes - 48")
    return out


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(generation, segment_id) for a segment file name, else None (SPEC §6)."""
    m = LEGACY_RE.match(name)
    if m:
        sid = int(m.group(1))
        return (0, sid) if sid <= U64_MAX else None
    m = GEN_RE.match(name)
    if m:
        gen, sid = int(m.group(1)), int(m.group(2))
        if gen == 0 or gen > U64_MAX or sid > U64_MAX:
            return None  # generation 0 must use the legacy name
        return (gen, sid)
    return None


def segment_name(gen: int, sid: int) -> str:
    if gen == 0:
        return "segment-%020d.log" % sid
    return "generation-%020d-segment-%020d.log" % (gen, sid)


def record_crc(buf: bytes, off: int, plen: int) -> int:
    """SPEC §3.2: CRC over bytes 4..31, then 36..39, then the payload (not magic, crc field,
    footer)."""
    c = zlib.crc32(buf[off + 4 : off + 32])
    c = zlib.crc32(buf[off + 36 : off + 40], c)
    return zlib.crc32(buf[off + 40 : off + 40 + plen], c) & 0xFFFFFFFF


# ---------------------------------------------------------------- decoding


class Problem:
    """One finding. kind: 'torn' (recovery removes it), 'corrupt', 'warning' or 'note' (no effect
    on verdict)."""

    def __init__(
        self,
        kind: str,
        message: str,
        file: str | None = None,
        offset: int | None = None,
        seqs: tuple[int, int] | None = None,
        after_seq: int | None = None,
    ) -> None:
        self.kind = kind
        self.message = message
        self.file = file
        self.offset = offset
        self.seqs = seqs  # (lo, hi) of the records concerned, when known
        self.after_seq = after_seq  # last valid seq before the problem, when seqs is unknown

    def where(self) -> str:
        parts: list[str] = []
        if self.file:
            parts.append(self.file)
        if self.offset is not None:
            parts.append("offset %d" % self.offset)
        if self.seqs:
            lo, hi = self.seqs
            parts.append("seq %d" % lo if lo == hi else "seq %d..%d" % (lo, hi))
        elif self.after_seq is not None:
            parts.append("after seq %d" % self.after_seq)
        return ", ".join(parts)

    def to_json(self) -> JSON:
        return {
            "kind": self.kind,
            "message": self.message,
            "file": self.file,
            "offset": self.offset,
            "seqs": list(self.seqs) if self.seqs else None,
            "after_seq": self.after_seq,
        }


def leftover_extra(left: Any, seg: Any) -> int | None:
    """SPEC R22: None when the segment (None: missing) starts with the staged cut's bytes up to
    its last non-zero byte (trailing zeros are an unsynced copy's), else the first offset where
    the two differ. (bytes or FileBytes.)"""
    e = leftover_end(left)
    a, b = bytes(left[:e]), bytes(seg[:e]) if seg is not None else b""
    if b == a:
        return None
    return next(i for i in range(e) if i >= len(b) or b[i] != a[i])


def decode_record(buf: bytes, off: int, opts: Options) -> tuple[JSON, str, str | None]:
    """Decode the record at buf[off:]. Returns (rec, status, why).

    status: 'ok'; 'short' (fewer than 40 bytes left, or the declared length runs past the end);
    'bad-header' (magic/version/length bounds: recovery cannot find the next record); 'invalid'
    (complete record failing CRC, footer or field rules). rec holds whatever could be decoded.
    """
    left = len(buf) - off
    if left < REC_HEADER:
        return (
            {"offset": off, "length": left},
            "short",
            "%d bytes left, less than a 40-byte header" % left,
        )
    magic, ver, typ, seq, arg, plen, rlen, crc, reserved = struct.unpack_from(
        REC_HEADER_FMT,
        buf[off : off + REC_HEADER],  # (a slice: buf may be FileBytes)
    )
    rec = {
        "offset": off,
        "type": typ,
        "type_name": TYPE_NAMES.get(typ, "?"),
        "version": ver,
        "seq": seq,
        "arg": arg,
        "payload_length": plen,
        "record_length": rlen,
        "crc32": crc,
        "crc_ok": None,
        "footer_ok": None,
        "reserved": reserved,
        "payload_hex": None,
    }
    if magic != REC_MAGIC:
        return rec, "bad-header", "bad magic %s" % magic.hex()
    if ver != REC_VERSION:
        return rec, "bad-header", "unsupported record version %d" % ver
    if rlen < REC_MIN or rlen > opts["segment_bytes"]:
        return (
            rec,
            "bad-header",
            "record_length %d outside 48..segment_bytes (%d)" % (rlen, opts["segment_bytes"]),
        )
    if rlen > left:
        return rec, "short", "record_length %d runs past the end (%d bytes left)" % (rlen, left)
    payload = bytes(buf[off + REC_HEADER : off + REC_HEADER + min(plen, rlen - REC_MIN)])
    rec["payload_hex"] = payload.hex()
    commit, trail = struct.unpack_from(FOOTER_FMT, buf[off + rlen - REC_FOOTER : off + rlen])
    rec["footer_ok"] = commit == REC_COMMIT and trail == rlen
    if rlen != REC_MIN + plen:
        rec["crc_ok"] = False
        return rec, "invalid", "record_length %d != 48 + payload_length %d" % (rlen, plen)
    rec["crc_ok"] = record_crc(buf, off, plen) == crc
    if not 1 <= typ <= 6:
        return rec, "invalid", "unknown record type %d" % typ
    if seq == 0:
        return rec, "invalid", "seq 0"
    if reserved != 0:
        return rec, "invalid", "reserved field is %d, must be 0" % reserved
    if not rec["crc_ok"]:
        return (
            rec,
            "invalid",
            "crc mismatch (stored 0x%08x, computed 0x%08x)" % (crc, record_crc(buf, off, plen)),
        )
    if commit != REC_COMMIT:
        return rec, "invalid", "bad commit marker %s" % commit.hex()
    if trail != rlen:
        return rec, "invalid", "trailing length %d != record_length %d" % (trail, rlen)
    why = _type_rule(typ, arg, plen, payload, opts)
    if why:
        return rec, "invalid", why
    if typ == T_STATE:
        st, att, lease, nb = struct.unpack(STATE_FMT, payload)
        rec["state"] = {"state": st, "attempts": att, "lease_until_ms": lease, "not_before_ms": nb}
    return rec, "ok", None


def _type_rule(typ: int, arg: int, plen: int, payload: bytes, opts: Options) -> str | None:
    """Per-type rules of SPEC §4; returns a reason string or None."""
    if typ == T_DATA:
        if arg != 0:
            return "DATA arg must be 0"
        if plen > opts["max_payload_bytes"]:
            return "DATA payload %d > max_payload_bytes %d" % (plen, opts["max_payload_bytes"])
    elif typ == T_CLAIM:
        if arg == 0:
            return "CLAIM lease_until_ms is 0"
        if plen:
            return "CLAIM payload must be empty"
    elif typ == T_ACK:
        if arg != 0 or plen:
            return "ACK arg and payload must be 0/empty"
    elif typ == T_RETRY:
        if plen:
            return "RETRY payload must be empty"
    elif typ == T_QUARANTINE:
        if arg != 0:
            return "QUARANTINE arg must be 0"
        if plen > MAX_REASON:
            return "QUARANTINE reason %d > 4096 bytes" % plen
    elif typ == T_STATE:
        if arg != 0:
            return "STATE arg must be 0"
        if plen != STATE_PAYLOAD:
            return "STATE payload is %d bytes, must be 24" % plen
        st, _att, lease, _nb = struct.unpack(STATE_FMT, payload)
        if st not in (S_AVAILABLE, S_CLAIMED, S_QUARANTINED):
            return "STATE state %d is not 1, 2 or 4" % st
        if (lease != 0) != (st == S_CLAIMED):
            return "STATE lease_until_ms must be non-zero exactly when CLAIMED"
    return None


def decode_manifest(
    data: bytes, opts: Options, marker_present: bool
) -> tuple[JSON | None, str | None]:
    """Decode and validate queue.manifest (SPEC §5). Returns (fields, error or None)."""
    if len(data) != MAN_SIZE:
        return None, "manifest is %d bytes, must be 48" % len(data)
    magic, ver, size, gen, next_seq, segs, items, end, crc, reserved = struct.unpack(MAN_FMT, data)
    fields = {
        "magic": magic.decode("latin-1"),
        "version": ver,
        "size": size,
        "generation": gen,
        "next_seq": next_seq,
        "segment_count": segs,
        "item_count": items,
        "end_offset": end,
        "crc32": crc,
        "reserved": reserved,
        "crc_ok": (zlib.crc32(data[:40]) & 0xFFFFFFFF) == crc,
    }
    if magic != MAN_MAGIC:
        return fields, "manifest magic %s is not DDQM" % magic.hex()
    if ver != 1:
        return fields, "manifest version %d" % ver
    if size != MAN_SIZE:
        return fields, "manifest size field %d" % size
    if not fields["crc_ok"]:
        return fields, "manifest crc mismatch"
    if reserved != 0:
        return fields, "manifest reserved field is not 0"
    if next_seq == 0:
        return fields, "manifest next_seq is 0"
    if segs == 0 or segs > opts["max_segments"]:
        return fields, "manifest segment_count %d outside 1..max_segments (%d)" % (
            segs,
            opts["max_segments"],
        )
    if items > opts["max_items"]:
        return fields, "manifest item_count %d > max_items (%d)" % (items, opts["max_items"])
    if end > opts["segment_bytes"]:
        return fields, "manifest end_offset %d > segment_bytes (%d)" % (end, opts["segment_bytes"])
    if gen != 0 and not marker_present:
        return fields, "generation %d manifest without queue.format marker" % gen
    return fields, None


# ---------------------------------------------------------------- recovery index (SPEC §12.1)


def _index_json(status: str, reason: str = "") -> JSON:
    return {
        "present": status != "absent",
        "status": status,
        "reason": reason,
        "covered_bytes": 0,
        "items": 0,
        "records_after": 0,
        "disagreement": None,
    }


class IndexFile:
    """queue.index decoded (SPEC X2); the columns as lists, the entry tables as dicts by seq."""

    def __init__(self, header: JSON, order: str) -> None:
        self.header = header
        self.order = order  # "<" or ">": the writer's native byte order (abi)
        # per covered segment: (crc32 of bytes 0..n-1, n, record_length of its first record)
        self.segs: list[tuple[int, int, int]] = []
        self.seq: list[int] = []
        self.sg: list[int] = []
        self.off: list[int] = []
        self.ln: list[int] = []
        self.st: list[int] = []
        self.live: dict[int, tuple[int, int, int]] = {}  # seq -> attempts, lease_until, not_before
        self.hist: dict[int, tuple[int, int]] = {}  # seq -> attempts, not_before
        self.reasons: dict[int, tuple[int, int, int]] = {}  # seq -> segment, offset, length

    def find(self, seq: int) -> int:
        """The item index of seq by binary search over the seq column, as ddq looks it up; -1."""
        lo, hi = 0, len(self.seq)
        while lo < hi:
            mid = (lo + hi) >> 1
            v = self.seq[mid]
            if v == seq:
                return mid
            if v < seq:
                lo = mid + 1
            else:
                hi = mid
        return -1

    def history(self, seq: int) -> tuple[int, int, int]:
        """(attempts, lease_until, not_before) of an item, as ddq reads its tables."""
        e = self.live.get(seq)
        if e is not None:
            return e
        h = self.hist.get(seq)
        if h is not None:
            return h[0], 0, h[1]
        return 0, 0, 0


def decode_index(data: bytes) -> tuple[IndexFile | None, str | None]:
    """Decode queue.index and check what depends on the file alone (SPEC X2, X4): magic, version,
    header CRC, abi, counts, exact size, body CRC, live entries. Returns (index, why damaged)."""
    if len(data) < IX_HEADER:
        return None, "%d bytes, shorter than the 96-byte header" % len(data)
    h = dict(zip(IX_FIELDS, struct.unpack_from(IX_FMT, data), strict=True))
    if h["magic"] != IX_MAGIC:
        return None, "bad magic %s" % h["magic"].hex()
    if h["version"] != 1:
        return None, "version %d" % h["version"]
    if zlib.crc32(data[: IX_HEADER - 4]) & 0xFFFFFFFF != h["header_crc"]:
        return None, "bad header CRC"
    order = IX_ABI.get(h["abi"])
    if order is None:
        return None, "unknown abi 0x%08x (column byte order and widths)" % h["abi"]
    n, ns = h["items"], h["segment_count"]
    counts = h["available"] + h["claimed"] + h["acked"] + h["quarantined"]
    if ns == 0:
        return None, "covers no segment"
    if counts != n:
        return None, "state counts add up to %d, not %d items" % (counts, n)
    if h["fresh"] > n:
        return None, "fresh %d > %d items" % (h["fresh"], n)
    want = (
        IX_HEADER
        + IX_SEG * ns
        + 19 * n
        + IX_LIVE * h["live_count"]
        + IX_HIST * h["hist_count"]
        + IX_REASON * h["reason_count"]
    )
    if len(data) != want:
        return None, "size mismatch: %d bytes, the counts give %d" % (len(data), want)
    if zlib.crc32(data[IX_HEADER:]) & 0xFFFFFFFF != h["body_crc"]:
        return None, "bad body CRC"
    ix = IndexFile(h, order)
    pos = IX_HEADER
    for _ in range(ns):
        ix.segs.append(struct.unpack_from("<III", data, pos))
        pos += IX_SEG
    cols: list[list[int]] = []
    for code, width in (("Q", 8), ("H", 2), ("I", 4), ("I", 4), ("B", 1)):
        cols.append(list(struct.unpack_from("%s%d%s" % (order, n, code), data, pos)))
        pos += width * n
    ix.seq, ix.sg, ix.off, ix.ln, ix.st = cols
    for _ in range(h["live_count"]):
        s, a, lease, nb = struct.unpack_from("<QIQQ", data, pos)
        pos += IX_LIVE
        i = ix.find(s)
        if i < 0 or ix.st[i] not in (S_AVAILABLE, S_CLAIMED):
            return None, "live entry for seq %d, which is not an available or claimed item" % s
        ix.live[s] = (a, lease, nb)
    for _ in range(h["hist_count"]):
        s, a, nb = struct.unpack_from("<QIQ", data, pos)
        pos += IX_HIST
        ix.hist[s] = (a, nb)
    for _ in range(h["reason_count"]):
        s, sg, off, ln = struct.unpack_from("<QIII", data, pos)
        pos += IX_REASON
        ix.reasons[s] = (sg, off, ln)
    return ix, None


# ---------------------------------------------------------------- the result the steps fill


# An item's fields as the C fixtures and `ddq records --json` show them, then the replay's own.
ITEM_FIELDS = ("seq", "state", "attempts", "lease_until_ms", "not_before_ms", "payload_len")


class Item:
    __slots__ = ITEM_FIELDS + ("snapshotted", "reason", "needs_reason", "location", "reason_at")

    def __init__(self, seq: int, plen: int, location: tuple[str, int]) -> None:
        self.seq = seq
        self.state = S_AVAILABLE
        self.attempts = 0
        self.lease_until_ms = 0
        self.not_before_ms = 0
        self.payload_len = plen
        self.snapshotted = False
        self.reason: bytes | None = None
        self.needs_reason = False
        self.location = location
        # where the QUARANTINE record is: file, offset, reason length
        self.reason_at: tuple[str, int, int] | None = None

    def is_default(self) -> bool:
        return (
            self.state == S_AVAILABLE
            and self.attempts == 0
            and self.lease_until_ms == 0
            and self.not_before_ms == 0
        )

    def to_json(self) -> JSON:
        return {
            "seq": self.seq,
            "state": STATE_NAMES[self.state],
            "attempts": self.attempts,
            "lease_until_ms": self.lease_until_ms,
            "not_before_ms": self.not_before_ms,
            "payload_len": self.payload_len,
            "quarantine_reason_hex": self.reason.hex() if self.reason is not None else None,
        }


class Report:
    def __init__(self, path: str, opts: Options) -> None:
        self.path = path
        self.options = opts
        self.manifest: JSON | None = None
        self.generation = 0
        self.segments: list[JSON] = []  # {"name", "id", "size", "records": [...], "tail": ...}
        self.problems: list[Problem] = []
        self.items: dict[int, Item] = {}
        self.next_seq = 1
        self.tail_bytes = 0
        self.ignored: list[str] = []  # names the scan ignores (never touched)
        self.obsolete: list[str] = []  # names recovery would delete
        self.replay_stopped: str | None = None
        self.c_compatible = True  # False when an extension rule (R11, R12, R14) decided something
        self.index: JSON = _index_json("absent")  # queue.index (SPEC §12.1), see IndexCheck

    @property
    def verdict(self) -> int:
        if any(p.kind == "corrupt" for p in self.problems):
            return CORRUPT
        if any(p.kind == "torn" for p in self.problems):
            return TORN
        return OK

    def add(self, kind: str, message: str, **kw: Any) -> None:
        self.problems.append(Problem(kind, message, **kw))

    def stats(self) -> JSON:
        counts = {s: 0 for s in STATE_NAMES}
        for it in self.items.values():
            counts[it.state] += 1
        stored = sum(s["size"] for s in self.segments) - self.tail_bytes
        return {
            "total_items": len(self.items),
            "available_items": counts[S_AVAILABLE],
            "claimed_items": counts[S_CLAIMED],
            "acknowledged_items": counts[S_ACKED],
            "quarantined_items": counts[S_QUARANTINED],
            "stored_bytes": stored,
            "segment_count": max(1, len(self.segments)),
            "next_seq": self.next_seq,
            "recovered_tail_bytes": self.tail_bytes,
            "generation": self.generation,
        }

    def to_json(self, with_records: bool = False) -> JSON:
        out: JSON = {
            "path": self.path,
            "verdict": VERDICT_NAMES[self.verdict],
            "exit_code": self.verdict,
            "options": self.options,
            "generation": self.generation,
            "manifest": self.manifest,
            "problems": [p.to_json() for p in self.problems],
            "stats": self.stats(),
            "items": [self.items[k].to_json() for k in sorted(self.items)],
            "segments": [
                {
                    "name": s["name"],
                    "id": s["id"],
                    "size": s["size"],
                    "record_count": len(s["records"]),
                    "tail": s["tail"],
                }
                for s in self.segments
            ],
            "ignored_files": self.ignored,
            "obsolete_files": self.obsolete,
            "c_compatible": self.c_compatible,
            "index": self.index,
        }
        if with_records:
            for js, s in zip(out["segments"], self.segments):  # noqa: B905
                js["records"] = s["records"]
        return out
