# port/ddq_mqtt.py against a scripted fake broker (a socket-like object): packet encoding, the
# PUBACK contract, packet ids (iotspool T8), DUP on redelivery, reconnect after a failure; and
# the adapter driven by Outbox.pump. Shared suite: subset Python. The real-broker runs (mosquitto,
# with a restart) are in tests/e2e/test_mqtt_mosquitto.py.
import support

# Measured: the module passes whole in a 192 KiB heap (unix port, 64-bit, beside the runner).
support.needs_heap(192 * 1024, support.OUTBOX_HEAP, 128 * 1024)  # 32-bit: measured on qemu
import ddq_mqtt
import ddq_outbox

T0 = 1767225600000
CONNACK = b"\x20\x02\x00\x00"


def puback(pid):
    return b"\x40\x02" + bytes([pid >> 8, pid & 0xFF])


class FakeSock:
    """Socket-like: recv() serves the scripted broker bytes, sendall() records what was sent."""

    def __init__(self, script):
        self.rx = bytearray(script)
        self.tx = bytearray()
        self.closed = False

    def sendall(self, b):
        if self.closed:
            raise OSError(9)
        self.tx += b

    def recv(self, n):
        n = min(n, len(self.rx), 3)  # short reads on purpose
        b = bytes(self.rx[0:n])
        self.rx[0:n] = b""
        return b

    def close(self):
        self.closed = True


class Broker:
    """A connect factory: each connection gets the next script."""

    def __init__(self, *scripts):
        self.scripts = list(scripts)
        self.socks = []

    def __call__(self):
        if not self.scripts:
            raise OSError(111)
        s = FakeSock(self.scripts.pop(0))
        self.socks.append(s)
        return s


def msg(seq, topic="t", payload=b"p", qos=1, retain=False, attempts=0):
    m = ddq_outbox.Message()
    m.seq, m.topic, m.payload, m.qos, m.retain, m.attempts = (
        seq,
        topic,
        payload,
        qos,
        retain,
        attempts,
    )
    return m


def test_T8_packet_id_is_never_zero():
    # EVIDENCE-OF: E19
    assert ddq_mqtt.packet_id(1) == 1
    assert ddq_mqtt.packet_id(65535) == 65535
    assert ddq_mqtt.packet_id(65536) == 1
    assert ddq_mqtt.packet_id(65535 * 7 + 1) == 1
    for seq in range(1, 300000, 977):
        assert 0 < ddq_mqtt.packet_id(seq) < 65536
    assert ddq_mqtt.packet_id(2**64 - 2) != 0
    support.raises(ValueError, ddq_mqtt.encode_publish, b"t", b"", 1, False, False, 0)


def test_encode_connect_and_publish_bytes():
    # EVIDENCE-OF: E19
    c = ddq_mqtt.encode_connect(b"dev", 60)
    assert c == b"\x10\x0f\x00\x04MQTT\x04\x02\x00\x3c\x00\x03dev", c
    p = ddq_mqtt.encode_publish(b"a/b", b"xy", 1, False, False, 258)
    assert p == b"\x32\x09\x00\x03a/b\x01\x02xy", p
    p = ddq_mqtt.encode_publish(b"a/b", b"xy", 1, True, True, 1)
    assert p[0] == 0x3B, p  # PUBLISH | DUP | QoS 1 | RETAIN
    p = ddq_mqtt.encode_publish(b"a", b"", 0, False, True)
    assert p == b"\x30\x03\x00\x01a", p  # QoS 0: no packet id, never DUP
    big = ddq_mqtt.encode_publish(b"t", b"z" * 200, 1, False, False, 5)
    assert big[1:3] == b"\xcd\x01", big[0:4]  # remaining length 205 in two bytes


def test_send_waits_for_the_matching_puback():
    # EVIDENCE-OF: E19
    broker = Broker(CONNACK + puback(9) + b"\xd0\x00" + puback(7))
    link = ddq_mqtt.Sender(connect=broker, client_id=b"dev")
    assert link.send(msg(7, "a/b", b"hello")) is True
    tx = bytes(broker.socks[0].tx)
    assert tx.startswith(ddq_mqtt.encode_connect(b"dev", 60))
    assert tx.endswith(ddq_mqtt.encode_publish(b"a/b", b"hello", 1, False, False, 7))
    assert link.connects == 1


def test_dup_on_redelivery_and_qos0_needs_no_puback():
    # EVIDENCE-OF: E19
    broker = Broker(CONNACK + puback(3))
    link = ddq_mqtt.Sender(connect=broker)
    assert link.send(msg(3, attempts=2)) is True
    assert bytes(broker.socks[0].tx).endswith(
        ddq_mqtt.encode_publish(b"t", b"p", 1, False, True, 3)
    )
    assert link.send(msg(4, qos=0, retain=True, attempts=5)) is True
    assert bytes(broker.socks[0].tx).endswith(b"\x31\x04\x00\x01tp")


