# The message layer of port/ddq.py (SPEC §13): envelope, Outbox, backoff, TTL, capacity policy,
# dead letters, group commit, lock, pump and the asyncio loop; and iotspool's traps T1..T32 as
# regression tests named after them. Shared suite: subset Python, no real sleeping (injected
# clock and ticks), bounded loops.
import shared
import support

# Measured: the module passes whole in a 256 KiB heap (unix port, 64-bit, beside the runner).
support.needs_heap(256 * 1024, support.OUTBOX_HEAP, 128 * 1024)  # 32-bit: measured on qemu
import ddq
import ddq_outbox

T0 = 1767225600000
SMALL = {"segment_bytes": 2048, "max_segments": 8, "max_payload_bytes": 512, "max_items": 64}


def _ob(d=None, clock=None, **kw):
    if "seed" not in kw:
        kw["seed"] = 7
    clock = clock or support.FakeClock(T0)
    return ddq_outbox.Outbox(d or support.tmpdir(), clock=clock, **kw), clock


def _pending(d, **kw):
    with ddq.Queue(d, **kw) as q:
        return [it.seq for it in q.items() if it.state in ("available", "claimed")]


# ---------------------------------------------------------------------------------- envelope


def test_envelope_layout_bytes():
    # EVIDENCE-OF: E1
    b = ddq_outbox.encode_envelope(
        "t/1", b"hi", qos=1, retain=True, enqueued_ms=0x0102030405, ttl_ms=1000, key=b"k"
    )
    exp = (
        b"DE\x01\x03\x01\x03\x00\xe8\x03\x00\x00\x05\x04\x03\x02\x01\x00\x00\x00"
        + b"k"
        + b"t/1"
        + b"hi"
    )
    assert b == exp, b
    assert len(ddq_outbox.encode_envelope("t", b"")) == 20


def test_envelope_round_trip():
    # EVIDENCE-OF: E1 E4
    b = ddq_outbox.encode_envelope(
        "a/b/c",
        b"\x00payload",
        qos=0,
        retain=False,
        enqueued_ms=T0,
        ttl_ms=5,
        key=b"id-1",
        orig_seq=42,
    )
    m = ddq_outbox.decode_envelope(b)
    assert (m.topic, m.payload, m.qos, m.retain, m.enqueued_ms, m.ttl_ms, m.key, m.orig_seq) == (
        "a/b/c",
        b"\x00payload",
        0,
        False,
        T0,
        5,
        b"id-1",
        42,
    )
    assert m.seq == 0 and m.attempts == 0
    m = ddq_outbox.decode_envelope(
        bytearray(ddq_outbox.encode_envelope(b"\xc3\xa9t\xc3\xa9", b"", 1, True))
    )
    assert m.topic == "\u00e9t\u00e9" and m.retain and m.qos == 1 and m.orig_seq == 0


def test_T16_topic_has_an_explicit_length():
    # EVIDENCE-OF: E1 E4
    m = ddq_outbox.decode_envelope(ddq_outbox.encode_envelope("factory/line1/temp", b'{"v":72.3}'))
    assert m.topic == "factory/line1/temp"
    assert m.payload == b'{"v":72.3}'


def test_envelope_encode_rejects_bad_fields():
    # EVIDENCE-OF: E4
    for args, kw in (
        (("", b"x"), {}),
        (("a\x00b", b"x"), {}),
        ((b"\xff", b"x"), {}),
        (("t", b"x"), {"qos": 2}),
        (("t", b"x"), {"retain": 5}),
        (("t", b"x"), {"key": b"k" * 256}),
        (("t", b"x"), {"ttl_ms": -1}),
        (("t", b"x"), {"ttl_ms": 2**32}),
        (("t", b"x"), {"orig_seq": -1}),
        (("t", 5), {}),
        ((None, b"x"), {}),
    ):
        support.raises(ddq.InvalidArgument, ddq_outbox.encode_envelope, *args, **kw)


def test_envelope_decode_bad_input_is_a_clear_error():
    # EVIDENCE-OF: E2 E3 E4 E6
    good = ddq_outbox.encode_envelope("t", b"payload", key=b"k")
    bad = [
        b"",
        good[0:18],
        b"XE" + good[2:],
        good[0:2] + b"\x02" + good[3:],  # version 2
        good[0:3] + b"\x20" + good[4:],  # reserved flag bit
        good[0:3] + b"\x08" + good[4:],  # orig_seq flag without room
        good[0:5] + b"\x00\x00" + good[7:],  # topic_len 0
        good[0:5] + b"\xff\x00" + good[7:],  # topic_len past the end
        good[0:4] + b"\xff" + good[5:],  # key_len past the end
        ddq_outbox.encode_envelope("ab", b"")[0:19] + b"\xff\xfe",  # topic not UTF-8
        ddq_outbox.encode_envelope("ab", b"")[0:19] + b"a\x00",  # NUL in topic
    ]
    for b in bad:
        e = support.raises(ddq_outbox.BadEnvelope, ddq_outbox.decode_envelope, b)
        assert isinstance(e, ddq.Corrupt) and isinstance(e, ddq.Error)
        assert str(e).startswith("envelope: "), str(e)
    support.raises(ddq.InvalidArgument, ddq_outbox.decode_envelope, "text")
    assert ddq_outbox.decode_envelope(good).payload == b"payload"


