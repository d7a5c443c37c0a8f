"""fsck, step 4 of 4, report: the text of `ddq records`, `ddq verify` and the index line."""

from .. import options
from .format import JSON, OK, STATE_NAMES, T_STATE, TORN, Report


def printable(s: str) -> str:
    """s with every character that is not printable (a newline, ESC and the other controls, a
    line separator, an undecodable byte's surrogate) escaped as Python escapes it: one line of
    text output stays one line, and no name, topic or reason can fake a line or drive the
    terminal. (JSON output stays exact.)"""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


def _human(n: int) -> str:
    if n < 1024:
        return "%d bytes" % n
    if n < 1 << 20:
        return "%.1f KiB" % (n / 1024)
    return "%.1f MiB" % (n / (1 << 20))


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


MANIFEST_LINE = (
    "manifest: generation %(generation)d next_seq %(next_seq)d segment_count %(segment_count)d"
    " item_count %(item_count)d end_offset %(end_offset)d"
)


def render_records(rep: Report, show_all: bool = False) -> str:
    out: list[str] = []
    if rep.manifest:
        m = rep.manifest
        out.append(
            MANIFEST_LINE % m + " crc %08x%s" % (m["crc32"], "" if m["crc_ok"] else " (BAD CRC)")
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
    return "".join(printable(line) + "\n" for line in out)


def render_verify(rep: Report) -> str:
    out = ["verify %s" % rep.path]
    o = rep.options
    out.append("options: " + " ".join("%s %d" % (k, o[k]) for k in options.KEYS))
    if rep.manifest:
        m = rep.manifest
        out.append(MANIFEST_LINE % m)
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
        out.append("%s: %s" % (p.kind.upper(), ": ".join(x for x in (p.where(), p.message) if x)))
    if rep.replay_stopped:
        out.append("note: %s" % rep.replay_stopped)
    if not rep.c_compatible:
        out.append(
            "note: libddq (C) would not open this directory as is "
            "(see the SPEC extension notes above)"
        )
    st = rep.stats()
    out.append(
        "items: %(total_items)d total, %(available_items)d available, %(claimed_items)d claimed,"
        " %(acknowledged_items)d acked, %(quarantined_items)d quarantined; next_seq %(next_seq)d"
        % st
    )
    v = rep.verdict
    if v == OK:
        out.append("result: clean")
    elif v == TORN:
        out.append("result: torn tail (%d bytes recovery would remove)" % rep.tail_bytes)
    else:
        nbad = len([p for p in rep.problems if p.kind == "corrupt"])
        out.append("result: corrupt (%d problem%s)" % (nbad, "" if nbad == 1 else "s"))
    return "".join(printable(line) + "\n" for line in out)
