# The recovery index (queue.index, SPEC §12.1) is a cache, never a way to write a bad log: an
# index whose CRCs were recomputed over changed contents passes every CRC, so ddq adopts it only
# when its cross-checks against the manifest and the log hold [X10], falls back to the full
# replay otherwise (a cache miss, not an error), and never raises anything but a ddq error.
# Shared suite: CPython and MicroPython over POSIX, LittleFS and FAT.
import binascii
import struct

import ddq
import shared
import support

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 400, "max_segments": 64}
# The 96-byte header (SPEC X2): field offsets used here.
_NEXT, _ITEMS, _FRESH, _AVAIL, _ACKED, _NLIVE, _NHIST, _NRS, _NSEG = (
    24,
    32,
    36,
    40,
    48,
    56,
    60,
    64,
    68,
)
_PLAN, _BODY, _HCRC = 72, 88, 92
support.needs_heap(
    256 * 1024, "queue.index adopted beside ddq_recover and ddq_compact (as tests/test_index.py)"
)


def _open(d, clock, ixb=1, **kw):
    o = dict(OPTS)
    o.update(kw)
    return ddq.Queue(d, clock=clock, index_bytes=ixb, **o)


def _crc(b):
    return binascii.crc32(b) & 0xFFFFFFFF


def _reseal(b):
    # Recompute body_crc and header_crc: a changed index that passes every CRC check (X4).
    struct.pack_into("<I", b, _BODY, _crc(bytes(b[96:])))
    struct.pack_into("<I", b, _HCRC, _crc(bytes(b[0:92])))
    return bytes(b)


def _u32(b, off):
    return struct.unpack_from("<I", b, off)[0]


def _layout(b):
    # Where the body's parts start: columns (seq, segment, offset, length, state), live, hist,
    # reasons; and the counts (SPEC X2).
    n, ns = _u32(b, _ITEMS), _u32(b, _NSEG)
    c0 = 96 + 12 * ns
    live = c0 + 19 * n
    hist = live + 28 * _u32(b, _NLIVE)
    rs = hist + 20 * _u32(b, _NHIST)
    return n, ns, c0, live, hist, rs


def _read(q, s):
    try:
        return q.read(s)
    except ddq.Error as e:
        return type(e).__name__


def _state(q):
    items = [
        (i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms, i.payload_len)
        for i in q.items()
    ]
    reasons = []
    for i in q.items():
        if i.state == "quarantined":
            try:
                reasons.append((i.seq, q.reason(i.seq)))
            except ddq.Error as e:
                reasons.append((i.seq, type(e).__name__))
    payloads = [(i.seq, _read(q, i.seq)) for i in q.items()]
    s = q.stats().as_dict()
    for k in ("recovered_tail_bytes", "replayed_records"):
        s.pop(k, None)
    return [items, reasons, payloads, s]


def _ops(q, clock):
    # The operations after the open, their results: enqueue, claim, read, ack, retry, claim.
    out = [_state(q)]
    out.append(q.enqueue(b"after the open"))
    for k in range(3):
        c = q.claim(1000)
        if c is None:
            out.append(None)
            continue
        out.append((c.seq, c.attempts, c.payload_len, _read(q, c.seq)))
        if k == 0:
            q.ack(c.seq)
        elif k == 1:
            q.retry(c.seq, 0)
    out.append(q.enqueue(b"x" * 30))
    clock.advance(2000)
    out.append(_state(q))
    return out


def _base(gen1):
    # A closed queue with queue.index over several segments and every state: acked, retried,
    # quarantined (reasons), claimed, a swept claim; gen1: compacted first (a manifest, a gap
    # in the seqs, a snapshot prefix), then more records after the compaction.
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock)
    shared.every_state(q, 36, 14)
    if gen1:
        assert q.compact()
        for k in range(8):
            q.enqueue(b"later %d" % k)
        q.ack(q.claim(1000).seq)
    q.claim_seq(30, 50)
    clock.advance(100)
    q.claim(5000)  # sweeps seq 30's lease in RAM only [T2]
    q.close()
    assert "queue.index" in support.listdir_sorted(d)
    return clock, d


def _with_index(d, data):
    support.write_file(d + "/queue.index", data)


def _replayed(d, clock):
    # A copy of d opened with index_bytes=0: everything replayed.
    e = d + "-full"
    support.rmtree(e)
    support.copytree(d, e)
    q = _open(e, clock, ixb=0)
    assert not q.index_used
    return q


def _full(d, clock):
    # The state and the results of the operations after an open that replays everything.
    t = clock.now_ms
    q = _replayed(d, clock)
    try:
        return _ops(q, clock)
    finally:
        q.close()
        clock.set(t)


