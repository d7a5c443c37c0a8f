# OUTBOX E29: nothing a broker sends can exhaust the senders' memory or stretch their timeout.
# ddq_mqtt.Sender, WindowSender and Outbox.pump against a fake broker (a socket-like object)
# that serves scripted bytes, then either an endless body (a 256 MB announcement the broker
# "means"; reading more than a few KiB of it fails the test at once) or a dribble: one byte a
# read, each read moving the sender's injected clock, so a deadline expires after a known
# number of reads with no real waiting. Shared suite: subset Python, bounded loops.
import support

# Measured: the module passes whole in a 192 KiB heap (unix port, 64-bit, beside the runner).
support.needs_heap(192 * 1024, support.OUTBOX_HEAP, 128 * 1024)  # 32-bit: measured on qemu
import ddq_mqtt
import ddq_outbox

T0 = 1767225600000
CONNACK = b"\x20\x02\x00\x00"
HUGE = b"\xff\xff\xff\x7f"  # remaining length 268,435,455 (256 MB), the largest MQTT allows
EPROTO, ETIMEDOUT, ECONNRESET = 71, 110, 104
TEXT_MAX = 100  # every error text of these tests stays this short


def puback(pid):
    return b"\x40\x02" + bytes([pid >> 8, pid & 0xFF])