def test_envelope_sha256_round_trip_and_mismatch():
    # EVIDENCE-OF: E5
    b = ddq_outbox.encode_envelope("t", b"payload", key=b"k", sha256=True, orig_seq=3)
    assert len(b) == 19 + 8 + 32 + 1 + 1 + 7
    assert ddq_outbox.decode_envelope(b).payload == b"payload"
    for i in (0, 20, len(b) - 1):  # header, orig_seq, payload: all covered
        c = bytearray(b)
        c[i] ^= 0x01
        if i == 0:
            support.raises(ddq_outbox.BadEnvelope, ddq_outbox.decode_envelope, c)
            continue
        e = support.raises(ddq_outbox.BadEnvelope, ddq_outbox.decode_envelope, c)
        assert "sha256" in str(e), str(e)
        ddq_outbox.decode_envelope(c, verify=False)
    d = bytearray(b)
    d[30] ^= 0x80  # inside the digest itself
    assert "sha256" in str(support.raises(ddq_outbox.BadEnvelope, ddq_outbox.decode_envelope, d))


def test_get_quarantines_bad_envelopes_and_nothing_is_lost():
    # EVIDENCE-OF: E5 E6
    ob, clock = _ob(sha256=True)
    a = ob.put("t/a", b"first")
    raw = ob.queue.enqueue(b"not an envelope")
    c = ob.put("t/c", b"third")
    tampered = bytearray(ddq_outbox.encode_envelope("t/d", b"fourth", sha256=True))
    tampered[-1] ^= 0xFF
    d = ob.queue.enqueue(tampered)
    got = [m.seq for m in shared.drain(ob)]
    assert got == [a, c], got
    dead = ob.dead_letters()
    assert [m.seq for m in dead] == [raw, d]
    assert (
        dead[0].reason.startswith(b"corrupt: envelope: ") and dead[0].payload == b"not an envelope"
    )
    assert dead[1].reason == b"corrupt: envelope: sha256 mismatch"
    assert ob.queue.read(d) == bytes(tampered)  # kept byte for byte
    assert ob.stats()["corrupt"] == 2 and ob.stats()["quarantined_by_reason"] == {"corrupt": 2}
    ob.close()


def test_T29_enqueue_time_and_ttl_are_recorded():
    # EVIDENCE-OF: E1 E7
    ob, clock = _ob(ttl_ms=5000)
    clock.advance(123)
    s = ob.put("t", b"x")
    s2 = ob.put("t", b"y", ttl_ms=0)
    m = ddq_outbox.decode_envelope(ob.queue.read(s))
    assert m.enqueued_ms == T0 + 123 and m.ttl_ms == 5000
    assert ddq_outbox.decode_envelope(ob.queue.read(s2)).ttl_ms == 0
    clock.advance(77)
    assert ob.get().age_ms == 77
    ob.close()


# ---------------------------------------------------------------------------------- backoff


def test_backoff_bounds_and_mean():
    # EVIDENCE-OF: E8
    b = ddq_outbox.Backoff(1000, 60000, seed=99)
    n, total, lo, hi = 20000, 0, 10**9, -1
    for _ in range(n):
        v = b.delay(0)
        assert 0 <= v <= 1000
        total += v
        lo, hi = min(lo, v), max(hi, v)
    ratio = total / n / 1000
    print("backoff mean/cap over %d draws: %.4f (min %d, max %d)" % (n, ratio, lo, hi))
    assert 0.48 < ratio < 0.52, ratio
    assert lo < 10 and hi > 990
    for a in (3, 10):  # the same at other caps
        cap, total = b.cap(a), 0
        for _ in range(4000):
            v = b.delay(a)
            assert 0 <= v <= cap
            total += v
        assert 0.46 < total / 4000 / cap < 0.54


def test_backoff_cap_doubles_up_to_the_ceiling():
    # EVIDENCE-OF: E8
    b = ddq_outbox.Backoff(1000, 60000, seed=1)
    assert [b.cap(a) for a in range(9)] == [
        1000,
        2000,
        4000,
        8000,
        16000,
        32000,
        60000,
        60000,
        60000,
    ]
    assert b.cap(10**6) == 60000
    b = ddq_outbox.Backoff(1, 2**32 - 1, seed=1)
    assert b.cap(31) == 2**31 and b.cap(32) == 2**32 - 1 and b.cap(400) == 2**32 - 1
    assert 0 <= b.delay(400) <= 2**32 - 1
    support.raises(ddq.InvalidArgument, ddq_outbox.Backoff, 0, 10)
    support.raises(ddq.InvalidArgument, ddq_outbox.Backoff, 100, 10)


def test_T19_full_jitter_has_no_floor():
    # EVIDENCE-OF: E8
    b = ddq_outbox.Backoff(1000, 60000, seed=3)
    low = 0  # counted, not listed: 2,000 draws in a list took an 8 KB block on a small board
    for _ in range(2000):
        if b.delay(2) < 1000:
            low += 1
    assert low > 300, low  # cap 4000: about a quarter of the draws are under min