def test_failure_raises_closes_and_the_next_send_reconnects():
    # EVIDENCE-OF: E19
    broker = Broker(CONNACK, CONNACK + puback(1))  # the first connection dies before PUBACK
    link = ddq_mqtt.Sender(connect=broker)
    e = support.raises(OSError, link.send, msg(1))
    assert broker.socks[0].closed and link.sock is None and e.args[0] == 104
    assert link.send(msg(1, attempts=1)) is True and link.connects == 2
    refused = Broker(b"\x20\x02\x00\x05")
    support.raises(OSError, ddq_mqtt.Sender(connect=refused).send, msg(1))
    assert refused.socks[0].closed


def test_outbox_pump_through_the_adapter():
    # EVIDENCE-OF: E17 E19
    # (on the 32-bit qemu board an open Outbox beside ddq_mqtt and the runner found no 3 KiB
    # block: measured, tests/host/test_host_qemu.py)
    support.needs_heap(0, "an open Outbox beside ddq_mqtt and the runner", 144 * 1024)
    clock = support.FakeClock(T0)
    ob = ddq_outbox.Outbox(support.tmpdir(), clock=clock, seed=3, min_retry_ms=10, max_retry_ms=10)
    for i in range(3):
        ob.put("dev/%d" % i, b"v%d" % i)
    broker = Broker(CONNACK + puback(1), CONNACK + puback(2) + puback(3))
    link = ddq_mqtt.Sender(connect=broker)
    assert ob.pump(link.send) == 1  # seq 2 fails: the connection closes without PUBACK
    clock.advance(10)
    assert ob.pump(link.send) == 2 and ob.empty()
    tx = bytes(broker.socks[1].tx)
    assert ddq_mqtt.encode_publish(b"dev/1", b"v1", 1, False, True, 2) in tx  # DUP: attempt 2
    assert ddq_mqtt.encode_publish(b"dev/2", b"v2", 1, False, False, 3) in tx
    ob.close()


class ReadOnlySock(FakeSock):
    """A TLS socket of an older port: read/write only (no recv/sendall)."""

    def __init__(self, raw):
        FakeSock.__init__(self, b"")
        self.raw = raw

    def write(self, b):
        self.raw.sendall(b)

    def read(self, n):
        return self.raw.recv(n)

    def close(self):
        self.raw.close()


ReadOnlySock.recv = None
ReadOnlySock.sendall = None


class FakeTLS:
    """A context-like object: wrap_socket records the server name, or fails like mbedtls."""

    def __init__(self, fail=None):
        self.names = []
        self.fail = fail

    def wrap_socket(self, sock, server_hostname=None):
        self.names.append(server_hostname)
        if self.fail is not None:
            raise self.fail
        return ReadOnlySock(sock)


def test_tls_option_wraps_the_socket_with_the_server_name():
    # EVIDENCE-OF: E20
    broker = Broker(CONNACK + puback(5))
    tls = FakeTLS()
    link = ddq_mqtt.Sender("broker.example", connect=broker, ssl=tls, client_id=b"dev")
    assert link.port == 8883 and ddq_mqtt.Sender().port == 1883
    assert link.send(msg(5, "a/b", b"hi")) is True
    assert tls.names == ["broker.example"], tls.names
    tx = bytes(broker.socks[0].tx)  # written through the wrapper's write()
    assert tx.endswith(ddq_mqtt.encode_publish(b"a/b", b"hi", 1, False, False, 5)), tx
    other = ddq_mqtt.Sender(
        "10.0.0.7", 9000, connect=Broker(CONNACK), ssl=tls, server_hostname="broker.example"
    )
    other.connect()
    assert other.port == 9000 and tls.names[-1] == "broker.example", tls.names
    other.close()


def test_tls_handshake_failure_is_an_oserror_and_closes_the_socket():
    # EVIDENCE-OF: E20
    for fail in (
        ValueError("The certificate is not correctly signed by the trusted CA"),
        OSError(110),
    ):
        broker = Broker(CONNACK)
        link = ddq_mqtt.Sender("h", connect=broker, ssl=FakeTLS(fail))
        e = support.raises(OSError, link.send, msg(1))
        assert broker.socks[0].closed and link.sock is None
        if isinstance(fail, ValueError):
            assert "trusted CA" in str(e), str(e)
        else:
            assert e.args[0] == 110, e.args
