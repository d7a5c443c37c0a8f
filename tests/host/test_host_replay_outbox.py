"""`ddq replay`'s Outbox (host/ddqhost/replay.py outbox_class, OUTBOX E26): the delivery options
for what a device kept -- raw payloads, a forced QoS, lapsed claims taken as they are, failure
"stop" and the report hook -- over the device's Outbox, which carries none of them."""

import pytest

import ddq
import ddq_outbox
import shared
import support
from ddqhost import replay

T0 = 1767225600000


def _ob(d=None, clock=None, **kw):
    if "seed" not in kw:
        kw["seed"] = 7
    clock = clock or support.FakeClock(T0)
    cls = replay.outbox_class(ddq_outbox.Outbox)
    return cls(d or support.tmpdir(), clock=clock, **kw), clock


def test_E26_the_device_outbox_takes_no_replay_option(tmp_path):
    # EVIDENCE-OF: E26
    for i, kw in enumerate(
        ({"raw": True}, {"qos": 1}, {"lapsed": "reclaim"}, {"failure": "stop"}, {"report": print})
    ):
        with pytest.raises((TypeError, ddq.InvalidArgument)):
            ddq_outbox.Outbox(str(tmp_path / str(i)), **kw)
    assert replay.outbox_class(ddq_outbox.Outbox) is replay.outbox_class(ddq_outbox.Outbox)


class _Win:
    # A windowed sender [E25] that confirms what it published on the next poll, until told to
    # fail: then poll raises OSError (a lost connection); a topic in `bad` is Unpublishable.
    def __init__(self, w, fail=False, bad=()):
        self.inflight_max, self.timeout_ms = w, 100
        self.fl, self.sent, self.fail, self.bad = [], [], fail, bad

    def publish(self, m, dup=False):
        if m.topic in self.bad:
            raise ddq_outbox.Unpublishable("no route for " + m.topic)
        self.fl.append(m.seq)
        self.sent.append((m.topic, bytes(m.payload), m.qos))

    def poll(self, timeout_ms=0):
        if self.fail:
            self.fl = []
            raise OSError(110)
        out, self.fl = self.fl, []
        return out


def test_E26_raw_payloads_forced_qos_and_expired_sent_anyway():
    # EVIDENCE-OF: E26 E27 E7
    events = []
    ob, clock = _ob(
        raw=True,
        qos=1,
        expired="send",
        ttl_ms=1000,
        report=lambda what, seq, why: events.append((what, seq, why)),
    )
    a = ob.put("t/a", b"A", qos=0)
    r = ob.queue.enqueue(b"raw \x00 bytes")  # written with plain ddq.Queue: no envelope
    z = ob.queue.enqueue(ddq_outbox.encode_envelope("t/z", b"Z", enqueued_ms=0, ttl_ms=5))
    clock.advance(5000)  # a is past its TTL; z has no enqueue time: no age, never expired
    got = []
    assert ob.pump(lambda m: got.append((m.seq, m.topic, m.payload, m.qos)) is None) == 3
    assert got == [(a, "t/a", b"A", 1), (r, "", b"raw \x00 bytes", 1), (z, "t/z", b"Z", 1)]
    assert events == [("sent", a, ""), ("sent", r, ""), ("sent", z, "")]
    assert ob.counters["expired"] == 0 and ob.counters["corrupt"] == 0 and ob.empty()
    ob.close()
    m = ddq_outbox.decode_envelope(ddq_outbox.encode_envelope("t", b"", ttl_ms=1))
    assert not m.expired(T0) and m.age_ms == 0  # [E27]
    # Without raw (the default) the same payload is a dead letter "corrupt"; with a key a raw
    # payload is "unauthenticated": it carries no tag [E22].
    for kw, cls in (({}, b"corrupt"), ({"raw": True, "hmac_key": b"k" * 16}, b"unauthenticated")):
        ob, clock = _ob(**kw)
        s = ob.queue.enqueue(b"raw")
        assert ob.get() is None and ob.queue.reason(s).split(b":")[0] == cls, kw
        ob.close()
    ob, clock = _ob(raw=True, hmac_key=b"k" * 16)
    s = ob.queue.enqueue(b"raw")
    ob.get()
    assert ob.queue.reason(s).startswith(b"unauthenticated: not an envelope (")
    ob.close()
    for bad in ({"qos": 2}, {"lapsed": "x"}, {"failure": "x"}, {"expired": "x"}, {"report": 1}):
        assert support.raises(ddq.InvalidArgument, _ob, **bad)


