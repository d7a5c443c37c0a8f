# The board app (port/ddq_app.py, what boards/*/main.py run) at its limits (docs/OUTBOX.md E33,
# E10, E30): a broker away for hours spends no reading's attempts, and a reading whose send
# resets the board ends as a dead letter after MAX_ATTEMPTS boots while the others are
# delivered. The app runs as a board runs it, through its real links (ddq_mqtt.WindowSender,
# ddq_mqtt.Umqtt) over a fake broker, on an injected clock. Shared suite: subset Python.
import support

support.needs_heap(192 * 1024, support.OUTBOX_HEAP, 128 * 1024)
import ddq  # noqa: E402
import ddq_app  # noqa: E402
import ddq_mqtt  # noqa: E402
import shared  # noqa: E402

T0 = 1767225600000
HOUR = 3600000


class Reset(BaseException):
    """The board resets in the middle of a send: nothing after it runs (no except clause of the
    app or the message layer takes it)."""


class Time:
    """The app's ticks and sleep, the Outbox's wall clock and the sender's clock: one counter."""

    def __init__(self):
        self.ms = 0

    def ticks(self):
        return self.ms & 0x3FFFFFFF

    def sleep(self, ms):
        self.ms += ms

    def wall(self):
        return T0 + self.ms


class Broker:
    """A broker that is away (connect refused, open connections closed) from down[0] to down[1]
    ms, receives payloads, and calls boom() for one that contains b"BOOM"."""

    def __init__(self, t):
        self.t, self.down, self.got, self.boom = t, None, [], None
        self.refused = 0

    def away(self):
        return self.down is not None and self.down[0] <= self.t.ms < self.down[1]

    def take(self, payload):
        if self.boom is not None and b"BOOM" in payload:
            self.boom()
        self.got.append(payload)

    def connect(self):  # WindowSender's connect factory
        if self.away():
            self.refused += 1
            raise OSError(111, "connection refused")
        return Sock(self)


class Sock:
    """The MQTT side of a connection: CONNACK for CONNECT, PUBACK for a QoS 1 PUBLISH."""

    def __init__(self, b):
        self.b, self.inb, self.out, self.tmo = b, b"", b"", 1.0

    def settimeout(self, s):
        self.tmo = s

    def setsockopt(self, *a):
        pass

    def close(self):
        pass

    def sendall(self, data):
        if self.b.away():
            raise OSError(104, "connection reset")
        self.inb += data
        while len(self.inb) >= 2:
            n, i, shift = 0, 1, 0
            while True:  # the remaining length, 7 bits a byte
                c = self.inb[i]
                n, i, shift = n | (c & 127) << shift, i + 1, shift + 7
                if c < 128:
                    break
            if len(self.inb) < i + n:
                return
            h, body, self.inb = self.inb[0], self.inb[i : i + n], self.inb[i + n :]
            if h >> 4 == 1:
                self.out += b"\x20\x02\x00\x00"
            elif h >> 4 == 3:
                j = 2 + (body[0] << 8 | body[1])
                qos = (h >> 1) & 3
                self.b.take(bytes(body[j + (2 if qos else 0) :]))
                if qos:
                    self.out += b"\x40\x02" + bytes(body[j : j + 2])

    def recv(self, n):
        if self.b.away():
            return b""
        if not self.out:
            self.b.t.sleep(int(self.tmo * 1000))  # the socket's timeout passes
            raise OSError(11, "timed out")
        r, self.out = self.out[:n], self.out[n:]
        return r


class UmqttClient:
    """What ddq_mqtt.Umqtt uses of umqtt.simple's MQTTClient."""

    def __init__(self, b):
        self.b, self.sock, self.keepalive, self.pid = b, None, 0, 0

    def connect(self, clean=True):
        if self.b.away():
            self.b.refused += 1
            raise OSError(113, "host unreachable")
        self.sock = Sock(self.b)

    def publish(self, topic, msg, retain=False, qos=0):
        if self.b.away():
            raise OSError(104, "connection reset")
        self.b.take(msg)

    def disconnect(self):
        self.sock = None


class Up:
    """A network that is always up (WiFi is not what these tests are about)."""

    def up(self):
        return True


def _cfg(t, sensor, **opts):
    o = {"clock": t.wall, "ticks": t.ticks, "seed": 7}
    o.update(opts)
    return dict(ddq_app.DEFAULTS, OPTIONS=o, TOPIC="t/app", read_sensor=sensor, Wifi=Up)


def _readings(payloads):
    return sorted(set([int(p.split(b" ")[0][2:]) for p in payloads]))


def test_app_spends_no_attempts_while_the_broker_is_away():
    # EVIDENCE-OF: E33 E30 E10
    # A reading a minute; the broker is away for 3 hours from minute 5. With MAX_ATTEMPTS 8 (as
    # ARMV7M_GENERIC sets it; the default now) the app tries to connect at its own backoff
    # (1 s doubling to 60 s) and claims nothing meanwhile: no reading is charged for the outage,
    # none is dead-lettered, and all of them arrive once the broker is back.
    for kind in ("window", "umqtt"):
        t = Time()
        b = Broker(t)
        b.down = (5 * 60000, 5 * 60000 + 3 * HOUR)
        if kind == "window":
            link = ddq_mqtt.WindowSender(connect=b.connect, clock=t.ticks, inflight_max=16)
        else:
            link = ddq_mqtt.Umqtt(UmqttClient(b))
        cfg = _cfg(t, lambda: b"21")
        cfg["MAX_ATTEMPTS"] = 8
        n = 200  # readings: 180 of them during the outage
        st = ddq_app.run(
            cfg,
            rounds=n,
            period_ms=60000,
            sender=link,
            queue_dir=support.tmpdir(),
            drain_ms=HOUR,
            clock=(t.ticks, t.sleep),
        )
        assert b.refused > 100, (kind, b.refused)  # it kept trying the broker, not the readings
        assert st["quarantined"] == 0 and st["exhausted"] == 0, (kind, st)
        assert st["pending"] == 0 and st["sent"] == n, (kind, st)
        assert _readings(b.got) == list(range(1, n + 1)), kind


