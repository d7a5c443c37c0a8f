# The windowed delivery of OUTBOX E25: ddq_mqtt.WindowSender against a fake broker that answers
# what it is sent (a socket-like object), driven by Outbox.pump and Outbox.run. Shared suite:
# subset Python, no real sleeping except a sender's short timeouts, bounded loops. The runs
# against a real mosquitto are in tests/e2e/test_window_mosquitto.py.
import support

# Measured: the module passes whole in a 192 KiB heap (unix port, 64-bit, beside the runner).
support.needs_heap(192 * 1024, support.OUTBOX_HEAP, 128 * 1024)  # 32-bit: measured on qemu
import ddq_mqtt
import ddq_outbox
import shared  # noqa: E402

T0 = 1767225600000


class WinSock:
    """One broker connection. CONNECT gets CONNACK; a QoS 1 PUBLISH is recorded in
    broker.log as (pid, dup, topic, payload) and acked per the broker's policy: "all" (PUBACKs
    held until `batch` publishes wait, then all at once, in order), "never", or a function."""

    def __init__(self, broker, policy):
        self.b, self.policy = broker, policy
        self.rx = bytearray()
        self.held = []
        self.closed = False
        self.buf = bytearray()

    def settimeout(self, t):
        pass

    def sendall(self, data):
        if self.closed:
            raise OSError(9)
        self.buf += data
        while len(self.buf) >= 2:
            n, shift, j = 0, 0, 1
            while True:
                n |= (self.buf[j] & 0x7F) << shift
                shift += 7
                j += 1
                if not self.buf[j - 1] & 0x80:
                    break
            if j + n > len(self.buf):
                return
            h, body = self.buf[0], bytes(self.buf[j : j + n])
            self.buf[0 : j + n] = b""
            self.packet(h, body)

    def packet(self, h, body):
        t = h & 0xF0
        if t == 0x10:
            self.rx += b"\x20\x02\x00\x00"
        elif t == 0x30 and h & 0x06:
            tl = (body[0] << 8) | body[1]
            pid = (body[2 + tl] << 8) | body[3 + tl]
            self.b.log.append((pid, bool(h & 0x08), body[2 : 2 + tl].decode(), body[4 + tl :]))
            self.b.max_waiting = max(self.b.max_waiting, len(self.held) + 1)
            if self.policy in ("never", "drop"):
                return
            if callable(self.policy):
                self.rx += self.policy(self, pid)
                return
            self.held.append(pid)
            if len(self.held) >= self.b.batch:
                for p in self.held:
                    self.rx += b"\x40\x02" + bytes([p >> 8, p & 0xFF])
                self.held = []

    def recv(self, n):
        if self.closed:
            raise OSError(9)
        if not self.rx:
            if self.b.tick is not None:
                self.b.tick()
            if self.policy == "drop":
                return b""  # the broker closes the connection: what it held is never acked
            if self.held and self.b.flush_held:
                for p in self.held:
                    self.rx += b"\x40\x02" + bytes([p >> 8, p & 0xFF])
                self.held = []
            if not self.rx:
                raise OSError(11)  # EAGAIN: nothing yet (a non-blocking read)
        n = min(n, len(self.rx))
        b = bytes(self.rx[0:n])
        self.rx[0:n] = b""
        return b

    def close(self):
        self.closed = True


class WinBroker:
    """A connect factory: connection i gets policies[i] (the last one repeats)."""

    def __init__(self, *policies, batch=1):
        self.policies = list(policies) or ["all"]
        self.socks, self.log = [], []
        self.batch, self.max_waiting, self.tick, self.flush_held = batch, 0, None, True

    def __call__(self):
        p = self.policies[min(len(self.socks), len(self.policies) - 1)]
        if p == "refuse":
            self.socks.append(None)
            raise OSError(111)
        s = WinSock(self, p)
        self.socks.append(s)
        return s


