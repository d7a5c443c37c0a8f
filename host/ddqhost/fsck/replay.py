"""fsck, step 2 of 4, replay: scan a directory as recovery would (SPEC §12) into a Report.

The directory rules (marker, manifest, segments), the replay of every record with the boundary
checkpoint, the tail rules, and the files recovery would delete; the index check (step 3) runs
beside it on the same walk.
"""

import os
from typing import Any

from .format import (
    CUT_SUFFIX,
    FORMAT_NAME,
    INDEX_NAME,
    INDEX_TMP,
    JSON,
    LOCK_NAME,
    MAN_SIZE,
    MANIFEST_NAME,
    MANIFEST_TMP,
    QUEUE_PREFIXES,
    REC_FOOTER,
    RESERVE_SUFFIX,
    S_ACKED,
    S_AVAILABLE,
    S_CLAIMED,
    S_QUARANTINED,
    STATE_NAMES,
    T_ACK,
    T_CLAIM,
    T_DATA,
    T_QUARANTINE,
    T_RETRY,
    T_STATE,
    TYPE_NAMES,
    U32_MAX,
    U64_MAX,
    FileBytes,
    Item,
    NotAQueue,
    Options,
    Report,
    check_options,
    decode_manifest,
    decode_record,
    leftover_extra,
    not_regular,
    parse_segment_name,
    read_entry,
    read_file,
)
from .index import IndexCheck