def test_T18_seeded_determinism_same_on_both_interpreters():
    # EVIDENCE-OF: E9
    b = ddq_outbox.Backoff(1000, 60000, seed=12345)
    assert [b.next32() for _ in range(4)] == [246445077, 107500940, 2548281312, 2716074767]
    b = ddq_outbox.Backoff(1000, 60000, seed=1)
    assert [b.delay(a) for a in range(8)] == [868, 1061, 343, 3725, 9626, 17520, 25556, 46126]
    c = ddq_outbox.Backoff(1000, 60000, seed=1)
    assert [c.delay(a) for a in range(8)] == [868, 1061, 343, 3725, 9626, 17520, 25556, 46126]
    z = ddq_outbox.Backoff(seed=0)
    assert z.next32() != 0


def test_T18_per_device_seeds_differ():
    # EVIDENCE-OF: E9
    a, b = ddq_outbox.Backoff(), ddq_outbox.Backoff()
    sa = [a.next32() for _ in range(4)]
    assert sa != [b.next32() for _ in range(4)]
    assert sa != [ddq_outbox.Backoff(seed=0x9E3779B9).next32() for _ in range(4)]


def test_T6_nack_works_on_what_get_returns_and_is_durable():
    # EVIDENCE-OF: E8 O5
    d = support.tmpdir()
    ob, clock = _ob(d, min_retry_ms=1000, max_retry_ms=8000)
    s = ob.put("t", b"x")
    m = ob.get()
    delay = ob.nack(m, "broker down")
    assert delay is not None and 0 < delay <= 1000
    assert ob.get() is None
    assert ob.next_ready_ms() == delay
    ob.close()
    ob, clock = _ob(d, clock=clock)  # restart: attempts and not_before came back from the log
    assert ob.get() is None and ob.next_ready_ms() == delay
    clock.advance(delay)
    m = ob.get()
    assert m.seq == s and m.attempts == 1
    ob.close()


def test_T20_backoff_is_per_message():
    # EVIDENCE-OF: E8 E12 O2
    ob, clock = _ob(min_retry_ms=5000, max_retry_ms=5000, seed=2)
    a, b = ob.put("t", b"a"), ob.put("t", b"b")
    m = ob.get()
    delay = ob.nack(m)
    assert m.seq == a and delay > 0
    m2 = ob.get()  # the failing head does not hold the queue back
    assert m2.seq == b
    ob.ack(m2)  # an ack of another message resets nothing
    assert ob.get() is None and ob.next_ready_ms() == delay
    clock.advance(delay)
    m3 = ob.get()
    assert m3.seq == a and m3.attempts == 1
    assert ob.nack(m3) <= 5000  # cap: min * 2 = 10000, ceiling 5000
    ob.close()


def test_T12_compaction_keeps_backoff_and_attempts():
    # EVIDENCE-OF: E8 C1
    ob, clock = _ob(min_retry_ms=4000, max_retry_ms=4000, seed=5)
    a = ob.put("t", b"a")
    for i in range(5):
        ob.put("t", b"fill %d" % i)
    m = ob.get()
    delay = ob.nack(m)
    for m2 in shared.drain(ob):
        assert m2.seq != a
    assert ob.queue.compact()
    assert ob.get() is None and ob.next_ready_ms() == delay
    clock.advance(delay)
    m = ob.get()
    assert m.seq == a and m.attempts == 1
    ob.close()


def test_max_attempts_quarantines_with_reason():
    # EVIDENCE-OF: E10
    d = support.tmpdir()
    ob, clock = _ob(d, max_attempts=3, min_retry_ms=100, max_retry_ms=100)
    s = ob.put("t", b"x")
    for attempt in range(3):
        clock.advance(100)
        m = ob.get()
        assert m.seq == s and m.attempts == attempt
        r = ob.nack(m, "timeout %d" % attempt)
        assert (r is None) == (attempt == 2)
    clock.advance(100)
    assert ob.get() is None and ob.next_ready_ms() is None
    assert ob.queue.reason(s) == b"max_attempts: timeout 2"
    assert ob.stats()["exhausted"] == 1 and ob.stats()["retried"] == 2
    ob.close()
    ob, clock = _ob(d, clock=clock)
    dead = ob.dead_letters()
    assert [(m.seq, m.attempts, m.reason) for m in dead] == [(s, 2, b"max_attempts: timeout 2")]
    ob.close()


def test_reject_quarantines_with_reason():
    # EVIDENCE-OF: E10
    ob, clock = _ob()
    s = ob.put("t", b"x")
    ob.reject(ob.get(), "413 too large")
    assert ob.queue.reason(s) == b"rejected: 413 too large"
    assert ob.get() is None and ob.stats()["rejected"] == 1
    ob.close()


def test_reasons_fit_a_small_max_payload():
    # EVIDENCE-OF: E10 O6
    ob, clock = _ob(max_payload_bytes=40, max_attempts=1)
    s = ob.put("t", b"x")
    assert ob.nack(ob.get(), "a very long explanation of what went wrong " * 3) is None
    assert ob.queue.reason(s) == b"max_attempts: a very long explanation of"
    s = ob.put("t", b"y")
    ob.reject(ob.get(), "nul \0 inside " * 20)
    assert b"\0" not in ob.queue.reason(s) and len(ob.queue.reason(s)) == 40
    ob.close()