def _ob(n, **kw):
    kw.setdefault("seed", 5)
    clock = kw.pop("clock", None) or support.FakeClock(T0)
    ob = ddq_outbox.Outbox(support.tmpdir(), clock=clock, **kw)
    for i in range(n):
        ob.put("w/%d" % (i % 3), b"m%d" % i)
    return ob, clock


def _link(broker, w=16, timeout_ms=200):
    return ddq_mqtt.WindowSender(connect=broker, inflight_max=w, timeout_ms=timeout_ms)


def test_window_keeps_W_publishes_in_flight():
    # EVIDENCE-OF: E25
    ob, _ = _ob(40)
    broker = WinBroker(batch=8)
    broker.flush_held = False  # PUBACKs only once 8 publishes wait: W = 1 would stall
    link = _link(broker, 8)
    assert link.inflight_max == 8
    assert ob.pump(link, budget=40) == 40 and ob.empty()
    assert broker.max_waiting == 8 and len(broker.log) == 40
    assert [p for p, _d, _t, _b in broker.log] == list(range(1, 41))
    assert not [1 for _p, d, _t, _b in broker.log if d]  # no DUP: nothing was resent
    assert link.connects == 1 and ob.stats()["sent"] == 40
    ob.close()


def test_window_of_one_is_one_at_a_time_and_plain_send_unchanged():
    # EVIDENCE-OF: E25 E17
    ob, _ = _ob(5)
    broker = WinBroker()
    link = _link(broker, 1)
    assert ob.pump(link, budget=5) == 5 and broker.max_waiting == 1
    ob.put("t", b"x")
    assert ob.pump(link.send) == 1  # the plain send contract: one at a time, as before
    support.raises(ValueError, ddq_mqtt.WindowSender, inflight_max=0)
    ob.close()


def test_window_larger_than_the_queue():
    # EVIDENCE-OF: E25
    ob, _ = _ob(3)
    broker = WinBroker(batch=100)
    link = _link(broker, 64)
    assert ob.pump(link, budget=1000) == 3 and ob.empty() and broker.max_waiting == 3
    assert ob.pump(link, budget=1000) == 0  # an empty queue: nothing published, no wait
    ob.close()


def _two_then_drop(acked):
    # A PUBACK policy: ack the first two packet ids (kept in acked), then drop the connection
    # (the rest stays in flight, then the connection is closed).
    def answer(sock, pid):
        if len(acked) < 2:
            acked.append(pid)
            return b"\x40\x02" + bytes([pid >> 8, pid & 0xFF])
        sock.policy = "drop"
        return b""

    return answer


def test_disconnect_with_window_in_flight_republishes_with_dup():
    # EVIDENCE-OF: E25 E19
    ob, _ = _ob(12)
    acked = []
    two_then_drop = _two_then_drop(acked)

    broker = WinBroker(two_then_drop, "all")
    link = _link(broker, 8)
    assert ob.pump(link, budget=12) == 12 and ob.empty()
    # 1..8 fill the window; the PUBACKs of 1 and 2 make room for 9 and 10; then the drop.
    first = [p for p, _d, _t, _b in broker.log[0:10]]
    assert first == list(range(1, 11)) and link.connects == 2
    again = broker.log[10:18]
    assert [p for p, _d, _t, _b in again] == list(range(3, 11))  # the un-acked, in seq order
    assert all(d for _p, d, _t, _b in again)  # flagged DUP
    assert [b for _p, _d, _t, b in again] == [b"m%d" % (p - 1) for p in range(3, 11)]  # re-read
    assert not [1 for _p, d, _t, _b in broker.log[18:] if d]
    assert ob.stats()["resent"] == 8 and link.dups == 8
    got = set(p for p, _d, _t, _b in broker.log)
    assert got == set(range(1, 13))  # nothing lost; 8 duplicates, each flagged
    ob.close()


