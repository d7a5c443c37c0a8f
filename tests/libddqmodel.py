# A model of what the C library (libddq, IoTSharp/DurableDeliveryQueue ddq.c at commit 9eb47a95)
# does when it opens a queue directory, for the questions of SPEC V4/R21/R22: does it refuse the
# directory, and if not, which items does it see and what does it change on disk. Written from the
# SPEC and from reading ddq.c (scan_segments, replay_segment, ddq_recover, clean_obsolete_files),
# never from port/ddq.py; records are decoded by tests/ddqfmt.py. Subset Python (CPython and
# MicroPython). What it models, in libddq's order:
#   load_manifest  a non-empty queue.format, a bad manifest, or a missing one beside the marker:
#                  CORRUPT;
#   scan_segments  only names of the selected generation's segments count; every other name
#                  (`<segment>.cut` included) is ignored; ids must be exactly 0..n-1, else CORRUPT;
#                  fewer segments than the manifest names: CORRUPT;
#   ddq_recover    no segment at all: segment 0 is created (an empty file), before anything below;
#   replay         a short tail (under 40 bytes, or a length past the end) of the last segment is
#                  truncated; anywhere else, or a bad header or a complete invalid record: CORRUPT;
#                  DATA seqs must increase (equal next_seq in generation 0);
#   clean_obsolete segments of other generations and queue.manifest.tmp are deleted; an empty
#                  `<segment>.reserve` is deleted; a non-empty one that is not a hard link of its
#                  segment is CORRUPT (the model's directories never hold hard links).
# view() returns (verdict, seqs, next_seq, changes, why): verdict "ok" or "corrupt"; changes
# {name: bytes (written) or None (deleted)} is what libddq did before it returned, since a
# refusal after the replay still leaves the truncations and the created segment 0 behind.
# The writer (write, enqueue, claim) places records as libddq does and has no R23: after a power
# cut lost a rotation's record it keeps the empty last segment and appends there (SPEC F7, V3).
import struct

import ddqfmt
import support


def snapshot(d):
    """{name: bytes} of the regular files in directory d."""
    out = {}
    for n in support.listdir_sorted(d):
        if support._kind(d + "/" + n) == 1:
            out[n] = support.read_file(d + "/" + n)
    return out


def apply(d, changes):
    """Make on disk in d what libddq changed (view()'s changes)."""
    import os

    for n in changes:
        if changes[n] is None:
            os.remove(d + "/" + n)
        else:
            support.write_file(d + "/" + n, changes[n])


def _segment(data, last, gen, seqs, nxt):
    """Replay one segment: (kept_length, next_seq, why) with why None when valid."""
    recs, end = ddqfmt.decode_records(data)
    for _off, rtype, seq, _arg, _payload in recs:
        if rtype == ddqfmt.T_DATA:
            if (seqs and seq <= seqs[-1]) or (gen == 0 and seq != nxt):
                return end, nxt, "DATA seq %d where %d was next" % (seq, nxt)
            seqs.append(seq)
            nxt = seq + 1
    left = len(data) - end
    if left == 0:
        return end, nxt, None
    torn = left < 40
    if not torn:
        magic, ver, _t, _s, _a, _p, rlen, _c, _r = struct.unpack_from(ddqfmt.HDR, data, end)
        if magic != ddqfmt.MAGIC or ver != 1 or rlen < 48:
            return end, nxt, "bad record header at offset %d" % end
        torn = rlen > left
    if torn and last:
        return end, nxt, None
    return end, nxt, "invalid record at offset %d" % end