# ---------------------------------------------------------------------------------- TTL, time


def test_ttl_expiry_quarantines_with_reason_expired():
    # EVIDENCE-OF: E7
    ob, clock = _ob(ttl_ms=1000)
    a = ob.put("t", b"old")
    clock.advance(600)
    b = ob.put("t", b"young")
    c = ob.put("t", b"forever", ttl_ms=0)
    clock.advance(400)  # a is exactly 1000 ms old: expired
    m = ob.get()
    assert m.seq == b and m.age_ms == 400
    ob.ack(m)
    clock.advance(10**9)
    m = ob.get()
    assert m.seq == c
    ob.ack(m)
    assert ob.queue.reason(a) == b"expired"
    assert ob.stats()["expired"] == 1 and ob.stats()["quarantined_by_reason"] == {"expired": 1}
    ob.close()


def test_ttl_expiry_can_drop_instead():
    # EVIDENCE-OF: E7
    ob, clock = _ob(ttl_ms=10, expired="drop")
    a = ob.put("t", b"x")
    clock.advance(10)
    assert ob.get() is None
    assert ob.dead_letters() == [] and ob.stats()["expired"] == 1
    assert [it.state for it in ob.queue.items() if it.seq == a] in ([], ["acked"])
    ob.close()


def test_ttl_with_clock_behind_the_enqueue_time_does_not_expire():
    # EVIDENCE-OF: E7
    ob, clock = _ob(ttl_ms=1000)
    ob.put("t", b"x")
    clock.advance(-5000)  # the RTC was set back
    m = ob.get()
    assert m is not None and m.age_ms == 0
    ob.close()


def test_next_ready_ms():
    # EVIDENCE-OF: E11
    ob, clock = _ob(lease_ms=30000, min_retry_ms=2000, max_retry_ms=2000, seed=11)
    assert ob.next_ready_ms() is None
    a = ob.put("t", b"a")
    assert ob.next_ready_ms() == 0
    m = ob.get()
    assert ob.next_ready_ms() == 30000  # only the lease can make it claimable again
    assert ob.next_ready_ms(T0 + 29000) == 1000
    delay = ob.nack(m)
    assert ob.next_ready_ms() == delay
    ob.put("t", b"b")
    assert ob.next_ready_ms() == 0
    shared.drain(ob)
    clock.advance(delay)
    shared.drain(ob)
    assert ob.next_ready_ms() is None and a
    ob.close()


def test_T5_deadlines_across_the_32_bit_wrap():
    # EVIDENCE-OF: E11 T3
    for start in (2**31 - 700, 2**32 - 700, 2**32 + 2**31 - 700):
        ob, clock = _ob(
            clock=support.FakeClock(start), min_retry_ms=1000, max_retry_ms=1000, seed=4
        )
        s = ob.put("t", b"x")
        m = ob.get()
        delay = ob.nack(m)
        assert delay > 700, delay  # the deadline lies beyond the wrap point
        assert ob.next_ready_ms() == delay and ob.get() is None
        clock.advance(delay - 1)
        assert ob.next_ready_ms() == 1 and ob.get() is None
        clock.advance(1)
        assert ob.next_ready_ms() == 0
        assert ob.get().seq == s
        ob.close()


def test_next_ready_ms_clock_moved_back_is_due_now():
    # EVIDENCE-OF: E11 T3
    ob, clock = _ob(min_retry_ms=1000, max_retry_ms=1000, seed=4)
    ob.put("t", b"x")
    ob.nack(ob.get())
    clock.advance(-(2**32))  # the retry deadline is now more than 2**32 ms ahead
    assert ob.next_ready_ms() == 0 and ob.get() is not None
    ob.close()


def test_ordered_is_strict_fifo_and_default_skips_ahead():
    # EVIDENCE-OF: E12 O3
    for ordered in (True, False):
        ob, clock = _ob(ordered=ordered, min_retry_ms=500, max_retry_ms=500, seed=4)
        a, b = ob.put("t", b"a"), ob.put("t", b"b")
        m = ob.get()
        assert m.seq == a
        if ordered:
            assert ob.get() is None  # the head is in flight
        delay = ob.nack(m)
        m2 = ob.get()
        if ordered:
            assert m2 is None and ob.next_ready_ms() == delay
            clock.advance(delay)
            assert [x.seq for x in shared.drain(ob)] == [a, b]
        else:
            assert m2.seq == b
        ob.close()


# ---------------------------------------------------------------------------------- capacity


def test_capacity_reject_raises_full_and_stores_nothing():
    # EVIDENCE-OF: E13 A7
    ob, clock = _ob(max_items=3)
    seqs = [ob.put("t", b"x%d" % i) for i in range(3)]
    assert not ob.full()
    support.raises(ddq.Full, ob.put, "t", b"too many")
    assert ob.full() and ob.qsize() == 3 and ob.queue.stats().next_seq == 4
    m = ob.get()
    ob.ack(m)
    assert ob.put("t", b"room again") == 4  # T10: the enqueue compacts; no manual step
    assert not ob.full() and ob.qsize() == 3 and seqs == [1, 2, 3]
    ob.close()