class Peer:
    """A broker connection: recv() serves `script` (up to 64 bytes a read, no time passing),
    then `tail` forever: `dribble` serves it one byte a read, each read advancing `clock` by
    `step_ms`; otherwise it is an endless body, and reading more than 4 KiB of it fails the
    test. Without a tail, the end of the script is the broker closing the connection."""

    def __init__(self, script, tail=b"", dribble=False, clock=None, step_ms=1000):
        self.rx = bytearray(script)
        self.tail, self.dribble, self.clock, self.step_ms = tail, dribble, clock, step_ms
        self.tx = bytearray()
        self.reads, self.tail_served, self.timeouts = 0, 0, []
        self.closed = False

    def settimeout(self, t):
        self.timeouts.append(t)

    def sendall(self, b):
        if self.closed:
            raise OSError(9)
        self.tx += b

    def recv(self, n):
        if self.closed:
            raise OSError(9)
        self.reads += 1
        if self.rx:
            n = min(n, len(self.rx), 64)
            b = bytes(self.rx[0:n])
            self.rx[0:n] = b""
            return b
        if not self.tail:
            return b""
        if self.dribble:
            if self.clock is not None:
                self.clock.advance(self.step_ms)
            n = 1
        n = min(n, 1024)
        k = self.tail_served % len(self.tail)
        b = (self.tail[k:] + self.tail * (n // len(self.tail) + 1))[0:n]
        self.tail_served += n
        assert self.dribble or self.tail_served <= 4096, "the sender read the body"
        return b

    def close(self):
        self.closed = True


class Broker:
    """A connect factory: connection i gets peers[i] (a Peer, or a function making one)."""

    def __init__(self, *peers):
        self.peers = list(peers)
        self.socks = []

    def __call__(self):
        if len(self.socks) >= len(self.peers):
            raise OSError(111)
        p = self.peers[len(self.socks)]
        s = p() if callable(p) and not isinstance(p, Peer) else p
        self.socks.append(s)
        return s


def msg(seq, qos=1):
    m = ddq_outbox.Message()
    m.seq, m.topic, m.payload, m.qos, m.retain, m.attempts = seq, "t", b"p", qos, False, 0
    return m


def _ob(n, clock=None):
    ob = ddq_outbox.Outbox(
        support.tmpdir(),
        clock=clock or support.FakeClock(T0),
        seed=7,
        min_retry_ms=10,
        max_retry_ms=10,
    )
    for i in range(n):
        ob.put("t/%d" % i, b"m%d" % i)
    return ob


def _measure(fn, *args):
    # (what fn(*args) returned or the OSError it raised, tracemalloc's peak in bytes, or None where
    # there is no tracemalloc: then the Peer's 4 KiB guard is the bound)
    try:
        import tracemalloc
    except ImportError:
        tracemalloc = None
    if tracemalloc is not None:
        tracemalloc.start()
    try:
        got = fn(*args)
    except OSError as e:
        got = e
    finally:
        peak = None
        if tracemalloc is not None:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return got, peak


def _peak(fn, *args):
    got, peak = _measure(fn, *args)
    assert isinstance(got, OSError), "expected OSError, got %r" % (got,)
    return got, peak


def _short(e):
    t = str(e)
    assert len(t) <= TEXT_MAX, (len(t), t[0:200])
    return t


def test_E29_a_huge_connack_is_refused_from_its_length():
    # EVIDENCE-OF: E29 E19
    peer = Peer(b"\x20" + HUGE, tail=b"\x00")
    link = ddq_mqtt.Sender(connect=Broker(peer))
    e, peak = _peak(link.connect)
    assert e.args[0] == EPROTO and peer.tail_served == 0, (e.args, peer.tail_served)
    assert peer.closed and link.sock is None
    assert "0x20" in _short(e) and "128 or more" in str(e), str(e)
    assert peak is None or peak < 1024 * 1024, peak  # CPython: a real bound, not a timing


def test_E29_a_huge_puback_or_unexpected_packet_is_refused_for_sender():
    # EVIDENCE-OF: E29 E19
    for head in (
        b"\x40" + HUGE,
        b"\x30" + HUGE,
        b"\x90\xc8\x01",
        b"\xd0\x11",
        b"\x20\x80\x80\x80\x80",
    ):  # the last: a malformed (5-byte) length
        peer = Peer(CONNACK + head, tail=b"\x00")
        link = ddq_mqtt.Sender(connect=Broker(peer))
        e, peak = _peak(link.send, msg(1))
        assert e.args[0] == EPROTO and peer.tail_served == 0, (head, e.args, peer.tail_served)
        assert peer.closed and link.sock is None
        _short(e)
        assert peak is None or peak < 1024 * 1024, peak
    # At most MAX_IN bytes: an unexpected packet that small is skipped, the PUBACK still counts.
    small = bytes([0xD0, ddq_mqtt.MAX_IN]) + b"\x00" * ddq_mqtt.MAX_IN
    link = ddq_mqtt.Sender(connect=Broker(Peer(CONNACK + small + puback(1))))
    assert ddq_mqtt.MAX_IN == 16 and link.send(msg(1)) is True


def test_E29_a_huge_packet_is_refused_by_the_window_sender():
    # EVIDENCE-OF: E29 E25
    for head in (b"\x40" + HUGE, b"\x30" + HUGE, b"\xd0\x11", b"\x42\x02\x00\x01"):
        peer = Peer(CONNACK + head, tail=b"\x00")
        link = ddq_mqtt.WindowSender(connect=Broker(peer), inflight_max=4)
        link.publish(msg(1))
        e, peak = _peak(link.poll, 1000)
        assert e.args[0] == EPROTO and peer.tail_served <= 256, (head, e.args, peer.tail_served)
        assert peer.closed and link.in_flight() == 0
        _short(e)
        assert peak is None or peak < 1024 * 1024, peak


def test_E29_outbox_pump_nacks_on_a_huge_packet_with_both_senders():
    # EVIDENCE-OF: E29 E17 E25
    for windowed in (False, True):
        ob = _ob(3)
        peers = [Peer(CONNACK + b"\x40" + HUGE, tail=b"\x00") for _ in range(2)]
        link = ddq_mqtt.WindowSender(connect=Broker(*peers), inflight_max=4)
        n, peak = _measure(ob.pump, link if windowed else link.send)
        st = ob.stats()
        assert n == 0 and st["sent"] == 0 and st["pending"] == 3, (windowed, st)
        assert st["retried"] >= 1 and st["in_flight"] == 0, st
        assert sum(p.tail_served for p in peers) <= 512, [p.tail_served for p in peers]
        assert peak is None or peak < 2 * 1024 * 1024, peak
        ob.close()


def test_E29_a_dribbled_connack_is_bounded_by_one_deadline():
    # EVIDENCE-OF: E29 E19
    clock = support.FakeClock(T0)
    peer = Peer(b"", tail=CONNACK, dribble=True, clock=clock)
    link = ddq_mqtt.Sender(connect=Broker(peer), timeout_ms=2000, clock=clock)
    e = support.raises(OSError, link.connect)
    assert e.args[0] == ETIMEDOUT and clock() - T0 == 2000, (e.args, clock() - T0)
    assert peer.reads == 2 and peer.closed  # 1 s a byte: the third read is never made
    assert peer.timeouts and max(peer.timeouts) <= 2.0, peer.timeouts  # each read: what is left
    assert peer.timeouts[-1] <= 1.0, peer.timeouts
    _short(e)


def test_E29_a_dribbling_broker_cannot_stretch_a_send():
    # EVIDENCE-OF: E29 E19
    clock = support.FakeClock(T0)
    # CONNACK at once, then PINGRESPs one byte a second forever: each PINGRESP is a whole,
    # valid packet, but no read renews the send's deadline.
    peer = Peer(CONNACK, tail=b"\xd0\x00", dribble=True, clock=clock)
    link = ddq_mqtt.Sender(connect=Broker(peer), timeout_ms=5000, clock=clock)
    e = support.raises(OSError, link.send, msg(1))
    assert e.args[0] == ETIMEDOUT and clock() - T0 == 5000, (e.args, clock() - T0)
    assert peer.tail_served == 5 and link.sock is None
    _short(e)
    # A send that has to connect gets one deadline for both: a dribbled CONNACK eats into it.
    clock2 = support.FakeClock(T0)
    slow = Peer(b"", tail=CONNACK + puback(1), dribble=True, clock=clock2)
    link = ddq_mqtt.Sender(connect=Broker(slow), timeout_ms=5000, clock=clock2)
    e = support.raises(OSError, link.send, msg(1))
    assert e.args[0] == ETIMEDOUT and clock2() - T0 == 5000 and slow.tail_served == 5
    support.raises(ValueError, ddq_mqtt.Sender, timeout_ms=0)


def test_E29_a_dribbling_broker_is_bounded_for_the_window_sender_and_pump():
    # EVIDENCE-OF: E29 E25
    clock = support.FakeClock(T0)
    peer = Peer(CONNACK, tail=b"\xd0\x00", dribble=True, clock=clock)
    link = ddq_mqtt.WindowSender(
        connect=Broker(peer), inflight_max=4, timeout_ms=3000, clock=clock
    )
    link.publish(msg(1))
    e = support.raises(OSError, link.poll, 60000)
    assert e.args[0] == ETIMEDOUT and clock() - T0 == 3000 and peer.tail_served == 3
    assert link.timeouts == 1 and link.in_flight() == 0
    _short(e)
    # Through Outbox.pump (its own clock the same): one reconnect and resend, then the round
    # ends; two deadlines in all, and nothing acked.
    for windowed in (False, True):
        clock = support.FakeClock(T0)
        ob = _ob(2, clock)
        peers = [Peer(CONNACK, tail=b"\xd0\x00", dribble=True, clock=clock) for _ in range(2)]
        link = ddq_mqtt.WindowSender(connect=Broker(*peers), timeout_ms=3000, clock=clock)
        assert ob.pump(link if windowed else link.send, budget=2) == 0
        st = ob.stats()
        assert st["sent"] == 0 and st["pending"] == 2 and st["retried"] >= 1, (windowed, st)
        assert clock() - T0 == (6000 if windowed else 3000), (windowed, clock() - T0)
        ob.close()


def test_E29_connack_texts_are_bounded():
    # EVIDENCE-OF: E29 E19
    junk = bytes([0x20, ddq_mqtt.MAX_IN]) + b"\xab" * ddq_mqtt.MAX_IN
    e = support.raises(OSError, ddq_mqtt.Sender(connect=Broker(Peer(junk))).connect)
    t = _short(e)
    assert e.args[0] == EPROTO and "abababababababab..." in t and "ab" * 9 not in t, t
    e = support.raises(OSError, ddq_mqtt.Sender(connect=Broker(Peer(b"\x20\x02\x00\x05"))).connect)
    assert e.args[0] == 111 and _short(e).endswith("return code 5"), str(e)


def test_E29_no_ack_without_the_messages_own_puback():
    # EVIDENCE-OF: E29 E19 E25
    # Everything but a PUBACK for the message's packet id (1): another id's PUBACK, PUBREC,
    # PUBREL and PUBCOMP carrying id 1, a PUBLISH carrying it, a CONNACK, a PINGRESP, then a
    # PUBACK cut short by the broker closing: nothing may be acked.
    junk = (
        puback(0x1234)
        + b"\x50\x02\x00\x01"
        + b"\x62\x02\x00\x01"
        + b"\x70\x02\x00\x01"
        + b"\x32\x05\x00\x01t\x00\x01"
        + CONNACK
        + b"\xd0\x00"
        + b"\x40\x02\x00"
    )
    e = support.raises(OSError, ddq_mqtt.Sender(connect=Broker(Peer(CONNACK + junk))).send, msg(1))
    assert e.args[0] == ECONNRESET, e.args
    link = ddq_mqtt.WindowSender(connect=Broker(Peer(CONNACK + junk)), inflight_max=4)
    link.publish(msg(1))
    e = support.raises(OSError, link.poll, 1000)
    assert e.args[0] == ECONNRESET and link.unknown_acks == 1, (e.args, link.unknown_acks)
    # A PUBACK with reserved flags set (0x42) is malformed, not a PUBACK.
    bad = Peer(CONNACK + b"\x42\x02\x00\x01" + puback(1))
    e = support.raises(OSError, ddq_mqtt.Sender(connect=Broker(bad)).send, msg(1))
    assert e.args[0] == EPROTO, e.args
    for windowed in (False, True):
        ob = _ob(3)
        peers = [Peer(CONNACK + junk) for _ in range(3)]
        link = ddq_mqtt.WindowSender(connect=Broker(*peers), inflight_max=4)
        assert ob.pump(link if windowed else link.send, budget=3) == 0
        st = ob.stats()
        assert st["sent"] == 0 and st["pending"] == 3 and st["in_flight"] == 0, (windowed, st)
        ob.close()
    # And the real one acks: the message's PUBACK after all of that junk but the cut one.
    link = ddq_mqtt.Sender(connect=Broker(Peer(CONNACK + junk[0:-3] + puback(1))))
    assert link.send(msg(1)) is True


def _loopback(data):
    """A real TCP connection on 127.0.0.1 whose broker end has already written `data` (and
    then stays silent): (client socket, broker socket). Single-threaded: the client connects
    to the listener's backlog, the broker end is accepted and writes before the sender reads."""
    try:
        import socket
    except ImportError:
        raise support.Skip("this port has no socket module")
    import os

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    port = 0
    if hasattr(ls, "getsockname"):
        ls.bind(("127.0.0.1", 0))
        port = ls.getsockname()[1]
    else:  # MicroPython: no getsockname; try free ports from a random start
        base = 20000 + (os.urandom(2)[0] << 7)
        for k in range(64):
            try:
                ls.bind(socket.getaddrinfo("127.0.0.1", base + k)[0][-1])
                port = base + k
                break
            except OSError:
                pass
        assert port, "no free loopback port"
    ls.listen(1)
    c = socket.socket()
    c.connect(socket.getaddrinfo("127.0.0.1", port)[0][-1])
    b = ls.accept()[0]
    ls.close()
    b.sendall(data() if callable(data) else data)  # (made once a socket exists: 8 KiB)
    return c, b


def test_E29_over_real_tcp_a_huge_connack_and_a_silent_broker():
    # EVIDENCE-OF: E29 E19
    c, b = _loopback(lambda: b"\x20" + HUGE + b"\x00" * 8192)  # its body waiting, 8 KiB of it
    try:
        link = ddq_mqtt.Sender(connect=lambda: c, timeout_ms=200)
        e, peak = _peak(link.connect)
        assert e.args[0] == EPROTO and link.sock is None, e.args
        _short(e)
        assert peak is None or peak < 1024 * 1024, peak
    finally:
        b.close()
    # A broker that sends half a PUBACK and then nothing: the client's own small real
    # deadline (100 ms) ends the send; nothing is acked.
    c, b = _loopback(CONNACK + b"\x40\x02\x00")
    try:
        link = ddq_mqtt.Sender(connect=lambda: c, timeout_ms=100)
        e = support.raises(OSError, link.send, msg(1))
        assert link.sock is None and (e.args[0] in (ETIMEDOUT, 11) or "timed out" in str(e)), (
            e.args
        )
    finally:
        b.close()
