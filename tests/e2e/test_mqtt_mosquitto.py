"""End to end: ddq_outbox.Outbox -> ddq_mqtt.Sender -> a real broker -> a paho subscriber.

Each test starts its own broker on a free loopback port (tests/brokers.py: mosquitto with
persistence on, so a graceful restart keeps the subscriber's queued QoS 1 messages; installed
with apt-get when root; else the embedded amqtt, whose outage is a relay cut) and ends it by pid.
The broker is restarted in the middle of delivery; every message must arrive (duplicates are
allowed: at least once). The MicroPython run drives the same adapter from the unix port in a
subprocess. Figures (messages/s) are printed, never asserted. EVIDENCE-OF: E17 E19
"""

import os
import subprocess
import sys
import time

import paho.mqtt.client as mqtt  # noqa: F401  (make venv installs it: never a reason to skip)
import pytest

import brokers
import ddq_mqtt
import ddq_outbox

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")


class Subscriber(brokers.Subscriber):
    def __init__(self, port: int, topic: str) -> None:
        super().__init__(port, topic, "ddq-e2e-sub-%d-%d" % (port, os.getpid()))


@pytest.fixture
def broker(tmp_path):  # type: ignore[no-untyped-def]
    """tests/brokers.py: mosquitto (installed with apt-get when root), else the embedded amqtt.
    stop()/start() of the tests below are its outage: interrupt()/resume() on the same port."""
    for b in brokers.serve(str(tmp_path / "broker")):
        b.stop, b.start = b.interrupt, b.resume
        yield b


def _deliver(ob: ddq_outbox.Outbox, link: ddq_mqtt.Sender, seconds: float, until=None) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end and not ob.empty():
        ob.pump(link.send, budget=50)
        if until is not None and until():
            return
        d = ob.next_ready_ms()
        time.sleep(min(d or 0, 50) / 1000)


def test_delivery_survives_a_broker_restart(broker, tmp_path):  # type: ignore[no-untyped-def]
    n = 300
    sub = Subscriber(broker.sub_port, "e2e/#")
    ob = ddq_outbox.Outbox(str(tmp_path / "q"), min_retry_ms=20, max_retry_ms=300, lease_ms=10000)
    link = ddq_mqtt.Sender("127.0.0.1", broker.port, client_id=b"ddq-e2e-pub", timeout_ms=2000)
    want = {b"%06d" % i for i in range(n)}
    try:
        for i in range(n):
            ob.put("e2e/%d" % (i % 7), b"%06d" % i, key=b"%06d" % i)
        _deliver(ob, link, 30, until=lambda: ob.stats()["sent"] >= n // 3)
        sent_before = ob.stats()["sent"]
        assert 0 < sent_before < n
        broker.stop()
        _deliver(ob, link, 0.7)  # the broker is down: every send fails and backs off
        st = ob.stats()
        assert st["sent"] == sent_before and st["retried"] > 0
        broker.start()
        _deliver(ob, link, 60)
        st = ob.stats()
        assert ob.empty() and st["sent"] == n, st
        missing = sub.wait_for(want, 30)
        dups = len(sub.got) - len(sub.distinct())
        print(
            "broker restart: %d messages, %d lost, %d duplicates, %d retries, %d connects"
            % (n, len(missing), dups, st["retried"], link.connects)
        )
        assert not missing, sorted(missing)[:10]
    finally:
        link.close()
        sub.close()
        ob.close()


@pytest.mark.parametrize("group", [0, 100])
def test_throughput_to_mosquitto(broker, tmp_path, group):  # type: ignore[no-untyped-def]
    n = 1000
    sub = Subscriber(broker.sub_port, "rate/#")
    ob = ddq_outbox.Outbox(str(tmp_path / "q"), sync_every=group)
    link = ddq_mqtt.Sender("127.0.0.1", broker.port, client_id=b"ddq-rate-pub")
    try:
        t0 = time.perf_counter()
        for i in range(n):
            ob.put("rate/x", b"%06d" % i)
        t1 = time.perf_counter()
        _deliver(ob, link, 120)
        t2 = time.perf_counter()
        assert ob.stats()["sent"] == n
        assert not sub.wait_for({b"%06d" % i for i in range(n)}, 30)
        print(
            "sync=%s: put %.0f msg/s; deliver (QoS 1, PUBACK each) %.0f msg/s"
            % ("every %d" % group if group else "always", n / (t1 - t0), n / (t2 - t1))
        )
    finally:
        link.close()
        sub.close()
        ob.close()


def mp_publisher(script, template, n, mqtt_port):  # type: ignore[no-untyped-def]
    """Start the MicroPython publisher `template` (its queue beside script) of n messages."""
    qdir = str(script.parent / "mpq")
    port = os.path.join(REPO, "port")
    script.write_text(template % {"port": port, "n": n, "qdir": qdir, "mqtt_port": mqtt_port})
    return subprocess.Popen(
        [MICROPYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def mp_delivered(p, n, sub):  # type: ignore[no-untyped-def]
    """Wait for mp_publisher's p to end: it must exit 0 saying it sent all n messages; returns
    its output and the payloads the subscriber still misses after 30 s."""
    out, _ = p.communicate(timeout=90)
    text = out.decode()
    assert p.returncode == 0, text
    assert ("MP sent %d " % n) in text, text
    return text, sub.wait_for({b"%06d" % i for i in range(n)}, 30)


MP_SCRIPT = """
import sys, time
sys.path.insert(0, %(port)r)
import ddq_mqtt, ddq_outbox
ob = ddq_outbox.Outbox(%(qdir)r, min_retry_ms=20, max_retry_ms=300, lease_ms=10000)
for i in range(%(n)d):
    ob.put("mp/%%d" %% (i %% 5), b"%%06d" %% i)
link = ddq_mqtt.Sender("127.0.0.1", %(mqtt_port)d, client_id=b"ddq-mp-pub", timeout_ms=2000)
t0 = time.ticks_ms()
for _ in range(100000):
    if ob.empty() or time.ticks_diff(time.ticks_ms(), t0) > 60000:
        break
    ob.pump(link.send, budget=5)
    time.sleep_ms(min(ob.next_ready_ms() or 0, 50) or 10)
st = ob.stats()
print("MP sent", st["sent"], "retried", st["retried"], "connects", link.connects)
link.close()
ob.close()
"""


def test_micropython_adapter_with_a_broker_restart(broker, tmp_path):  # type: ignore[no-untyped-def]
    assert os.path.exists(MICROPYTHON), "no MicroPython unix port in the venv: make venv"
    n = 200
    sub = Subscriber(broker.sub_port, "mp/#")
    p = mp_publisher(tmp_path / "mp_pub.py", MP_SCRIPT, n, broker.port)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and len(sub.distinct()) < n // 4:
            time.sleep(0.02)
        assert len(sub.distinct()) < n, "the MicroPython publisher finished before the restart"
        broker.stop()
        time.sleep(0.5)
        broker.start()
        text, missing = mp_delivered(p, n, sub)
        print(
            text.strip(), "| lost", len(missing), "duplicates", len(sub.got) - len(sub.distinct())
        )
        assert not missing, sorted(missing)[:10]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        sub.close()