def test_puback_for_an_unknown_packet_id_is_ignored_and_counted():
    # EVIDENCE-OF: E25
    ob, _ = _ob(4)

    def wrong_first(sock, pid):
        return b"\x40\x02\x12\x34" + b"\xd0\x00" + b"\x40\x02" + bytes([pid >> 8, pid & 0xFF])

    broker = WinBroker(wrong_first)
    link = _link(broker, 4)
    assert ob.pump(link, budget=4) == 4 and ob.empty()
    assert link.unknown_acks == 4 and link.connects == 1
    ob.close()


def test_broker_that_never_acks_times_out_reconnects_then_backs_off():
    # EVIDENCE-OF: E25 E8 E30
    ob, clock = _ob(5, min_retry_ms=1000, max_retry_ms=1000)
    broker = WinBroker("never", "never", "never", "all")
    link = _link(broker, 16, timeout_ms=300)  # (30 ms failed once on a loaded board)
    assert ob.pump(link, budget=5) == 0
    # 5 in flight time out (none charged), 1 then 2 are republished alone and time out (each an
    # attempt); two losses in a row without a PUBACK end the round: all nacked, none left.
    assert link.timeouts == 3 and link.connects == 3
    st = ob.stats()
    assert st["retried"] == 5 and st["in_flight"] == 0 and st["resent"] == 2
    assert ob.next_ready_ms() > 0  # every message backs off (full jitter, E8)
    assert ob.pump(link, budget=5) == 0 and len(broker.socks) == 3  # nothing due: no reconnect
    clock.advance(1001)
    assert ob.pump(link, budget=5) == 5 and ob.empty() and link.connects == 4
    assert all(d for _p, d, _t, _b in broker.log[7:])  # attempts > 0: DUP
    assert [it.attempts for it in ob.queue.items()] == [1] * 5  # one attempt each, not two
    ob.close()


def test_connection_refused_nacks_everything_claimed():
    # EVIDENCE-OF: E25
    ob, _ = _ob(3)
    broker = WinBroker("refuse")
    assert ob.pump(_link(broker, 8), budget=3) == 0
    st = ob.stats()
    assert st["retried"] >= 1 and st["in_flight"] == 0 and st["pending"] == 3
    ob.close()


def test_no_message_stays_in_flight_past_its_lease():
    # EVIDENCE-OF: E25 E7
    clock = support.FakeClock(T0)
    ob, _ = _ob(3, clock=clock, lease_ms=400, min_retry_ms=10, max_retry_ms=10)
    broker = WinBroker("never", "all")
    # Every empty read moves the wall clock 50 ms, up to 300 ms: the lease (400 ms, margin a
    # quarter of it) ends within the margin there, and the loop must give the messages up.
    broker.tick = lambda: clock.advance(50) if clock() - T0 < 300 else None
    link = _link(broker, 8, timeout_ms=60000)
    assert ob.pump(link, budget=3) == 0
    st = ob.stats()
    assert st["lease_nacks"] == 3 and st["in_flight"] == 0 and st["retried"] == 3
    assert len(broker.log) == 3  # nacked before the lease ran out: never claimed twice meanwhile
    assert link.in_flight() == 0  # forget(): the sender stopped waiting for them too
    assert clock() - T0 == 300
    broker.tick = None
    clock.advance(20)
    # The connection is still up; the broker now acks, late: the first copies' PUBACKs confirm
    # the messages sent again (DUP, same packet ids), whose own PUBACKs are then unknown.
    sock = broker.socks[0]
    sock.policy = "all"
    for p in (1, 2, 3):
        sock.rx += b"\x40\x02\x00" + bytes([p])
    assert ob.pump(link, budget=3) == 3 and ob.empty() and link.connects == 1
    assert [d for p, d, _t, _b in broker.log[3:]] == [True] * 3 and link.unknown_acks == 3
    ob.close()


def test_ordered_outbox_keeps_one_in_flight():
    # EVIDENCE-OF: E25 E12
    ob, _ = _ob(6, ordered=True)
    broker = WinBroker(batch=1)
    assert ob.pump(_link(broker, 16), budget=6) == 6 and broker.max_waiting == 1
    assert [p for p, _d, _t, _b in broker.log] == list(range(1, 7))
    ob.close()


