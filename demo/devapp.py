# The demo's device app: synthetic telemetry into a ddq Outbox, delivered over MQTT QoS 1.
#
# One file, subset Python: it runs on the MicroPython unix port (the virtual board, started over
# mpremote by demo/run.py) and on CPython (the Linux gateway: `python demo/devapp.py key=value
# ...`).
#
# Each reading gets the seq that ddq will give it (the queue's next_seq), a synthetic value and a
# CRC-32 of its text, so the subscriber can check every message it receives. A reading is
# sampled only when the previous one's enqueue returned, so "enqueued" is exactly the queue's
# next_seq - 1 after recovery (sync="always": every returned enqueue is durable). A full queue is
# backpressure: the reading waits, nothing is counted.
#
# Delivery: Outbox.pump claims up to `window` messages (16; OUTBOX E25, ddq_mqtt.WindowSender on
# the MicroPython board; the paho gateway and window=1 keep one at a time), publishes them with QoS
# 1 and acks each only after the broker's PUBACK; after a lost connection the un-acked ones are
# republished at once with DUP; a failed publish is nacked (the message layer's full-jitter
# backoff); losing the broker drops the connection, and reconnects back off too
# (ddq_outbox.Backoff). The publish topic is the stored topic plus "/<boot>/<attempts>", so the
# host can tell which boot of the device sent each copy. At boot, claims left by the previous
# (killed) boot are released: this app is the queue's only consumer. When `total` readings are
# enqueued and none is pending, the app publishes "done" on the status topic, closes the queue and
# returns.
import sys
import time

import ddq
import ddq_outbox

try:
    from binascii import crc32
except ImportError:  # a build without binascii.crc32

    def crc32(data):
        c = 0xFFFFFFFF
        for b in data:
            c ^= b
            for _ in range(8):
                c = (c >> 1) ^ (0xEDB88320 & -(c & 1))
        return c ^ 0xFFFFFFFF


TOPIC = "ddq/demo/telemetry"
STATUS = "ddq/demo/status"

if hasattr(time, "ticks_ms"):
    ticks_ms, ticks_diff, sleep_ms = time.ticks_ms, time.ticks_diff, time.sleep_ms
else:

    def ticks_ms():
        return time.monotonic_ns() // 1000000

    def ticks_diff(a, b):
        return a - b

    def sleep_ms(ms):
        time.sleep(ms / 1000)