def _forged_next_seq(value, big):
    # EVIDENCE-OF: X10 X5 R5
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock, segment_bytes=8192, max_segments=64)
    for k in range(300 if big else 40):
        q.enqueue(b"m%d" % k)
    q.close()
    b = bytearray(support.read_file(d + "/queue.index"))
    assert struct.unpack_from("<Q", b, _NEXT)[0] == (301 if big else 41)
    struct.pack_into("<Q", b, _NEXT, value)
    _with_index(d, _reseal(b))
    q = _open(d, clock, segment_bytes=8192, max_segments=64)
    try:
        assert not q.index_used  # a cache miss: the full replay
        seq = q.enqueue(b"new")
        assert seq == (301 if big else 41), seq
    finally:
        q.close()
    q = _open(d, clock, ixb=0, segment_bytes=8192, max_segments=64)  # the log replays
    assert q.read(seq) == b"new" and q.stats().next_seq == seq + 1
    q.close()


def test_index_with_next_seq_0_is_not_adopted():
    # An index with next_seq 0 made enqueue return seq 0 (a seq the format does not allow).
    _forged_next_seq(0, False)


def test_index_with_next_seq_below_the_logs_highest_is_not_adopted():
    # next_seq 100 with seq 300 in the log: enqueue reused seq 100, and the next open was Corrupt.
    _forged_next_seq(100, True)


def test_index_with_next_seq_above_the_log_is_not_adopted():
    # A gap after the boundary is Corrupt on the next full replay (R5: contiguous seqs).
    _forged_next_seq(500, True)


def test_index_of_fewer_items_than_its_covered_bytes_is_not_adopted():
    # EVIDENCE-OF: X10 X4
    # An old index whose segment table is stretched over today's bytes (CRCs recomputed): its
    # seqs and next_seq agree with each other, but the covered bytes hold DATA records after its
    # last item. Adopted, enqueue would reuse the next seq.
    clock, d, q = _twenty()
    old = bytearray(support.read_file(d + "/queue.index"))
    for k in range(20):
        q.enqueue(b"second %d" % k)
    segs = q.stats().segment_count
    q.close()
    ns = _u32(old, _NSEG)
    for k in range(ns):
        data = support.read_file(d + "/" + ddq.segment_name(0, k))
        struct.pack_into("<II", old, 96 + 12 * k, _crc(data), len(data))
    assert segs >= ns
    _with_index(d, _reseal(old))
    assert _a_cache_miss(d, clock)[1] == 41


def _twenty():
    # 20 items, closed with an index, reopened by a writer without it: (clock, dir, queue).
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock)
    for k in range(20):
        q.enqueue(b"item %d" % k)
    q.close()
    return clock, d, _open(d, clock, ixb=0)


def _a_cache_miss(d, clock):
    # The open ignores queue.index and gives what index_bytes=0 gives; returns those results.
    want = _full(d, clock)
    q = _open(d, clock)
    try:
        assert not q.index_used
        got = _ops(q, clock)
    finally:
        q.close()
    assert got == want, (got, want)
    return want


def test_index_state_that_later_records_contradict_is_a_cache_miss():
    # EVIDENCE-OF: X10 X5 X7
    # A state byte changed with the counts to match (a forgery no cheap check sees); a writer
    # without the index then claimed and acked that item after the covered end. The resumed
    # replay cannot apply the CLAIM to an acked item: the index was wrong, so ddq replays
    # everything (as with index_bytes=0) instead of reporting the log as Corrupt.
    clock, d, q = _twenty()
    c = q.claim(1000)
    q.ack(c.seq)
    q.close()
    b = bytearray(support.read_file(d + "/queue.index"))
    n, _ns, c0, _l, _h, _r = _layout(b)
    assert b[c0 + 18 * n] == 1  # item 0: available in the index
    b[c0 + 18 * n] = 3  # acked
    struct.pack_into("<II", b, _AVAIL, _u32(b, _AVAIL) - 1, 0)
    struct.pack_into("<I", b, _ACKED, _u32(b, _ACKED) + 1)
    struct.pack_into("<I", b, _FRESH, 0)
    _with_index(d, _reseal(b))
    _a_cache_miss(d, clock)


def test_a_forged_payload_length_never_reads_wrong_bytes():
    # EVIDENCE-OF: X10 R19
    # An item's length changed inside a run (not one of the records adoption reads): read()
    # re-reads and re-validates the record, so it raises Corrupt, never returns other bytes.
    clock, d = _base(False)
    b = bytearray(support.read_file(d + "/queue.index"))
    n, _ns, c0, _l, _h, _r = _layout(b)
    sg = struct.unpack_from("<%dH" % n, b, c0 + 8 * n)  # the segment column (native: this host)
    i = 1
    while not sg[i - 1] == sg[i] == sg[i + 1]:  # an item inside its segment (one run: gen 0)
        i += 1
    ln = _u32(b, c0 + 14 * n + 4 * i)
    seq = struct.unpack_from("<Q", b, c0 + 8 * i)[0]
    struct.pack_into("<I", b, c0 + 14 * n + 4 * i, ln - 1)
    _with_index(d, _reseal(b))
    q = _open(d, clock)
    try:
        assert q.index_used  # (a length inside a run is not among the records read back)
        support.raises(ddq.Corrupt, q.read, seq)
        buf = bytearray(64)
        support.raises(ddq.Corrupt, q.read_into, seq, buf)
        assert q.read(seq + 1) == _full_payload(d, clock, seq + 1)
    finally:
        q.close()


