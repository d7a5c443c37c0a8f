# What libddq writes on its own, after a power cut lost the record of a fresh rotation (issue 35
# item 10; SPEC F7, V3): libddq has no R23, so it keeps the empty last segment and appends its
# next record there; the segment before then "ends early". ddq must open every such directory,
# go on writing it and reopen it. libddq's writes are modelled by tests/libddqmodel.py. Shared
# suite: CPython and MicroPython over POSIX, LittleFS and FAT.
import ddq
import ddqfmt
import libddqmodel
import support

T0 = 1767225600000
LEASE = T0 + 60000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 400}


def _payload(i):
    # 5 of 54 B (102 B records: segment 0 is 510 B), then 52 B (100 B: segment 1 is 400 B)
    return bytes([64 + i]) * (54 if i <= 5 else 52)


def _sizes(d, gen=0):
    out = []
    k = 0
    while ddqfmt.seg_name(gen, k) in support.listdir_sorted(d):
        out.append(support.file_size(d + "/" + ddqfmt.seg_name(gen, k)))
        k += 1
    return out


def _q(d):
    return ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)


def _check(q, want):
    # want: {seq: (state, payload)}; every item there, in its state, with its payload
    got = {}
    for it in q.items():
        got[it.seq] = it.state
        if it.state == "claimed":
            assert it.lease_until_ms == LEASE, it.lease_until_ms
    assert got == dict((s, want[s][0]) for s in want), got
    for s in want:
        if want[s][0] != "acked":
            assert q.read(s) == want[s][1], s


def _go_on(d, want, nxt):
    # ddq goes on writing the directory (a rotation among them), closes, and reopens it; libddq
    # (modelled) still reads the same seqs
    q = _q(d)
    _check(q, want)
    for i in range(4):
        p = bytes([97 + i]) * 300
        assert q.enqueue(p) == nxt + i
        want[nxt + i] = ("available", p)
    s = min(s for s in want if want[s][0] == "available")
    c = q.claim(1000)
    assert c is not None and c.seq == s, (c, s)
    q.ack(s)
    want[s] = ("acked", want[s][1])
    q.close()
    q = _q(d)
    _check(q, want)
    q.close()
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "ok" and v[1] == sorted(want), v


def test_libddq_lost_rotation_then_a_claim_opens_in_ddq():
    # EVIDENCE-OF: V3 F7 R23
    # The directory: libddq wrote 9 items (segments of 510 and 400 B), its rotation for
    # a 200 B record lost its record, it reopened and claimed item 1: the CLAIM (48 B) went into
    # the empty segment 2. ddq said Corrupt("segment 1 of generation 0 ends early").
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    d = support.tmpdir() + "/q"
    support._makedirs(d)
    for i in range(1, 10):
        assert libddqmodel.enqueue(d, _payload(i), 512) == i
    assert libddqmodel.enqueue(d, b"x" * 200, 512, lose=True) == 10  # segment 2, left empty
    assert _sizes(d) == [510, 400, 0]
    libddqmodel.claim(d, 1, LEASE, 512)
    assert _sizes(d) == [510, 400, 48]
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "ok" and v[1] == list(range(1, 10)), v  # libddq reopens it: 9 items
    want = {}
    for i in range(1, 10):
        want[i] = ("claimed" if i == 1 else "available", _payload(i))
    _go_on(d, want, 10)


def _ddq_wrote(d, compact):
    # ddq writes the 9 items (generation 1: after one acked item, compacted away); returns
    # (generation, the seq of the first of them)
    q = _q(d)
    off = 0
    if compact:
        assert q.enqueue(b"z") == 1
        q.claim(1000)
        q.ack(1)
        off = 1
    for i in range(1, 10):
        assert q.enqueue(_payload(i)) == i + off
    if compact:
        q.compact()  # generation 1: the 9 items again, 510 + 400 B, the boundary at 400
        assert q.stats().generation == 1
    q.close()
    gen = 1 if compact else 0
    assert _sizes(d, gen) == [510, 400], _sizes(d, gen)
    # ddq's rotation for a 200 B record: W3 made segment 2's name durable, then a power cut
    # before its record was (what R23 removes when ddq recovers first)
    support.write_file(d + "/" + ddqfmt.seg_name(gen, 2), b"")
    return gen, off + 1


def test_ddq_lost_rotation_then_libddq_appends_opens():
    # EVIDENCE-OF: V3 F7 R23
    # ddq wrote generation 0 or 1 and lost a rotation's record; libddq opened the directory
    # before ddq recovered it and appended there: a DATA record, or a CLAIM.
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    for compact in (False, True):
        for what in ("enqueue", "claim"):
            d = support.tmpdir() + "/q"
            gen, first = _ddq_wrote(d, compact)
            want = {}
            for i in range(1, 10):
                want[first + i - 1] = ("available", _payload(i))
            nxt = first + 9
            if what == "enqueue":
                assert libddqmodel.enqueue(d, b"L" * 10, 512) == nxt
                want[nxt] = ("available", b"L" * 10)
                nxt += 1
                assert _sizes(d, gen) == [510, 400, 58]
            else:
                libddqmodel.claim(d, first, LEASE, 512)
                want[first] = ("claimed", _payload(1))
                assert _sizes(d, gen) == [510, 400, 48]
            _go_on(d, want, nxt)


def test_a_segment_before_one_that_holds_records_must_hold_one():
    # EVIDENCE-OF: F7 R13
    # What no writer leaves: an empty segment that is not the last (a rotation is only out of
    # a segment that holds a record; any record fits in an empty one): Corrupt, segment 0 too
    # (which the old rule, comparing only with earlier segments, let through).
    d = support.tmpdir() + "/q"
    support._makedirs(d)
    support.write_file(d + "/" + ddqfmt.seg_name(0, 0), b"")
    support.write_file(d + "/" + ddqfmt.seg_name(0, 1), ddqfmt.encode_record(ddqfmt.T_DATA, 1))
    e = support.raises(ddq.Corrupt, _q, d)
    assert "segment 0 of generation 0" in str(e), str(e)
    d = support.tmpdir() + "/q"
    _ddq_wrote(d, False)
    libddqmodel.enqueue(d, b"L" * 10, 512)
    support.write_file(d + "/" + ddqfmt.seg_name(0, 1), b"")
    e = support.raises(ddq.Corrupt, _q, d)
    assert "segment 1 of generation 0" in str(e), str(e)
