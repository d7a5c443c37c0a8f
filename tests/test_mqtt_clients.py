# The adapters of port/ddq_mqtt.py for the MQTT clients users already run (umqtt.simple, mqtt_as,
# paho-mqtt), against tiny fakes with only the methods the adapters use: PUBACK = ack, failure =
# nack and a reconnect, TCP_NODELAY, the packet id. Shared suite: subset Python. The real clients
# against a real broker (killed and restarted mid-stream) are in
# tests/e2e/test_client_adapters_broker.py.
import support

# Measured: the module passes whole in a 192 KiB heap (unix port, 64-bit, beside the runner).
support.needs_heap(192 * 1024, support.OUTBOX_HEAP, 128 * 1024)  # 32-bit: measured on qemu
import ddq_mqtt
import ddq_outbox
import shared  # noqa: E402

T0 = 1767225600000


class FakeSock:
    def __init__(self):
        self.opts = []
        self.timeout = None
        self.closed = False

    def setsockopt(self, level, opt, value):
        self.opts.append((level, opt, value))

    def settimeout(self, t):
        self.timeout = t

    def close(self):
        self.closed = True


class FakeUmqtt:
    """umqtt.simple.MQTTClient's surface: connect(clean), publish(topic, msg, retain, qos) that
    returns after the PUBACK (here: at once), disconnect(), .sock, .pid, .keepalive."""

    def __init__(self):
        self.sock = None
        self.pid = 0
        self.keepalive = 0
        self.sent = []  # (topic, msg, retain, qos, pid)
        self.fail_publish = []  # seqs (by payload) whose publish raises once
        self.refuse = 0  # connects to refuse
        self.socks = []

    def connect(self, clean_session=True):
        self.sock = FakeSock()
        self.socks.append(self.sock)
        if self.refuse:
            self.refuse -= 1
            raise OSError(111)
        return 0

    def disconnect(self):
        self.sock.close()

    def publish(self, topic, msg, retain=False, qos=0):
        if qos:
            self.pid += 1
        if msg in self.fail_publish:
            self.fail_publish.remove(msg)
            raise OSError(-1)  # umqtt.simple: the broker closed the connection
        self.sent.append((topic, msg, retain, qos, self.pid if qos else 0))


def _ob(**kw):
    return ddq_outbox.Outbox(
        support.tmpdir(), clock=support.FakeClock(T0), seed=3, min_retry_ms=1, max_retry_ms=1, **kw
    )


def test_umqtt_acks_after_publish_with_nodelay_and_the_message_packet_id():
    # EVIDENCE-OF: E24
    ob, c = _ob(), FakeUmqtt()
    for i in range(3):
        ob.put("t/%d" % i, b"m%d" % i, retain=i == 1)
    ob.put("q0", b"zero", qos=0)
    link = ddq_mqtt.Umqtt(c, timeout_ms=2500)
    assert ob.pump(link.send) == 4 and ob.empty()
    assert c.sent == [
        (b"t/0", b"m0", False, 1, 1),
        (b"t/1", b"m1", True, 1, 2),
        (b"t/2", b"m2", False, 1, 3),
        (b"q0", b"zero", False, 0, 0),
    ], c.sent
    assert c.sock.opts == [(6, 1, 1)] and c.sock.timeout == 2.5 and link.connects == 1
    # the packet id follows the seq, never 0: seq 65536 -> 1, as Sender's (iotspool T8)
    m = ddq_outbox.Message()
    m.seq, m.topic, m.payload, m.qos = 65536, "t", b"x", 1
    assert link.send(m) and c.sent[-1][4] == ddq_mqtt.packet_id(65536) == 1
    ob.close()


class TLSSock(FakeSock):
    settimeout = None  # a TLS socket without settimeout (some MicroPython ports)


def test_umqtt_over_a_socket_without_settimeout():
    # EVIDENCE-OF: E24
    ob, c = _ob(), FakeUmqtt()
    ob.put("t", b"m")
    link = ddq_mqtt.Umqtt(c)
    link.connect()
    c.sock = TLSSock()  # as umqtt.simple's ssl=True leaves it
    assert ob.pump(link.send) == 1 and ob.empty()
    ob.close()


