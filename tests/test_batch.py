# Readings that share a DDQ item (port/ddq_batch.py, OUTBOX §13.4): delivered as separate
# messages, each item acked when all of its readings are confirmed. Shared suite.
import support

# The message layer and ddq_batch beside the runner: as test_window (a 192 KiB heap).
support.needs_heap(192 * 1024, support.OUTBOX_HEAP)
import ddq  # noqa: E402
import ddq_outbox  # noqa: E402
from ddq_batch import KEY, BatchOutbox  # noqa: E402
from shared import drain  # noqa: E402

T0 = 1767225600000
OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 100000, "max_segments": 8}


def _ob(d, clock, **kw):
    k = dict(OPTS)
    k.update(kw)
    return BatchOutbox(d, clock=clock, ticks=lambda: 0, seed=1, **k)


def _start(n=0, **kw):
    # A fresh directory, its clock and a BatchOutbox over it, with n readings put and written.
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    ob = _ob(d, clock, **kw)
    if n:
        _put(ob, clock, n)
        ob.flush()
    return d, clock, ob


def _put(ob, clock, n, topic="s/t", start=0):
    for i in range(start, start + n):
        clock.advance(1000)
        ob.put(topic, b"r%03d" % i)


def test_batch_readings_delivered_one_by_one():
    # EVIDENCE-OF: B1 B2 B4
    d, clock, ob = _start(30, batch_bytes=80)
    items = ob.queue.stats().total_items
    assert 1 < items < 30, items
    got = []

    def send(m):
        got.append((m.topic, m.payload, m.enqueued_ms, m.qos))
        return True

    for _ in range(100):
        if not ob.pump(send, budget=7):
            break
    assert got == [("s/t", b"r%03d" % i, T0 + 1000 * (i + 1), 1) for i in range(30)], got
    s = ob.queue.stats()
    assert s.available_items == s.claimed_items == 0 and s.acknowledged_items == items, s.as_dict()
    ob.close()


def test_batch_durability_window():
    # EVIDENCE-OF: B3
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    ob = _ob(d, clock, batch_bytes=80, batch_ms=5000)
    _put(ob, clock, 3)  # in the open batch (RAM) only
    assert ob.queue.stats().total_items == 0
    ob.tick()  # batch_ms not passed (ticks stand still): still open
    assert ob.queue.stats().total_items == 0
    seq = ob.flush()
    assert seq == 1 and ob.queue.stats().total_items == 1
    _put(ob, clock, 2, start=3)
    ob.queue.close()  # a power cut: the open batch is gone, the written one is not
    ob = _ob(d, clock, batch_bytes=80)
    got = []
    ob.pump(lambda m: got.append(m.payload) or True)
    assert got == [b"r000", b"r001", b"r002"], got
    ob.close()


def test_batch_failed_reading_retries_the_rest():
    # EVIDENCE-OF: B5
    d, clock, ob = _start(6, batch_bytes=200)
    sent, fail = [], [b"r003"]

    def send(m):
        if fail and m.payload == fail[0]:
            fail.pop()
            raise OSError(104, "connection reset")
        sent.append(m.payload)
        return True

    ob.pump(send)
    assert sent == [b"r000", b"r001", b"r002"], sent
    assert ob.queue.stats().available_items == 1  # retried with a backoff
    clock.advance(10 * 60000)
    ob.pump(send)
    assert sent == [b"r%03d" % i for i in range(6)], sent  # confirmed ones not sent again
    assert ob.queue.stats().acknowledged_items == 1
    ob.close()


class _Window:
    # A windowed sender (OUTBOX E25): every publish is confirmed at the next poll.
    inflight_max = 4

    def __init__(self):
        self.out, self.pend = [], []

    def publish(self, m, dup=False):
        self.out.append(m.payload)
        self.pend.append(m.seq)

    def poll(self, timeout_ms=0):
        p, self.pend = self.pend, []
        return p


def test_batch_windowed_sender():
    # EVIDENCE-OF: B4 E25
    d, clock, ob = _start(20, batch_bytes=60)
    w = _Window()
    for _ in range(50):
        if not ob.pump(w, budget=16):
            break
    assert w.out == [b"r%03d" % i for i in range(20)], w.out
    s = ob.queue.stats()
    assert s.available_items == s.claimed_items == 0, s.as_dict()
    ob.close()