def scan(
    path: str, options: dict[str, Any] | None = None, exact_segment_bytes: bool = True
) -> Report:
    """Decode a queue directory without modifying it. Returns a Report (raises NotAQueue, OSError).

    exact_segment_bytes: options["segment_bytes"] is the writer's (given, not a default), so a
    segment that ends before a record that would have fit is damage (corrupt) rather than a
    warning.
    """
    opts = check_options(options)
    rep = Report(path, opts)
    names = sorted(os.listdir(path))
    seg_bound = "segment_bytes (%d)" % opts["segment_bytes"]
    # SPEC R4: ddq reads at most max_segments*8 + 1024 names before it refuses (Limit).
    most = opts["max_segments"] * 8 + 1024
    if len(names) > most:
        rep.add(
            "corrupt",
            "%d directory entries, more than max_segments*8 + 1024 (%d): ddq refuses to open "
            "the directory (Limit, SPEC R4)" % (len(names), most),
        )
        return rep
    # SPEC N7: every entry ddq may open is a regular file, checked before anything is opened.
    for n in names:
        why = n.startswith(QUEUE_PREFIXES) and not_regular(os.path.join(path, n))
        if why and (not why.startswith("a directory") or n == LOCK_NAME):
            # (a directory: the rules of its name; queue.lock's is that ddq opens it to lock)
            rep.add("corrupt", "%s is %s: ddq refuses the directory (SPEC N7)" % (n, why), file=n)
    if rep.problems:
        return rep
    segs_by_gen: dict[int, list[tuple[int, str]]] = {}
    for n in names:
        parsed = parse_segment_name(n)
        if parsed:
            segs_by_gen.setdefault(parsed[0], []).append((parsed[1], n))
    # R22: a staged cut (`.reserve`, or an older ddq's `.cut`) whose segment is missing or empty is
    # renamed to it by recovery unless it holds only zeros; the rest are classified below.
    sources: dict[str, str] = {}
    for n in names:
        target = _leftover_target(n)
        if target is None:
            continue
        tp = os.path.join(path, target)
        if target in names and os.lstat(tp).st_size != 0:
            continue
        left, why = read_file(os.path.join(path, n), opts["segment_bytes"], seg_bound)
        if left is None:
            rep.add("corrupt", "%s is %s (SPEC N7, R15)" % (n, why), file=n)
            return rep
        holds = leftover_extra(left, None) is not None
        if not holds:
            continue  # deleted by recovery
        parsed = parse_segment_name(target)
        assert parsed is not None  # checked by _leftover_target
        if target not in names:
            segs_by_gen.setdefault(parsed[0], []).append((parsed[1], target))
        sources[target] = n
    has_marker = FORMAT_NAME in names
    has_manifest = MANIFEST_NAME in names
    if not segs_by_gen and not has_marker and not has_manifest:
        raise NotAQueue(
            "%s is not a ddq queue directory (no segment, manifest or queue.format)" % path
        )
    ixc = IndexCheck(rep, path, names)

    # SPEC §12 steps 2-5 (R2, R14, R3, R15): marker and manifest.
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
        tmp_bytes = read_entry(tp, MAN_SIZE + 1, "48 bytes")[0] if MANIFEST_TMP in names else None
        if tmp_bytes is not None:
            _fields, err = decode_manifest(tmp_bytes, opts, has_marker)
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
        man_bytes, why = read_entry(os.path.join(path, man_name), MAN_SIZE + 1, "48 bytes")
        if man_bytes is None:
            rep.add("corrupt", "%s is %s" % (man_name, why), file=man_name)
            return ixc.unchecked()
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
    elif any(g != 0 for g in segs_by_gen):
        # SPEC K13: no write of ddq leaves a generation >= 1 without its manifest (C2 publishes
        # one first); recovery would open generation 0 and delete these (R3, R16).
        g = min(g for g in segs_by_gen if g != 0)
        rep.add(
            "corrupt",
            "segments of generation %d but neither queue.manifest nor queue.format (an "
            "interrupted copy or a lost manifest): ddq would delete them; try ddq salvage" % g,
        )
        return ixc.unchecked()

    # SPEC §12 step 6 (R4): the selected generation's segments, contiguous ids from 0.
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
                "recovery renames %s to %s (SPEC R22; libddq would report the directory corrupt, "
                "or, for a .cut, open it without this segment's records)" % (sources[n], n),
                file=sources[n],
            )
            rep.c_compatible = False
    _classify_other_files(rep, path, names, gen, mine, man_name, sources)

    # SPEC §12 steps 7-8 (R5-R11): replay.
    st = _Replay(rep, opts, gen, cp, exact_segment_bytes)
    sizes = []
    for _sid, n in mine:
        sizes.append(os.lstat(os.path.join(path, sources.get(n, n))).st_size)
    st.snap_at = ixc.check_dir(gen, sizes, man_bytes, cp)
    for idx, (sid, n) in enumerate(mine):
        data, why = read_file(
            os.path.join(path, sources.get(n, n)), opts["segment_bytes"], seg_bound
        )
        if data is None:
            rep.add("corrupt", "segment %s is %s (SPEC R15)" % (sources.get(n, n), why), file=n)
            return ixc.unchecked()
        seg: JSON = {"name": n, "id": sid, "size": len(data), "records": [], "tail": None}
        rep.segments.append(seg)
        ixc.check_segment(idx, data)
        st.segment(seg, idx, data, last=(idx == len(mine) - 1))
        st.big_before = max(st.big_before, st.prev_size)
        st.prev_size, st.prev_name = len(data), n
    if st.fits and not st.fits[0][3]:
        st.corrupt(
            "segment %s holds no record but %s does (SPEC F7: a writer rotates only out of a "
            "segment that holds one)" % (st.fits[0][1], st.fits[0][2]),
            file=st.fits[0][1],
        )
    elif st.fits:
        fit, prev, nxt, big = st.fits[0]
        st.corrupt(
            "segment %s ends early: it and %s's first record (%d bytes together) would fit in "
            "a segment of %d bytes, which an earlier segment has (SPEC F7: every writer "
            "rotates past every segment before)" % (prev, nxt, fit, big),
            file=prev,
        )
    if len(mine) > 1 and len(mine) - 1 > (cp[0] if cp else -1) and rep.segments[-1]["size"] == 0:
        rep.add(
            "note",
            "the last segment is empty (a rotation whose record never became durable); "
            "recovery removes it (SPEC R23)",
            file=rep.segments[-1]["name"],
        )
    st.finish()
    ixc.finish(st.applied, st.snap, st.stopped)
    return rep


