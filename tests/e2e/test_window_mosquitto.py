"""The window (OUTBOX E25) at its edges, over real sockets: ddq_mqtt.WindowSender under Outbox.pump
-> a delaying relay of our own (it also reads every PUBLISH the sender writes, to check DUP) ->
a real mosquitto -> a paho subscriber. The broker's side drops every connection with the window
full; a fake broker (a socket server in this file) answers with a PUBACK for an unknown packet
id, or accepts the connection and never acks. The MicroPython run drives the same code from the
unix port in a subprocess. EVIDENCE-OF: E25 E19
"""

import contextlib
import os
import queue
import socket
import struct
import threading
import time

import pytest
from test_mqtt_mosquitto import MICROPYTHON, Subscriber, mp_delivered, mp_publisher

import brokers
import ddq_mqtt
import ddq_outbox


@pytest.fixture
def broker(tmp_path):  # type: ignore[no-untyped-def]
    """tests/brokers.py: mosquitto (installed with apt-get when root), else the embedded amqtt."""
    yield from brokers.serve(str(tmp_path / "broker"))


class Relay:
    """127.0.0.1:<port> -> target, every segment delayed `delay` s each way (order kept, reads
    never wait for writes); records (packet id, DUP) of every QoS 1 PUBLISH the client writes;
    cut() closes every connection at once (what a broker that drops its clients does)."""

    def __init__(self, target: int, delay: float = 0.02) -> None:
        self.target, self.delay = target, delay
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.port = int(self.srv.getsockname()[1])
        self.socks: list[socket.socket] = []
        self.publishes: list[tuple[int, bool]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            with self.lock:
                self.socks += [c, u]
            threading.Thread(target=self._pipe, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, sniff: bool) -> None:
        q: "queue.Queue[tuple[float, bytes]]" = queue.Queue()

        def out() -> None:
            while True:
                t, b = q.get()
                if not b:
                    break
                time.sleep(max(0.0, t - time.monotonic()))
                try:
                    dst.sendall(b)
                except OSError:
                    break
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        threading.Thread(target=out, daemon=True).start()
        buf = b""
        while True:
            try:
                b = src.recv(65536)
            except OSError:
                b = b""
            if sniff and b:
                buf = self._sniff(buf + b)
            q.put((time.monotonic() + self.delay, b))
            if not b:
                return

    def _sniff(self, b: bytes) -> bytes:
        while len(b) >= 2:
            n, shift, j = 0, 0, 1
            while j < len(b):
                n |= (b[j] & 0x7F) << shift
                shift += 7
                j += 1
                if not b[j - 1] & 0x80:
                    break
            else:
                return b
            if j + n > len(b):
                return b
            if b[0] & 0xF0 == 0x30 and b[0] & 0x06:
                tl = struct.unpack_from("!H", b, j)[0]
                pid = struct.unpack_from("!H", b, j + 2 + tl)[0]
                with self.lock:
                    self.publishes.append((pid, bool(b[0] & 0x08)))
            b = b[j + n :]
        return b

    def cut(self) -> None:
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.srv.close()
        self.cut()


def _pump_until(ob: ddq_outbox.Outbox, link: "object", seconds: float, until=None) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end and not ob.empty():
        ob.pump(link, budget=50)
        if until is not None and until():
            return
        time.sleep(min(ob.next_ready_ms() or 0, 50) / 1000)


def test_broker_drops_the_connection_with_the_window_full(broker, tmp_path):  # type: ignore[no-untyped-def]
    n, w = 400, 16
    sub = Subscriber(broker.sub_port, "win/#")
    relay = Relay(broker.port)
    ob = ddq_outbox.Outbox(
        str(tmp_path / "q"), min_retry_ms=20, max_retry_ms=200, lease_ms=10000, sync_interval_ms=20
    )
    link = ddq_mqtt.WindowSender(
        "127.0.0.1", relay.port, inflight_max=w, client_id=b"ddq-win-pub", timeout_ms=3000
    )
    want = {b"%06d" % i for i in range(n)}
    cuts: list[int] = []

    def cutter() -> None:  # drop every connection three times while the window is full
        for k, lag in ((1, 0.0), (2, 0.03), (3, 0.015)):
            while ob.counters["sent"] < k * n // 4 and len(cuts) < 3:
                time.sleep(0.005)
            # The window moves in bursts (16 PUBACKs come back together, 16 PUBLISHes go out):
            # cut at different phases, so that some cuts lose PUBLISHes on their way to the
            # broker and others lose PUBACKs on their way back (those resends are duplicates).
            time.sleep(lag)
            if link.in_flight() >= w // 2:
                cuts.append(link.in_flight())
            relay.cut()

    try:
        for i in range(n):
            ob.put("win/%d" % (i % 5), b"%06d" % i)
        t = threading.Thread(target=cutter, daemon=True)
        t.start()
        _pump_until(ob, link, 60)
        t.join(10)
        st = ob.stats()
        assert ob.empty() and st["sent"] == n, st
        missing = sub.wait_for(want, 30)
        dups = len(sub.got) - len(sub.distinct())
        with relay.lock:
            pubs = list(relay.publishes)
        seen: set[int] = set()
        undup = 0
        for pid, dup in pubs:
            if pid in seen and not dup:
                undup += 1  # a second copy of a packet id without DUP: must never happen
            seen.add(pid)
        print(
            "window %d, %d cuts with %s in flight: %d lost, %d duplicates received, "
            "%d resent (DUP), %d publishes, %d connects"
            % (w, 3, cuts, len(missing), dups, st["resent"], len(pubs), link.connects)
        )
        assert not missing, sorted(missing)[:10]
        assert cuts and max(cuts) >= w // 2  # the window was (at least half) full at a cut
        assert st["resent"] >= 1 and link.dups == sum(1 for _p, d in pubs if d)
        assert undup == 0 and len(pubs) - len(seen) <= link.dups
        assert link.connects >= 4
    finally:
        link.close()
        relay.close()
        sub.close()
        ob.close()


class FakeBroker:
    """A TCP server that CONNACKs and then answers each PUBLISH per `mode`: "never" (no PUBACK)
    or "unknown" (a PUBACK for packet id 0x7777, a PINGRESP, then the right PUBACK); "mute"
    accepts the TCP connection and never answers at all (no CONNACK)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.port = int(self.srv.getsockname()[1])
        self.accepts: list[float] = []
        self.publishes = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.accepts.append(time.monotonic())
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        buf = b""
        try:
            while True:
                b = c.recv(4096)
                if not b:
                    return
                buf += b
                while len(buf) >= 2 and len(buf) >= 2 + buf[1]:  # packets < 128 bytes here
                    h, body, buf = buf[0], buf[2 : 2 + buf[1]], buf[2 + buf[1] :]
                    if h & 0xF0 == 0x10:
                        if self.mode != "mute":
                            c.sendall(b"\x20\x02\x00\x00")
                    elif h & 0xF0 == 0x30:
                        self.publishes += 1
                        tl = struct.unpack_from("!H", body, 0)[0]
                        pid = body[2 + tl : 4 + tl]
                        if self.mode == "unknown":
                            c.sendall(b"\x40\x02\x77\x77" + b"\xd0\x00" + b"\x40\x02" + pid)
        except OSError:
            return
        finally:
            c.close()

    def close(self) -> None:
        self.srv.close()


@contextlib.contextmanager
def _fake_broker(mode, tmp_path, n, backoff, **window):  # type: ignore[no-untyped-def]
    """A FakeBroker(mode), an Outbox holding n messages on topic <mode>/x (backoff: its retry
    options) and a WindowSender(**window) to the fake; all closed on the way out."""
    fb = FakeBroker(mode)
    ob = ddq_outbox.Outbox(str(tmp_path / "q"), **backoff)
    link = ddq_mqtt.WindowSender("127.0.0.1", fb.port, **window)
    try:
        for i in range(n):
            ob.put(mode + "/x", b"%d" % i)
        yield fb, ob, link
    finally:
        link.close()
        fb.close()
        ob.close()


def _pump_none(ob, link, budget):  # type: ignore[no-untyped-def]
    """One pump round that must deliver nothing; returns the seconds it took."""
    t0 = time.monotonic()
    assert ob.pump(link, budget=budget) == 0
    return time.monotonic() - t0


def _backoff_holds(ob, link, fb, budget, accepts=2):  # type: ignore[no-untyped-def]
    # Backoff: nothing is due until the full-jitter delays pass; no reconnect meanwhile.
    if ob.next_ready_ms():
        assert ob.pump(link, budget=budget) == 0 and len(fb.accepts) == accepts


def test_puback_for_an_unknown_packet_id_over_tcp(tmp_path):  # type: ignore[no-untyped-def]
    with _fake_broker("unknown", tmp_path, 20, {}, inflight_max=8, timeout_ms=3000) as parts:
        fb, ob, link = parts
        assert ob.pump(link, budget=20) == 20 and ob.empty()
        assert link.unknown_acks == 20 and link.connects == 1 and fb.publishes == 20


def test_broker_that_never_acks_times_out_and_reconnects_with_backoff(tmp_path):  # type: ignore[no-untyped-def]
    backoff = {"min_retry_ms": 400, "max_retry_ms": 400, "seed": 3}
    with _fake_broker("never", tmp_path, 5, backoff, inflight_max=16, timeout_ms=300) as parts:
        fb, ob, link = parts
        dt = _pump_none(ob, link, 5)
        st = ob.stats()
        # no PUBACK in 300 ms: reconnect at once, republish the first alone (DUP; OUTBOX
        # E30), 300 ms more (its attempt), the second alone, 300 ms more: then nack all
        assert link.timeouts == 3 and len(fb.accepts) == 3 and 0.85 < dt < 5, dt
        assert st["retried"] == 5 and st["resent"] == 2 and st["in_flight"] == 0
        assert fb.publishes == 7 and link.dups == 2
        _backoff_holds(ob, link, fb, 5, 3)


def test_broker_that_never_connacks_is_retried_with_backoff(tmp_path):  # type: ignore[no-untyped-def]
    backoff = {"min_retry_ms": 300, "max_retry_ms": 300, "seed": 4}
    with _fake_broker("mute", tmp_path, 4, backoff, inflight_max=16, timeout_ms=200) as parts:
        fb, ob, link = parts
        # the CONNECT times out with the claimed message alone: its attempt (OUTBOX E30), and
        # the round ends (no busy retry); the next round waits for the backoff
        assert _pump_none(ob, link, 4) < 3 and len(fb.accepts) == 1 and fb.publishes == 0
        st = ob.stats()
        assert st["retried"] == 1 and st["in_flight"] == 0 and link.connects == 0
        _backoff_holds(ob, link, fb, 4, 1)


def test_window_larger_than_the_queue_with_mosquitto(broker, tmp_path):  # type: ignore[no-untyped-def]
    sub = Subscriber(broker.sub_port, "big/#")
    ob = ddq_outbox.Outbox(str(tmp_path / "q"))
    link = ddq_mqtt.WindowSender("127.0.0.1", broker.port, inflight_max=1000)
    try:
        for i in range(7):
            ob.put("big/x", b"%d" % i)
        assert ob.pump(link, budget=100) == 7 and ob.empty() and link.in_flight() == 0
        assert not sub.wait_for({b"%d" % i for i in range(7)}, 10)
    finally:
        link.close()
        sub.close()
        ob.close()


MP_SCRIPT = """
import sys, time
sys.path.insert(0, %(port)r)
import ddq_mqtt, ddq_outbox
ob = ddq_outbox.Outbox(%(qdir)r, min_retry_ms=20, max_retry_ms=200, lease_ms=10000,
                       sync_interval_ms=20)
for i in range(%(n)d):
    ob.put("mpw/%%d" %% (i %% 5), b"%%06d" %% i)
link = ddq_mqtt.WindowSender("127.0.0.1", %(mqtt_port)d, inflight_max=16, client_id=b"ddq-mpw",
                             timeout_ms=3000)
print("READY")
t0 = time.ticks_ms()
for _ in range(100000):
    if ob.empty() or time.ticks_diff(time.ticks_ms(), t0) > 60000:
        break
    ob.pump(link, budget=20)
    time.sleep_ms(min(ob.next_ready_ms() or 0, 50))
st = ob.stats()
print("MP sent", st["sent"], "resent", st["resent"], "dups", link.dups, "connects", link.connects)
link.close()
ob.close()
"""


def test_micropython_window_survives_dropped_connections(broker, tmp_path):  # type: ignore[no-untyped-def]
    if not os.path.exists(MICROPYTHON):
        pytest.skip("no MicroPython unix port in the venv")
    n = 300
    sub = Subscriber(broker.sub_port, "mpw/#")
    relay = Relay(broker.port)
    p = mp_publisher(tmp_path / "mp_win.py", MP_SCRIPT, n, relay.port)
    try:
        for k in (1, 2):
            end = time.monotonic() + 30
            while time.monotonic() < end and len(sub.distinct()) < k * n // 3:
                time.sleep(0.005)
            relay.cut()
        text, missing = mp_delivered(p, n, sub)
        with relay.lock:
            pubs = list(relay.publishes)
        seen: set[int] = set()
        undup = 0
        for pid, dup in pubs:
            undup += 1 if pid in seen and not dup else 0
            seen.add(pid)
        print(
            text.strip(), "| lost", len(missing), "duplicates", len(sub.got) - len(sub.distinct())
        )
        assert not missing, sorted(missing)[:10]
        assert undup == 0 and int(text.split("resent ")[1].split()[0]) >= 1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        relay.close()
        sub.close()


def test_a_message_mosquitto_drops_the_connection_for_is_dead_lettered(tmp_path):  # type: ignore[no-untyped-def]
    # OUTBOX E30 against the real thing: mosquitto with max_packet_size closes the connection on
    # the one PUBLISH above it, without the PUBACKs it owed for the window before it. That
    # message is charged an attempt per loss it is alone for and ends as a dead letter after
    # max_attempts; the 19 published beside it are delivered, none charged.
    b = brokers.small_packet_mosquitto(str(tmp_path / "broker"), 2048)
    sub = None
    try:
        sub = Subscriber(b.port, "drop/#")
        clock = [1767225600000]
        ob = ddq_outbox.Outbox(
            str(tmp_path / "q"), clock=lambda: clock[0], max_attempts=3, min_retry_ms=5,
            max_retry_ms=5, seed=1,
        )  # fmt: skip
        seqs = [ob.put("drop/%d" % i, b"x" * 4000 if i == 5 else b"%010d" % i) for i in range(20)]
        link = ddq_mqtt.WindowSender("127.0.0.1", b.port, inflight_max=8, timeout_ms=5000)
        for _ in range(12):  # bounded: each round charges the big one an attempt at most
            ob.pump(link, budget=40)
            clock[0] += 6
            if ob.empty():
                break
        assert ob.empty() and ob.stats()["sent"] == 19, ob.stats()
        dead = ob.dead_letters()
        assert [m.seq for m in dead] == [seqs[5]] and dead[0].attempts == 2, dead
        assert dead[0].reason.startswith(b"max_attempts: "), dead[0].reason
        assert [it.attempts for it in ob.queue.items() if it.seq != seqs[5]] == [0] * 19
        assert not sub.wait_for({b"%010d" % i for i in range(20) if i != 5}, 10)
        ob.close()
    finally:
        if sub is not None:
            sub.close()
        b.close()