class _Flaky(_Window):
    # 16 publishes in flight, one in five refused ("not now": nacked, retried after backoff)
    inflight_max = 16

    def __init__(self):
        _Window.__init__(self)
        self.n = 0

    def publish(self, m, dup=False):
        self.n += 1
        if self.n % 5 == 0:
            raise ValueError("not now")
        _Window.publish(self, m, dup)


def test_batch_full_under_a_small_reserve_drains_through_a_wider_window():
    # EVIDENCE-OF: H5 B3
    # The board apps' BATCH_OPTIONS (window 4, 256 B of evidence) under a publish window of 16
    # with retries: items with history outgrow the window, and a queue filled to Full still
    # delivers every reading it took and ends empty (nothing admitted is stranded).
    d, clock, ob = _start(
        0,
        window=4,
        evidence_bytes=256,
        segment_bytes=1024,
        max_segments=4,
        max_payload_bytes=200,
        batch_bytes=200,
        min_retry_ms=1,
        max_retry_ms=8,
    )
    took, tried = [], 0
    for i in range(5000):
        clock.advance(10000)
        tried += 1
        try:
            ob.put("s/t", b"r%04d" % i)
        except ddq.Full:
            break
        took.append(b"r%04d" % i)
    assert 40 < len(took) < 5000, len(took)
    w, flushed = _Flaky(), False
    for _ in range(2000):
        clock.advance(50)
        ob.pump(w, budget=16)
        if not flushed and ob.queue.stats().acknowledged_items:
            try:
                ob.flush()  # the batch open at Full: written once acks made room
                flushed = True
            except ddq.Full:
                pass
        if flushed and ob.qsize() == 0:
            break
    assert flushed and ob.qsize() == 0, (flushed, ob.queue.stats().as_dict())
    got = sorted(set(w.out))
    assert len(got) == len(w.out), "a confirmed reading was sent again"
    assert set(took) <= set(got) and len(got) <= tried, (len(took), len(got), tried)
    ob.close()


def test_batch_directory_is_ddq():
    # EVIDENCE-OF: B6 B2
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    ob = _ob(d, clock, batch_bytes=100)
    _put(ob, clock, 5)
    ob.close()  # close writes the open batch
    q = ddq.Queue(d, clock=clock, **OPTS)  # libddq's admission, no message layer
    assert q.stats().total_items == 1
    m = ddq_outbox.decode_envelope(q.read(1))
    assert m.key == KEY and m.topic == "s/t" and m.enqueued_ms == T0 + 5000, (m.key, m.topic)
    q.close()


def test_board_app_setting():
    # EVIDENCE-OF: B1
    import ddq_app

    d = support.tmpdir() + "/q"
    held = dict(OPTS, window=16, evidence_bytes=1024)
    batch = {"window": 4, "evidence_bytes": 256}
    cfg = dict(ddq_app.DEFAULTS, OPTIONS=held, OUTBOX="ddq_batch", BATCH_OPTIONS=batch)
    ob = ddq_app.open_outbox(cfg, d)
    assert isinstance(ob, BatchOutbox)
    assert (ob.queue._o.win, ob.queue._o.ev) == (4, 256)  # BATCH_OPTIONS replace OPTIONS' reserve
    ob.put("s/t", b"x")
    assert ob.queue.stats().total_items == 0  # in the open batch
    ob.close()
    cfg.pop("OUTBOX")
    ob = ddq_app.open_outbox(cfg, d)  # the default: one reading, one item, OPTIONS as given
    assert not isinstance(ob, BatchOutbox) and ob.queue.stats().total_items == 1
    assert (ob.queue._o.win, ob.queue._o.ev) == (16, 1024)
    ob.close()


def _hex(b):
    return "".join(["%02x" % x for x in b])


def _body(ob, seq):
    return ddq_outbox.decode_envelope(ob.queue.read(seq))


def _readings(ob):
    # Every reading get() hands out (acked), as (payload, enqueued_ms); bounded.
    return [(m.payload, m.enqueued_ms) for m in drain(ob, 5000)]


