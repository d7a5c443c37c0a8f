# Readings that share a DDQ item (port/ddq_batch.py, OUTBOX §13.4): delivered as separate
# messages, each item acked when all of its readings are confirmed. Shared suite.
import support

# The message layer and ddq_batch beside the runner: as test_window (a 192 KiB heap).
support.needs_heap(192 * 1024, support.OUTBOX_HEAP)
import ddq  # noqa: E402
import ddq_outbox  # noqa: E402
from ddq_batch import KEY, BatchOutbox  # noqa: E402

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
    cfg = dict(ddq_app.DEFAULTS, OPTIONS=OPTS, OUTBOX="ddq_batch")
    ob = ddq_app.open_outbox(cfg, d)
    assert isinstance(ob, BatchOutbox)
    ob.put("s/t", b"x")
    assert ob.queue.stats().total_items == 0  # in the open batch
    ob.close()
    cfg.pop("OUTBOX")
    ob = ddq_app.open_outbox(cfg, d)  # the default: one reading, one item
    assert not isinstance(ob, BatchOutbox) and ob.queue.stats().total_items == 1
    ob.close()