def test_rejected_from_publish_is_a_dead_letter():
    # EVIDENCE-OF: E25 E17
    ob, _ = _ob(3)

    class Picky:
        inflight_max = 4
        timeout_ms = 100

        def __init__(self):
            self.acked = []

        def publish(self, m, dup=False):
            if m.seq == 2:
                raise ddq_outbox.Rejected("no")
            self.acked.append(m.seq)

        def poll(self, timeout_ms=0):
            out, self.acked = self.acked, []
            return out

    assert ob.pump(Picky(), budget=3) == 2
    assert ob.stats()["rejected"] == 1 and ob.empty()
    ob.close()


def test_asyncio_loop_with_a_window():
    # EVIDENCE-OF: E25 E17
    asyncio = shared.needs_asyncio()
    ob, _ = _ob(20)
    acked = []
    two_then_drop = _two_then_drop(acked)

    broker = WinBroker(two_then_drop, "all", batch=4)
    link = _link(broker, 8)
    n = asyncio.run(ob.run(link, idle_ms=1, stop=ob.empty))
    assert n == 20 and ob.empty() and link.connects == 2
    assert set(p for p, _d, _t, _b in broker.log) == set(range(1, 21))
    assert ob.stats()["resent"] >= 6 and link.dups == ob.stats()["resent"]
    ob.close()


def test_in_flight_messages_hold_no_payload_and_resends_reread_it():
    # EVIDENCE-OF: E25
    support.needs_heap(
        192 * 1024,
        "six 3,000 B payloads beside an open Outbox (3 KB blocks; "
        "the 32-bit board's 136 KiB heap has none left)",
        192 * 1024,
    )
    ob, _ = _ob(0)
    for i in range(6):
        ob.put("big/%d" % i, b"%d" % i * 3000)

    class Spy:
        inflight_max = 3
        timeout_ms = 100

        def __init__(self):
            self.fl, self.seqs, self.held, self.drop, self.resent = [], [], [], True, []

        def publish(self, m, dup=False):
            assert len(m.payload) == 3000, len(m.payload)
            if dup:  # a resend: a fresh Message, re-read from the queue (dropped after this)
                self.resent.append((m.seq, bytes(m.payload[0:1])))
            else:
                self.fl.append(m)  # the loop's own Message, kept while in flight
            self.seqs.append(m.seq)

        def poll(self, timeout_ms=0):
            # while waiting, the loop's in-flight messages carry no payload (not held as a copy)
            self.held += [len(m.payload) for m in self.fl]
            if self.drop:
                self.drop, self.seqs = False, []
                raise OSError(104)  # the connection dropped with the window full
            out, self.seqs, self.fl = self.seqs, [], []
            return out

    spy = Spy()
    assert ob.pump(spy, budget=6) == 6 and ob.empty()
    assert spy.held and max(spy.held) == 0
    assert spy.resent == [(1, b"0"), (2, b"1"), (3, b"2")]  # re-read from the queue
    ob.close()


def _drops_on(topic, seen):
    # A PUBACK policy: a broker that closes the connection when a PUBLISH of `topic` arrives (as
    # mosquitto does for one it finds malformed, or too large), losing the PUBACKs it had not
    # sent yet, as mosquitto 2.0 does; anything else is acked at once. seen: pids it dropped on.
    def answer(sock, pid):
        if sock.b.log[-1][2] == topic:
            seen.append(pid)
            sock.policy, sock.rx[:] = "drop", b""
            return b""
        return b"" if sock.policy == "drop" else b"\x40\x02" + bytes([pid >> 8, pid & 0xFF])

    return answer