def test_batch_runs_byte_exact():
    # EVIDENCE-OF: B2
    # A reading as long as the one before and the same gap after it joins a run (its bytes only);
    # another gap costs the gap's change (zigzag), another length that length. The same bytes on
    # both interpreters.
    d, clock, ob = _start(batch_bytes=200)
    for step, r in ((1000, b"ab"), (1000, b"ab"), (1000, b"ab"), (1000, b"ab"), (1003, b"ab")):
        clock.advance(step)
        assert ob.put("s/t", r) == 0
    clock.advance(1000)
    ob.put("s/t", b"xyz")
    clock.advance(1000)
    ob.put("s/t", b"xyz")
    clock.advance(500)
    seq = ob.flush()
    m = _body(ob, seq)
    assert m.key == KEY == b"\0C" and m.enqueued_ms == T0 + 7503, (m.key, m.enqueued_ms)
    assert _hex(m.payload) == (
        "e732"  # the first: its age at the write (6,503 ms), its length
        "026162"
        "c13e6162"  # the second: gap 1,000 (its change from 0), the same length
        "0461626162"  # a run of 2: the length and the gap as before
        "196162"  # gap 1,003: +3
        "170378797a"  # gap 1,000 (-3), length 3
        "0278797a"  # a run of 1
    ), _hex(m.payload)
    got = _readings(ob)
    want = [(b"ab", T0 + 1000 * k) for k in range(1, 5)]
    want += [(b"ab", T0 + 5003), (b"xyz", T0 + 6003), (b"xyz", T0 + 7003)]
    assert got == want, got
    ob.close()


def test_batch_regular_readings_cost_their_bytes_alone():
    # EVIDENCE-OF: B2
    # 200 readings of 25 bytes, exactly 10 s apart: one header byte per 63 readings of a run.
    d, clock, ob = _start(
        batch_bytes=8000, max_payload_bytes=8000, segment_bytes=16384, max_segments=16
    )
    r = b"n=12345 t=12345678 v=21.5"
    for _ in range(200):
        clock.advance(10000)
        ob.put("s/t", r)
    m = _body(ob, ob.flush())
    # the first: its age at the write (1,990,000 ms: 3 bytes) and length; the second: its gap
    # (3 bytes); then runs of 63, 63, 63 and 9 readings: a header byte each
    assert len(m.payload) == 200 * 25 + 3 + 1 + 3 + 4, len(m.payload)
    got = _readings(ob)
    assert got == [(r, T0 + 10000 * (k + 1)) for k in range(200)], got[:3]
    ob.close()


def test_batch_of_the_first_release_is_delivered():
    # EVIDENCE-OF: B2 B6
    # A b"\0B" batch (each reading: a gap and a length) in a directory from before: delivered
    # with each reading's own time.
    d, clock, ob = _start()
    body = b"\x05\x02ab" + b"\xe8\x07\x03xyz" + b"\x00\x00"  # ages 5; gaps 1,000 and 0
    ob.queue.enqueue(ddq_outbox.encode_envelope("s/t", body, enqueued_ms=T0, key=b"\0B", qos=1))
    got = _readings(ob)
    assert got == [(b"ab", T0 - 5), (b"xyz", T0 + 995), (b"", T0 + 995)], got
    ob.close()


def test_batch_tampered_runs_are_corrupt():
    # EVIDENCE-OF: B2
    # An empty run, a run past the end, a gap below 0: each
    # batch is dead-lettered corrupt whole (nothing of it delivered), in bounded work.
    bad = [
        b"\x00\x01a" + b"\x00",
        b"\x00\x01a" + b"\x04a",
        b"\x00\x01a" + b"\x07a",  # the gap's change -1 from 0
    ]
    d, clock, ob = _start()
    for body in bad:
        ob.queue.enqueue(ddq_outbox.encode_envelope("s/t", body, enqueued_ms=T0, key=KEY))
    assert _readings(ob) == []
    s = ob.queue.stats()
    assert s.quarantined_items == len(bad) and s.available_items == 0, s.as_dict()
    for seq in range(1, len(bad) + 1):
        assert bytes(ob.queue.reason(seq)).startswith(b"corrupt"), ob.queue.reason(seq)
    ob.close()