def test_umqtt_failure_nacks_closes_and_reconnects():
    # EVIDENCE-OF: E24
    ob, c = _ob(), FakeUmqtt()
    for i in range(3):
        ob.put("t", b"m%d" % i)
    c.fail_publish = [b"m1"]
    link = ddq_mqtt.Umqtt(c)
    assert ob.pump(link.send) == 1  # m0 acked, m1 failed: nacked, the round ends
    first = c.socks[0]
    assert first.closed and not link.up
    st = ob.stats()
    assert st["retried"] == 1 and st["sent"] == 1
    c.refuse = 1  # the broker is down: connect fails, the message is nacked again
    ob.queue.clock.advance(10)
    assert ob.pump(link.send) == 0 and c.socks[1].closed and ob.stats()["retried"] == 2
    ob.queue.clock.advance(10)
    assert ob.pump(link.send) == 2 and ob.empty() and link.connects == 2
    assert [s[1] for s in c.sent] == [b"m0", b"m1", b"m2"]
    ob.close()


class Info:
    def __init__(self, published, rc=0):
        self.published, self.rc = published, rc

    def wait_for_publish(self, timeout=None):
        if self.rc:
            raise RuntimeError("Message publish failed")

    def is_published(self):
        return self.published


class FakePaho:
    def __init__(self):
        self.connected = True
        self.acks = []  # per publish: True (PUBACK came), False (no PUBACK in time)
        self.sent = []

    def is_connected(self):
        return self.connected

    def publish(self, topic, payload=None, qos=0, retain=False):
        self.sent.append((topic, payload, qos, retain))
        return Info(self.acks.pop(0) if self.acks else True)


def test_paho_acks_only_a_published_message():
    # EVIDENCE-OF: E24
    ob, c = _ob(), FakePaho()
    for i in range(3):
        ob.put("t/%d" % i, b"m%d" % i)
    link = ddq_mqtt.Paho(c, timeout_ms=10)
    c.connected = False
    assert ob.pump(link.send) == 0 and c.sent == []  # not connected: nack, paho gets no copy
    ob.queue.clock.advance(10)
    c.connected, c.acks = True, [True, False]
    assert ob.pump(link.send) == 1  # the second had no PUBACK within timeout_ms: nack
    ob.queue.clock.advance(10)
    assert ob.pump(link.send) == 2 and ob.empty()
    assert c.sent[0] == ("t/0", b"m0", 1, False) and ob.stats()["retried"] == 2
    ob.close()


class FakeMqttAs:
    def __init__(self, asyncio):
        self.asyncio = asyncio
        self.hang = 0  # publishes that wait for a reconnection that does not come
        self.sent = []

    async def publish(self, topic, msg, retain=False, qos=0):
        if self.hang:
            self.hang -= 1
            await self.asyncio.sleep(10)
        await self.asyncio.sleep(0)
        self.sent.append((topic, msg, retain, qos))


def test_mqtt_as_awaits_the_publish_and_a_hung_one_times_out():
    # EVIDENCE-OF: E24
    asyncio = shared.needs_asyncio()
    ob, c = _ob(), FakeMqttAs(asyncio)
    for i in range(3):
        ob.put("t/%d" % i, b"m%d" % i)
    c.hang = 1
    link = ddq_mqtt.MqttAs(c, timeout_ms=20)

    def stop():
        ob.queue.clock.advance(5)
        return ob.empty()

    assert asyncio.run(ob.run(link.send, idle_ms=1, stop=stop)) == 3
    assert ob.stats()["retried"] == 1
    assert sorted(c.sent) == [
        (b"t/0", b"m0", False, 1),
        (b"t/1", b"m1", False, 1),
        (b"t/2", b"m2", False, 1),
    ], c.sent
    ob.close()


def test_nodelay_is_false_where_it_cannot_be_set():
    # EVIDENCE-OF: E24
    class NoOpt:
        pass

    class Refuses:
        def setsockopt(self, *a):
            raise OSError(95)

    s = FakeSock()
    assert ddq_mqtt.nodelay(s) and s.opts == [(6, 1, 1)]
    assert not ddq_mqtt.nodelay(NoOpt()) and not ddq_mqtt.nodelay(Refuses())