def test_E26_lapsed_reclaim_takes_a_lapsed_claim_as_it_is():
    # EVIDENCE-OF: E26 E10
    for lapsed in ("retry", "reclaim"):
        ob, clock = _ob(lapsed=lapsed, lease_ms=1000, min_retry_ms=60000, max_retry_ms=60000)
        s = ob.put("t", b"x")
        assert ob.get().seq == s  # claimed, then neither acked nor nacked
        clock.advance(1001)
        m = ob.get()
        if lapsed == "retry":  # E10: a RETRY with a backoff: not claimable now
            assert m is None and ob.counters["lapsed"] == 1
        else:  # taken again at once, no record of a failed attempt
            assert m.seq == s and m.attempts == 0 and ob.counters["lapsed"] == 0
        ob.close()


def test_E26_failure_stop_retries_at_once_and_ends_the_loop():
    # EVIDENCE-OF: E26 E17 E25 E4
    events = []
    ob, clock = _ob(
        failure="stop",
        min_retry_ms=60000,
        max_retry_ms=60000,
        report=lambda what, seq, why: events.append((what, seq)),
    )
    seqs = [ob.put("t/%d" % i, b"%d" % i) for i in range(6)]
    calls = []

    def send(m):
        calls.append(m.seq)
        return m.seq != seqs[1]

    assert ob.pump(send) == 1 and calls == seqs[0:2]  # stopped at the first failure
    assert ob.counters["failed"] == 1 and ob.counters["retried"] == 0
    assert ob.next_ready_ms() == 0  # no backoff: due again at once, one attempt counted
    assert [it.attempts for it in ob.queue.items() if it.seq == seqs[1]] == [1]
    assert events == [("sent", seqs[0]), ("failed", seqs[1])]
    # A window: a lost connection releases everything in flight (seq order) and ends the loop;
    # nothing is republished.
    w = _Win(3, fail=True)
    assert ob.pump(w) == 0 and len(w.sent) == 3
    assert events[2:] == [("failed", s) for s in seqs[1:4]]
    assert ob.next_ready_ms() == 0 and ob.qsize() == 5
    # stop() claims no more; an Unpublishable from the sender is a dead letter, the loop goes on.
    w = _Win(2, bad=("t/2",))
    n = [0]

    def stop():
        n[0] += 1
        return n[0] > 3

    assert ob.pump(w, stop=stop) == 2 and ob.qsize() == 2
    assert ob.queue.reason(seqs[2]) == b"unpublishable: no route for t/2"
    assert ob.counters["unpublishable"] == 1
    assert ob.pump(w) == 2 and ob.empty()
    ob.close()


def test_E26_failure_stop_honours_max_attempts():
    # EVIDENCE-OF: E26 E10 E30
    # A failure pinned on one message (a send, or a window with it alone in flight) counts an
    # attempt and the last one dead-letters it: a dropped connection is not a free retry.
    for w in (0, 1, 3):
        ob, clock = _ob(failure="stop", max_attempts=3)
        a = ob.put("t/a", b"A")
        if w == 3:  # several in flight: the loss is pinned on none, all released (no end)
            ob.put("t/b", b"B")
            for _ in range(5):
                assert ob.pump(_Win(3, fail=True)) == 0
            assert ob.qsize() == 2 and ob.counters["exhausted"] == 0
            ob.close()
            continue

        def send(m):
            raise OSError(104, "connection closed by the broker")

        for _i in range(5):
            assert ob.pump(_Win(1, fail=True) if w else send) == 0
        assert ob.counters["failed"] == 2 and ob.counters["exhausted"] == 1, ob.counters
        assert ob.empty() and ob.queue.reason(a).startswith(b"max_attempts: ")
        ob.close()


def test_E26_failure_stop_ends_the_asyncio_loop_too():
    # EVIDENCE-OF: E26 E17 E25
    asyncio = shared.needs_asyncio()
    for window in (False, True):
        ob, clock = _ob(failure="stop")
        seqs = [ob.put("t", b"%d" % i) for i in range(4)]
        if window:
            w = _Win(2, fail=True)
            n = asyncio.run(ob.run(w))
        else:
            first = seqs[0]
            n = asyncio.run(
                ob.run(lambda m, first=first: m.seq == first)
            )  # only a failure ends it
        assert ob.counters["failed"] == (2 if window else 1), window
        assert n == (0 if window else 1) and ob.qsize() == (4 if window else 3)
        assert ob.next_ready_ms() == 0
        ob.close()