def test_batch_envelope_never_over_batch_bytes():
    # EVIDENCE-OF: B1 B2
    # Every batch written fits batch_bytes, whatever the gaps (a reading 74 hours after the one
    # before: a 5-byte gap) and lengths (2-byte lengths): the first release's estimate let such
    # a batch grow a byte over max_payload_bytes, and every write of it then raised TooLarge.
    d, clock, ob = _start(batch_bytes=256, batch_ms=0, max_segments=64)
    ob.put("s/t", b"x" * 90)
    clock.advance((1 << 28) + 5)
    ob.put("s/t", b"y" * 130)
    ob.flush()
    x = 7
    for _ in range(150):  # varied lengths and gaps (a fixed LCG: the same run everywhere)
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        clock.advance((x >> 8) % 3 * (1 << (x % 29)))
        ob.put("s/t", b"z" * ((x >> 4) % 140))
    ob.flush()
    n = ob.queue.stats().total_items
    for seq in range(1, n + 1):
        assert len(ob.queue.read(seq)) <= 256, seq
    assert len(_readings(ob)) == 152
    ob.close()


def _fill(ob, clock):
    # Put readings until the queue is full; the last batch stays open in RAM. Returns them.
    took = []
    for i in range(5000):
        clock.advance(10000)
        try:
            ob.put("s/t", b"r%04d" % i)
        except ddq.Full:
            return took
        took.append(b"r%04d" % i)
    raise AssertionError("never full")


FULL_OPTS = {
    "segment_bytes": 1024,
    "max_segments": 4,
    "max_payload_bytes": 200,
    "batch_bytes": 200,
    "batch_ms": 1000,
}


def test_batch_tick_at_full_leaves_the_batch_open_and_pump_delivers():
    # EVIDENCE-OF: B3 (tick's write meets Full: the batch stays open, tick and pump raise
    # nothing, delivery makes room and a later tick writes it; issue 35: pump raised Full every
    # round and nothing was delivered)
    ticks = [0]
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    k = dict(OPTS)
    k.update(FULL_OPTS)
    ob = BatchOutbox(d, clock=clock, ticks=lambda: ticks[0], seed=1, **k)
    took = _fill(ob, clock)
    assert ob.counters["readings"] > ob.queue.stats().total_items > 1
    ticks[0] += 5000  # batch_ms passed: tick tries to write the open batch into the full queue
    got = []
    for _ in range(200):
        ticks[0] += 5000
        clock.advance(1000)
        ob.pump(lambda m: got.append(m.payload) or True)
        if len(got) == len(took) and ob.qsize() == 0:
            break
    assert sorted(got) == sorted(took), (len(got), len(took))
    ob.close()


def test_batch_close_at_full_counts_the_open_batch_dropped():
    # EVIDENCE-OF: B3 (close's write meets Full: the open batch's readings, never durable, are
    # dropped and counted; close raises nothing and the queue reopens with what was written)
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    ob = _ob(d, clock, **FULL_OPTS)
    took = _fill(ob, clock)
    written = ob.queue.stats().total_items
    ob.close()
    dropped = ob.counters["dropped"]
    assert dropped > 0
    ob = _ob(d, clock, **FULL_OPTS)
    got = []
    for _ in range(100):
        if not ob.pump(lambda m: got.append(m.payload) or True):
            break
    assert ob.queue.stats().acknowledged_items == written
    assert len(got) + dropped == len(took) and got == took[: len(got)], (len(got), dropped)
    ob.close()


def test_batch_clock_back_while_a_batch_is_open():
    # EVIDENCE-OF: B2 (the wall clock set back while a batch is open: the first reading's age at
    # the write is 0, never negative; the write used to loop for ever in its varint)
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    ob = _ob(d, clock, batch_bytes=200)
    ob.put("s/t", b"a")
    clock.advance(-60000)
    ob.put("s/t", b"b")
    assert ob.flush() == 1
    got = []
    ob.pump(lambda m: got.append(m.payload) or True)
    assert got == [b"a", b"b"], got
    ob.close()