def _full_payload(d, clock, seq):
    q = _replayed(d, clock)
    try:
        return q.read(seq)
    finally:
        q.close()


class _Rand:
    # A small LCG: the same mutations on both interpreters.
    def __init__(self, seed):
        self.x = seed

    def below(self, n):
        self.x = (self.x * 1103515245 + 12345) & 0x7FFFFFFF
        return (self.x >> 7) % n


def _mutate(rnd, good):
    # One change to a copy of good, resealed; returns (bytes, kind) where kind says what an
    # adopted index may change: "exact" (nothing: cross-checked, X10), "length" (a payload
    # length inside a run: checked when the record is read, R19), "value" (attempts, leases,
    # not_before, the plan: trusted as the log is, docs/SECURITY.md).
    b = bytearray(good)
    n, ns, c0, live, hist, rs = _layout(b)
    fields = [
        (_NEXT, 8),
        (_ITEMS, 4),
        (_FRESH, 4),
        (_AVAIL, 4),
        (44, 4),
        (_ACKED, 4),
        (52, 4),
        (_PLAN, 4),
        (_PLAN + 4, 4),
        (80, 4),
        (84, 4),
    ]
    for k in range(ns):
        fields.append((96 + 12 * k + 4, 4))
        fields.append((96 + 12 * k + 8, 4))
    for i in range(n):
        fields.append((c0 + 8 * i, 8))
        fields.append((c0 + 14 * n + 4 * i, 4))
        fields.append((c0 + 18 * n + i, 1))
        fields.append((c0 + 8 * n + 2 * i, 2))
        fields.append((c0 + 10 * n + 4 * i, 4))
    for p in range(live, len(b), 4):
        fields.append((p, 4))
    how = rnd.below(3)
    if how == 0:  # a field plus or minus a little
        pos, w = fields[rnd.below(len(fields))]
        v = 0
        for j in range(w):
            v |= b[pos + j] << (8 * j)
        v = (v + (1, -1, 2, -2, 255, 1 << 16)[rnd.below(6)]) & ((1 << (8 * w)) - 1)
        for j in range(w):
            b[pos + j] = (v >> (8 * j)) & 255
    else:  # a bit flipped or a byte replaced anywhere but the two CRC fields
        pos = rnd.below(len(b) - 8)
        pos = pos + 8 if pos >= _BODY else pos
        if how == 1:
            b[pos] ^= 1 << rnd.below(8)
        else:
            b[pos] = rnd.below(256)
    if _PLAN <= pos < _PLAN + 8:
        kind = "value"
    elif c0 + 14 * n <= pos < c0 + 18 * n:
        kind = "length"
    elif live <= pos < hist:
        kind = "value" if (pos - live) % 28 >= 8 else "exact"
    elif hist <= pos < rs:
        kind = "value" if (pos - hist) % 20 >= 8 else "exact"
    else:
        kind = "exact"
    return _reseal(b), kind


def _same_log(got, want):
    # What holds for every kind: enqueue returned the seqs the full replay gives, and the log
    # ddq wrote replays (checked by the caller) with the same seqs.
    assert got[1] == want[1] and got[-2] == want[-2], (got[1], want[1], got[-2], want[-2])


def _fuzz(gen1, count, seed):
    # EVIDENCE-OF: X10 X4 X5 R19
    clock, d = _base(gen1)
    good = support.read_file(d + "/queue.index")
    want = _full(d, clock)
    final = None
    w = d + "-work"
    rnd = _Rand(seed)
    seen = {"adopted": 0, "ignored": 0}
    for k in range(count):
        data, kind = _mutate(rnd, good)
        support.rmtree(w)
        support.copytree(d, w)
        _with_index(w, data)
        t = clock.now_ms
        q = _open(w, clock)
        used = q.index_used
        try:
            got = _ops(q, clock)
        finally:
            q.close()
            clock.set(t)
        seen["adopted" if used else "ignored"] += 1
        if not used or kind == "exact":
            assert got == want, (k, kind, used, got, want)
        else:
            _same_log(got, want)
            for (s, p), (s2, p2) in zip(got[0][2], want[0][2]):
                # (bytes against str only by type: MicroPython warns on a bytes == str)
                same = p == p2 if type(p) is type(p2) else p == "Corrupt"
                assert s == s2 and same, (k, s, p, p2)
        q = _open(w, clock, ixb=0)  # the log ddq wrote after that open replays
        try:
            st = _state(q)
        finally:
            q.close()
        if final is None:
            final = st
        assert [i[0] for i in st[0]] == [i[0] for i in final[0]], k
        assert st[3]["next_seq"] == final[3]["next_seq"], k
    print("fuzz", "gen1" if gen1 else "gen0", count, seen)
    assert seen["adopted"] and seen["ignored"], seen


def test_fuzzed_index_is_adopted_only_when_consistent_generation_0():
    _fuzz(False, 150, 11)


def test_fuzzed_index_is_adopted_only_when_consistent_after_a_compaction():
    _fuzz(True, 150, 12)