def _classify_other_files(
    rep: Report,
    path: str,
    names: list[str],
    gen: int,
    mine: list[tuple[int, str]],
    man_name: str,
    sources: dict[str, str],
) -> None:
    mine_names = {n for _, n in mine}
    for n in names:
        if n in (LOCK_NAME, FORMAT_NAME, MANIFEST_NAME, man_name, INDEX_NAME) or n in mine_names:
            continue  # queue.index is decoded by IndexCheck
        target = _leftover_target(n)
        if target is not None and sources.get(target) == n:
            continue  # adopted as its segment (R22)
        fp = os.path.join(path, n)
        regular = os.path.isfile(fp) and not os.path.islink(fp)
        if n in (MANIFEST_TMP, INDEX_TMP) or parse_segment_name(n):
            if not regular:
                rep.add("corrupt", "%s is not a regular file" % n, file=n)
            else:
                rep.obsolete.append(n)
        elif target is not None:
            if not regular:
                rep.add("corrupt", "%s is not a regular file" % n, file=n)
                continue
            limit = rep.options["segment_bytes"]
            bound = "segment_bytes (%d)" % limit
            seg, why, bad = None, None, target
            if target in names:
                seg, why = read_file(os.path.join(path, target), limit, bound)
            left = None
            if why is None:
                left, why = read_file(fp, limit, bound)
                bad = n
            if left is None:
                rep.add("corrupt", "%s is %s (SPEC R15)" % (bad, why), file=n)
                continue
            extra = leftover_extra(left, seg)
            if extra is None:
                rep.obsolete.append(n)  # its segment holds all its records (R22)
            else:
                rep.add(
                    "corrupt",
                    "%s holds a record at offset %d that %s does not (SPEC R22: written since, "
                    "e.g. by libddq reusing its seqs; recovery keeps both)" % (n, extra, target),
                    file=n,
                    offset=extra,
                )
        else:
            rep.ignored.append(n)
    for n in rep.obsolete:
        rep.add("note", "recovery deletes %s (other generation or leftover)" % n, file=n)


def _leftover_target(n: str) -> str | None:
    """The segment a staged tail cut `<segment>.reserve` / `<segment>.cut` belongs to (R22)."""
    for suffix in (RESERVE_SUFFIX, CUT_SUFFIX):
        if n.endswith(suffix) and parse_segment_name(n[: -len(suffix)]):
            return n[: -len(suffix)]
    return None