def test_batch_dropped_items_count_their_readings():
    # EVIDENCE-OF: B7 B4 E7 E13
    # An item that goes unsent as a whole (expired="drop", capacity="drop_oldest") counts each
    # of its readings, as a reading that goes alone does: the counters stay in messages.
    d, clock, ob = _start(expired="drop")
    _put(ob, clock, 3)
    ob.put("s/t", b"x", ttl_ms=1000)  # another TTL: the first batch is written
    ob.put("s/t", b"y", ttl_ms=1000)
    ob.flush()
    clock.advance(5000)
    assert ob.pump(lambda m: True) == 3
    assert ob.counters["expired"] == 2 and ob.counters["sent"] == 3, ob.counters
    ob.close()
    opts = {"segment_bytes": 512, "max_segments": 3, "max_items": 100000, "max_payload_bytes": 64}
    d = support.tmpdir() + "/q"
    ob = BatchOutbox(d, clock=clock, ticks=lambda: 0, seed=1, capacity="drop_oldest", **opts)
    dropped = 0
    for i in range(80):
        ob.put("s/t", b"r%03d" % i, ttl_ms=i // 4)  # batches of 4 readings
        dropped = ob.counters["dropped"]
        if dropped:
            break
    assert dropped == 4, ob.counters
    ob.close()


def test_batch_dead_letters_count_their_readings():
    # EVIDENCE-OF: B7 E32 E7
    # Expired batches under a hold rule: written as dead letters while room lasts, then dropped
    # (E32); either way every reading is counted, dead_dropped in readings too.
    hold = {"segment_bytes": 1024, "max_segments": 6, "max_payload_bytes": 256}
    hold.update({"max_items": 1000, "window": 4, "evidence_bytes": 256})
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    ob = BatchOutbox(d, clock=clock, ticks=lambda: 0, seed=1, **hold)
    n = 0
    for _j in range(400):  # batches of 5 readings, written until the queue is Full
        for i in range(5):
            ob.put("s/t", b"r%03d" % i, ttl_ms=1000)
        try:
            ob.flush()
        except ddq.Full:
            break
        n += 5
    ob.close()  # (drops the unwritten batch, counted dropped)
    ob = BatchOutbox(d, clock=clock, ticks=lambda: 0, seed=1, **hold)
    clock.advance(5000)
    for _ in range(n // 32 + 2):
        assert ob.get() is None
    st = ob.stats()
    assert st["pending"] == 0 and st["dead_dropped"] > 0, st
    assert st["expired"] == n and n % 5 == 0, (n, st)
    assert st["dead_dropped_by_reason"] == {"expired": st["dead_dropped"]}, st
    assert st["dead_dropped"] == n - 5 * st["quarantined"], st
    ob.close()


def test_batch_reading_lost_alone_ends_its_item_and_the_rest_are_not_resent():
    # EVIDENCE-OF: B5 E30 E25
    # Liveness torture seeds 28102, 41984: two readings of one item lost together, then the
    # first republished alone and lost again: its item is nacked (here: its last attempt, a
    # dead letter). The second, waiting its turn to be republished, was re-read from the queue
    # -- NotFound when the dead letter had been dropped for want of room, else sent though
    # its item was no longer claimed. Now it leaves the window: it goes with its item.
    d, clock, ob = _start(2, batch_bytes=200, max_attempts=1)

    class Drops:
        inflight_max = 2

        def __init__(self):
            self.log, self.wire, self.polls = [], [], 0

        def publish(self, m, dup=False):
            self.log.append((bytes(m.payload), dup))
            self.wire.append(m.seq)

        def poll(self, timeout_ms=0):
            self.polls += 1
            assert self.polls < 50
            out, self.wire = self.wire, []
            if self.polls <= 2:  # the connection drops twice: nothing on it is acked
                raise OSError(104)
            return out

    w = Drops()
    assert ob.pump(w, budget=8) == 0
    assert w.log == [(b"r000", False), (b"r001", False), (b"r000", True)], w.log
    st = ob.stats()
    assert st["pending"] == 0 and st["exhausted"] == 2 and st["quarantined"] == 1, st
    ob.close()