def test_T11_drop_oldest_never_drops_a_claimed_message_and_survives_restart():
    # EVIDENCE-OF: E13
    support.needs_heap(256 * 1024, support.OUTBOX_HEAP, 192 * 1024)  # 32-bit: no room in 136 KiB
    d = support.tmpdir()
    ob, clock = _ob(d, capacity="drop_oldest", max_items=3)
    a, b, c = ob.put("t", b"a"), ob.put("t", b"b"), ob.put("t", b"c")
    m = ob.get()  # a is in flight
    assert m.seq == a
    e = ob.put("t", b"e")  # b is the oldest unclaimed: dropped
    assert ob.stats()["dropped"] == 1
    assert ob.ack(m)  # the in-flight message is untouched
    ob.close()
    assert _pending(d) == [c, e] and b not in _pending(d)
    ob, clock = _ob(d, clock=clock, capacity="drop_oldest", max_items=3)
    assert [x.payload for x in shared.drain(ob)] == [b"c", b"e"]
    ob.close()


def test_drop_oldest_when_everything_is_in_flight_raises_full():
    # EVIDENCE-OF: E13
    ob, clock = _ob(capacity="drop_oldest", max_items=2)
    ob.put("t", b"a")
    ob.put("t", b"b")
    ma, mb = ob.get(), ob.get()
    support.raises(ddq.Full, ob.put, "t", b"c")
    assert ob.ack(ma) and ob.ack(mb)
    ob.close()


def test_T1_envelope_buffer_survives_compaction_inside_put():
    # EVIDENCE-OF: E13 W4 C1
    support.needs_heap(256 * 1024, support.OUTBOX_HEAP, 192 * 1024)  # 32-bit: no room in 136 KiB
    d = support.tmpdir()
    ob, clock = _ob(d, capacity="drop_oldest", **SMALL)
    want = {}
    for i in range(300):
        s = ob.put("t/%d" % i, b"payload-%d-" % i + b"z" * (i % 150))
        want[s] = ("t/%d" % i, b"payload-%d-" % i + b"z" * (i % 150))
        if i % 3 == 0:
            m = ob.get()
            assert (m.topic, m.payload) == want.pop(m.seq)
            ob.ack(m)
    dropped = ob.stats()["dropped"]
    ob.close()
    ob, clock = _ob(d, clock=clock, **SMALL)
    got = shared.drain(ob)
    assert len(got) + dropped == len(want), (len(got), dropped, len(want))
    for m in got:
        assert (m.topic, m.payload) == want[m.seq]
    ob.close()


def test_T7_seq_never_reused_after_compaction_and_restart():
    # EVIDENCE-OF: O14 M4
    d = support.tmpdir()
    ob, clock = _ob(d)
    for i in range(5):
        ob.put("t", b"%d" % i)
    shared.drain(ob)
    ob.queue.compact()
    ob.close()
    ob, clock = _ob(d, clock=clock)
    assert ob.put("t", b"next") == 6
    ob.close()


def test_T17_message_payload_is_not_a_shared_view():
    # EVIDENCE-OF: E1
    ob, clock = _ob()
    ob.put("t/1", b"one")
    m1 = ob.get()
    ob.put("t/2", b"two" * 50)
    m2 = ob.get()
    assert (m1.topic, m1.payload, m2.payload) == ("t/1", b"one", b"two" * 50)
    ob.close()


# ---------------------------------------------------------------------------------- dead letters


def test_dead_letters_requeue_round_trip_across_restart():
    # EVIDENCE-OF: E14 C10
    d = support.tmpdir()
    ob, clock = _ob(d)
    a = ob.put("t/a", b"A", key=b"key-a", qos=0, retain=True)
    b = ob.put("t/b", b"B")
    ob.reject(ob.get(), "bad")
    m = ob.get()
    ob.nack(m)
    clock.advance(10**6)
    ob.reject(ob.get(), "also bad")
    ob.close()
    clock.advance(5000)
    ob, clock = _ob(d, clock=clock)
    dead = ob.dead_letters()
    assert [(x.seq, x.reason, x.attempts, x.topic) for x in dead] == [
        (a, b"rejected: bad", 0, "t/a"),
        (b, b"rejected: also bad", 1, "t/b"),
    ]
    assert dead[0].age_ms == 10**6 + 5000
    n = ob.requeue(a)
    assert len(n) == 1 and n[0] > b
    assert [x.seq for x in ob.dead_letters()] == [b]
    support.raises(ddq.NotFound, ob.queue.read, a)  # purged
    ob.close()
    ob, clock = _ob(d, clock=clock)
    assert [x.seq for x in ob.dead_letters()] == [b]
    m = ob.get()
    assert (m.seq, m.topic, m.payload, m.key, m.qos, m.retain, m.orig_seq, m.attempts) == (
        n[0],
        "t/a",
        b"A",
        b"key-a",
        0,
        True,
        a,
        0,
    )
    assert m.age_ms == 0  # a fresh enqueue time
    n2 = ob.requeue()
    assert len(n2) == 1 and ob.dead_letters() == [] and ob.requeue() == []
    assert ddq_outbox.decode_envelope(ob.queue.read(n2[0])).orig_seq == b
    support.raises(ddq.BadState, ob.requeue, m.seq)
    support.raises(ddq.NotFound, ob.requeue, 999)
    assert ob.stats()["quarantined"] == 0
    ob.close()


