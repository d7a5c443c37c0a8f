"""ddq_mqtt: deliver ddq_outbox.Outbox messages through MQTT 3.1.1, QoS 1 (PUBACK = delivered).

Adapters for the MQTT client you already run: each `send(m)` publishes one message and returns
True only after the broker's PUBACK, so the Outbox acks it; a failed publish or a lost connection
raises, so the Outbox nacks it (retried after a backoff) [E24]; their code is ddq_clients.py's,
loaded at the first use of one:

    ob.pump(ddq_mqtt.Umqtt(umqtt.simple.MQTTClient(b"dev-42", "broker.local")).send)
    await ob.run(ddq_mqtt.MqttAs(mqtt_as_client).send)      # asyncio: Peter Hinch's mqtt_as
    ob.pump(ddq_mqtt.Paho(paho_client).send)                 # CPython gateways: paho-mqtt

and `Sender`, a minimal client of our own over `socket` (CONNECT, PUBLISH, PUBACK, DISCONNECT;
no subscribe, no PINGREQ: a connection idle past keepalive is closed and made afresh) that runs
unchanged on CPython and MicroPython [E19]. Packet ids come from the ddq seq and are never 0;
DUP is set on a redelivery (attempts > 0).

    import ddq_mqtt, ddq_outbox
    ob = ddq_outbox.Outbox("outbox")
    link = ddq_mqtt.Sender("broker.local", client_id=b"dev-42")
    # TLS (ddq_tls.py): ddq_mqtt.Sender("broker.local", ssl=ddq_mqtt.tls_context(cafile="ca.der"))
    ob.put("site/dev-42/temp", b"21.5")
    ob.pump(link.send)        # or: asyncio.run(ob.run(link.send))

Wire format: MQTT 3.1.1 (OASIS) §3.1 CONNECT, §3.2 CONNACK, §3.3 PUBLISH, §3.4 PUBACK. Behaviour:
docs/OUTBOX.md §13.3 [E19], TLS [E20], adapters [E24], what a broker may send [E29].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import struct
import time

_MP = hasattr(time, "ticks_ms")  # a feature probe; mypy's two passes read it as a flag
if _MP:
    from micropython import const as const  # re-exported: ddq_tls and ddq_clients import it

    def _ms() -> int:
        t: int = time.ticks_ms()  # type: ignore[assignment]  # stubs: an opaque _TicksMs
        return t & 0x3FFFFFFF
else:

    def const(x: int) -> int:
        return x

    def _ms() -> int:
        return (time.monotonic_ns() // 1000000) & 0x3FFFFFFF


TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

_CONNECT = const(0x10)
_CONNACK = const(0x20)
_PUBLISH = const(0x30)
_PUBACK = const(0x40)
_DISCONNECT = const(0xE0)
_DUP = const(0x08)
_RETAIN = const(0x01)
_QOS1 = const(0x02)
_MAX_PACKETS = const(64)  # packets read while waiting for one PUBACK (PINGRESP, stale PUBACKs)
# The largest remaining length a client reads [E29]: what a 3.1.1 broker sends a client that
# never subscribes is CONNACK and PUBACK (2 bytes), PINGRESP (0); more is a protocol error,
# raised before the body is read. Below 128, so a packet it reads has a one-byte length.
MAX_IN = const(16)
_ECONNRESET = const(104)
_ECONNREFUSED = const(111)
_ETIMEDOUT = const(110)
_ECONNABORTED = const(103)
_EPROTO = const(71)


def _hex(b: bytes) -> str:
    # At most 8 bytes in hex: an error text never carries what a broker sent whole [E29].
    return "".join(["%02x" % x for x in b[:8]]) + ("..." if len(b) > 8 else "")


def _bad(h: int, n: int) -> OSError:
    # A packet of more than MAX_IN bytes (n: its first length byte): refused before its body.
    return OSError(
        _EPROTO,
        "MQTT packet 0x%02x announces %s bytes (at most %d are read)"
        % (h, "128 or more" if n & 0x80 else str(n), MAX_IN),
    )


def packet_id(seq: int) -> int:
    """Return the MQTT packet id of ddq seq: 1..65535, never 0, stable across redeliveries."""
    return (seq - 1) % 65535 + 1


def _varlen(n: int) -> bytes:
    # MQTT remaining length: 7 bits a byte, high bit = more (§2.2.3); at most 268,435,455.
    if n > 268435455:
        raise ValueError("MQTT packet too large")
    out = bytearray()
    for _ in range(4):
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            break
    return bytes(out)


def _str(b: bytes) -> bytes:
    return struct.pack("!H", len(b)) + b


def encode_connect(
    client_id: bytes,
    keepalive: int = 60,
    clean: bool = True,
    user: "Optional[bytes]" = None,
    password: "Optional[bytes]" = None,
) -> bytes:
    """Return a CONNECT packet (protocol level 4)."""
    flags = (
        (0x02 if clean else 0)
        | (0x80 if user is not None else 0)
        | (0x40 if password is not None else 0)
    )
    body = _str(b"MQTT") + struct.pack("!BBH", 4, flags, keepalive) + _str(client_id)
    if user is not None:
        body += _str(user)
    if password is not None:
        body += _str(password)
    return bytes([_CONNECT]) + _varlen(len(body)) + body


def encode_publish(
    topic: bytes,
    payload: bytes,
    qos: int = 1,
    retain: bool = False,
    dup: bool = False,
    pid: int = 0,
) -> bytes:
    """Return a PUBLISH packet; QoS 1 needs a packet id in 1..65535 (§3.3.2.2)."""
    if qos and not 0 < pid < 65536:
        raise ValueError("QoS 1 needs a packet id in 1..65535")
    h = (
        _PUBLISH
        | (_QOS1 if qos else 0)
        | (_RETAIN if retain else 0)
        | (_DUP if qos and dup else 0)
    )
    var = _str(topic) + (struct.pack("!H", pid) if qos else b"")
    return bytes([h]) + _varlen(len(var) + len(payload)) + var + payload


# ============================================================================ parts
# Beside ddq_mqtt.py, each loaded at its first use (DESIGN §4.1), so that a board that only
# publishes through Sender never holds them: ddq_tls, the TLS contexts of Sender(ssl=...) [E20],
# and ddq_clients, the adapters for the MQTT clients users already run (umqtt.simple, mqtt_as,
# paho) [E24]. ddq_mqtt.NAME reaches each of their public names (PEP 562, as ddq's _PARTS).
_PARTS = {"ddq_tls": " tls_context ", "ddq_clients": " Umqtt MqttAs Paho nodelay "}
if TYPE_CHECKING:
    from ddq_clients import MqttAs as MqttAs, Paho as Paho, Umqtt as Umqtt, nodelay as nodelay
    from ddq_tls import tls_context as tls_context


def __getattr__(name: str) -> "Any":
    for m in _PARTS:
        if " %s " % name in _PARTS[m]:
            try:
                mod = __import__(m)
            except ImportError:
                raise ImportError("ddq_mqtt: port file %s.py missing (needed by %s)" % (m, name))
            return getattr(mod, name)
    raise AttributeError(name)


class Sender:
    """One MQTT connection that publishes ddq messages; send(msg) returns True once delivered
    (QoS 1: PUBACK received; QoS 0: written) and raises OSError otherwise, after closing the
    connection (the next send reconnects). `connect` may supply a socket-like object (tests).
    What it gives that the adapters' clients do not: one client for CPython and MicroPython
    alike (umqtt.simple and mqtt_as are MicroPython-only, paho CPython-only); no dependency to
    install on the board; the packet id is the message's (stable across redeliveries) with DUP
    set on a redelivery; one deadline of timeout_ms for a whole connect or send (a dribbling
    broker cannot renew it) and no packet read past MAX_IN bytes [E29]; and TLS that
    verifies the broker by default on both interpreters (tls_context).
    ssl: None (plain TCP), True (tls_context()), or a context with wrap_socket(sock,
    server_hostname=...), e.g. tls_context(cafile=...); port 0 means 1883, or 8883 with ssl
    [E20]. server_hostname: the name the certificate must carry (default: host). clock: the
    deadline's monotonic ms (default the ticks clock; tests inject one)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        client_id: bytes = b"ddq",
        keepalive: int = 60,
        timeout_ms: int = 5000,
        user: "Optional[bytes]" = None,
        password: "Optional[bytes]" = None,
        connect: "Optional[Callable[[], Any]]" = None,
        ssl: "Any" = None,
        server_hostname: "Optional[str]" = None,
        clock: "Optional[Callable[[], int]]" = None,
    ) -> None:
        if not 0 < timeout_ms < 0x20000000:
            raise ValueError("timeout_ms: 1..2**29-1")
        if ssl is True:
            ssl = __getattr__("tls_context")()  # (ddq_tls, through the one rule: _PARTS)
        self.ssl = ssl or None
        self.host, self.client_id = host, client_id
        self.port = port or (8883 if self.ssl is not None else 1883)
        self.server_hostname = server_hostname or host
        self.keepalive, self.timeout_ms = keepalive, timeout_ms
        self.user, self.password = user, password
        self._factory = connect
        self.sock: "Any" = None
        self._st: "Any" = None  # the connection's settimeout (its TCP socket's under old TLS)
        self._clock = clock or _ms  # monotonic ms (tests inject one)
        self._dl = 0  # the deadline of the connect or send under way (clock ms) [E29]
        self._last = 0
        self.connects = 0  # how many connections were made (statistics)

    def _arm(self) -> None:
        # Before every read and write: the deadline bounds the whole connect or send, so the
        # socket waits at most what is left of it (a ticks_diff); none left is ETIMEDOUT [E29].
        left = ((self._dl - self._clock() + 0x20000000) & 0x3FFFFFFF) - 0x20000000
        if left <= 0:
            raise OSError(_ETIMEDOUT, "MQTT: no answer within %d ms" % self.timeout_ms)
        if self._st is not None:
            self._st(left / 1000)

    def _open(self) -> "Any":
        # socket is imported here, not at the top, and only without a connect factory: the
        # adapters need none, so the module loads on a port without networking too (Sender
        # then raises ImportError: a nack), and a factory's connection needs no socket module.
        if self._factory is not None:
            s = self._factory()
        else:
            import socket

            s = socket.socket()
        try:
            self._st = getattr(s, "settimeout", None)
            if self._factory is None:
                addr = socket.getaddrinfo(self.host, self.port)[0][-1]
                self._arm()
                s.connect(addr)
            if self.ssl is not None:
                self._arm()
                try:  # the handshake, within what is left of the deadline
                    s = self.ssl.wrap_socket(s, server_hostname=self.server_hostname)
                except ValueError as e:
                    if isinstance(e, OSError):
                        raise
                    # MicroPython's mbedtls reports a rejected certificate as ValueError; the
                    # Sender's contract is OSError [E19].
                    raise OSError(_ECONNABORTED, "TLS: %s" % str(e).strip()[:120]) from None
                # A TLS socket without settimeout reads through its TCP socket's timeout.
                self._st = getattr(s, "settimeout", None) or self._st
        except BaseException:
            s.close()
            raise
        return s

    def _write(self, b: bytes) -> None:
        w = getattr(self.sock, "sendall", None) or self.sock.write  # sendall where it exists
        self._arm()
        w(b)
        self._last = self._clock()

    def _read(self, n: int) -> bytes:
        # n (at most MAX_IN + 2) bytes, each read within what is left of the deadline [E29].
        out = b""
        r = getattr(self.sock, "recv", None) or self.sock.read  # old TLS sockets: read only
        for _ in range(n + 1):
            if len(out) >= n:
                break
            self._arm()
            chunk = r(n - len(out))
            if chunk is None:  # a TLS read whose TCP socket timed out (MicroPython)
                raise OSError(_ETIMEDOUT, "MQTT: no answer within %d ms" % self.timeout_ms)
            if not chunk:
                raise OSError(_ECONNRESET, "MQTT connection closed by the broker")
            out += chunk
        return out

    def _packet(self) -> "tuple[int, bytes]":
        # One packet from the broker: its header byte and its body of at most MAX_IN bytes; a
        # longer one is refused from its length byte, before any of its body is read [E29].
        hb = self._read(2)
        h, n = hb[0], hb[1]
        if n > MAX_IN:
            raise _bad(h, n)
        return h, self._read(n) if n else b""

    def connect(self) -> None:
        """Open the connection (CONNECT, wait for CONNACK) within timeout_ms; OSError if
        refused, on a protocol error, or past the deadline [E29]."""
        self._dl = self._clock() + self.timeout_ms
        self._connect()

    def _connect(self) -> None:
        # Under the deadline self._dl, set by connect() or by the send that connects.
        self.close()
        self.sock = self._open()
        try:
            self._write(
                encode_connect(self.client_id, self.keepalive, True, self.user, self.password)
            )
            h, body = self._packet()
            if h != _CONNACK or len(body) != 2:
                raise OSError(
                    _EPROTO,
                    "MQTT: expected a CONNACK, got packet 0x%02x of %d bytes"
                    " (%s)" % (h, len(body), _hex(body)),
                )
            if body[1] != 0:
                raise OSError(_ECONNREFUSED, "MQTT CONNACK refused: return code %d" % body[1])
        except BaseException:
            self.close()
            raise
        self.connects += 1

    def close(self) -> None:
        """Send DISCONNECT (best effort) and close the socket."""
        s, self.sock, self._st = self.sock, None, None
        if s is not None:
            try:
                (getattr(s, "sendall", None) or s.write)(bytes([_DISCONNECT, 0]))
            except OSError:
                pass
            s.close()

    def send(self, m: "Any") -> bool:
        """Publish one ddq_outbox.Message (topic, payload, qos, retain, seq, attempts) [E19];
        the whole send, a connect included, within timeout_ms [E29]."""
        now = self._clock()
        self._dl = now + self.timeout_ms
        idle = ((now - self._last + 0x20000000) & 0x3FFFFFFF) - 0x20000000  # ticks_diff
        if self.sock is not None and self.keepalive and not 0 <= idle < self.keepalive * 1000:
            self.close()  # idle past keepalive: the broker may have dropped us; start afresh
        if self.sock is None:
            self._connect()
        pid = packet_id(m.seq)
        try:
            self._write(
                encode_publish(m.topic.encode(), m.payload, m.qos, m.retain, m.attempts > 0, pid)
            )
            if not m.qos:
                return True
            for _ in range(_MAX_PACKETS):
                h, body = self._packet()
                if h & 0xF0 != _PUBACK:
                    continue  # PINGRESP, or anything else small: skipped
                if h != _PUBACK or len(body) != 2:
                    raise OSError(
                        _EPROTO,
                        "MQTT: malformed PUBACK 0x%02x of %d bytes (%s)"
                        % (h, len(body), _hex(body)),
                    )
                if struct.unpack("!H", body)[0] == pid:
                    return True  # the only way to True for QoS 1: this packet id's PUBACK
            raise OSError(_ETIMEDOUT, "no PUBACK for packet id %d" % pid)
        except BaseException:
            self.close()
            raise


