"""Independent reader of the DDQ on-disk format (STYLE rule 22): fsck for ``ddq verify`` / ``ddq records``.

This module deliberately does NOT import ddq. Every constant and rule below is written from the format
tables in shared/reference/ddq-c-format.md (cited as F§n): records F§4, record types F§5, manifest F§6,
options F§7, replay rules F§10.4, recovery F§14. When ddq and this reader disagree about a directory,
one of them has a bug; tests compare both against directories written by the C library.

ddq's docs/SPEC.md adds a few recovery rules to the C ones ("Extension"); they are applied here too,
because verify answers "will ddq open this directory, and what will recovery change", and each use
is reported as a note saying what libddq (C) would do instead:
  - R11: a bad header whose bytes to the end of file are all 0x00 or all 0xFF, or a complete final
    record failing validation whose footer onwards is uniform, is a torn tail (C: corrupt);
  - R12: `<segment>.cut` left by an interrupted tail cut is removed, or adopted when its segment is
    missing (C: a missing segment id is corrupt);
  - R14: a missing manifest with the marker present adopts a valid `queue.manifest.tmp` (C: corrupt);
  - F7: a segment other than the last must end where its successor's first record did not fit.

The recovery index `queue.index` (SPEC §12.1, X1-X8; ddq only, libddq ignores it) is decoded from
the SPEC's layout too: it is "valid" when ddq would adopt it (X4), and then its state must equal this
reader's replay at the end of the bytes it covers (X3), else ddq would open a wrong state (corrupt).
A stale or damaged index is a note: ddq ignores it and replays everything (time only).

Verdicts: CLEAN (0), TORN (1: only a torn tail that recovery would remove), CORRUPT (2).
"""

import os
import re
import struct
import zlib
from typing import Any

from . import options
from .errors import HostError

JSON = dict[str, Any]
Options = dict[str, int]

# ---------------------------------------------------------------- format constants (F§4, F§6, F§7)

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1

REC_MAGIC = b"DQG1"  # 0x31475144 little-endian, F§4.1
REC_VERSION = 1
REC_HEADER = 40
REC_FOOTER = 8
REC_MIN = 48
REC_COMMIT = b"CMIT"  # 0x54494D43, F§4.1
# magic(4s) version(H) type(H) seq(Q) arg(Q) payload_length(I) record_length(I) crc(I) reserved(I)
REC_HEADER_FMT = "<4sHHQQIIII"
FOOTER_FMT = "<4sI"

T_DATA, T_CLAIM, T_ACK, T_RETRY, T_QUARANTINE, T_STATE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {1: "DATA", 2: "CLAIM", 3: "ACK", 4: "RETRY", 5: "QUARANTINE", 6: "STATE"}

STATE_PAYLOAD = 24  # F§5: state(I) attempts(I) lease_until_ms(Q) not_before_ms(Q)
STATE_FMT = "<IIQQ"
MAX_REASON = 4096

MAN_MAGIC = b"DDQM"  # 0x4D514444, F§6.1
MAN_SIZE = 48
# magic version size generation next_seq segment_count item_count end_offset crc reserved
MAN_FMT = "<4sHHQQIIQII"

S_AVAILABLE, S_CLAIMED, S_ACKED, S_QUARANTINED = 1, 2, 3, 4
STATE_NAMES = {1: "available", 2: "claimed", 3: "acked", 4: "quarantined"}

DEFAULT_OPTIONS = options.DEFAULTS  # F§7.1: a table of numbers, not ddq.py
OPTION_RANGES = options.RANGES

LOCK_NAME = "queue.lock"
FORMAT_NAME = "queue.format"
MANIFEST_NAME = "queue.manifest"
MANIFEST_TMP = "queue.manifest.tmp"
LEGACY_RE = re.compile(r"^segment-(\d{20})\.log$")
GEN_RE = re.compile(r"^generation-(\d{20})-segment-(\d{20})\.log$")
CUT_SUFFIX = ".cut"  # SPEC R12 (ddq extension): a tail cut in progress

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


class NotAQueue(HostError):
    """The directory holds no segment, manifest or format marker."""


