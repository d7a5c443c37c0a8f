"""ddq_clients: ddq_mqtt's adapters for the MQTT clients users already run [E24].

Each send(m) publishes one ddq_outbox.Message and returns True only after the broker's PUBACK
(QoS 1; QoS 0: once written), so the Outbox acks it; any failure raises, so the Outbox nacks it
(retried after a backoff). None of them imports its client: pass the client object in.

    ob.pump(ddq_mqtt.Umqtt(umqtt.simple.MQTTClient(b"dev-42", "broker.local")).send)
    await ob.run(ddq_mqtt.MqttAs(mqtt_as_client).send)      # asyncio: Peter Hinch's mqtt_as
    ob.pump(ddq_mqtt.Paho(paho_client).send)                 # CPython gateways: paho-mqtt

Loaded at its first use (ddq_mqtt.Umqtt, ...: ddq_mqtt's _PARTS), never by a board that
publishes through ddq_mqtt's own Sender (DESIGN §4.1). Behaviour: docs/OUTBOX.md [E24], [E30].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq_mqtt import _ms, const, packet_id

TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any

_ECONNRESET = const(104)
_ETIMEDOUT = const(110)


# ============================================================================ adapters [E24]
def nodelay(sock: "Any") -> bool:
    """Set TCP_NODELAY on sock; False where it cannot be set (no setsockopt, e.g. a TLS socket).

    Clients that write a packet in several small writes (umqtt.simple) otherwise wait for the
    peer's delayed ACK on every publish: 200 QoS 1 publishes took 8.8 s instead of 10 ms.
    """
    try:
        sock.setsockopt(6, 1, 1)  # IPPROTO_TCP, TCP_NODELAY: the same numbers on Linux and lwIP
        return True
    except (AttributeError, OSError):
        return False


def _drop(sock: "Any") -> None:
    try:
        sock.close()
    except (AttributeError, OSError):
        pass


class Umqtt:
    """Deliver through micropython-lib's umqtt.simple MQTTClient (blocking, MicroPython).

    send(m) connects if needed (then sets TCP_NODELAY and the read timeout), publishes m with
    its topic, QoS and retain and returns True when publish() returned, which for QoS 1 is after
    the PUBACK. The packet id is the message's (1..65535, as Sender's), so a redelivery reuses
    it and a long-lived client never sends id 0. Any failure closes the socket and raises
    (nack); the next send connects again, also after keepalive seconds idle. timeout_ms bounds
    each wait for the broker (umqtt.simple 1.3.4's connect() itself has no timeout).
    """

    def __init__(self, client: "Any", timeout_ms: int = 5000, clean: bool = True) -> None:
        self.client, self.timeout_ms, self.clean = client, timeout_ms, clean
        self.up = False
        self.connects = 0  # how many connections were made (statistics)
        self._last = 0

    def connect(self) -> None:
        """Connect the client now (CONNECT, CONNACK), with TCP_NODELAY."""
        self.close()
        c = self.client
        try:
            c.connect(self.clean)
        except BaseException:
            _drop(c.sock)  # umqtt.simple leaves a failed connect's socket open
            raise
        nodelay(c.sock)
        self.up, self._last = True, _ms()
        self.connects += 1

    def close(self) -> None:
        """Disconnect (best effort) and close the socket."""
        if self.up:
            self.up = False
            try:
                self.client.disconnect()
            except OSError:
                _drop(self.client.sock)

    def send(self, m: "Any") -> bool:
        """Publish one ddq_outbox.Message; True after the PUBACK [E24]."""
        c, ka = self.client, getattr(self.client, "keepalive", 0)
        idle = ((_ms() - self._last + 0x20000000) & 0x3FFFFFFF) - 0x20000000  # ticks_diff
        if self.up and ka and not 0 <= idle < ka * 1000:
            self.close()  # idle past keepalive: the broker may have dropped us
        if not self.up:
            self.connect()
        try:
            st = getattr(c.sock, "settimeout", None)  # some TLS sockets have none: no bound then
            if st is not None:
                st(self.timeout_ms / 1000)  # each time: umqtt's wait_msg() resets it to blocking
            if m.qos:
                c.pid = packet_id(m.seq) - 1  # publish() adds 1
            c.publish(m.topic.encode(), m.payload, m.retain, m.qos)
        except BaseException:
            self.up = False
            _drop(c.sock)
            raise
        self._last = _ms()
        return True


class MqttAs:
    """Deliver through an asyncio MQTT client with mqtt_as's publish(topic, msg, retain, qos):
    Peter Hinch's mqtt_as, or micropython-mqtt-async (mqtt_async).

    `await send(m)` awaits the client's publish, which for QoS 1 returns after the PUBACK, and
    returns True. The client keeps its own connection (connect it first); while it is down its
    publish waits for a reconnection, so timeout_ms bounds the wait: past it the publish is
    cancelled and asyncio.TimeoutError raised (nack). For Outbox.run (asyncio).
    """

    def __init__(self, client: "Any", timeout_ms: int = 10000) -> None:
        self.client, self.timeout_ms = client, timeout_ms

    async def send(self, m: "Any") -> bool:
        """Publish one ddq_outbox.Message; True after the PUBACK [E24]."""
        import asyncio

        await asyncio.wait_for(
            self.client.publish(m.topic.encode(), m.payload, m.retain, m.qos),
            self.timeout_ms / 1000,
        )
        return True


class Paho:
    """Deliver through a paho-mqtt Client (CPython) whose network loop runs (loop_start(), or
    loop_forever() in a thread) and which reconnects by itself.

    send(m) refuses while the client is not connected (OSError: nack; paho is not given a copy
    to resend later), publishes m and waits up to timeout_ms for the PUBACK
    (wait_for_publish); True once is_published(). A publish paho refuses or that is not
    acknowledged in time raises (nack) and is withdrawn from paho's queue, so paho does not
    resend it after a reconnect on its own (a copy already on the wire may still arrive: a
    duplicate that at-least-once allows) [E30].
    """

    def __init__(self, client: "Any", timeout_ms: int = 10000) -> None:
        self.client, self.timeout_ms = client, timeout_ms

    def send(self, m: "Any") -> bool:
        """Publish one ddq_outbox.Message; True after the PUBACK [E24]."""
        c = self.client
        if not c.is_connected():
            raise OSError(_ECONNRESET, "MQTT client not connected")
        info = c.publish(m.topic, m.payload, m.qos, m.retain)
        try:
            info.wait_for_publish(self.timeout_ms / 1000)  # RuntimeError/ValueError: not sent
            if info.is_published():
                return True
            raise OSError(_ETIMEDOUT, "no PUBACK within %d ms" % self.timeout_ms)
        except BaseException:
            # Withdrawn: paho would publish it again after every reconnect, on its own, and
            # one the broker drops the connection for would then block the client for ever
            # after the Outbox gave up on it [E30] (paho 2 has no public call: its own steps).
            lk = getattr(c, "_out_message_mutex", None)
            if lk is not None:
                with lk:
                    w = c._out_messages.pop(info.mid, None)
                    if w is not None and w.qos and w.state != 9:  # 9: mqtt_ms_queued
                        c._inflight_messages -= 1
            raise
