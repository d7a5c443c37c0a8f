# Example outbox app for ESP32_GENERIC (ESP32 (4 MB flash, LittleFS vfs partition, about 110 KB free heap))
#
# The app to start from: join the network (WiFi with backoff; skipped where the port has no
# `network`), read a sensor every PERIOD_MS, put each reading into a durable Outbox with
# this board's queue options, and deliver through umqtt.simple with the message layer's own loop
# (Outbox.pump). A reading is acked only after the broker's PUBACK; while the broker or the
# network is away, sends fail and readings are retried with a growing, jittered delay, and new
# readings keep being queued. It survives resets: a reading is on flash once put() returned, and
# one that was in flight at a power cut is sent again when its lease ends (LEASE_MS). A reading
# the far end refuses for good (raise ddq_outbox.Rejected in a send) is kept as a dead letter:
# `ddq pull :outbox out && ddq inspect out` shows it.
#
# On the board: ddq, ddq_outbox, ddq_mqtt (`ddq flash --example-app` installs them and this file as
# main.py) and umqtt.simple (`mpremote mip install umqtt.simple`; without it the app uses
# ddq_mqtt.Sender). Set BROKER, CLIENT_ID, the WiFi settings and read_sensor() for yours.
# run_async() is the same app on asyncio, delivering through mqtt_as.
import time

import ddq
import ddq_outbox

QUEUE_DIR = "outbox"
# Queue options of boards/ESP32_GENERIC.json. Keep them fixed for the life of the directory: DDQ does not
# store them, and a reader with smaller limits reports the directory as corrupt.
OPTIONS = {
    "segment_bytes": 8192,
    "max_payload_bytes": 512,
    "max_items": 1240,
    "max_segments": 128,
}
LEASE_MS = 30000  # the profile's lease: an in-flight reading is ours this long, then sent again
RETRY_BASE_MS = 1000  # retry delays: full jitter up to base * 2**attempts, capped at RETRY_MAX_MS
RETRY_MAX_MS = 300000
MAX_ATTEMPTS = 0  # 0: never give a reading up because the broker was away for long
PERIOD_MS = 10000  # one reading every PERIOD_MS
BUDGET = 16  # messages one pump may send before the loop reads the sensor again

BROKER = "192.168.1.10"  # your broker
BROKER_PORT = 1883
CLIENT_ID = b"ddq-esp32"
TOPIC = "ddq/esp32/temp"
KEEPALIVE_S = 60
WIFI_SSID = "my-ssid"
WIFI_PASSWORD = "my-password"


def read_sensor():
    """ESP32 internal temperature (esp32.mcu_temperature on newer chips, raw_temperature in F on ESP32)."""
    import esp32

    if hasattr(esp32, "mcu_temperature"):
        t = esp32.mcu_temperature()
    else:
        t = (esp32.raw_temperature() - 32) / 1.8
    return b"%d" % int(t)


def encode(reading, n):
    # Small and self-describing, no json on tiny boards: "n=<count> t=<ms> v=<value>".
    return b"n=%d t=%d v=%s" % (n, time.ticks_ms(), reading)


class Wifi:
    """Station WiFi with backoff: up() is True once connected; otherwise it starts a connect at
    most every `delay` ms (doubling to 60 s) and returns False. Without `network`: always up."""

    def __init__(self):
        try:
            import network
        except ImportError:
            self.wlan = None
            return
        self.wlan = network.WLAN(network.STA_IF)
        self.wlan.active(True)
        self.delay, self.next = 1000, time.ticks_ms()

    def up(self):
        w = self.wlan
        if w is None or w.isconnected():
            return True
        now = time.ticks_ms()
        if WIFI_SSID and time.ticks_diff(now, self.next) >= 0:
            try:
                w.connect(WIFI_SSID, WIFI_PASSWORD)  # returns at once; isconnected() tells
            except OSError as e:  # e.g. "already connecting"
                print("wifi:", e)
            self.next = time.ticks_add(now, self.delay)
            self.delay = min(self.delay * 2, 60000)
        return False


def make_link():
    """The send function: umqtt.simple through ddq_mqtt.Umqtt (PUBACK = ack, TCP_NODELAY).
    None where the port has no socket: the readings wait on flash (`ddq pull`, `ddq replay`)."""
    try:
        import socket  # noqa: F401
    except ImportError:
        print("no network on this port: readings wait on flash (ddq pull, ddq replay)")
        return None
    import ddq_mqtt

    try:
        from umqtt.simple import MQTTClient
    except ImportError:
        print("no umqtt.simple (mpremote mip install umqtt.simple): using ddq_mqtt.Sender")
        return ddq_mqtt.Sender(BROKER, BROKER_PORT, client_id=CLIENT_ID,
                               keepalive=KEEPALIVE_S).send
    return ddq_mqtt.Umqtt(MQTTClient(CLIENT_ID, BROKER, BROKER_PORT,
                                     keepalive=KEEPALIVE_S)).send