class _Replay:
    """Replay rules of SPEC §12 step 7 (R5-R9) with the boundary checkpoint (R8)."""

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
        self.big_before = 0  # the largest segment before the previous one (F7)
        self.fits: list[tuple[int, str | None, str, int]] = []
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
        why, seq = None, None  # the first rule the state at the boundary breaks
        if len(items) != m["item_count"]:
            why = "at the snapshot boundary %d items, manifest says %d" % (
                len(items),
                m["item_count"],
            )
        elif self.next_seq > m["next_seq"] or (self.gen == 0 and self.next_seq != m["next_seq"]):
            why = "at the snapshot boundary next_seq %d, manifest says %d" % (
                self.next_seq,
                m["next_seq"],
            )
        for it in items.values() if why is None else ():
            if self.gen != 0 and not it.snapshotted and not it.is_default():
                why = "item %d not snapshotted but not in the default state" % it.seq
            elif it.needs_reason:
                why = "quarantined item %d has no reason record" % it.seq
            if why is not None:
                seq = it.seq
                break
        if why is not None:
            seqs = (seq, seq) if seq is not None else None
            self.corrupt(why, file=name, offset=off, seqs=seqs)
            return
        self.next_seq = m["next_seq"]
        self.seen = True

    def segment(self, seg: JSON, idx: int, data: Any, last: bool) -> None:
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
                # SPEC R11 (ddq extension): bytes that never reached the medium read as 0x00 or
                # 0xFF.
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
                    "segment %s ends at %d bytes, and this first record of %d bytes would have "
                    "fit in segment_bytes %d: a writer with a smaller segment_bytes wrote it, or "
                    "it lost its end (SPEC F7)"
                    % (
                        self.prev_name,
                        self.prev_size,
                        rec["record_length"],
                        self.opts["segment_bytes"],
                    )
                )
                # With the writer's exact segment_bytes this is damage, unless the options
                # changed between opens (allowed: F7, R15), which the directory cannot tell:
                # a note; the reader rule below still decides.
                if self.exact:
                    self.rep.add("note", msg, file=name, offset=0)
            if status == "ok" and off == 0 and idx > 0 and self.prev_size == 0:
                # F7: a writer rotates only out of a segment that holds a record (any record
                # fits in an empty one)
                self.fits.append((rec["record_length"], self.prev_name, name, 0))
            elif (
                status == "ok"
                and off == 0
                and idx > 0
                and self.prev_size + rec["record_length"] <= self.big_before
            ):
                # F7 without the writers' segment_bytes: a writer rotates only past every
                # segment there is (each open's W holds every segment, R15), so the end of a
                # segment + its successor's first record exceeds every segment before it. That
                # record is the rotation's only inside a snapshot (one compaction wrote both
                # segments); past it libddq, which has no R23, may have appended it to the
                # empty segment a lost rotation left (V3): a note there.
                fit = (
                    self.prev_size + rec["record_length"],
                    self.prev_name,
                    name,
                    self.big_before,
                )
                if self.gen != 0 and self.cp is not None and idx <= self.cp[0]:
                    self.fits.append(fit)
                else:
                    self.rep.add(
                        "note",
                        "segment %s ends early: it and %s's first record (%d bytes together) "
                        "would fit in a segment of %d bytes, which an earlier segment has: a "
                        "rotation whose record a power cut lost, then a write after the reopen "
                        "(libddq has no R23), or a segment that lost its end, which the format "
                        "cannot tell apart (SPEC F7, V3)" % (fit[1], fit[2], fit[0], fit[3]),
                        file=fit[1],
                    )
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
                # Complete but failing record: reported, shown by --all, and skipped by length so
                # the rest of the segment can still be decoded (replay stays stopped).
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
    def uniform_tail(data: Any, off: int, rec: JSON, status: str) -> bool:
        if status != "bad-header":
            off += rec["record_length"] - REC_FOOTER  # the footer and all after it
        if isinstance(data, FileBytes):  # its data extents only: a hole is zeros, unread
            return data.uniform_from(off)
        rest = data[off:]
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
        # CLAIM takes an available (or, its lease lapsed, a claimed) item; ACK, RETRY and
        # QUARANTINE only a claimed one (SPEC §7.4).
        if it.state not in ((S_AVAILABLE, S_CLAIMED) if typ == T_CLAIM else (S_CLAIMED,)):
            what = (TYPE_NAMES[typ], STATE_NAMES[it.state])
            return self.corrupt("%s of a %s item" % what, **where)
        if typ == T_CLAIM:
            it.state = S_CLAIMED
            it.lease_until_ms = rec["arg"]
        elif typ == T_ACK:
            it.state = S_ACKED
            it.lease_until_ms = 0
        elif typ == T_RETRY:
            if it.attempts >= U32_MAX:
                return self.corrupt("RETRY would overflow attempts", **where)
            it.state = S_AVAILABLE
            it.attempts += 1
            it.lease_until_ms = 0
            it.not_before_ms = rec["arg"]
        elif typ == T_QUARANTINE:
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