def test_requeue_without_purge_hides_the_original_across_restart():
    # EVIDENCE-OF: E14
    d = support.tmpdir()
    ob, clock = _ob(d)
    a = ob.put("t", b"A")
    ob.reject(ob.get(), "no")
    n = ob.requeue(purge=False)
    assert ob.dead_letters() == [] and ob.queue.reason(a) == b"rejected: no"
    ob.close()
    ob, clock = _ob(d, clock=clock)  # hidden again: the copy's envelope names the original
    assert ob.dead_letters() == [] and ob.requeue() == []  # nothing requeued twice
    assert ob.queue.stats().quarantined_items == 0  # ... and the leftover is purged now
    m = ob.get()
    assert m.seq == n[0] and m.orig_seq == a
    ob.close()


def test_purge_deletes_dead_letters():
    # EVIDENCE-OF: E14 C10
    ob, clock = _ob()
    a = ob.put("t", b"x")
    b = ob.put("t", b"y")
    c = ob.put("t", b"z")
    ob.reject(ob.get(), "no")
    ob.reject(ob.get(), "no")
    assert ob.purge([a]) == 1 and [x.seq for x in ob.dead_letters()] == [b]
    support.raises(ddq.BadState, ob.purge, [c])
    assert ob.purge() == 1 and ob.dead_letters() == [] and ob.qsize() == 1
    assert ob.put("t", b"w") == 4
    ob.close()


# ---------------------------------------------------------------------------------- durability


def test_sync_always_makes_every_put_durable():
    # EVIDENCE-OF: D1 D4 D5 D6 E15
    d, fs = support.tmpdir(), shared.CrashFS()
    ob, clock = _ob(d, storage=fs)
    for i in range(3):
        s = ob.put("t", b"%d" % i)
        assert ob.durable_seq == s
        assert _pending(fs.crash_copy(d)) == list(range(1, s + 1))
    m = ob.get()
    ob.ack(m)
    assert _pending(fs.crash_copy(d)) == [2, 3]
    ob.close()


def test_group_commit_sync_every():
    # EVIDENCE-OF: D3 D4 E15
    d, fs = support.tmpdir(), shared.CrashFS()
    ob, clock = _ob(d, storage=fs, sync_every=3)
    ob.put("t", b"1")
    ob.put("t", b"2")
    assert ob.durable_seq == 0
    assert _pending(fs.crash_copy(d)) == []  # a power cut now loses both puts
    ob.put("t", b"3")
    assert ob.durable_seq == 3
    assert _pending(fs.crash_copy(d)) == [1, 2, 3]
    m = ob.get()  # CLAIM: 1 unsynced record
    ob.ack(m)  # ACK: 2
    assert _pending(fs.crash_copy(d)) == [1, 2, 3]  # the ack is not durable: 1 comes again
    assert ob.sync() == 3
    assert _pending(fs.crash_copy(d)) == [2, 3]
    ob.put("t", b"4")
    ob.close()  # close syncs
    assert _pending(fs.crash_copy(d)) == [2, 3, 4]


def test_group_commit_interval_uses_ticks_across_the_wrap():
    # EVIDENCE-OF: D3 D4 E15
    t = [2**30 - 400]

    def ticks():
        return t[0] % 2**30

    d, fs = support.tmpdir(), shared.CrashFS()
    ob, clock = _ob(d, storage=fs, sync_interval_ms=1000, ticks=ticks)
    ob.put("t", b"1")  # the interval starts at the first unsynced record
    t[0] += 999  # ticks wrapped to 599
    ob.tick()
    ob.put("t", b"2")
    assert ob.durable_seq == 0 and _pending(fs.crash_copy(d)) == []
    t[0] += 1
    ob.tick()
    assert ob.durable_seq == 2 and _pending(fs.crash_copy(d)) == [1, 2]
    t[0] += 5000  # idle: nothing unsynced, no sync needed
    ob.put("t", b"3")
    assert ob.durable_seq == 2
    t[0] += 2**29 + 5  # past the ticks_diff window: a negative difference syncs too
    ob.put("t", b"4")
    assert ob.durable_seq == 4
    ob.close()


def test_group_commit_on_a_queue_passed_in():
    # EVIDENCE-OF: D3 E15
    d = support.tmpdir()
    q = ddq.Queue(d, sync="none", clock=support.FakeClock(T0))
    ob = ddq_outbox.Outbox(q, sync_every=2, seed=1)
    ob.put("t", b"1")
    assert ob.durable_seq == 0
    ob.put("t", b"2")
    assert ob.durable_seq == 2
    ob.put("t", b"3")
    ob.close()  # syncs; the caller's queue stays open
    assert q.durable_seq == 3 and q.stats().total_items == 3
    support.raises(ddq.InvalidArgument, ddq_outbox.Outbox, q, max_items=3)
    q.close()