_EAGAIN = const(11)
_EWOULDBLOCK_MP = const(115)  # EINPROGRESS: some ports' non-blocking recv


class WindowSender(Sender):
    """A Sender that keeps up to inflight_max QoS 1 publishes in flight (a window) [E25].

    The windowed-sender protocol of Outbox.pump/run: publish(m, dup) writes one PUBLISH and
    returns (it waits only while the window is full or m's packet id is taken); poll(timeout_ms)
    returns the seqs whose PUBACK arrived (possibly none) and raises OSError once the connection
    is lost or no PUBACK came for timeout_ms while messages were in flight. After an OSError
    nothing is in flight: the next publish reconnects (clean session) and the caller republishes
    what was not acked, with dup=True. RAM: two ints per message in flight, never a payload.
    send(m) (one message at a time, W = 1) still works."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, inflight_max: int = 16, **kw: "Any"
    ) -> None:
        Sender.__init__(self, host, port, **kw)
        if not 1 <= inflight_max <= 65535:
            raise ValueError("inflight_max: 1..65535")
        self.inflight_max = inflight_max
        self._fl: "dict[int, int]" = {}  # packet id -> seq, in flight on this connection
        self._acked: "list[int]" = []  # seqs confirmed (PUBACK, or QoS 0 written), not polled
        self._rb = b""  # bytes read, not yet a whole packet
        self._since = 0  # ticks of the last progress (a PUBACK, or the window filling from 0)
        self.dups = 0  # PUBLISHes sent with DUP (statistics)
        self.unknown_acks = 0  # PUBACKs for a packet id not in flight: ignored (statistics)
        self.timeouts = 0  # connections dropped because no PUBACK came in time (statistics)

    def connect(self) -> None:
        """Open the connection; nothing is in flight on a new (clean) session."""
        Sender.connect(self)
        if self.sock is not None:
            so = getattr(self.sock, "setsockopt", None)
            if so is not None and self.ssl is None:
                try:  # TCP_NODELAY: a window of small packets must not wait for Nagle
                    so(6, 1, 1)
                except (OSError, TypeError, ValueError):
                    pass

    def close(self) -> None:
        """Send DISCONNECT (best effort) and close; what was in flight is forgotten."""
        Sender.close(self)
        self._fl = {}
        self._rb = b""

    def in_flight(self) -> int:
        """How many publishes wait for their PUBACK on this connection."""
        return len(self._fl)

    def publish(self, m: "Any", dup: bool = False) -> None:
        """Write m's PUBLISH (DUP if dup or m.attempts > 0); OSError: the connection is lost.
        A connect, and then the write, each within timeout_ms [E29]."""
        idle = ((self._clock() - self._last + 0x20000000) & 0x3FFFFFFF) - 0x20000000
        if (
            self.sock is not None
            and not self._fl
            and self.keepalive
            and not 0 <= idle < self.keepalive * 1000
        ):
            self.close()
        if self.sock is None:
            self.connect()
        pid = packet_id(m.seq)
        try:
            if m.qos:
                for _ in range(65536):  # wait for room and for a free packet id
                    s = self._fl.get(pid)
                    if len(self._fl) < self.inflight_max and s in (None, m.seq):
                        break
                    self._acked.extend(self._wait(self.timeout_ms))
            d = bool(m.qos) and (dup or m.attempts > 0)
            self._dl = self._clock() + self.timeout_ms
            if not self._fl:
                self._since = self._dl - self.timeout_ms
            self._write(encode_publish(m.topic.encode(), m.payload, m.qos, m.retain, d, pid))
            self.dups += 1 if d else 0
            if m.qos:
                self._fl[pid] = m.seq
            else:
                self._acked.append(m.seq)
        except BaseException:
            self.close()
            raise

    def forget(self, seq: int) -> None:
        """Stop waiting for seq's PUBACK (the loop gave it up at its lease's end): its packet id
        is free again; a PUBACK that still comes for it is counted unknown."""
        pid = packet_id(seq)
        if self._fl.get(pid) == seq:
            del self._fl[pid]

    def poll(self, timeout_ms: int = 0) -> "list[int]":
        """Return the seqs confirmed since the last poll, waiting up to timeout_ms for one."""
        out, self._acked = self._acked, []
        if out or self.sock is None or not self._fl:
            return out
        try:
            return self._wait(timeout_ms)
        except BaseException:
            self.close()
            raise

    def _take(self) -> "list[int]":
        # Parse the whole packets in the read buffer; return the seqs their PUBACKs confirm.
        out, b, i = [], self._rb, 0
        while i + 2 <= len(b):
            n, j = b[i + 1], i + 2  # MAX_IN < 128: a packet read has a one-byte length
            if n > MAX_IN:  # [E29] refused from its length, before its body is read
                raise _bad(b[i], n)
            if j + n > len(b):
                break
            if b[i] & 0xF0 == _PUBACK and (b[i] != _PUBACK or n != 2):
                raise OSError(
                    _EPROTO,
                    "MQTT: malformed PUBACK 0x%02x of %d bytes (%s)"
                    % (b[i], n, _hex(b[j : j + n])),
                )
            if b[i] == _PUBACK:  # the only way a seq is confirmed: its packet id's PUBACK
                s = self._fl.pop((b[j] << 8) | b[j + 1], None)
                if s is None:
                    self.unknown_acks += 1  # stale, duplicated or never sent: ignored
                else:
                    out.append(s)
                    self._since = self._clock()
            i = j + n  # PINGRESP and anything else: skipped
        self._rb = b[i:]
        return out

    def _wait(self, timeout_ms: int) -> "list[int]":
        # Read until a PUBACK confirms something or timeout_ms passes; OSError on a closed
        # connection or when no PUBACK confirmed a message in flight for timeout_ms (self's).
        t0 = self._clock()
        r = getattr(self.sock, "recv", None) or self.sock.read
        st = self._st
        for _ in range(1048576):
            out = self._take()
            if out or not self._fl:
                return out
            now = self._clock()
            left = timeout_ms - (((now - t0 + 0x20000000) & 0x3FFFFFFF) - 0x20000000)
            stall = self.timeout_ms - (
                ((now - self._since + 0x20000000) & 0x3FFFFFFF) - 0x20000000
            )
            if stall <= 0:
                self.timeouts += 1
                raise OSError(
                    _ETIMEDOUT,
                    "no PUBACK for %d ms (%d in flight)" % (self.timeout_ms, len(self._fl)),
                )
            if left < 0:
                return out
            w = min(left, stall)
            chunk = None
            try:
                if st is not None:
                    st(w / 1000)  # a write re-arms its own (_arm)
                chunk = r(256)
            except OSError as e:
                # Nothing to read yet: EAGAIN/ETIMEDOUT (MicroPython), TimeoutError or
                # BlockingIOError (CPython), SSLWantReadError (CPython TLS, non-blocking).
                if (
                    e.args
                    and e.args[0] not in (_EAGAIN, _ETIMEDOUT, _EWOULDBLOCK_MP)
                    and "timed out" not in str(e)
                    and "WantRead" not in type(e).__name__
                ):
                    raise
            if chunk is not None:
                if not chunk:
                    raise OSError(_ECONNRESET, "MQTT connection closed by the broker")
                self._rb += chunk
            elif left <= 0:
                return out
        return []