def _boots_until_it_ends(kind):
    # Readings 1..12 queued offline; reading 3's send resets the board. Boot until a run
    # returns: (resets, its stats, the broker, the queue directory).
    t = Time()
    b = Broker(t)
    st = {"fs": shared.CrashFS(), "d": support.tmpdir(), "cut": [], "n": 0}

    def read():
        st["n"] += 1
        return b"BOOM" if st["n"] == 3 else b"21"

    def boom():  # what a reset leaves: what was synced, the app never closing anything
        st["cut"].append(shared.cut_copy(st["d"], st["fs"].synced))
        raise Reset()

    cfg = _cfg(t, read, storage=st["fs"])
    kw = {"period_ms": 1000, "clock": (t.ticks, t.sleep)}
    ddq_app.run(cfg, rounds=12, queue_dir=st["d"], budget=0, **kw)  # queued while offline
    b.boom = boom
    for resets in range(20):  # boots
        st["fs"] = cfg["OPTIONS"]["storage"] = shared.CrashFS()
        if kind == "window":
            link = ddq_mqtt.WindowSender(connect=b.connect, clock=t.ticks, inflight_max=16)
        else:
            link = ddq_mqtt.Umqtt(UmqttClient(b))
        try:
            return resets, ddq_app.run(cfg, rounds=0, sender=link, queue_dir=st["d"],
                                       drain_ms=HOUR, **kw), b, st["d"]  # fmt: skip
        except Reset:
            st["d"] = st["cut"].pop()
            t.sleep(cfg["LEASE_MS"] + 1)  # the board is back after the lease ran out
    return 20, None, b, st["d"]


def test_app_dead_letters_a_reading_whose_send_resets_the_board():
    # EVIDENCE-OF: E33 E10 D1 E25
    # ddq_app's defaults (sync="always", MAX_ATTEMPTS; both LINK kinds): reading 3's send resets
    # the board, on every boot; each reset leaves its claim on flash, so each boot is an attempt
    # (E10's lapsed lease) and after MAX_ATTEMPTS boots it is a dead letter; the other readings
    # arrive; those in flight beside it at the first reset (a window) are charged for that reset
    # only: after it each lapsed claim comes back at its own jittered time, and the app pumps
    # when the next one is due.
    for kind in ("umqtt", "window"):
        resets, st, b, d = _boots_until_it_ends(kind)
        assert st is not None, (kind, resets)
        assert resets == ddq_app.DEFAULTS["MAX_ATTEMPTS"] > 0, (kind, resets)
        assert st["pending"] == 0 and st["quarantined"] == 1, (kind, st)
        assert _readings(b.got) == [1, 2] + list(range(4, 13)), (kind, b.got)
        with ddq.Queue(d) as q:
            assert [(i.seq, i.state) for i in q.items() if i.state != "acked"] == [
                (3, "quarantined")
            ], kind
            assert q.reason(3) == b"max_attempts: lease expired", q.reason(3)
            most = max([i.attempts for i in q.items() if i.seq != 3])
            assert most <= 1, (kind, [(i.seq, i.attempts) for i in q.items()])


class AsClient:
    """What ddq_mqtt.MqttAs and run_async use of an mqtt_as client, away until `until` ms: its
    isconnected() is False then (each look: half an hour), and a publish waits for the reconnect
    until MqttAs's 10 s timeout (here: raises at once, 10 s later)."""

    def __init__(self, t, until):
        self.t, self.until, self.got, self.timeouts = t, until, [], 0

    async def connect(self):
        pass

    def isconnected(self):
        if self.t.ms < self.until:
            self.t.sleep(HOUR // 2)
            return False
        return True

    async def publish(self, topic, msg, retain=False, qos=0):
        if self.t.ms < self.until:
            self.t.sleep(10000)
            self.timeouts += 1
            raise OSError(110, "timed out")
        self.got.append(msg)


def test_app_async_claims_nothing_while_the_client_is_away():
    # EVIDENCE-OF: E33 E10
    # run_async (Outbox.run through MqttAs): the client is away for 3 hours from the start,
    # with readings waiting. The app runs the delivery loop only while the client is connected:
    # no publish waits out a timeout (no attempt spent), nothing is dead-lettered, all arrive.
    asyncio = shared.needs_asyncio()
    t = Time()
    c = AsClient(t, 3 * HOUR)
    cfg = _cfg(t, lambda: b"21")
    n = 20
    st = asyncio.run(
        ddq_app.run_async(
            cfg, rounds=n, period_ms=0, client=c, queue_dir=support.tmpdir(), drain_ms=60000
        )
    )
    assert c.timeouts == 0, c.timeouts
    assert st["quarantined"] == 0 and st["sent"] == n and st["pending"] == 0, st
    assert _readings(c.got) == list(range(1, n + 1))