# ---------------------------------------------------------------------------------- lock


def test_lock_callbacks_wrap_every_public_call():
    # EVIDENCE-OF: E16
    log = []

    def acquire():
        log.append("a")

    def release():
        log.append("r")

    ob, clock = _ob(lock=(acquire, release))
    ob.put("t", b"x")
    assert log == ["a", "r"]
    m = ob.get()
    ob.stats()
    ob.nack(m)
    ob.next_ready_ms()
    ob.sync()
    assert log == ["a", "r"] * 6
    support.raises(ddq.InvalidArgument, ob.put, "", b"x")  # released after an error too
    assert log[-2:] == ["a", "r"] and len(log) == 14
    ob.close()


def test_T32_refused_lock_raises_and_does_nothing():
    # EVIDENCE-OF: E16
    allow = [True]
    ob, clock = _ob(lock=(lambda: allow[0], lambda: None))
    ob.put("t", b"x")
    allow[0] = False
    support.raises(ddq.Locked, ob.put, "t", b"y")
    support.raises(ddq.Locked, ob.get)
    support.raises(ddq.Locked, ob.stats)
    allow[0] = True
    assert ob.qsize() == 1 and ob.stats()["put"] == 1
    ob.close()


def test_lock_true_uses_thread_lock_where_it_exists():
    # EVIDENCE-OF: E16
    try:
        import _thread  # noqa: F401
    except ImportError:
        support.raises(ddq.InvalidArgument, _ob, lock=True)
        raise support.Skip("no _thread")
    ob, clock = _ob(lock=True)
    ob.put("t", b"x")
    sent = []
    assert ob.pump(lambda m: sent.append(m.seq) or True) == 1  # no deadlock: send runs unlocked
    assert sent == [1]
    ob.close()
    support.raises(ddq.InvalidArgument, _ob, lock=(1,))
    support.raises(ddq.InvalidArgument, _ob, lock="yes")


# ---------------------------------------------------------------------------------- delivery


def test_pump_send_contract():
    # EVIDENCE-OF: E17 E10
    ob, clock = _ob(min_retry_ms=100, max_retry_ms=100)
    seqs = [ob.put("t", b"%d" % i) for i in range(5)]
    script = {seqs[0]: True, seqs[1]: "reject", seqs[2]: True, seqs[3]: "boom", seqs[4]: True}

    def send(m):
        what = script[m.seq]
        if what == "reject":
            raise ddq_outbox.Rejected("schema")
        if what == "boom":
            script[m.seq] = True
            raise OSError(104)
        return what

    assert ob.pump(send) == 2  # 1 and 3 acked, 2 dead-lettered, 4 failed: round over
    assert ob.queue.reason(seqs[1]) == b"rejected: schema"
    st = ob.stats()
    assert (st["sent"], st["rejected"], st["retried"], st["pending"]) == (2, 1, 1, 2)
    assert ob.pump(send) == 1  # 5; 4 is backing off
    clock.advance(100)
    assert ob.pump(send) == 1 and ob.empty()
    assert ob.pump(send) == 0
    ob.close()


def test_pump_false_is_a_temporary_failure_and_budget_bounds_a_round():
    # EVIDENCE-OF: E17
    ob, clock = _ob()
    for i in range(10):
        ob.put("t", b"%d" % i)
    assert ob.pump(lambda m: True, budget=3) == 3 and ob.qsize() == 7
    assert ob.pump(lambda m: False) == 0 and ob.stats()["retried"] == 1
    assert ob.pump(lambda m: 1) == 0  # only True means delivered
    t = [0]

    def ticks():
        t[0] += 10
        return t[0]

    ob2, c2 = _ob(ticks=ticks)
    for i in range(10):
        ob2.put("t", b"%d" % i)
    assert ob2.pump(lambda m: True, budget=100, budget_ms=25) == 2
    ob.close()
    ob2.close()


def test_asyncio_loop():
    # EVIDENCE-OF: E17
    asyncio = shared.needs_asyncio()
    ob, clock = _ob(min_retry_ms=50, max_retry_ms=50, seed=9)
    for i in range(6):
        ob.put("t/%d" % i, b"%d" % i)
    got, failed = [], []

    async def send(m):
        await asyncio.sleep(0)
        if m.seq == 3 and not failed:
            failed.append(m.seq)
            return False
        got.append(m.seq)
        return True

    def stop():
        clock.advance(10)  # fake time passes between rounds; the loop sleeps 1 ms at most
        return len(got) >= 6

    n = asyncio.run(ob.run(send, idle_ms=1, stop=stop))
    assert n == 6 and sorted(got) == [1, 2, 3, 4, 5, 6] and failed == [3]
    ob.put("t", b"sync send")
    n = asyncio.run(ob.run(lambda m: True, idle_ms=1, stop=ob.empty))
    assert n == 1 and ob.stats()["sent"] == 7
    ob.close()


# ---------------------------------------------------------------------------------- stats