def open_outbox(queue_dir=QUEUE_DIR):
    """The board's outbox: its queue options and lease, this app's retry policy."""
    return ddq_outbox.Outbox(queue_dir, lease_ms=LEASE_MS, min_retry_ms=max(1, RETRY_BASE_MS),
                             max_retry_ms=max(1, RETRY_BASE_MS, RETRY_MAX_MS),
                             max_attempts=MAX_ATTEMPTS, **OPTIONS)


def run(rounds=None, period_ms=None, sender=None, queue_dir=QUEUE_DIR, budget=BUDGET,
        drain_ms=0):
    """Take a reading every period_ms and deliver what is due in between; rounds=None: forever.

    After `rounds` readings, keep delivering for up to drain_ms until the outbox is empty; then
    return its stats(). sender: a send function (default: make_link()); budget=0: only queue.
    """
    period = PERIOD_MS if period_ms is None else period_ms
    ob = open_outbox(queue_dir)
    wifi = Wifi()
    send = sender or (make_link() if budget else None)
    n, due, end = 0, time.ticks_ms(), None
    pause, resume = 0, time.ticks_ms()  # the link's own backoff: 1 s doubling to 60 s
    try:
        while True:
            now = time.ticks_ms()
            if rounds is None or n < rounds:
                if time.ticks_diff(now, due) >= 0:  # the sensor timer
                    n += 1
                    try:
                        ob.put(TOPIC, encode(read_sensor(), n))
                    except ddq.Full:
                        print("outbox full: reading dropped")  # nothing acked to reclaim
                    # the next reading PERIOD_MS after this one's slot (or now, if far behind)
                    due = time.ticks_add(due, period)
                    if time.ticks_diff(now, due) > period:
                        due = now
            else:
                end = time.ticks_add(now, drain_ms) if end is None else end
                if ob.empty() or time.ticks_diff(now, end) >= 0:
                    break
            online = send is not None and budget and wifi.up()
            if online and time.ticks_diff(now, resume) >= 0:
                nacked = ob.counters["retried"]
                # the message layer's loop: ack after the PUBACK, nack (backoff) or dead letter
                if ob.pump(send, budget) == 0 and ob.counters["retried"] > nacked:
                    # the link failed: every waiting reading would try it now, one after the
                    # other; pause delivery instead (each reading keeps its own backoff too)
                    pause = min(max(1000, pause * 2), 60000)
                    resume = time.ticks_add(time.ticks_ms(), pause)
                else:
                    pause = 0
            # sleep until the next reading or, online, the next retry, whichever is first (1 s at
            # most, so a WiFi that comes back is noticed)
            wait = time.ticks_diff(due, time.ticks_ms()) if end is None else 50
            nxt = ob.next_ready_ms() if online else None
            if nxt is not None:
                wait = min(wait, max(nxt, time.ticks_diff(resume, time.ticks_ms())))
            if wait > 0:
                time.sleep_ms(min(wait, 1000))
        return ob.stats()
    finally:
        ob.close()


async def run_async(rounds=None, period_ms=None, client=None, queue_dir=QUEUE_DIR, drain_ms=0):
    """The asyncio variant of run(): a task takes the readings on the timer, mqtt_as (Peter
    Hinch's; micropython-mqtt-async works too) keeps WiFi and the broker connection, and the
    message layer's asyncio loop (Outbox.run) delivers through ddq_mqtt.MqttAs. client: a
    connected-or-not mqtt_as MQTTClient (default: one made from the settings above). Start it
    with asyncio.run(run_async()); returns the outbox's stats() like run()."""
    import asyncio

    import ddq_mqtt

    period = PERIOD_MS if period_ms is None else period_ms
    ob = open_outbox(queue_dir)
    state = [0, None]  # readings taken; the drain deadline once they are all taken

    async def sample():
        while rounds is None or state[0] < rounds:
            state[0] += 1
            try:
                ob.put(TOPIC, encode(read_sensor(), state[0]))
            except ddq.Full:
                print("outbox full: reading dropped")
            await asyncio.sleep_ms(period)
        state[1] = time.ticks_add(time.ticks_ms(), drain_ms)

    def stop():
        return state[1] is not None and (ob.empty()
                                         or time.ticks_diff(time.ticks_ms(), state[1]) >= 0)

    try:
        task = asyncio.create_task(sample())  # readings are queued while we connect
        if client is None:
            from mqtt_as import MQTTClient, config

            config["server"], config["port"], config["client_id"] = BROKER, BROKER_PORT, CLIENT_ID
            config["ssid"], config["wifi_pw"] = WIFI_SSID, WIFI_PASSWORD
            client = MQTTClient(config)
        delay = 1000
        while not stop():  # the first connect, with backoff; mqtt_as reconnects by itself later
            try:
                await client.connect()
                break
            except OSError as e:
                print("mqtt:", e)
                await asyncio.sleep_ms(delay)
                delay = min(delay * 2, 60000)
        await ob.run(ddq_mqtt.MqttAs(client).send, stop=stop)
        task.cancel()
        return ob.stats()
    finally:
        ob.close()


if __name__ == "__main__":
    run()  # asyncio with mqtt_as instead: import asyncio; asyncio.run(run_async())
