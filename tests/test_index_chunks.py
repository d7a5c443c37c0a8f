# The RAM index's chunks (DESIGN §4): each chunk of 256 items keeps one payload length while its
# items are alike, one byte an item over a base length while they lie within 256 of it, else
# the lengths themselves; states are packed 2 bits an item. These tests put uniform and varying
# lengths on both sides of chunk boundaries, move items through every state there, and check every
# item's state, length and payload live, after a reopen that adopts queue.index, after a full
# replay, and after a compaction. Shared suite: CPython and MicroPython over POSIX, LittleFS and
# FAT.
import ddq
import support

T0 = 1767225600000
CH = 256  # items per index chunk (ddq._CH)
OPTS = {"segment_bytes": 8192, "max_payload_bytes": 600, "max_items": 1200, "max_segments": 512}
# Where a test skips in a small heap (support.needs_heap; measured on the unix port, 64-bit, the
# test alone beside the test runner): the test's own model of four chunks' items.
_MODEL_HEAP = "the test's model of 1,000 items (a dict of lists) beside the queue"


def _open(d, clock, ixb):
    return ddq.Queue(d, clock=clock, index_bytes=ixb, sync="none", **OPTS)


def _length(k):
    # Item k's payload length: chunk 0 uniform; chunk 1 uniform, then varying a little from
    # item 356 (bytes over a base, mid-chunk); chunk 2 varying a little from its second item,
    # then a lot from item 612 (the lengths themselves); chunk 3 uniform again.
    if k < CH + 100 or k >= 3 * CH:
        return 16
    if k == 2 * CH:
        return 20
    if k > 2 * CH + 100 and k % 5 == 0:
        return 500 + k % 97
    return k % 61


def _payload(k, n):
    return bytes((k * 7 + j) & 255 for j in range(n))


def _enqueue(q, want, count, length):
    # want: seq -> [state, payload length, k]; item k's payload is _payload(k, length(k)).
    k0 = len(want) and max(v[2] for v in want.values()) + 1
    for k in range(k0, k0 + count):
        seq = q.enqueue(_payload(k, length(k)))
        want[seq] = ["available", length(k), k]


def _start(heap, count, length):
    # A fresh queue (index_bytes=1) holding count items of length(k): (clock, dir, queue, want,
    # the first seq); skipped where the board's heap is below heap (the models' own data).
    support.needs_heap(heap, _MODEL_HEAP)
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock, 1)
    want = {}
    _enqueue(q, want, count, length)
    return clock, d, q, want, min(want)


def _check(q, want):
    got = {it.seq: [it.state, it.payload_len] for it in q.items()}
    bad = [(s, got.get(s), v) for s, v in sorted(want.items()) if got.get(s) != v[:2]]
    assert not bad and len(got) == len(want), bad[:8]
    for s, v in want.items():
        assert q.read(s) == _payload(v[2], v[1]), s
    counts = {}
    for v in want.values():
        counts[v[0]] = counts.get(v[0], 0) + 1
    st = q.stats()
    assert (st.available_items, st.claimed_items, st.acknowledged_items, st.quarantined_items) == (
        counts.get("available", 0),
        counts.get("claimed", 0),
        counts.get("acked", 0),
        counts.get("quarantined", 0),
    ), st.as_dict()


def _transitions(q, want, seqs):
    # Claims, acks, retries and quarantines on items around chunk boundaries, out of order.
    for j, s in enumerate(seqs):
        c = q.claim_seq(s, 30000)
        assert c.seq == s and c.payload_len == want[s][1]
        r = j % 4
        if r == 0:
            q.ack(s)
            want[s][0] = "acked"
        elif r == 1:
            q.retry(s, 1000)  # waits: AVAILABLE with history
        elif r == 2:
            q.quarantine(s, b"why %d" % s)
            want[s][0] = "quarantined"
        else:
            want[s][0] = "claimed"


def test_uniform_and_varying_lengths_across_chunks_survive_every_state_and_reopen():
    # EVIDENCE-OF: O10 O12 R1 X5
    clock, d, q, want, first = _start(1024 * 1024, 3 * CH + 40, _length)
    at = [
        first + k
        for k in (
            0,
            1,
            CH - 2,
            CH - 1,
            CH,
            CH + 1,
            CH + 99,
            CH + 100,
            CH + 101,
            2 * CH - 1,
            2 * CH,
            2 * CH + 1,
            2 * CH + 2,
            3 * CH - 1,
            3 * CH,
            3 * CH + 1,
            3 * CH + 39,
        )
    ]
    _transitions(q, want, at)
    _check(q, want)
    q.close()  # writes queue.index (index_bytes=1)

    for ixb in (1, 0):  # adopt the index, then replay the whole log
        q = _open(d, clock, ixb)
        assert q.index_used == (ixb == 1)
        _check(q, want)
        q.close()

    # After an adopted index: the partial last chunk (uniform) takes other lengths, then a
    # chunk more; every item is still intact after both kinds of reopen.
    q = _open(d, clock, 1)
    assert q.index_used
    _enqueue(q, want, CH, lambda k: 590 if k % 50 == 7 else 9 if k % 3 else 40)
    last = max(want)
    _transitions(q, want, [last - CH + 1, last - CH + 2, last - 1, last])
    _check(q, want)
    q.close()
    for ixb in (1, 0):
        q = _open(d, clock, ixb)
        _check(q, want)
        q.close()


def test_lengths_and_states_survive_compaction_and_a_mixed_partial_chunk():
    # EVIDENCE-OF: C1 O10 R1 X5
    clock, d, q, want, first = _start(
        512 * 1024, CH + 30, lambda k: 16 if k < CH + 10 else 5 + k % 7 + (k % 3 == 0) * 400
    )
    for s in range(first, first + 40):  # acked in order: compaction drops them
        q.ack(q.claim_seq(s, 1000).seq)
        del want[s]
    _transitions(q, want, [first + 41, first + 100, first + CH - 1, first + CH, first + CH + 11])
    clock.advance(2000)  # the retried item is ready again
    assert q.compact()
    for s in list(want):
        if want[s][0] == "acked":
            del want[s]
    _check(q, want)
    q.close()  # the index's last piece: a partial chunk of lengths far apart
    q = _open(d, clock, 1)
    assert q.index_used
    _check(q, want)
    _enqueue(q, want, 20, lambda k: 16)  # appended to that chunk (its column has 256 slots)
    _check(q, want)
    q.close()
    q = _open(d, clock, 1)  # now a partial chunk of lengths close together (bytes over a base)
    _enqueue(q, want, CH - 30, lambda k: 30 + k % 9)
    q.close()
    q = _open(d, clock, 1)
    assert q.index_used
    _enqueue(q, want, 20, lambda k: 5 + k % 2 * 20)  # appended: 5 lies below the base: widened
    _check(q, want)
    q.close()
    q = _open(d, clock, 0)
    _check(q, want)
    q.close()