def test_stats_survive_restart_where_derivable():
    # EVIDENCE-OF: E18 O9
    support.needs_heap(256 * 1024, support.OUTBOX_HEAP, 192 * 1024)  # 32-bit: no room in 136 KiB
    d = support.tmpdir()
    ob, clock = _ob(d, ttl_ms=100000, lease_ms=300000)
    for i in range(6):
        ob.put("t", b"%d" % i)
    ob.put("t", b"no ttl", ttl_ms=0)
    ob.reject(ob.get(), "x")
    ob.nack(ob.get(), "y")
    m = ob.get()
    clock.advance(100000)  # all but m (in flight) and the last one expire
    ob.ack(ob.get())
    clock.advance(-100000)
    st = ob.stats()
    assert (st["put"], st["sent"], st["rejected"], st["retried"], st["expired"]) == (7, 1, 1, 1, 4)
    ob.close()
    clock.advance(250)
    ob, clock = _ob(d, clock=clock)
    st = ob.stats()
    assert st["put"] == 0 and st["expired"] == 0  # this run's counters start at zero
    assert (st["pending"], st["in_flight"], st["quarantined"]) == (1, 1, 5)
    assert st["quarantined_by_reason"] == {"rejected": 1, "expired": 4}
    assert st["oldest_age_ms"] == 250 and st["durable_seq"] == 7
    assert st["next_ready_ms"] == 300000 - 250
    assert ob.ack(m) and ob.stats()["in_flight"] == 0 and ob.stats()["oldest_age_ms"] is None
    ob.close()


def test_outbox_options_are_checked():
    # EVIDENCE-OF: E7 E13 O8
    d = support.tmpdir()
    for kw in (
        {"capacity": "evict"},
        {"expired": "keep"},
        {"lease_ms": 0},
        {"max_attempts": -1},
        {"min_retry_ms": 0},
        {"max_retry_ms": 1},
        {"sync_every": -1},
        {"max_topic_bytes": 0},
    ):
        support.raises(ddq.InvalidArgument, ddq_outbox.Outbox, d, **kw)
    ob, clock = _ob(d, max_topic_bytes=4)
    support.raises(ddq.InvalidArgument, ob.put, "12345", b"x")
    support.raises(ddq.InvalidArgument, ob.put, "t", b"x", qos=2)
    assert ob.put("1234", b"x") == 1
    ob.close()


def test_lapsed_leases_count_as_attempts_so_a_poison_message_is_dead_lettered():
    # EVIDENCE-OF: E10 E8 O11
    # A message that kills the device on every send is never nacked: each boot claims it, then
    # dies. A lease that ran out unanswered is a failed attempt (a durable RETRY), so
    # max_attempts dead-letters it instead of a crash loop forever.
    d = support.tmpdir()
    clock = support.FakeClock(T0)
    ob, _ = _ob(d, clock=clock, lease_ms=1000, max_attempts=3, min_retry_ms=10, max_retry_ms=10)
    seq = ob.put("t", b"poison")
    ob.put("t", b"fine")
    for boot in range(2):
        m = ob.get()
        assert m.seq == seq and m.attempts == boot, (boot, m.attempts)
        ob.queue.close()  # the device dies while sending: no ack, no nack
        ob, _ = _ob(
            d, clock=clock, lease_ms=1000, max_attempts=3, min_retry_ms=10, max_retry_ms=10
        )
        clock.advance(1000)  # the lease runs out
        clock.advance(10)
    m = ob.get()  # the third claim
    assert m.seq == seq and m.attempts == 2
    ob.queue.close()
    ob, _ = _ob(d, clock=clock, lease_ms=1000, max_attempts=3, min_retry_ms=10, max_retry_ms=10)
    clock.advance(1000)
    m = ob.get()  # the lapse makes 3 attempts: dead letter
    assert m.payload == b"fine"
    dl = ob.dead_letters()
    assert [x.seq for x in dl] == [seq] and dl[0].reason == b"max_attempts: lease expired"
    assert ob.stats()["exhausted"] == 1
    ob.close()


def test_E25_a_delivery_loop_of_its_own_uses_public_methods():
    # EVIDENCE-OF: E25 E17
    # What ddq_window's loop uses, public: settle (the send contract), reread, within and the
    # clock, ticks and lease_ms the Outbox runs on.
    ticks = [5]
    ob, clock = _ob(lease_ms=4000, min_retry_ms=60000, max_retry_ms=60000, ticks=lambda: ticks[0])
    assert ob.lease_ms == 4000 and ob.clock() == T0 and ob.ticks() == 5
    a, b, c = ob.put("t/a", b"A"), ob.put("t/b", b"B"), ob.put("t/c", b"C")
    m = ob.get()
    r = ob.reread(m)
    assert (r.seq, r.topic, r.payload, r.lease_until_ms) == (a, "t/a", b"A", m.lease_until_ms)
    assert ob.settle(m, True) == 1 and ob.counters["sent"] == 1
    assert ob.settle(ob.get(), False) == -1 and ob.counters["retried"] == 1
    assert ob.settle(ob.get(), None, ddq_outbox.Rejected("no")) == 0
    assert ob.queue.reason(c) == b"rejected: no" and ob.get() is None and b
    assert ob.within(5, 0) and ob.within(0, 6) and not ob.within(0, 5)
    ob.close()