def check_options(opts: dict[str, Any] | None) -> Options:
    """Fill defaults and range-check (F§7.1). Returns a new dict or raises ValueError."""
    out = dict(DEFAULT_OPTIONS)
    for k, v in (opts or {}).items():
        if k in out and v is not None:
            out[k] = int(v)
    for k, (lo, hi) in OPTION_RANGES.items():
        if not lo <= out[k] <= hi:
            raise ValueError("%s=%d outside %d..%d" % (k, out[k], lo, hi))
    if out["max_payload_bytes"] > out["segment_bytes"] - REC_MIN:
        raise ValueError("max_payload_bytes must be <= segment_bytes - 48")
    return out


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(generation, segment_id) for a segment file name, else None (F§3.2)."""
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
    """F§4.2: CRC over bytes 4..31, then 36..39, then the payload (not magic, crc field, footer)."""
    c = zlib.crc32(buf[off + 4 : off + 32])
    c = zlib.crc32(buf[off + 36 : off + 40], c)
    return zlib.crc32(buf[off + 40 : off + 40 + plen], c) & 0xFFFFFFFF


# ---------------------------------------------------------------- decoding


class Problem:
    """One finding. kind: 'torn' (recovery removes it), 'corrupt', 'warning' or 'note' (no effect on verdict)."""

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
        REC_HEADER_FMT, buf, off
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
    commit, trail = struct.unpack_from(FOOTER_FMT, buf, off + rlen - REC_FOOTER)
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
    """Per-type rules of F§5; returns a reason string or None."""
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
    """Decode and validate queue.manifest (F§6). Returns (fields, error or None)."""
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


class Item:
    __slots__ = (
        "seq",
        "state",
        "attempts",
        "lease_until_ms",
        "not_before_ms",
        "payload_len",
        "snapshotted",
        "reason",
        "needs_reason",
        "location",
        "reason_at",
    )

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


def scan(
    path: str, options: dict[str, Any] | None = None, exact_segment_bytes: bool = True
) -> Report:
    """Decode a queue directory without modifying it. Returns a Report (raises NotAQueue, OSError).

    exact_segment_bytes: options["segment_bytes"] is the writer's (given, not a default), so a segment
    that ends before a record that would have fit is damage (corrupt) rather than a warning.
    """
    opts = check_options(options)
    rep = Report(path, opts)
    names = sorted(os.listdir(path))
    segs_by_gen: dict[int, list[tuple[int, str]]] = {}
    for n in names:
        parsed = parse_segment_name(n)
        if parsed:
            segs_by_gen.setdefault(parsed[0], []).append((parsed[1], n))
    # R12: a `.cut` whose segment is missing is renamed to it by recovery; one beside its segment is removed.
    sources: dict[str, str] = {}
    for n in names:
        if n.endswith(CUT_SUFFIX) and parse_segment_name(n[: -len(CUT_SUFFIX)]):
            target = n[: -len(CUT_SUFFIX)]
            if target in names:
                continue  # classified with the leftovers below
            parsed = parse_segment_name(target)
            assert parsed is not None  # checked in the condition above
            segs_by_gen.setdefault(parsed[0], []).append((parsed[1], target))
            sources[target] = n
    has_marker = FORMAT_NAME in names
    has_manifest = MANIFEST_NAME in names
    if not segs_by_gen and not has_marker and not has_manifest:
        raise NotAQueue(
            "%s is not a ddq queue directory (no segment, manifest or queue.format)" % path
        )
    ixc = IndexCheck(rep, path, names)

    # F§14 step 2: marker and manifest.
    if has_marker:
        mp = os.path.join(path, FORMAT_NAME)
        if os.path.islink(mp) or not os.path.isfile(mp):
            rep.add("corrupt", "queue.format is not a regular file", file=FORMAT_NAME)
        elif os.path.getsize(mp) != 0:
            rep.add(
                "corrupt",
                "queue.format is not empty (%d bytes)" % os.path.getsize(mp),
                file=FORMAT_NAME,
            )
    cp = None  # checkpoint (segment index, end offset) while not yet seen
    man_bytes: bytes | None = None
    man_name = MANIFEST_NAME
    if not has_manifest and has_marker:
        tp = os.path.join(path, MANIFEST_TMP)
        if MANIFEST_TMP in names and os.path.isfile(tp) and not os.path.islink(tp):
            with open(tp, "rb") as f:
                _fields, err = decode_manifest(f.read(), opts, has_marker)
            if err is None:
                man_name, has_manifest = MANIFEST_TMP, True
                rep.add(
                    "note",
                    "queue.manifest is missing: recovery adopts queue.manifest.tmp (SPEC R14; "
                    "libddq would report the directory corrupt)",
                    file=MANIFEST_TMP,
                )
                rep.c_compatible = False
    if has_manifest:
        mp = os.path.join(path, man_name)
        if os.path.islink(mp) or not os.path.isfile(mp):
            rep.add("corrupt", "queue.manifest is not a regular file", file=MANIFEST_NAME)
            return ixc.unchecked()
        with open(mp, "rb") as f:
            man_bytes = f.read()
        fields, err = decode_manifest(man_bytes, opts, has_marker)
        rep.manifest = fields
        if err or fields is None:
            rep.add("corrupt", err or "unreadable manifest", file=man_name)
            return ixc.unchecked()
        rep.generation = fields["generation"]
        cp = (fields["segment_count"] - 1, fields["end_offset"])
    elif has_marker:
        rep.add("corrupt", "queue.format exists but queue.manifest is missing", file=MANIFEST_NAME)
        return ixc.unchecked()

    # F§14 step 3: the selected generation's segments, contiguous ids from 0.
    gen = rep.generation
    mine = sorted(segs_by_gen.get(gen, []))
    if len(mine) > opts["max_segments"]:
        rep.add(
            "corrupt",
            "%d segments exceed max_segments %d (limit; try --max-segments)"
            % (len(mine), opts["max_segments"]),
        )
        return ixc.unchecked()
    for i, (sid, n) in enumerate(mine):
        if sid != i:
            rep.add(
                "corrupt", "segment ids not contiguous: expected id %d, found %s" % (i, n), file=n
            )
            return ixc.unchecked()
    if rep.manifest and len(mine) < rep.manifest["segment_count"]:
        rep.add(
            "corrupt",
            "manifest names %d segments, only %d present"
            % (rep.manifest["segment_count"], len(mine)),
        )
        return ixc.unchecked()
    for _sid, n in mine:
        if n in sources:
            rep.add(
                "note",
                "recovery renames %s to %s (SPEC R12; libddq would report the segment missing)"
                % (sources[n], n),
                file=sources[n],
            )
            rep.c_compatible = False
    _classify_other_files(rep, path, names, gen, mine, man_name)

    # F§14 steps 6-7: replay.
    st = _Replay(rep, opts, gen, cp, exact_segment_bytes)
    sizes = []
    for _sid, n in mine:
        fp = os.path.join(path, sources.get(n, n))
        sizes.append(os.path.getsize(fp) if os.path.isfile(fp) else -1)
    st.snap_at = ixc.check_dir(gen, sizes, man_bytes, cp)
    for idx, (sid, n) in enumerate(mine):
        fp = os.path.join(path, sources.get(n, n))
        if not os.path.isfile(fp) or os.path.islink(fp):
            rep.add("corrupt", "segment is not a regular file", file=n)
            return ixc.unchecked()
        with open(fp, "rb") as f:
            data = f.read()
        seg: JSON = {"name": n, "id": sid, "size": len(data), "records": [], "tail": None}
        rep.segments.append(seg)
        ixc.check_segment(idx, data)
        st.segment(seg, idx, data, last=(idx == len(mine) - 1))
        st.prev_size, st.prev_name = len(data), n
    if st.fits and not st.exact:
        big = max(s["size"] for s in rep.segments)
        fit, prev, nxt = min(st.fits)
        if big >= fit:
            st.corrupt(
                "segment %s ends early: it and %s's first record (%d bytes together) would fit in "
                "a segment of %d bytes, which this generation has (SPEC F7: no segment_bytes "
                "explains its rotations)" % (prev, nxt, fit, big),
                file=prev,
            )
    st.finish()
    ixc.finish(st)
    return rep


def _classify_other_files(
    rep: Report, path: str, names: list[str], gen: int, mine: list[tuple[int, str]], man_name: str
) -> None:
    mine_names = {n for _, n in mine}
    for n in names:
        if n in (LOCK_NAME, FORMAT_NAME, MANIFEST_NAME, man_name, INDEX_NAME) or n in mine_names:
            continue  # queue.index is decoded by IndexCheck
        if (
            n.endswith(CUT_SUFFIX)
            and n[: -len(CUT_SUFFIX)] in mine_names
            and n[: -len(CUT_SUFFIX)] not in names
        ):
            continue  # adopted as its segment (R12)
        fp = os.path.join(path, n)
        regular = os.path.isfile(fp) and not os.path.islink(fp)
        if (
            n in (MANIFEST_TMP, INDEX_TMP)
            or parse_segment_name(n)
            or (n.endswith(CUT_SUFFIX) and parse_segment_name(n[: -len(CUT_SUFFIX)]))
        ):
            if not regular:
                rep.add("corrupt", "%s is not a regular file" % n, file=n)
            else:
                rep.obsolete.append(n)
        elif n.endswith(".reserve") and parse_segment_name(n[:-8]):
            if not regular:
                rep.add("corrupt", "%s is not a regular file" % n, file=n)
            elif os.path.getsize(fp) == 0:
                rep.obsolete.append(n)
            else:
                base = n[:-8]
                alias = False
                if base in mine_names:
                    a, b = os.stat(fp), os.stat(os.path.join(path, base))
                    alias = (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
                if alias:
                    rep.obsolete.append(n)
                else:
                    rep.add("corrupt", "unknown non-empty reserve file", file=n)
        else:
            rep.ignored.append(n)
    for n in rep.obsolete:
        rep.add("note", "recovery deletes %s (other generation or leftover)" % n, file=n)


class _Replay:
    """Replay rules of F§10.4 with the checkpoint rules of F§14 step 7."""

    def __init__(
        self, rep: Report, opts: Options, gen: int, cp: tuple[int, int] | None, exact: bool = True
    ) -> None:
        self.rep = rep
        self.exact = exact
        self.opts = opts
        self.gen = gen
        self.cp = cp  # (segment index, end_offset), or None without a manifest
        self.seen = cp is None
        self.next_seq = 1
        self.last_seq = 0  # seq of the newest item
        self.prev: tuple[int, int, int | None] | None = (
            None  # previous record (type, seq, state-record state) in log order
        )
        self.stopped = False
        self.prev_size = 0
        self.prev_name: str | None = None
        self.fits: list[tuple[int, str | None, str]] = []
        self.last_rec_seq = 0  # seq of the last valid record in log order (problem context)
        self.applied = 0  # records replayed without a problem (ddq's replayed_records, X6)
        self.seg_ids: dict[str, int] = {}  # segment name -> index in the generation
        # SPEC X3: the replay state where queue.index's covered bytes end (segment, offset).
        self.snap_at: tuple[int, int] | None = None
        self.snap: JSON | None = None

    def check_snap(self, idx: int, off: int) -> None:
        if self.snap_at != (idx, off) or self.snap is not None or self.stopped:
            return
        items = []
        for k in sorted(self.rep.items):
            it = self.rep.items[k]
            ra = it.reason_at
            items.append(
                (
                    it.seq,
                    it.state,
                    it.attempts,
                    it.lease_until_ms,
                    it.not_before_ms,
                    it.payload_len,
                    self.seg_ids[it.location[0]],
                    it.location[1],
                    None if ra is None else (self.seg_ids[ra[0]], ra[1], ra[2]),
                )
            )
        self.snap = {"items": items, "next_seq": self.next_seq, "applied": self.applied}

    def corrupt(self, msg: str, **kw: Any) -> None:
        self.rep.add("corrupt", msg, **kw)
        if not self.stopped:
            self.stopped = True
            self.rep.replay_stopped = "replay stopped at the first corruption"

    def check_cp(self, idx: int, off: int, name: str) -> None:
        if self.seen or self.stopped or self.cp is None or idx != self.cp[0]:
            return
        end = self.cp[1]
        if off > end:
            self.corrupt(
                "a record crosses the snapshot boundary at offset %d" % end,
                file=name,
                offset=off,
                after_seq=self.last_rec_seq or None,
            )
            return
        if off < end:
            return
        m = self.rep.manifest
        assert m is not None  # a checkpoint exists only with a manifest
        items = self.rep.items
        if len(items) != m["item_count"]:
            self.corrupt(
                "at the snapshot boundary %d items, manifest says %d"
                % (len(items), m["item_count"]),
                file=name,
                offset=off,
            )
            return
        if self.next_seq > m["next_seq"] or (self.gen == 0 and self.next_seq != m["next_seq"]):
            self.corrupt(
                "at the snapshot boundary next_seq %d, manifest says %d"
                % (self.next_seq, m["next_seq"]),
                file=name,
                offset=off,
            )
            return
        for it in items.values():
            if self.gen != 0 and not it.snapshotted and not it.is_default():
                self.corrupt(
                    "item %d not snapshotted but not in the default state" % it.seq,
                    file=name,
                    offset=off,
                    seqs=(it.seq, it.seq),
                )
                return
            if it.needs_reason:
                self.corrupt(
                    "quarantined item %d has no reason record" % it.seq,
                    file=name,
                    offset=off,
                    seqs=(it.seq, it.seq),
                )
                return
        self.next_seq = m["next_seq"]
        self.seen = True

    def segment(self, seg: JSON, idx: int, data: bytes, last: bool) -> None:
        name = seg["name"]
        self.seg_ids[name] = idx
        if len(data) > self.opts["segment_bytes"]:
            self.corrupt(
                "segment is %d bytes, larger than segment_bytes %d"
                % (len(data), self.opts["segment_bytes"]),
                file=name,
            )
        self.check_cp(idx, 0, name)
        self.check_snap(idx, 0)
        off = 0
        while off < len(data):
            rec, status, why = decode_record(data, off, self.opts)
            tail_ok = last and self.seen
            if (
                tail_ok
                and status in ("bad-header", "invalid")
                and self.uniform_tail(data, off, rec, status)
            ):
                # SPEC R11 (ddq extension): bytes that never reached the medium read as 0x00 or 0xFF.
                left = len(data) - off
                self.rep.tail_bytes = left
                self.rep.c_compatible = False
                seg["tail"] = {
                    "offset": off,
                    "length": left,
                    "status": "torn",
                    "reason": why,
                    "header": None,
                }
                self.rep.add(
                    "torn",
                    "torn tail of %d bytes (%s, then only 0x00/0xFF); recovery removes it "
                    "(SPEC R11; libddq would report it corrupt)" % (left, why),
                    file=name,
                    offset=off,
                    after_seq=self.last_rec_seq or None,
                )
                return
            if (
                status == "ok"
                and off == 0
                and idx > 0
                and self.prev_size + rec["record_length"] <= self.opts["segment_bytes"]
            ):
                msg = (
                    "segment %s ends early: %d bytes, and this first record of %d bytes would have fit in "
                    "segment_bytes %d (SPEC F7)"
                    % (
                        self.prev_name,
                        self.prev_size,
                        rec["record_length"],
                        self.opts["segment_bytes"],
                    )
                )
                if self.exact:
                    self.corrupt(msg, file=name, offset=0, seqs=(rec["seq"], rec["seq"]))
            if status == "ok" and off == 0 and idx > 0:
                # F7 without the writer's segment_bytes W: every segment <= W < (end of a
                # segment + its successor's first record) must have a solution.
                self.fits.append((self.prev_size + rec["record_length"], self.prev_name, name))
            if status == "ok":
                self.last_rec_seq = rec["seq"]
                seg["records"].append(rec)
                if not self.stopped:
                    self.apply(rec, name)
                    if not self.stopped:
                        self.applied += 1
                off += rec["record_length"]
                self.check_cp(idx, off, name)
                self.check_snap(idx, off)
                continue
            left = len(data) - off
            # A decoded header is trustworthy only past the magic/version/length checks.
            seqs = (rec["seq"], rec["seq"]) if "seq" in rec and status != "bad-header" else None
            tail = {
                "offset": off,
                "length": left,
                "status": status,
                "reason": why,
                "header": rec if "seq" in rec else None,
            }
            if status == "short" and last and self.seen:
                self.rep.tail_bytes = left
                tail["status"] = "torn"
                self.rep.add(
                    "torn",
                    "torn tail of %d bytes (%s); recovery truncates it" % (left, why),
                    file=name,
                    offset=off,
                    seqs=seqs,
                    after_seq=self.last_rec_seq or None,
                )
                seg["tail"] = tail
                return
            if status == "invalid":
                # Complete but failing record: reported, shown by --all, and skipped by length so the
                # rest of the segment can still be decoded (replay stays stopped).
                rec["status"] = "invalid"
                rec["reason"] = why
                seg["records"].append(rec)
                self.corrupt(why or "invalid record", file=name, offset=off, seqs=seqs)
                off += rec["record_length"]
                continue
            if status == "short":
                where = (
                    "before the snapshot boundary"
                    if not self.seen
                    else "in a segment that is not the last"
                )
                why = "%s %s" % (why, where)
            tail["status"] = "invalid"
            seg["tail"] = tail
            self.corrupt(
                why or "invalid record",
                file=name,
                offset=off,
                seqs=seqs,
                after_seq=self.last_rec_seq or None,
            )
            return

    @staticmethod
    def uniform_tail(data: bytes, off: int, rec: JSON, status: str) -> bool:
        if status == "bad-header":
            rest = data[off:]
        else:
            rest = data[off + rec["record_length"] - REC_FOOTER :]  # the footer and all after it
        return len(rest) > 0 and (rest.count(0) == len(rest) or rest.count(0xFF) == len(rest))

    def apply(self, rec: JSON, name: str) -> None:
        typ, seq = rec["type"], rec["seq"]
        items = self.rep.items
        off = rec["offset"]
        where = {"file": name, "offset": off, "seqs": (seq, seq)}
        in_prefix = not self.seen and self.gen != 0
        prev = self.prev
        self.prev = (typ, seq, rec.get("state", {}).get("state"))
        if typ == T_DATA:
            if seq == U64_MAX:
                return self.corrupt("DATA seq is UINT64_MAX", **where)
            if seq <= self.last_seq:
                return self.corrupt(
                    "DATA seq %d not above previous item %d" % (seq, self.last_seq), **where
                )
            if in_prefix:
                for it in items.values():
                    if it.needs_reason:
                        return self.corrupt(
                            "DATA after quarantined item %d whose reason is missing" % it.seq,
                            **where,
                        )
            elif seq != self.next_seq:
                return self.corrupt(
                    "DATA seq %d, expected %d (sequences must be contiguous)"
                    % (seq, self.next_seq),
                    **where,
                )
            items[seq] = Item(seq, rec["payload_length"], (name, off))
            self.last_seq = seq
            self.next_seq = seq + 1
            return
        found = items.get(seq)
        if found is None:
            return self.corrupt("%s for unknown seq %d" % (TYPE_NAMES[typ], seq), **where)
        it = found
        if in_prefix:
            if typ == T_STATE:
                if (
                    seq != self.last_seq
                    or it.snapshotted
                    or not prev
                    or prev[0] != T_DATA
                    or prev[1] != seq
                ):
                    return self.corrupt(
                        "STATE must directly follow its DATA in the snapshot prefix", **where
                    )
                s = rec["state"]
                it.state = s["state"]
                it.attempts = s["attempts"]
                it.lease_until_ms = s["lease_until_ms"]
                it.not_before_ms = s["not_before_ms"]
                it.snapshotted = True
                it.needs_reason = it.state == S_QUARANTINED
                return
            if typ == T_QUARANTINE:
                if not prev or prev[0] != T_STATE or prev[1] != seq or prev[2] != S_QUARANTINED:
                    return self.corrupt(
                        "QUARANTINE in the snapshot prefix must follow a QUARANTINED STATE",
                        **where,
                    )
                it.reason = bytes.fromhex(rec["payload_hex"])
                it.reason_at = (name, off, rec["payload_length"])
                it.needs_reason = False
                return
            return self.corrupt("%s record inside the snapshot prefix" % TYPE_NAMES[typ], **where)
        if typ == T_STATE:
            return self.corrupt("STATE record outside a snapshot prefix", **where)
        if typ == T_CLAIM:
            if it.state not in (S_AVAILABLE, S_CLAIMED):
                return self.corrupt("CLAIM of a %s item" % STATE_NAMES[it.state], **where)
            it.state = S_CLAIMED
            it.lease_until_ms = rec["arg"]
        elif typ == T_ACK:
            if it.state != S_CLAIMED:
                return self.corrupt("ACK of a %s item" % STATE_NAMES[it.state], **where)
            it.state = S_ACKED
            it.lease_until_ms = 0
        elif typ == T_RETRY:
            if it.state != S_CLAIMED:
                return self.corrupt("RETRY of a %s item" % STATE_NAMES[it.state], **where)
            if it.attempts >= U32_MAX:
                return self.corrupt("RETRY would overflow attempts", **where)
            it.state = S_AVAILABLE
            it.attempts += 1
            it.lease_until_ms = 0
            it.not_before_ms = rec["arg"]
        elif typ == T_QUARANTINE:
            if it.state != S_CLAIMED:
                return self.corrupt("QUARANTINE of a %s item" % STATE_NAMES[it.state], **where)
            it.state = S_QUARANTINED
            it.lease_until_ms = 0
            it.reason = bytes.fromhex(rec["payload_hex"])
            it.reason_at = (name, off, rec["payload_length"])

    def finish(self) -> None:
        rep = self.rep
        if not self.seen and not self.stopped and self.cp is not None:
            name = rep.segments[self.cp[0]]["name"] if self.cp[0] < len(rep.segments) else None
            self.corrupt(
                "snapshot boundary (segment %d, offset %d) never reached: incomplete snapshot"
                % self.cp,
                file=name,
            )
        rep.next_seq = self.next_seq
        if len(rep.items) > self.opts["max_items"]:
            rep.add(
                "corrupt",
                "%d items exceed max_items %d (ddq reports Full; a reader's limits must be at "
                "least the writer's: try --max-items)" % (len(rep.items), self.opts["max_items"]),
            )


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


def _human(n: int) -> str:
    if n < 1024:
        return "%d bytes" % n
    if n < 1 << 20:
        return "%.1f KiB" % (n / 1024)
    return "%.1f MiB" % (n / (1 << 20))


class IndexCheck:
    """Would ddq adopt queue.index (SPEC X4), and does it hold the replay state it covers (X3)?

    Works in the order of scan(): decode (the file alone), check_dir (generation, manifest,
    limits, covered sizes, boundary: sets where the replay snapshots its state), check_segment
    (crc32 of every covered byte), finish (compare with the snapshot), or unchecked().
    """

    def __init__(self, rep: Report, path: str, names: list[str]) -> None:
        self.rep = rep
        self.ix: IndexFile | None = None
        self.status = "absent"
        self.reason = ""
        self.header: JSON | None = None
        if INDEX_NAME not in names:
            return
        fp = os.path.join(path, INDEX_NAME)
        if not os.path.isfile(fp):
            self._set("damaged", "not a regular file")
            return
        with open(fp, "rb") as f:
            data = f.read()
        if len(data) >= IX_HEADER:
            self.header = dict(zip(IX_FIELDS, struct.unpack_from(IX_FMT, data), strict=True))
        self.ix, why = decode_index(data)
        if why is not None:
            self._set("damaged", why)
        else:
            self.status = "pending"

    def _set(self, status: str, reason: str) -> None:
        if self.status in ("absent", "pending"):
            self.status, self.reason = status, reason

    def check_dir(
        self, gen: int, sizes: list[int], man_bytes: bytes | None, cp: tuple[int, int] | None
    ) -> tuple[int, int] | None:
        """SPEC X4 against the directory; returns (segment, offset) where the coverage ends."""
        ix, opts = self.ix, self.rep.options
        if ix is None or self.status != "pending":
            return None
        h = ix.header
        # manifest_crc: crc32 of manifest bytes 0..39 (so, by M3, the manifest's own CRC field)
        mcrc = zlib.crc32(man_bytes[:40]) & 0xFFFFFFFF if man_bytes is not None else 0
        ns = len(ix.segs)
        if h["generation"] != gen:
            self._set("stale", "generation %d, queue is at %d" % (h["generation"], gen))
        elif (h["flags"] & 1) != (man_bytes is not None) or h["manifest_crc"] != mcrc:
            self._set("stale", "manifest changed")
        elif ns > len(sizes):
            self._set("stale", "covers %d segments, the queue has %d" % (ns, len(sizes)))
        elif h["items"] > opts["max_items"]:
            self._set("stale", "%d items exceed max_items %d" % (h["items"], opts["max_items"]))
        elif h["max_payload"] > opts["max_payload_bytes"]:
            self._set(
                "stale",
                "a payload of %d bytes exceeds max_payload_bytes %d"
                % (h["max_payload"], opts["max_payload_bytes"]),
            )
        else:
            for k, (_crc, size, _first) in enumerate(ix.segs):
                if size > opts["segment_bytes"]:
                    self._set(
                        "stale", "covers %d bytes of segment %d, over segment_bytes" % (size, k)
                    )
                elif sizes[k] < size or (k < ns - 1 and sizes[k] != size):
                    self._set(
                        "stale",
                        "segment %d is %d bytes, the index covers %d" % (k, sizes[k], size),
                    )
                if self.status != "pending":
                    return None
            end = ix.segs[-1][1]
            if cp is not None and (ns - 1 < cp[0] or (ns - 1 == cp[0] and end < cp[1])):
                self._set("stale", "covered end lies before the manifest's snapshot boundary")
        if self.status != "pending":
            return None
        return ns - 1, ix.segs[-1][1]

    def check_segment(self, idx: int, data: bytes) -> None:
        ix = self.ix
        if ix is None or self.status != "pending" or idx >= len(ix.segs):
            return
        crc, size, _first = ix.segs[idx]
        if zlib.crc32(data[:size]) & 0xFFFFFFFF != crc:
            self._set("stale", "segment bytes changed at segment %d" % idx)

    def unchecked(self) -> Report:
        """scan() stopped before the replay: the index could not be compared with the log."""
        if self.status == "pending":
            self._set("stale", "not checked: the directory fails before recovery would read it")
        self._publish(None)
        return self.rep

    def finish(self, st: "_Replay") -> None:
        if self.status == "pending":
            self.status = "valid"
        self._publish(st)

    def _publish(self, st: "_Replay | None") -> None:
        rep, ix = self.rep, self.ix
        js = _index_json(self.status, self.reason)
        if self.header is not None and self.status != "damaged":
            js["items"] = self.header["items"]
        if ix is not None:
            js["covered_bytes"] = sum(e[1] for e in ix.segs)
        rep.index = js
        if self.status in ("stale", "damaged"):
            rep.add(
                "note",
                "queue.index is %s (%s): ddq ignores it and replays every record (costs time only)"
                % (self.status, self.reason),
                file=INDEX_NAME,
            )
        if st is None:
            return
        if self.status != "valid" or ix is None:
            js["records_after"] = st.applied  # ddq replays the whole log
            return
        snap = st.snap
        if snap is None:
            end = (len(ix.segs) - 1, ix.segs[-1][1])
            if st.stopped:
                why = "it covers records that do not replay (see above), which ddq would not see"
            else:
                why = "its covered end (segment %d, offset %d) is not a record boundary" % end
            self._disagree(js, why, None)
            return
        js["records_after"] = st.applied - snap["applied"]
        diff, seq = _compare_index(ix, snap, rep.segments)
        if diff is not None:
            self._disagree(js, diff, seq)

    def _disagree(self, js: JSON, why: str, seq: int | None) -> None:
        at = " at seq %d" % seq if seq is not None else ""
        msg = "queue.index disagrees with the log%s: %s; ddq would adopt a wrong state" % (at, why)
        js["disagreement"] = msg
        self.rep.add("corrupt", msg, file=INDEX_NAME, seqs=(seq, seq) if seq is not None else None)


def _compare_index(
    ix: IndexFile, snap: JSON, segments: list[JSON]
) -> tuple[str | None, int | None]:
    """SPEC X3: the index's state against this reader's replay of the covered bytes."""
    h = ix.header
    for k in range(1, len(ix.segs)):
        recs = [r for r in segments[k]["records"] if r.get("status") != "invalid"]
        first = recs[0]["record_length"] if recs and recs[0]["offset"] == 0 else 0
        if ix.segs[k][2] != first:
            return "segment %d's first record is %d bytes, the index says %d" % (
                k,
                first,
                ix.segs[k][2],
            ), None
    mine: list[tuple[Any, ...]] = snap["items"]
    names = (
        "state",
        "attempts",
        "lease_until_ms",
        "not_before_ms",
        "payload length",
        "segment",
        "offset",
    )
    for i in range(max(len(mine), len(ix.seq))):
        if i >= len(ix.seq):
            return "the index ends before this item (%d items, the log has %d)" % (
                len(ix.seq),
                len(mine),
            ), mine[i][0]
        seq = ix.seq[i]
        if i >= len(mine) or mine[i][0] != seq:
            if i < len(mine) and mine[i][0] < seq:
                return "the index lacks this item", mine[i][0]
            return "the log has no such item", seq
        a, lease, nb = ix.history(seq)
        theirs = (ix.st[i], a, lease, nb, ix.ln[i], ix.sg[i], ix.off[i])
        for name, x, y in zip(names, theirs, mine[i][1:8], strict=True):
            if x != y:
                if name == "state":
                    return "state %s, the log gives %s" % (
                        STATE_NAMES.get(x, str(x)),
                        STATE_NAMES.get(y, str(y)),
                    ), seq
                return "%s %d, the log gives %d" % (name, x, y), seq
        if mine[i][1] == S_QUARANTINED and ix.reasons.get(seq) != mine[i][8]:
            return "reason at %s, the log has it at %s (segment, offset, length)" % (
                ix.reasons.get(seq),
                mine[i][8],
            ), seq
        if i < h["fresh"] and ix.st[i] == S_AVAILABLE and seq not in ix.live:
            return "fresh (%d) lies past this plain available item: ddq would never deliver it" % (
                h["fresh"]
            ), seq
    if h["next_seq"] != snap["next_seq"]:
        return "next_seq %d, the log gives %d" % (h["next_seq"], snap["next_seq"]), None
    counts = {s: 0 for s in STATE_NAMES}
    for e in mine:
        counts[e[1]] += 1
    for s, key in ((1, "available"), (2, "claimed"), (3, "acked"), (4, "quarantined")):
        if h[key] != counts[s]:
            return "%d %s items, the log gives %d" % (h[key], key, counts[s]), None
    return None, None


def render_index(ix: JSON) -> str:
    """The one-line summary of queue.index in verify and inspect."""
    st = ix["status"]
    if st == "absent":
        return "index: none"
    if st == "valid":
        line = "index: valid, %d items, covers %s, %d records after it" % (
            ix["items"],
            _human(ix["covered_bytes"]),
            ix["records_after"],
        )
        if ix.get("disagreement"):
            line += " (DISAGREES WITH THE LOG)"
        return line
    return "index: %s (%s): ignored by ddq" % (st, ix["reason"])


# ---------------------------------------------------------------- text rendering


def _fmt_record(r: JSON) -> str:
    line = "  %6d  %-10s seq %-6d arg %-14d len %-5d rec %-5d crc %08x" % (
        r["offset"],
        r["type_name"],
        r["seq"],
        r["arg"],
        r["payload_length"],
        r["record_length"],
        r["crc32"],
    )
    if r.get("status") == "invalid":
        line += "  INVALID: %s" % r["reason"]
    elif r["type"] == T_STATE and "state" in r:
        s = r["state"]
        line += "  state=%s attempts=%d lease=%d not_before=%d" % (
            STATE_NAMES.get(s["state"], s["state"]),
            s["attempts"],
            s["lease_until_ms"],
            s["not_before_ms"],
        )
    elif r["payload_hex"]:
        p = bytes.fromhex(r["payload_hex"])
        line += "  %s" % _preview(p)
    return line


def _preview(b: bytes, n: int = 32) -> str:
    s = repr(bytes(b[:n]))
    return s + ("..." if len(b) > n else "")


def render_records(rep: Report, show_all: bool = False) -> str:
    out: list[str] = []
    if rep.manifest:
        m = rep.manifest
        out.append(
            "manifest: generation %d next_seq %d segment_count %d item_count %d end_offset %d crc %08x%s"
            % (
                m["generation"],
                m["next_seq"],
                m["segment_count"],
                m["item_count"],
                m["end_offset"],
                m["crc32"],
                "" if m["crc_ok"] else " (BAD CRC)",
            )
        )
    else:
        out.append("manifest: none (generation 0)")
    for s in rep.segments:
        recs = [r for r in s["records"] if show_all or r.get("status") != "invalid"]
        out.append("%s: %d bytes, %d records" % (s["name"], s["size"], len(recs)))
        for r in recs:
            out.append(_fmt_record(r))
        t = s["tail"]
        if t:
            if show_all:
                out.append(
                    "  %6d  %s tail of %d bytes: %s"
                    % (t["offset"], t["status"].upper(), t["length"], t["reason"])
                )
            else:
                out.append(
                    "  (%d bytes at offset %d not shown: %s tail; use --all)"
                    % (t["length"], t["offset"], t["status"])
                )
        hidden = len(s["records"]) - len(recs)
        if hidden:
            out.append("  (%d invalid records not shown; use --all)" % hidden)
    return "\n".join(out) + "\n"


def render_verify(rep: Report) -> str:
    out = ["verify %s" % rep.path]
    o = rep.options
    out.append(
        "options: " + " ".join("%s %d" % (k, o[k]) for k in options.KEYS)
    )
    if rep.manifest:
        m = rep.manifest
        out.append(
            "manifest: generation %d next_seq %d segment_count %d item_count %d end_offset %d"
            % (
                m["generation"],
                m["next_seq"],
                m["segment_count"],
                m["item_count"],
                m["end_offset"],
            )
        )
    else:
        out.append("manifest: none (generation 0)")
    for s in rep.segments:
        out.append(
            "segment %s: %d bytes, %d records"
            % (
                s["name"],
                s["size"],
                len([r for r in s["records"] if r.get("status") != "invalid"]),
            )
        )
    out.append(render_index(rep.index))
    for n in rep.ignored:
        out.append("ignored: %s" % n)
    for p in rep.problems:
        out.append("%s: %s: %s" % (p.kind.upper(), p.where(), p.message))
    if rep.replay_stopped:
        out.append("note: %s" % rep.replay_stopped)
    if not rep.c_compatible:
        out.append(
            "note: libddq (C) would not open this directory as is (see the SPEC extension notes above)"
        )
    st = rep.stats()
    out.append(
        "items: %d total, %d available, %d claimed, %d acked, %d quarantined; next_seq %d"
        % (
            st["total_items"],
            st["available_items"],
            st["claimed_items"],
            st["acknowledged_items"],
            st["quarantined_items"],
            st["next_seq"],
        )
    )
    v = rep.verdict
    if v == OK:
        out.append("result: clean")
    elif v == TORN:
        out.append("result: torn tail (%d bytes recovery would remove)" % rep.tail_bytes)
    else:
        nbad = len([p for p in rep.problems if p.kind == "corrupt"])
        out.append("result: corrupt (%d problem%s)" % (nbad, "" if nbad == 1 else "s"))
    return "\n".join(out) + "\n"
