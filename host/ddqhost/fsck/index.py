"""fsck, step 3 of 4, index check: would ddq adopt queue.index (SPEC §12.1 X4), and does it hold
the state the replay (step 2) reaches at the end of the bytes it covers (X3)?
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Any

from .format import (
    INDEX_NAME,
    IX_FIELDS,
    IX_FMT,
    IX_HEADER,
    JSON,
    MAX_REASON,
    REC_HEADER_FMT,
    REC_MAGIC,
    REC_MIN,
    REC_VERSION,
    S_ACKED,
    S_AVAILABLE,
    S_CLAIMED,
    S_QUARANTINED,
    STATE_NAMES,
    T_DATA,
    T_QUARANTINE,
    IndexFile,
    Report,
    _index_json,
    decode_index,
    index_limit,
    read_entry,
)


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
        data, why = read_entry(
            os.path.join(path, INDEX_NAME), index_limit(rep.options), "these options allow"
        )
        if data is None:
            why = why or "unreadable"
            self._set("damaged", "not a regular file" if why.endswith("regular file") else why)
            return
        if len(data) >= IX_HEADER:
            self.header = dict(zip(IX_FIELDS, struct.unpack_from(IX_FMT, data), strict=True))
        self.ix, why = decode_index(data)
        if why is None and self.ix is not None:
            why = _consistent(self.ix, rep.options["max_payload_bytes"])
        if why is not None:
            self._set("damaged", why)
        else:
            self.status = "pending"
        self.tail = -1  # where the tail walk resumes in the next covered segment (X10)

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
            else:
                why = _against_manifest(ix, self.rep.manifest)
                if why is not None:
                    self._set("stale", why)
        if self.status != "pending":
            return None
        return ns - 1, ix.segs[-1][1]

    def check_segment(self, idx: int, data: Any) -> None:  # bytes or FileBytes
        ix = self.ix
        if ix is None or self.status != "pending" or idx >= len(ix.segs):
            return
        crc, size, _first = ix.segs[idx]
        if zlib.crc32(data[:size]) & 0xFFFFFFFF != crc:
            self._set("stale", "segment bytes changed at segment %d" % idx)
            return
        why, self.tail = _against_segment(ix, idx, data[:size], self.tail)
        if why is not None:
            self._set("stale", why)

    def unchecked(self) -> Report:
        """scan() stopped before the replay: the index could not be compared with the log."""
        if self.status == "pending":
            self._set("stale", "not checked: the directory fails before recovery would read it")
        self._publish(None)
        return self.rep

    def finish(self, applied: int, snap: JSON | None, stopped: bool) -> None:
        """The replay is done: applied records in all, its state snap where the index's
        coverage ends (None: never reached), stopped: it stopped at a record that fails."""
        if self.status == "pending":
            self.status = "valid"
        self._publish((applied, snap, stopped))

    def _publish(self, end: tuple[int, JSON | None, bool] | None) -> None:
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
        if end is None:
            return
        applied, snap, stopped = end
        if self.status != "valid" or ix is None:
            js["records_after"] = applied  # ddq replays the whole log
            return
        if snap is None:
            at = (len(ix.segs) - 1, ix.segs[-1][1])
            if stopped:
                why = "it covers records that do not replay (see above), which ddq would not see"
            else:
                why = "its covered end (segment %d, offset %d) is not a record boundary" % at
            self._disagree(js, why, None)
            return
        js["records_after"] = applied - snap["applied"]
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


def _consistent(ix: IndexFile, max_payload: int) -> str | None:
    """SPEC X10, the file alone: what ddq checks before it reads the log (ddq ignores the index
    otherwise)."""
    h, n = ix.header, len(ix.seq)
    if h["reserved"] or h["flags"] & 0xFE:
        return "reserved bits set"
    counts = dict.fromkeys(STATE_NAMES, 0)
    prev = 0
    for i in range(n):
        if (
            ix.seq[i] <= prev
            or ix.st[i] not in counts
            or ix.sg[i] >= len(ix.segs)
            or (i and ix.sg[i] < ix.sg[i - 1])
            or ix.ln[i] > max_payload
        ):
            return "item %d: seqs not increasing, or a segment, state or length out of range" % i
        prev = ix.seq[i]
        counts[ix.st[i]] += 1
    for s, key in ((1, "available"), (2, "claimed"), (3, "acked"), (4, "quarantined")):
        if h[key] != counts.get(s, 0):
            return "%d %s items, the state column has %d" % (h[key], key, counts.get(s, 0))
    if len(ix.live) != h["live_count"] or len(ix.reasons) != h["reason_count"]:
        return "an entry twice"
    claimed = sum(1 for s in ix.live if ix.st[ix.find(s)] == S_CLAIMED)
    if claimed != h["claimed"]:
        return "a claimed item without its live entry"
    for i in range(h["fresh"]):
        if ix.st[i] == S_AVAILABLE and ix.seq[i] not in ix.live:
            return "fresh (%d) lies past the plain available seq %d" % (h["fresh"], ix.seq[i])
    for s in ix.hist:
        i = ix.find(s)
        if i >= 0 and ix.st[i] < S_ACKED:
            return "history entry for seq %d, which is not a terminal item" % s
    if h["reason_count"] != h["quarantined"]:
        return "%d reasons for %d quarantined items" % (h["reason_count"], h["quarantined"])
    for s, (sg, _off, ln) in ix.reasons.items():
        i = ix.find(s)
        if i < 0 or ix.st[i] != S_QUARANTINED or ln > MAX_REASON or sg >= len(ix.segs):
            return "reason entry for seq %d out of range" % s
    pay = max([0] + ix.ln + [e[2] for e in ix.reasons.values()])
    if h["max_payload"] != pay:
        return "max_payload %d, the largest length is %d" % (h["max_payload"], pay)
    if ix.segs[0][2]:
        return "segment 0 has a first record length"
    return None


def _against_manifest(ix: IndexFile, man: JSON | None) -> str | None:
    """SPEC X10: next_seq and the seqs against the manifest (no manifest: seqs 1 .. n)."""
    items, nxt = (man["item_count"], man["next_seq"]) if man else (0, 1)
    n = len(ix.seq)
    want = nxt + n - items
    if n < items or ix.header["next_seq"] != want:
        return "next_seq %d, the manifest gives %d" % (ix.header["next_seq"], want)
    if (n > items and (ix.seq[items] != nxt or ix.seq[-1] != want - 1)) or (
        n and n == items and ix.seq[-1] >= nxt
    ):
        return "seqs not consecutive from the manifest's next_seq after its boundary"
    return None


def _header(data: bytes, pos: int) -> tuple[int, int, int, int] | None:
    """(type, seq, payload length, record length) of the record at pos within data, as ddq's
    cross-check reads it (SPEC X10), else None."""
    if pos + REC_MIN > len(data):
        return None
    magic, ver, typ, seq, _a, plen, rlen, _c, _r = struct.unpack_from(REC_HEADER_FMT, data, pos)
    if (
        magic != REC_MAGIC
        or ver != REC_VERSION
        or rlen != REC_MIN + plen
        or pos + rlen > len(data)
    ):
        return None
    return typ, seq, plen, rlen


def _against_segment(ix: IndexFile, idx: int, data: bytes, tail: int) -> tuple[str | None, int]:
    """SPEC X10 in covered segment idx (its covered bytes): its first record length, the DATA
    records of the first and last item of each run and of this segment's items, its reasons,
    and the tail after the last item (no DATA, records up to the covered end). Returns (why
    ddq ignores the index or None, where the tail walk resumes in the next segment)."""
    first = struct.unpack_from("<I", data, 28)[0] if len(data) >= 32 else 0
    if idx and first != ix.segs[idx][2]:
        return "segment %d's first record is %d bytes, the index says %d" % (
            idx,
            first,
            ix.segs[idx][2],
        ), -1
    n, seq, sg = len(ix.seq), ix.seq, ix.sg
    for i in range(n):
        if sg[i] != idx:
            continue
        edge = (
            i in (0, n - 1)
            or seq[i - 1] + 1 != seq[i]
            or seq[i + 1] != seq[i] + 1
            or sg[i - 1] != idx
            or sg[i + 1] != idx
        )
        if not edge:
            continue
        r = _header(data, ix.off[i])
        if r is None or r[0] != T_DATA or r[1] != seq[i] or r[2] != ix.ln[i]:
            return "seq %d is not the DATA record at segment %d offset %d" % (
                seq[i],
                idx,
                ix.off[i],
            ), -1
        if i == n - 1:
            tail = ix.off[i] + r[3]
    for s, (rsg, off, ln) in ix.reasons.items():
        if rsg != idx:
            continue
        r = _header(data, off)
        if r is None or r[0] != T_QUARANTINE or r[1] != s or r[2] != ln:
            return "seq %d's reason is not at segment %d offset %d" % (s, idx, off), -1
    if not n and not idx:
        tail = 0
    if tail < 0:
        return None, -1
    pos = tail
    while pos < len(data):
        r = _header(data, pos)
        if r is None or r[0] == T_DATA:
            return "segment %d offset %d: %s after the index's last item" % (
                idx,
                pos,
                "a DATA record" if r else "no whole record",
            ), -1
        pos += r[3]
    return None, 0
