"""CPython-only test helper: an MQTT broker for the end-to-end tests on any machine.

mosquitto when it is installed. When it is not and we are root with apt-get, it is installed
first (demo/ensure_broker.sh, as `make demo` does). Otherwise the embedded amqtt broker from PyPI
(installed into this venv on first use, as demo/run.py does). DDQ_TEST_BROKER=mosquitto|amqtt
forces one. The brokers are demo/run.py's: a process on a free loopback port, ended by pid.

    b = brokers.start(tmp)   # b.kind, b.version; publishers use b.port, subscribers b.sub_port
    b.interrupt()            # an outage: connections cut, the port refuses ...
    b.resume()               # ... and listens again, on the same port
    b.close()

mosquitto's outage is a real stop and restart (SIGTERM: it saves its persistent sessions, so
what it acknowledged survives). amqtt keeps sessions in memory only, so its outage is a relay
between the clients and the broker going down and up (demo/run.py's Amqtt): the publisher sees
the broker vanish the same way while the subscriber's session lives on.

summary() is the line pytest prints at the end (tests/conftest.py) and `make test` repeats above
its closing line: which broker served the tests, and how often one was started.
Not part of the shared suite (the name does not start with test_).
"""

import importlib.util
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (os.path.join(REPO, "host"), os.path.join(REPO, "port")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

_spec = importlib.util.spec_from_file_location(
    "ddq_demo_run", os.path.join(REPO, "demo", "run.py")
)
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)

_used = {}  # "mosquitto 2.0.21" -> brokers started (a module fixture's broker serves many tests)
_tried_install = []  # [(exit status of demo/ensure_broker.sh, its output)], at most one run


def ensure_mosquitto():
    """Path of mosquitto, installing it with apt-get first when root (once); None if absent.
    install_failure() then says whether it could have been installed (and why it was not)."""
    if os.environ.get("DDQ_TEST_BROKER") == "amqtt":
        return None
    exe = demo.find_mosquitto()
    if exe is None and not _tried_install:
        r = subprocess.run(
            ["bash", os.path.join(REPO, "demo", "ensure_broker.sh"), "pytest"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
        )
        out = (r.stdout or "").strip() if r else ""
        _tried_install.append((r.returncode if r else 2, out))
        if out:
            print(out, file=sys.stderr)
        exe = demo.find_mosquitto()
    return exe


def install_failure():
    """None, or apt-get's error when mosquitto was installable here (root with apt-get) and the
    install failed: a test that needs mosquitto must then fail, not skip (a test
    skips only for what the run cannot fix)."""
    if not _tried_install or _tried_install[0][0] != 1:
        return None
    lines = [ln.strip() for ln in _tried_install[0][1].splitlines() if ln.strip()]
    return " / ".join(lines[-4:]) or "apt-get install mosquitto failed"


def kind():
    """The broker start() gives: "mosquitto" or "amqtt"."""
    forced = os.environ.get("DDQ_TEST_BROKER")
    if forced == "mosquitto" or (forced != "amqtt" and ensure_mosquitto()):
        return "mosquitto"
    return "amqtt"


def start(workdir):
    """Start a broker on a free loopback port; the caller close()s it."""
    k = kind()
    os.makedirs(workdir, exist_ok=True)
    b = demo.make_broker(k, workdir, demo.free_port(), lambda s: print(s, file=sys.stderr))
    b.start()
    served(b.version)
    return b


def small_packet_mosquitto(workdir, max_packet_size):
    """A started mosquitto that closes the connection on a PUBLISH over max_packet_size bytes
    (OUTBOX E30's broker); skips the test where mosquitto cannot be had. The caller close()s it.
    """
    import pytest

    exe = ensure_mosquitto()
    if exe is None:
        pytest.skip("needs mosquitto (its max_packet_size): " + str(install_failure()))
    b = demo.Mosquitto(workdir, demo.free_port(), exe)
    with open(b.conf, "a") as f:
        f.write("max_packet_size %d\n" % max_packet_size)
    b.start()
    served(b.version)
    return b


def serve(workdir):
    """A generator for a fixture: yields start(workdir)'s broker and closes it."""
    b = start(workdir)
    try:
        yield b
    finally:
        b.close()


def wait_until(cond, seconds, what):
    """Poll cond() every 50 ms until it is true; AssertionError after seconds (bounded)."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def served(version):
    """Count a test served by a broker started elsewhere (the demo starts its own)."""
    _used[version] = _used.get(version, 0) + 1


def used():
    """{broker version: tests served} of this process (a pytest-xdist worker hands it over)."""
    return dict(_used)


def add_used(counts):
    """Add another process's used() (pytest-xdist's controller: a worker's)."""
    for version, n in counts.items():
        _used[version] = _used.get(version, 0) + n


def summary():
    """One line: the brokers that served the tests, or None when no test used one."""
    if not _used:
        return None
    return "MQTT broker: " + ", ".join(
        "%s (started %d times)" % kv for kv in sorted(_used.items())
    )


class Subscriber:
    """paho on b.sub_port: a persistent session (clean_session False), QoS 1, reconnecting by
    itself; records every payload received under topic (a filter)."""

    def __init__(self, port, topic, client_id):
        import threading

        import paho.mqtt.client as mqtt

        self.got = []
        self.lock = threading.Lock()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=False,
            protocol=mqtt.MQTTv311,
        )
        ready = threading.Event()
        self.c.on_connect = lambda c, u, f, rc, p=None: c.subscribe(topic, qos=1)
        self.c.on_subscribe = lambda *a: ready.set()
        self.c.on_message = self._on_message
        self.c.reconnect_delay_set(1, 1)
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        if not ready.wait(20):
            self.close()
            raise RuntimeError("the subscription was not acknowledged")

    def _on_message(self, c, u, m):
        with self.lock:
            self.got.append(bytes(m.payload))

    def distinct(self):
        with self.lock:
            return set(self.got)

    def wait_for(self, want, seconds):
        """Wait until every payload of want arrived; return the missing ones."""
        import time

        end = time.monotonic() + seconds
        while time.monotonic() < end and not want <= self.distinct():
            time.sleep(0.05)
        return want - self.distinct()

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()
