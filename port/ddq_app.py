"""ddq_app: the example board app, once; boards/<PROFILE>/main.py holds a board's settings.

The app to start from: join the network (WiFi with backoff; skipped where the port has no
`network`), read a sensor every PERIOD_MS, put each reading into a durable Outbox with the board's
queue options, and deliver with the message layer's own loop (Outbox.pump; Outbox.run on
asyncio through mqtt_as) through ddq_mqtt.WindowSender: up to WINDOW QoS 1 publishes in flight,
so a backlog left by an outage drains at the link's speed, not at one message per round trip
(LINK = "umqtt" sends through umqtt.simple instead, one at a time). A reading is acked only
after the broker's PUBACK; while the broker or the network is away, the link reconnects with
backoff, nothing is claimed, and new readings keep being queued; a failed send is retried with a
growing, jittered delay, and a reading that fails MAX_ATTEMPTS sends (one whose send resets the
board too) becomes a dead letter (OUTBOX E33). It survives resets: a reading is on flash once
put() returned, and one in flight at a power cut is sent again when its lease ends (LEASE_MS).

A board's main.py defines its settings (OPTIONS, the queue options of its profile; TOPIC;
BROKER, CLIENT_ID, WIFI_SSID, WIFI_PASSWORD where it has a network; OUTBOX = "ddq_batch" to batch
readings (OUTBOX §13.4), with BATCH_OPTIONS replacing OPTIONS' window and evidence_bytes then;
any of DEFAULTS it wants otherwise: QUEUE_DIR, LEASE_MS,
RETRY_BASE_MS, RETRY_MAX_MS, MAX_ATTEMPTS, PERIOD_MS, BUDGET, BROKER_PORT, KEEPALIVE_S, LINK,
WINDOW) and read_sensor(), then calls `ddq_app.bind(globals())`, which gives it run(),
run_async() and Wifi over those settings. Settings are read when they are used, so
`main.LEASE_MS = 2000` before main.run() takes effect.
`ddq flash --example-app` installs this module with the app (the app imports it).
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import time

# ============================================================================ compat
import ddq
import ddq_outbox
from ddq import _import, const
from ddq_outbox import _tdiff, _ticks

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Optional

    Cfg = dict[str, Any]

_MASK = 0x3FFFFFFF  # ddq_outbox's ticks period (2**30 ms)

# The network settings a board's main.py may leave out (a board without a network).
# The settings a board's main.py may leave out (bind fills them in), once for every board:
DEFAULTS = {
    "QUEUE_DIR": "outbox",
    # the profiles' lease: an in-flight reading is ours this long, then sent again
    "LEASE_MS": 30000,
    # retry delays: full jitter up to base * 2**attempts, capped at RETRY_MAX_MS
    "RETRY_BASE_MS": 1000,
    "RETRY_MAX_MS": 300000,
    # a dead letter after N failed sends (0: never): a reading whose send resets the board or
    # that the broker keeps dropping the connection for ends instead of blocking for ever. The
    # broker or WiFi being away spends none: the app claims nothing while its link is down
    # (OUTBOX E33)
    "MAX_ATTEMPTS": 8,
    "PERIOD_MS": 10000,  # one reading every PERIOD_MS
    "BUDGET": 16,  # messages one pump may send before the loop reads the sensor again
    "BROKER": "127.0.0.1",
    "BROKER_PORT": 1883,
    "CLIENT_ID": b"ddq",
    "KEEPALIVE_S": 60,
    # the MQTT sender: "window" (ddq_mqtt.WindowSender, WINDOW publishes in flight: a backlog
    # drains at link speed, ~paho's rate over a 100 ms round trip) or "umqtt" (umqtt.simple,
    # one publish per round trip: the client a board may already carry; enough for live
    # readings every few seconds, about 10 a second for a backlog over a 100 ms round trip)
    "LINK": "window",
    "WINDOW": 16,
    "WIFI_SSID": None,
    "WIFI_PASSWORD": None,  # None: no WiFi to join (the port's own network)
}


def _add(t: int, d: int) -> int:
    return (t + d) & _MASK  # ticks_add for ddq_outbox's ticks


def _sleep_ms(ms: int) -> None:
    s = getattr(time, "sleep_ms", None)  # MicroPython; CPython has sleep(seconds)
    if s is not None:
        s(ms)
    else:
        time.sleep(ms / 1000)


# ============================================================================ app
async def _asleep(ms: int) -> None:
    import asyncio

    s = getattr(asyncio, "sleep_ms", None)  # MicroPython's asyncio has sleep_ms
    await (s(ms) if s is not None else asyncio.sleep(ms / 1000))


def encode(reading: bytes, n: int) -> bytes:
    """Small and self-describing, no json on tiny boards: "n=<count> t=<ms> v=<value>"."""
    return b"n=%d t=%d v=%s" % (n, _ticks(), reading)


class Wifi:
    """Station WiFi with backoff: up() is True once connected; otherwise it starts a connect at
    most every `delay` ms (doubling to 60 s) and returns False. Without `network`: always up."""

    def __init__(self, cfg: "Cfg") -> None:
        self.cfg = cfg
        network = _import("network")
        self.wlan: "Any" = None
        self.delay, self.next = 1000, _ticks()
        if network is None or not hasattr(network, "WLAN"):
            return
        self.wlan = network.WLAN(network.STA_IF)
        self.wlan.active(True)

    def up(self) -> bool:
        w = self.wlan
        if w is None or w.isconnected():
            return True
        now = _ticks()
        if self.cfg["WIFI_SSID"] and _tdiff(now, self.next) >= 0:
            try:
                w.connect(self.cfg["WIFI_SSID"], self.cfg["WIFI_PASSWORD"])  # isconnected() tells
            except OSError as e:  # e.g. "already connecting"
                print("wifi:", e)
            self.next = _add(now, self.delay)
            self.delay = min(self.delay * 2, 60000)
        return False


def make_link(cfg: "Cfg") -> "Any":
    """The link Outbox.pump delivers through (PUBACK = ack): ddq_mqtt.WindowSender with
    WINDOW publishes in flight [E25] (LINK "window", the default), or umqtt.simple through
    ddq_mqtt.Umqtt (its send), one at a time (LINK "umqtt"; WindowSender when umqtt.simple or
    ddq_clients.py, the adapter's module, is missing: `ddq flash` installs it when main.py sets
    LINK = "umqtt"). None where the port has no socket: the readings wait on flash (`ddq pull`,
    `ddq replay`)."""
    if _import("socket") is None:
        print("no network on this port: readings wait on flash (ddq pull, ddq replay)")
        return None
    import ddq_mqtt

    if cfg["LINK"] == "umqtt":
        um = getattr(_import("umqtt.simple"), "simple", None)  # the package, simple loaded
        if um is not None and _import("ddq_clients"):
            return ddq_mqtt.Umqtt(
                um.MQTTClient(
                    cfg["CLIENT_ID"],
                    cfg["BROKER"],
                    cfg["BROKER_PORT"],
                    keepalive=cfg["KEEPALIVE_S"],
                )
            )
        print("no umqtt.simple (mip install) or ddq_clients.py (ddq flash): WindowSender")
    return ddq_mqtt.WindowSender(
        cfg["BROKER"],
        cfg["BROKER_PORT"],
        inflight_max=cfg["WINDOW"],
        client_id=cfg["CLIENT_ID"],
        keepalive=cfg["KEEPALIVE_S"],
    )


def open_outbox(cfg: "Cfg", queue_dir: "Optional[str]" = None) -> ddq_outbox.Outbox:
    """The board's outbox: its queue options and lease, this app's retry policy."""
    base = max(1, cfg["RETRY_BASE_MS"])
    # OUTBOX = "ddq_batch" in a board's main.py (not in DEFAULTS, no new names here: a board's
    # heap): readings share queue items of up to max_payload_bytes, each written when full or a
    # minute after its first reading (OUTBOX B1-B3: a reading is on flash once its item is
    # written, not when put() returns); `ddq flash` installs ddq_batch for such an app.
    mod, opts = cfg.get("OUTBOX", "ddq_outbox"), cfg["OPTIONS"]
    if mod == "ddq_batch":  # BATCH_OPTIONS: its own reserve (an item holds many readings)
        opts = dict(opts, **cfg.get("BATCH_OPTIONS", {}))
    ob: ddq_outbox.Outbox = __import__(mod).Outbox(
        queue_dir or cfg["QUEUE_DIR"],
        lease_ms=cfg["LEASE_MS"],
        min_retry_ms=base,
        max_retry_ms=max(base, cfg["RETRY_MAX_MS"]),
        max_attempts=cfg["MAX_ATTEMPTS"],
        **opts,
    )
    return ob


def link_up(link: "Any") -> bool:
    """True if link (a WindowSender, a ddq_mqtt.Umqtt, or a send function: always) is
    connected or connects now; False while the broker or the network is away. The app pumps
    only then, so an outage claims nothing and spends no attempt (OUTBOX E33): a send that
    fails on a live connection (or drops it) is the message's attempt, one the broker is away
    for is not."""
    c = getattr(link, "connect", None)
    if c is None or getattr(link, "up", None) or getattr(link, "sock", None) is not None:
        return True
    try:
        c()
        return True
    except Exception as e:  # OSError; umqtt.simple's MQTTException for a refused CONNACK
        print("mqtt:", e)
        return False


def connected(client: "Any") -> bool:
    """Whether an asyncio MQTT client is connected: mqtt_as's isconnected(); micropython-mqtt-
    async (mqtt_async) has none, its connection object is None while it reconnects."""
    f = getattr(client, "isconnected", None)
    return bool(f()) if f is not None else getattr(client, "_proto", 0) is not None


def _reading(cfg: "Cfg", ob: ddq_outbox.Outbox, n: int) -> None:
    try:
        ob.put(cfg["TOPIC"], encode(cfg["read_sensor"](), n))
    except ddq.Full:
        print("outbox full: reading dropped")  # nothing acked to reclaim


def run(
    cfg: "Cfg",
    rounds: "Optional[int]" = None,
    period_ms: "Optional[int]" = None,
    sender: "Any" = None,
    queue_dir: "Optional[str]" = None,
    budget: "Optional[int]" = None,
    drain_ms: int = 0,
    clock: "Any" = None,
) -> "dict[str, Any]":
    """Take a reading every period_ms and deliver what is due in between; rounds=None: forever.

    After `rounds` readings, keep delivering for up to drain_ms until the outbox is empty; then
    return its stats(). sender: a send function, a windowed sender or a ddq_mqtt.Umqtt (default:
    make_link()); budget=0: only queue. clock: (ticks, sleep_ms), the app's interval clock
    (ms modulo 2**30) and sleep (tests inject them; default the board's).
    """
    period = cfg["PERIOD_MS"] if period_ms is None else period_ms
    budget = cfg["BUDGET"] if budget is None else budget
    ob = open_outbox(cfg, queue_dir)
    wifi = cfg["Wifi"]()
    tk, zz = clock or (_ticks, _sleep_ms)
    link: "Any" = sender or (make_link(cfg) if budget else None)
    send = link if hasattr(link, "poll") or not hasattr(link, "send") else link.send
    n, due, end = 0, tk(), None
    pause, resume = 0, tk()  # the link's own backoff: 1 s doubling to 60 s
    try:
        while True:
            now = tk()
            if rounds is None or n < rounds:
                if _tdiff(now, due) >= 0:  # the sensor timer
                    n += 1
                    _reading(cfg, ob, n)
                    # the next reading PERIOD_MS after this one's slot (or now, if far behind)
                    due = _add(due, period)
                    if _tdiff(now, due) > period:
                        due = now
            else:
                end = _add(now, drain_ms) if end is None else end
                if ob.empty() or _tdiff(now, end) >= 0:
                    break
            online = send is not None and budget and wifi.up()
            if online and _tdiff(now, resume) >= 0:
                nacked = ob.counters["retried"]
                # the message layer's loop: ack after the PUBACK, nack (backoff) or dead letter.
                # A windowed sender keeps its window full until the next reading is due (1 s
                # at most): stopping every `budget` messages would idle a round trip each time,
                # half a backlog's rate over a slow link (bench row D6).
                lim, ms = budget, 0
                if hasattr(send, "poll"):
                    left = _tdiff(due, now) if rounds is None or n < rounds else 1000
                    lim, ms = 0xFFFF, max(50, min(1000, left))
                # The link first: while the broker or WiFi is away nothing is claimed, so an
                # outage spends no reading's attempts (MAX_ATTEMPTS counts sends that failed on
                # a live link, or reset the board: OUTBOX E33).
                if not link_up(link) or (
                    ob.pump(send, lim, ms) == 0 and ob.counters["retried"] > nacked
                ):
                    # the link failed: every waiting reading would try it now, one after the
                    # other; pause delivery instead (each reading keeps its own backoff too)
                    pause = min(max(1000, pause * 2), 60000)
                    resume = _add(tk(), pause)
                    # said, not only counted: a broker that stays away is seen on the console
                    print(
                        "mqtt: %s:%s: nothing delivered, %d waiting; next try in %d s"
                        % (cfg.get("BROKER"), cfg.get("BROKER_PORT"), ob.qsize(), pause // 1000)
                    )
                else:
                    pause = 0
            # sleep until the next reading or, online, the next retry, whichever is first (1 s at
            # most, so a WiFi that comes back is noticed)
            wait = _tdiff(due, tk()) if end is None else 50
            nxt = ob.next_ready_ms() if online else None
            if nxt is not None:
                wait = min(wait, max(nxt, _tdiff(resume, tk())))
            if wait > 0:
                zz(min(wait, 1000))
        return ob.stats()
    finally:
        ob.close()


async def run_async(
    cfg: "Cfg",
    rounds: "Optional[int]" = None,
    period_ms: "Optional[int]" = None,
    client: "Any" = None,
    queue_dir: "Optional[str]" = None,
    drain_ms: int = 0,
) -> "dict[str, Any]":
    """The asyncio variant of run(): a task takes the readings on the timer, mqtt_as (Peter
    Hinch's; micropython-mqtt-async works too) keeps WiFi and the broker connection, and the
    message layer's asyncio loop (Outbox.run) delivers through ddq_mqtt.MqttAs. client: a
    connected-or-not mqtt_as MQTTClient (default: one made from the settings). Returns the
    outbox's stats() like run()."""
    import asyncio

    import ddq_mqtt

    period = cfg["PERIOD_MS"] if period_ms is None else period_ms
    ob = open_outbox(cfg, queue_dir)
    state: "list[Any]" = [0, None]  # readings taken; the drain deadline once they are all taken

    async def sample() -> None:
        while rounds is None or state[0] < rounds:
            state[0] += 1
            _reading(cfg, ob, state[0])
            await _asleep(period)
        state[1] = _add(_ticks(), drain_ms)

    def stop() -> bool:
        return state[1] is not None and (ob.empty() or _tdiff(_ticks(), state[1]) >= 0)

    try:
        task = asyncio.create_task(sample())  # readings are queued while we connect
        if client is None:
            ma = _import("mqtt_as")
            if ma is None:
                raise ImportError("run_async needs mqtt_as (or pass client=)")
            config = ma.config
            config["server"], config["port"] = cfg["BROKER"], cfg["BROKER_PORT"]
            config["client_id"] = cfg["CLIENT_ID"]
            config["ssid"], config["wifi_pw"] = cfg["WIFI_SSID"], cfg["WIFI_PASSWORD"]
            client = ma.MQTTClient(config)
        delay = 1000
        while not stop():  # the first connect, with backoff; mqtt_as reconnects by itself later
            try:
                await client.connect()
                break
            except OSError as e:
                print("mqtt:", e)
                await _asleep(delay)
                delay = min(delay * 2, 60000)
        # Deliver while the client is connected; while it is away claim nothing (its publish
        # would wait for the reconnect and time out: an attempt spent on an outage, E33).
        send = ddq_mqtt.MqttAs(client).send

        def away() -> bool:
            return stop() or not connected(client)

        while not stop():
            if connected(client):
                await ob.run(send, stop=away)
            else:
                await _asleep(250)
        task.cancel()
        return ob.stats()
    finally:
        ob.close()


def bind(g: "Cfg") -> None:
    """Give a board's main.py (its globals g) run(), run_async() and Wifi over its settings
    (those it leaves out: DEFAULTS)."""
    for k in DEFAULTS:
        if k not in g:
            g[k] = DEFAULTS[k]
    # `ddq flash --layout raw` (docs/BOARDS.md) wrote :ddq_layout.py: the queue goes on the
    # board's raw flash region (storage=ddq_flash.FlashStorage) with that layout's options.
    try:
        layout = __import__("ddq_layout")
    except ImportError:
        layout = None
    if layout:
        layout.use(g["OPTIONS"])

    class BoardWifi(Wifi):
        """Station WiFi with the board's WIFI_SSID and WIFI_PASSWORD, with backoff."""

        def __init__(self) -> None:
            Wifi.__init__(self, g)

    # run() and run_async() over g: their own parameters after the settings (their docs).
    def board_run(*a: "Any", **k: "Any") -> "dict[str, Any]":
        return run(g, *a, **k)

    def board_run_async(*a: "Any", **k: "Any") -> "Any":
        return run_async(g, *a, **k)

    g["Wifi"], g["run"], g["run_async"] = BoardWifi, board_run, board_run_async
