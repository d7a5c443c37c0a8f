"""The MQTT clients users already run, through ddq_mqtt's adapters, against a real broker that goes
away mid-stream: umqtt.simple and mqtt_as (micropython-mqtt-async) on the MicroPython unix port,
paho-mqtt on CPython. EVIDENCE-OF: E24 E17

Each run puts a message every 10 ms while delivering (the message layer's pump/run), so the
outage falls in the middle of the stream: once the subscriber has a quarter of them, the broker
is stopped, kept down for a second and started again on the same port (tests/brokers.py says
what an outage is with each broker). Nothing may be lost: every message arrives at least once
and the queue ends empty. The unix port's clients come from their pinned sdists (`make venv`:
.venv/mpylib; fetched here when missing). Figures are printed, not asserted, except that the
adapter's TCP_NODELAY run must be at least 3 times faster than the same run without it.
"""

import os
import subprocess
import sys
import time

import pytest

import brokers
import ddq_mqtt
import ddq_outbox

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")
MPYLIB = os.path.join(REPO, ".venv", "mpylib")
STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpstandin")
N = 200


def mpylib():
    """.venv/mpylib with umqtt/simple.py and mqtt_async.py (make venv's step, run if missing)."""
    if not all(
        os.path.exists(os.path.join(MPYLIB, f)) for f in ("umqtt/simple.py", "mqtt_async.py")
    ):
        r = subprocess.run(["make", "-C", REPO, "venv"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    return MPYLIB


@pytest.fixture
def broker(tmp_path):  # type: ignore[no-untyped-def]
    yield from brokers.serve(str(tmp_path / "broker"))


def _outage_when(sub, b, until_done, seconds=120.0, down=1.0):
    """Poll until_done(); once sub has N/4 messages, take the broker down for `down` s."""
    end, state, t_down = time.monotonic() + seconds, "up", 0.0
    while time.monotonic() < end:
        if until_done():
            break
        if state == "up" and len(sub.distinct()) >= N // 4:
            assert len(sub.distinct()) < N, "the stream ended before the outage"
            b.interrupt()
            state, t_down = "down", time.monotonic()
        elif state == "down" and time.monotonic() - t_down >= down:
            b.resume()
            state = "again"
        time.sleep(0.02)
    if state == "down":
        b.resume()
    return state


def _run_mp(script, sub, b, tmp_path):
    path = tmp_path / "app.py"
    path.write_text(script)
    p = subprocess.Popen(
        [MICROPYTHON, str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        state = _outage_when(sub, b, lambda: p.poll() is not None)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = out.decode()
    assert state == "again", "no outage happened mid-stream: " + text[-2000:]
    assert p.returncode == 0, text[-3000:]
    return text


def _check(sub, text, prefix, b):
    missing = sub.wait_for({b"%06d" % i for i in range(N)}, 30)
    last = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    print(
        "%s | broker %s | lost %d, duplicates %d"
        % (
            last[-1] if last else text[-300:],
            b.version,
            len(missing),
            len(sub.got) - len(sub.distinct()),
        )
    )
    assert last and (" put %d sent %d " % (N, N)) in last[-1] and " pending 0 " in last[-1], text
    assert not missing, sorted(missing)[:10]


# The message layer's own loop does the delivery: a put every 10 ms, pump between.
UMQTT = r"""
import sys, time
sys.path[0:0] = [%(port)r, %(mpylib)r]
import ddq_mqtt, ddq_outbox
from umqtt.simple import MQTTClient

ob = ddq_outbox.Outbox(%(qdir)r, min_retry_ms=50, max_retry_ms=500, lease_ms=10000)
link = ddq_mqtt.Umqtt(MQTTClient(b"ddq-umqtt", "127.0.0.1", %(mqtt)d), timeout_ms=2000)
put, t0 = 0, time.ticks_ms()
while time.ticks_diff(time.ticks_ms(), t0) < 90000:
    if put < %(n)d:
        ob.put("um/%%d" %% (put %% 5), b"%%06d" %% put)
        put += 1
    elif ob.empty():
        break
    ob.pump(link.send, budget=8)
    time.sleep_ms(10 if put < %(n)d else min(ob.next_ready_ms() or 0, 50) or 5)
st = ob.stats()
print("umqtt put", put, "sent", st["sent"], "retried", st["retried"], "pending", st["pending"],
      "connects", link.connects)
link.close()
ob.close()
"""


def test_umqtt_simple_on_the_unix_port_through_a_broker_outage(broker, tmp_path):
    _through_an_outage(UMQTT, "um/#", "ddq-sub-umqtt", "umqtt put", broker, tmp_path)


def _through_an_outage(template, topic, sub_id, prefix, broker, tmp_path):
    """Run the MicroPython app `template` (given port/, micropython-lib, the stand-ins, its queue
    directory, the broker's port and N) through an outage; every message must arrive."""
    sub = brokers.Subscriber(broker.sub_port, topic, "%s-%d" % (sub_id, os.getpid()))
    try:
        script = template % {
            "port": os.path.join(REPO, "port"),
            "mpylib": mpylib(),
            "standin": STANDIN,
            "qdir": str(tmp_path / "q"),
            "mqtt": broker.port,
            "n": N,
        }
        _check(sub, _run_mp(script, sub, broker, tmp_path), prefix, broker)
    finally:
        sub.close()


FIGURES = r"""
import sys, time
sys.path[0:0] = [%(port)r, %(mpylib)r]
import ddq_clients, ddq_mqtt, ddq_outbox
from umqtt.simple import MQTTClient

def outbox(d):
    ob = ddq_outbox.Outbox(d)
    for i in range(%(n)d):
        ob.put("fig/x", b"%%06d" %% i)
    return ob

# The obvious glue: umqtt's publish() returns None, so a delivered message is nacked, not acked.
ob = outbox(%(q)r + "/glue")
c = MQTTClient(b"ddq-glue", "127.0.0.1", %(mqtt)d)
c.connect()
acked = ob.pump(lambda m: c.publish(m.topic, m.payload, m.retain, 1), budget=1)
print("glue acked", acked, "retried", ob.stats()["retried"])
c.disconnect()
ob.close()

def timed(name, q):
    ob = outbox(q)
    link = ddq_mqtt.Umqtt(MQTTClient(name, "127.0.0.1", %(mqtt)d))
    link.connect()
    t = time.ticks_ms()
    while not ob.empty():
        ob.pump(link.send, budget=%(n)d)
    ms = time.ticks_diff(time.ticks_ms(), t)
    link.close()
    ob.close()
    return ms

with_nodelay = timed(b"ddq-fig-1", %(q)r + "/a")
ddq_clients.nodelay = lambda s: False  # the same adapter, without TCP_NODELAY
without = timed(b"ddq-fig-0", %(q)r + "/b")
print("umqtt %(n)d messages: %%d ms with TCP_NODELAY, %%d ms without" %% (with_nodelay, without))
"""


def test_umqtt_figures_tcp_nodelay_and_the_obvious_glue(broker, tmp_path):
    script = tmp_path / "fig.py"
    script.write_text(
        FIGURES
        % {
            "port": os.path.join(REPO, "port"),
            "mpylib": mpylib(),
            "q": str(tmp_path),
            "mqtt": broker.port,
            "n": N,
        }
    )
    r = subprocess.run([MICROPYTHON, str(script)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stdout.strip(), "| broker", broker.version)
    assert "glue acked 0 retried 1" in r.stdout, r.stdout
    line = [ln for ln in r.stdout.splitlines() if "with TCP_NODELAY" in ln][0]
    with_ms, without_ms = (int(w) for w in line.split(": ")[1].split() if w.isdigit())
    # Without it each publish waits for a delayed ACK (~40 ms on Linux) whatever the CPU does;
    # with it, the time is the queue's own work. A ratio holds on a busy machine too.
    assert with_ms * 3 < without_ms, line


MQTT_AS = r"""
import sys, time, asyncio
sys.path[0:0] = [%(port)r, %(mpylib)r, %(standin)r]
# mqtt_async on the unix port: stand-ins for `network` (WiFi) and what else the port lacks
# (tests/e2e/mpstandin/mqtt_async_unix.py says which and why)
from mqtt_async_unix import Client, config
import ddq_mqtt, ddq_outbox

cfg = config
cfg.server, cfg.port, cfg.client_id, cfg.response_time = "127.0.0.1", %(mqtt)d, b"ddq-as", 2
ob = ddq_outbox.Outbox(%(qdir)r, min_retry_ms=50, max_retry_ms=500, lease_ms=10000)
state = {"put": 0}

async def produce():
    while state["put"] < %(n)d:
        i = state["put"]
        ob.put("as/%%d" %% (i %% 5), b"%%06d" %% i)
        state["put"] = i + 1
        await asyncio.sleep_ms(10)

async def main():
    c = Client(cfg)
    await c.connect()
    link = ddq_mqtt.MqttAs(c, timeout_ms=2000)
    asyncio.create_task(produce())
    t0 = time.ticks_ms()
    def stop():
        done = state["put"] >= %(n)d and ob.empty()
        return done or time.ticks_diff(time.ticks_ms(), t0) > 90000
    await ob.run(link.send, idle_ms=20, stop=stop)
    st = ob.stats()
    print("mqtt_as put", state["put"], "sent", st["sent"], "retried", st["retried"], "pending",
          st["pending"], "")
    await c.disconnect()

asyncio.run(main())
ob.close()
"""


def test_mqtt_as_on_the_unix_port_through_a_broker_outage(broker, tmp_path):
    _through_an_outage(MQTT_AS, "as/#", "ddq-sub-as", "mqtt_as put", broker, tmp_path)


def test_paho_on_cpython_through_a_broker_outage(broker, tmp_path):
    import paho.mqtt.client as mqtt

    sub = brokers.Subscriber(broker.sub_port, "paho/#", "ddq-sub-paho-%d" % os.getpid())
    pub = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id="ddq-paho-pub", protocol=mqtt.MQTTv311
    )
    pub.reconnect_delay_set(1, 1)
    pub.connect("127.0.0.1", broker.port, keepalive=30)
    pub.loop_start()
    ob = ddq_outbox.Outbox(str(tmp_path / "q"), min_retry_ms=50, max_retry_ms=500, lease_ms=10000)
    link = ddq_mqtt.Paho(pub, timeout_ms=2000)
    st = {"put": 0}

    def step():  # one round of the app: a put every 10 ms, then the message layer's pump
        if st["put"] < N:
            ob.put("paho/%d" % (st["put"] % 5), b"%06d" % st["put"])
            st["put"] += 1
        elif ob.empty():
            return True
        ob.pump(link.send, budget=8)
        return False

    try:
        end, state, t_down = time.monotonic() + 120, "up", 0.0
        while time.monotonic() < end and not step():
            if state == "up" and len(sub.distinct()) >= N // 4:
                broker.interrupt()
                state, t_down = "down", time.monotonic()
            elif state == "down" and time.monotonic() - t_down >= 1.0:
                broker.resume()
                state = "again"
            time.sleep(0.01)
        s = ob.stats()
        text = "paho put %d sent %d retried %d pending %d " % (
            st["put"],
            s["sent"],
            s["retried"],
            s["pending"],
        )
        assert state == "again", text
        _check(sub, text, "paho put", broker)
    finally:
        pub.loop_stop()
        pub.disconnect()
        sub.close()
        ob.close()


def test_paho_drops_what_the_broker_closes_the_connection_for(tmp_path):
    # OUTBOX E30 through the paho adapter: mosquitto with max_packet_size closes the connection
    # on the big message. paho resends an unacknowledged publish after each reconnect on its
    # own, so unless the adapter withdraws it once the Outbox gave up on it, it is sent again
    # at every reconnect and nothing after it is ever acked. The big one ends as a dead letter
    # after max_attempts; the others are delivered, none of them charged.
    import paho.mqtt.client as mqtt

    b = brokers.small_packet_mosquitto(str(tmp_path / "broker"), 2048)
    pub = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id="ddq-paho-e30", protocol=mqtt.MQTTv311
    )
    pub.reconnect_delay_set(1, 1)
    sub = None
    try:
        sub = brokers.Subscriber(b.port, "big/#", "ddq-sub-paho-e30-%d" % os.getpid())
        pub.connect("127.0.0.1", b.port, keepalive=30)
        pub.loop_start()
        ob = ddq_outbox.Outbox(str(tmp_path / "q"), min_retry_ms=10, max_retry_ms=10,
                               max_attempts=2)  # fmt: skip
        seqs = [ob.put("big/%d" % i, b"x" * 4000 if i == 1 else b"%06d" % i) for i in range(6)]
        link = ddq_mqtt.Paho(pub, timeout_ms=1500)
        end = time.monotonic() + 60
        while time.monotonic() < end and not ob.empty():
            if pub.is_connected():  # (a send while paho reconnects is an attempt too)
                ob.pump(link.send, budget=8)
            time.sleep(0.05)
        assert ob.empty(), ob.stats()
        dead = ob.dead_letters()
        assert [m.seq for m in dead] == [seqs[1]] and dead[0].attempts == 1, dead
        assert [it.attempts for it in ob.queue.items() if it.seq != seqs[1]] == [0] * 5
        assert not sub.wait_for({b"%06d" % i for i in range(6) if i != 1}, 10)
        ob.close()
    finally:
        pub.loop_stop()
        pub.disconnect()
        if sub is not None:
            sub.close()
        b.close()