def test_a_connection_drop_is_an_attempt_and_ends_as_a_dead_letter():
    # EVIDENCE-OF: E30 E25 E10
    for ordered in (False, True):
        ob, clock = _ob(0, min_retry_ms=10, max_retry_ms=10, max_attempts=3, ordered=ordered)
        seqs = [ob.put("w/bad" if i == 3 else "w/%d" % i, b"m%d" % i) for i in range(12)]
        seen = []
        broker = WinBroker(_drops_on("w/bad", seen))
        link = _link(broker, 8)
        for _ in range(12):  # bounded: each round charges the poison one attempt at most
            ob.pump(link, budget=20)
            clock.advance(11)
            if ob.empty():
                break
        assert ob.empty() and ob.stats()["sent"] == 11, ob.stats()
        dead = ob.dead_letters()
        assert [m.seq for m in dead] == [seqs[3]] and dead[0].attempts == 2
        assert (
            dead[0].reason.startswith(b"max_attempts: ")
            and b"closed by the broker" in dead[0].reason
        )
        # every other message delivered, never charged for the poison's drops
        assert [it.attempts for it in ob.queue.items() if it.seq != seqs[3]] == [0] * 11
        # three drops alone, three attempts; unordered, a first drop with 8 in flight charged none
        assert len(seen) == (3 if ordered else 4) and ob.stats()["exhausted"] == 1
        if ordered:
            assert broker.max_waiting == 1 and link.connects == 4
            got = [b for _p, _d, t, b in broker.log if t != "w/bad"]
            assert got == [b"m%d" % i for i in range(12) if i != 3]  # strict FIFO held
        ob.close()
    # the plain send (E17, one at a time) counts each drop as its attempt too
    ob, clock = _ob(0, min_retry_ms=10, max_retry_ms=10, max_attempts=2, ordered=True)
    bad, seen = ob.put("w/bad", b"x"), []
    ob.put("w/ok", b"y")
    link = _link(WinBroker(_drops_on("w/bad", seen)), 1)
    for _ in range(4):
        ob.pump(link.send)
        clock.advance(11)
    assert ob.empty() and ob.stats()["sent"] == 1 and len(seen) == 2
    assert ob.queue.reason(bad).startswith(b"max_attempts: ")
    ob.close()


def test_a_loss_with_a_former_solo_among_several_in_flight_charges_none_and_resends_all():
    # EVIDENCE-OF: E30 E25
    # Liveness torture seed 36439: a message republished alone and lost was nacked; claimed
    # again in the same pump, it was still taken for "the one alone on the connection" at the
    # next loss, though another was in flight beside it: it was charged, and the other was never
    # republished (it waited for its lease's end; a poll that returns at once spun meanwhile).
    ob, clock = _ob(4, min_retry_ms=50, max_retry_ms=50)

    class Spy:
        inflight_max = 2
        timeout_ms = 1000

        def __init__(self):
            self.wire, self.log, self.polls = [], [], 0

        def publish(self, m, dup=False):
            self.wire.append(m.seq)
            self.log.append((m.seq, dup))

        def poll(self, timeout_ms=0):
            self.polls += 1
            assert self.polls < 100
            k = self.polls
            if not self.wire:
                clock.advance(timeout_ms)  # nothing arrives: a real poll waits this long
                return []
            if k in (1, 3, 5):  # the connection drops: nothing on it is acked
                self.wire = []
                raise OSError(104)
            if k == 4:  # one PUBACK; the one before waits on
                clock.advance(100)  # (the message nacked at poll 3 is due again)
                return [self.wire.pop()]
            out, self.wire = self.wire, []
            return out

    spy = Spy()
    assert ob.pump(spy, budget=8) == 4 and ob.empty()
    # 1 and 2 lost together, 1 alone acked, 2 alone lost (nacked), 3 and 4, 4 acked, 2 again
    # beside 3: lost together, so neither is charged; both republished one at a time
    assert spy.log[:8] == [
        (1, False),
        (2, False),
        (1, True),
        (2, True),
        (3, False),
        (4, False),
        (2, True),
        (2, True),
    ], spy.log
    assert spy.log[8:] == [(3, True)], spy.log
    assert ob.counters["lease_nacks"] == 0 and ob.counters["retried"] == 1, ob.stats()
    ob.close()