def reading(seq):
    """The synthetic telemetry of sample seq: text with a CRC-32 of everything before ' crc='."""
    t = 2000 + (seq * 37) % 600  # centi-degrees, a sawtooth
    body = b"seq=%d temp=%d.%02d rh=%d" % (seq, t // 100, t % 100, 30 + seq % 50)
    return body + b" crc=%08x" % (crc32(body) & 0xFFFFFFFF)


def check_reading(payload):
    """The seq of a received reading, or -1 when its text or CRC is wrong."""
    try:
        body, crc = bytes(payload).rsplit(b" crc=", 1)
        if int(crc, 16) != crc32(body) & 0xFFFFFFFF or not body.startswith(b"seq="):
            return -1
        return int(body[4 : body.index(b" ")])
    except (ValueError, IndexError):
        return -1


# ---------------------------------------------------------------- MQTT links: ddq_mqtt or paho


class SenderLink:
    """The app's four calls over ddq_mqtt.Sender (OUTBOX E19), one QoS 1 publish at a time:
    connect, publish (QoS 1 returns True only after the PUBACK), poll, disconnect. Any failure
    drops the connection (up = False)."""

    def __init__(self, host, port, client_id, timeout_ms=2000, keepalive=30):
        import ddq_mqtt

        self.s = ddq_mqtt.Sender(
            host, port, client_id=client_id.encode(), keepalive=keepalive, timeout_ms=timeout_ms
        )

    @property
    def up(self):
        return self.s.sock is not None

    def connect(self):
        try:
            self.s.connect()
            return True
        except OSError:
            return False

    def publish(self, topic, payload, qos=1):
        if not self.up:
            return False
        try:
            # Packet id 65535 for every publish: one at a time, and a failure closes the
            # connection, so no late PUBACK can be taken for a later publish.
            return self.s.send(_msg(topic, payload, qos, 65535, 0))
        except OSError:
            return False

    def poll(self):
        pass  # Sender notices a dead connection at its next publish

    def disconnect(self):
        self.s.close()

    close = disconnect


class PahoLink:
    """The same four calls on paho-mqtt (the CPython gateway): a fresh client per connection, so a
    publish that timed out can never be sent later behind the app's back."""

    def __init__(self, host, port, client_id, timeout_ms=2000, keepalive=30):
        import paho.mqtt.client as mqtt  # CPython only

        self.mqtt, self.host, self.port, self.cid = mqtt, host, port, client_id
        self.timeout, self.keepalive = timeout_ms / 1000, keepalive
        self.c = None
        self.lost = False

    @property
    def up(self):
        return self.c is not None and not self.lost

    def connect(self):
        import threading

        self.close()
        ev, res = threading.Event(), []
        c = self.mqtt.Client(
            self.mqtt.CallbackAPIVersion.VERSION2, client_id=self.cid, clean_session=True
        )
        c.on_connect = lambda _c, _u, _f, rc, _p: (res.append(not rc.is_failure), ev.set())
        c.on_disconnect = lambda *_a: setattr(self, "lost", True)
        try:
            c.connect(self.host, self.port, keepalive=self.keepalive)
        except OSError:
            return False
        self.lost = False
        c.loop_start()
        if not ev.wait(self.timeout) or not res or not res[0]:
            c.loop_stop()
            return False
        self.c = c
        return True

    def publish(self, topic, payload, qos=1):
        if not self.up:
            return False
        info = self.c.publish(topic, bytes(payload), qos=qos)
        if qos == 0:
            return True
        try:
            info.wait_for_publish(self.timeout)
        except (RuntimeError, ValueError):
            pass
        if info.is_published():
            return True
        self.close()
        return False

    def poll(self):
        if self.c is not None and self.lost:
            self.close()

    def close(self):
        c, self.c = self.c, None
        if c is not None:
            try:
                c.disconnect()
            except Exception:
                pass
            c.loop_stop()

    disconnect = close


class WindowLink(SenderLink):
    """The app's four calls over ddq_mqtt.WindowSender (OUTBOX E25), plus `win`: the windowed
    sender Outbox.pump takes, which keeps `window` QoS 1 publishes in flight and adds the app's
    topic suffix (boot, attempts) to each. Any failure drops the connection (up = False)."""

    def __init__(
        self, host, port, client_id, timeout_ms=2000, keepalive=30, window=16, suffix="/0/"
    ):
        import ddq_mqtt

        self.s = ddq_mqtt.WindowSender(
            host,
            port,
            inflight_max=window,
            timeout_ms=timeout_ms,
            client_id=client_id.encode(),
            keepalive=keepalive,
        )
        self.win, self.inflight_max = _Win(self.s, suffix, window), window

    def publish(self, topic, payload, qos=1):
        # The app's own status messages (nothing of the window is in flight then).
        try:
            if qos == 0:
                self.s.publish(_msg(topic, payload, 0, 0, 0))
                return True
            return self.s.send(_msg(topic, payload, 1, 65535, 0))
        except OSError:
            return False


def _msg(topic, payload, qos, seq, attempts):
    m = ddq_outbox.Message()
    m.topic, m.payload, m.qos, m.seq, m.attempts = topic, payload, qos, seq, attempts
    return m


class _Win:
    """The windowed-sender protocol (OUTBOX E25) with the app's topic suffix."""

    def __init__(self, s, suffix, window):
        self.s, self.suffix, self.inflight_max = s, suffix, window
        self.timeout_ms = s.timeout_ms

    def publish(self, m, dup=False):
        self.s.publish(
            _msg(m.topic + self.suffix + str(m.attempts), m.payload, m.qos, m.seq, m.attempts), dup
        )

    def poll(self, timeout_ms=0):
        return [s for s in self.s.poll(timeout_ms) if s]  # seq 0: a QoS 0 status message


# ---------------------------------------------------------------- the app


def release_claims(q):
    """Claims still leased by the previous boot (killed mid-send) become ready now."""
    n = 0
    for seq in [it.seq for it in q.items() if it.state == "claimed"]:
        q.retry(seq, 0)
        n += 1
    return n


def main(
    host="127.0.0.1",
    port=1883,
    total=1000,
    rate=50,
    boot=0,
    queue_dir="outbox",
    options=None,
    sync="always",
    lease_ms=5000,
    timeout_ms=2000,
    min_retry_ms=200,
    max_retry_ms=3000,
    seed=None,
    link="mini",
    client_id="ddq-demo-device",
    log=True,
    window=16,
    raw=False,
):
    """Run until `total` readings are enqueued and delivered; return the Outbox stats. raw: the
    queue on the board's raw flash region (`ddq flash --layout raw` wrote ddq_layout)."""
    opts = dict(options or {})
    if raw:
        import ddq_layout

        ddq_layout.use(opts)
    ob = ddq_outbox.Outbox(
        queue_dir,
        lease_ms=lease_ms,
        min_retry_ms=min_retry_ms,
        max_retry_ms=max_retry_ms,
        seed=seed,
        sync=sync,
        **opts,
    )
    q = ob.queue
    say = print if log else (lambda *a: None)
    released = release_claims(q)
    nxt = q.stats().next_seq
    say("boot %d: next_seq %d, %d pending, %d claims released" % (boot, nxt, ob.qsize(), released))
    suffix = "/%d/" % boot
    if link == "mini" and window > 1:  # the window (OUTBOX E25): ddq_mqtt.WindowSender
        mq = WindowLink(
            host, port, "%s-%d" % (client_id, boot), timeout_ms, window=window, suffix=suffix
        )
    else:
        cls = PahoLink if link == "paho" else SenderLink
        mq = cls(host, port, "%s-%d" % (client_id, boot), timeout_ms)
    say(
        "boot %d: delivery window %d (%s)"
        % (boot, getattr(mq, "inflight_max", 1), type(mq).__name__)
    )
    conn_bo = ddq_outbox.Backoff(100, 2000, None if seed is None else seed + 1)
    conn_fail, conn_at = 0, ticks_ms()
    period = 1000 // max(1, rate)
    t_sample = hb_at = ticks_ms()
    full = done_sent = 0

    def send(m):
        return mq.publish(m.topic + suffix + str(m.attempts), m.payload, 1)

    try:
        while True:
            busy = False
            now = ticks_ms()
            # 1. sample: the next reading once its time has come (backpressure when Full)
            if nxt <= total and ticks_diff(now, t_sample) >= 0:
                try:
                    seq = ob.put(TOPIC, reading(nxt), qos=1)
                except ddq.Full:
                    full += 1
                    seq = 0
                if seq:
                    if seq != nxt:  # the reading carries the wrong seq: say so loudly
                        say("ERROR: put returned seq %d for reading %d" % (seq, nxt))
                    nxt = seq + 1
                    t_sample += period
                    if ticks_diff(now, t_sample) > 1000:
                        t_sample = now  # far behind (an outage): do not burst to catch up
                    busy = True
            # 2. the connection: reconnect with backoff
            mq.poll()
            if not mq.up and ticks_diff(now, conn_at) >= 0:
                if mq.connect():
                    say("boot %d: connected" % boot)
                    conn_fail = 0
                else:
                    conn_fail += 1
                    conn_at = ticks_ms() + conn_bo.delay(conn_fail)
            # 3. deliver what is due
            if mq.up:
                w = getattr(mq, "win", None)
                busy = ob.pump(w or send, budget=2 * w.inflight_max if w else 8) > 0 or busy
            # 4. heartbeat for the host's progress line (QoS 0, best effort)
            if mq.up and ticks_diff(now, hb_at) >= 500:
                hb_at = now
                mq.publish(
                    STATUS + "/hb",
                    b"boot=%d enq=%d pending=%d full=%d" % (boot, nxt - 1, ob.qsize(), full),
                    0,
                )
            # 5. finished: everything enqueued and delivered
            if nxt > total and mq.up and ob.qsize() == 0:
                ob.sync()
                if mq.publish(STATUS + "/done", b"boot=%d enq=%d" % (boot, nxt - 1), 1):
                    done_sent = 1
                    break
            if not busy:
                sleep_ms(2)
    finally:
        mq.disconnect()
        st = ob.stats()
        ob.close()
    say("boot %d: finished (done sent %d): %r" % (boot, done_sent, st))
    return st


def _cli(argv):
    # key=value arguments; ints where they parse; options=json
    import json

    kw = {}
    for a in argv:
        k, v = a.split("=", 1)
        if k == "options":
            kw[k] = json.loads(v)
        else:
            try:
                kw[k] = int(v)
            except ValueError:
                kw[k] = v
    main(**kw)


if __name__ == "__main__":
    _cli(sys.argv[1:])