def view(files):
    changes = {}
    mk = files.get(ddqfmt.MARKER)
    if mk is not None and len(mk):
        return ("corrupt", [], 0, changes, "queue.format is not empty")
    man = files.get(ddqfmt.MANIFEST)
    gen, need, cp_next = 0, 0, 1
    if man is None:
        if mk is not None:
            return ("corrupt", [], 0, changes, "manifest missing beside the marker")
    else:
        m = ddqfmt.decode_manifest(man)
        if m is None or (m[0] != 0 and mk is None):
            return ("corrupt", [], 0, changes, "bad manifest")
        gen, cp_next, need = m[0], m[1], m[2]
    ids = []
    for n in files:
        p = ddqfmt.parse_seg_name(n)
        if p is not None and p[0] == gen:
            ids.append(p[1])
    ids.sort()
    if ids != list(range(len(ids))):
        return ("corrupt", [], 0, changes, "segment ids %r are not 0..n-1" % ids)
    if man is not None and len(ids) < need:
        return ("corrupt", [], 0, changes, "fewer segments than the manifest names")
    seqs = []
    nxt = 1
    if not ids:
        changes[ddqfmt.seg_name(gen, 0)] = b""
    for i in ids:
        name = ddqfmt.seg_name(gen, i)
        data = files[name]
        end, nxt, why = _segment(data, i == ids[-1], gen, seqs, nxt)
        if why is not None:
            return ("corrupt", seqs, nxt, changes, "%s: %s" % (name, why))
        if end != len(data):
            changes[name] = data[:end]  # ftruncate of the short tail
    if man is not None and cp_next > nxt:
        nxt = cp_next
    for n in files:
        p = ddqfmt.parse_seg_name(n)
        if n == "queue.manifest.tmp" or (p is not None and p[0] != gen):
            changes[n] = None
        elif n[-8:] == ".reserve" and ddqfmt.parse_seg_name(n[:-8]) is not None:
            if len(files[n]) == 0:
                changes[n] = None
            else:
                return ("corrupt", seqs, nxt, changes, "unknown non-empty reserve file " + n)
    return ("ok", seqs, nxt, changes, None)


def place(files, rtype, seq, arg, payload, segment_bytes, lose=False):
    """What libddq's writer does with one record after it opened the directory files ({name:
    bytes}, view() ok, its changes made): append it to the last segment, or, when it does not
    fit there (a segment that holds a record), to a new one created O_EXCL. libddq has no R23:
    an empty last segment (a rotation whose record a power cut lost) is kept and written into.
    lose: the power cut right after the rotation's create (segment synced, name durable, record
    lost): the new segment stays empty. Returns (name, its new bytes), or None when lose and
    the record fits (no rotation to lose)."""
    gen = 0
    m = files.get(ddqfmt.MANIFEST)
    if m is not None:
        gen = ddqfmt.decode_manifest(m)[0]
    last = 0
    for n in files:
        p = ddqfmt.parse_seg_name(n)
        if p is not None and p[0] == gen and p[1] > last:
            last = p[1]
    rec = ddqfmt.encode_record(rtype, seq, arg, payload)
    name = ddqfmt.seg_name(gen, last)
    data = files.get(name, b"")
    if data and len(data) + len(rec) > segment_bytes:
        name = ddqfmt.seg_name(gen, last + 1)
        assert name not in files, "O_EXCL: %s exists" % name
        data = b""
    elif lose:
        return None
    return name, (b"" if lose else data + rec)


def write(d, rtype, seq, arg, payload, segment_bytes, lose=False):
    """place() on directory d, on disk. Returns the segment's name (None: nothing written)."""
    w = place(snapshot(d), rtype, seq, arg, payload, segment_bytes, lose)
    if w is not None:
        support.write_file(d + "/" + w[0], w[1])
        return w[0]
    return None


def open_view(d):
    """libddq's open of d: view(), its changes made on disk; returns the view."""
    v = view(snapshot(d))
    assert v[0] == "ok", v
    apply(d, v[3])
    return v


def enqueue(d, payload, segment_bytes, lose=False):
    """What ddq_enqueue does after libddq opened d: DATA next_seq written as write() does (lose:
    the rotation's record lost, the seq not taken). Returns the seq."""
    v = open_view(d)
    write(d, ddqfmt.T_DATA, v[2], 0, payload, segment_bytes, lose)
    return v[2]


def claim(d, seq, lease_until_ms, segment_bytes):
    """ddq_claim of item seq after libddq opened d: a CLAIM record written as write() does."""
    open_view(d)
    write(d, ddqfmt.T_CLAIM, seq, lease_until_ms, b"", segment_bytes)
