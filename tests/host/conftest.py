"""Fixtures for the host-tool tests: the `ddq` CLI as a real process, a virtual board, a mosquitto.

Every process a fixture starts is ended in a finally by its pid (and checked gone).
"""

import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HOST = os.path.join(REPO, "host")
PORT_DIR = os.path.join(REPO, "port")
for _p in (HOST, PORT_DIR, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from ddqhost import vboard  # noqa: E402

FIXTURES = os.environ.get("DDQ_FIXTURES") or os.path.join(REPO, "tests", "fixtures", "ddq-c")
FIXTURE_NAMES = ("basic", "compacted", "legacy_uncompacted")

# The port modules every flash installs first, in the order `ddq flash` writes them.
PORT_CORE = "ddq ddq_recover ddq_compact ddq_extra ddq_cut ddq_fat ddq_hold"
# With an app on a LittleFS profile: no ddq_fat (the lock's key on FAT, SPEC L3; HOST.md flash).
PORT_CORE_LFS = PORT_CORE.replace(" ddq_fat", "")
SKIP_REASON = re.compile(r"^SKIP \S+: \S.{10,}$")  # a skip says why


def port_files(fmt, *groups):
    """[fmt % name] for the space-separated module names of groups, in order."""
    return [fmt % n for g in groups for n in g.split()]


def check_suite_run(r, mods):
    """Assert a `ddq test --each` run of mods passed: no FAIL line, every SKIP says why, the
    summary line says 0 failed. Returns the run's stdout."""
    out = r.stdout
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL ")]
    assert r.returncode == 0 and not fails, "\n".join(fails) + "\n" + out[-3000:] + r.stderr
    for ln in out.splitlines():
        if ln.startswith("SKIP "):
            assert SKIP_REASON.match(ln), ln
    last = out.strip().splitlines()[-1]
    assert re.match(r"ddq test --each: posix: \d+ passed, 0 failed", last), last
    print(" ".join(mods), last)  # (pytest -s shows the counts)
    return out


def cli_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [HOST, PORT_DIR] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.pop("DDQ_DEVICE", None)
    # Never the user's virtual board: tests always name their device.
    env["DDQ_STATE_DIR"] = os.path.join(REPO, ".no-default-virtual-board")  # never created
    env["DDQ_QEMU_STATE_DIR"] = os.path.join(REPO, ".no-default-qemu-board")  # never created
    env["DDQ_PICO_STATE_DIR"] = os.path.join(REPO, ".no-default-pico-board")  # never created
    return env


def ddq(*args, timeout=120, input=None):
    """Run `python -m ddqhost.cli ARGS` as a real process; return the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-m", "ddqhost.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=timeout,
        input=input,
        cwd=REPO,
    )


def one_line_error(r, code):
    """Assert r failed with exit status code and exactly one `ddq: ...` line on stderr."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddq: "), r.stderr
    return lines[0]


def tree_hash(path):
    """{relative name: sha256} of every file under path (to prove a command modified nothing)."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def copy_fixture(name, dst):
    shutil.copytree(os.path.join(FIXTURES, name), dst)
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    os.chmod(dst, 0o755)
    return dst


def option_flags(opts):
    out = []
    for k in ("segment_bytes", "max_payload_bytes", "max_items", "max_segments"):
        out += ["--" + k.replace("_", "-"), str(opts[k])]
    return out


# ---------------------------------------------------------------- virtual board


def kill_board(kill, state_dir, pids):
    """Stop a board with kill(state_dir) and SIGKILL any of pids still alive; True when none is."""
    kill(state_dir)
    for pid in pids:
        if vboard.pid_alive(pid):
            os.kill(pid, 9)
    return not any(vboard.pid_alive(p) for p in pids)


class Board:
    def __init__(self, state_dir):
        self.dir = state_dir
        self.tty = os.path.join(state_dir, "tty")
        self.pids = set()

    def start(self):
        st = vboard.start(self.dir)
        self.pids.update([st["bridge_pid"], st["micropython_pid"]])
        return st

    def all_gone(self):
        return not any(vboard.pid_alive(p) for p in self.pids)


@contextlib.contextmanager
def fresh_board(state_dir):
    """A virtual board with the defaults a user gets (1 MiB LittleFS image) in state_dir, for one
    test: yields (vboard.start's state, the set of its pids: a test adds the ones it saw); after
    it, killed with every one of them (checked gone)."""
    b = Board(state_dir)
    st = b.start()
    try:
        yield st, b.pids
    finally:
        b.pids.add((vboard.read_state(state_dir) or {}).get("micropython_pid"))
        b.pids.discard(None)  # (a soft reset restarts micropython: its pid is the state's)
        assert kill_board(vboard.kill, state_dir, b.pids), "virtual board processes left behind"


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A virtual board for the module (its image persists across stop/start inside the module)."""
    b = Board(str(tmp_path_factory.mktemp("vboard")))
    b.start()
    try:
        yield b
    finally:
        assert kill_board(vboard.kill, b.dir, b.pids), "virtual board processes left behind"


# ---------------------------------------------------------------- mosquitto


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory):
    """An MQTT broker on 127.0.0.1:<free port>; yields the port. tests/brokers.py picks it:
    mosquitto (installed with apt-get when root), else the embedded amqtt from PyPI."""
    import brokers

    b = brokers.start(str(tmp_path_factory.mktemp("broker")))
    try:
        yield b.sub_port  # the broker itself (amqtt's relay is for outages, none here)
    finally:
        b.close()


class HostileServer:
    """A TCP listener on 127.0.0.1 (.port) whose accept thread hands each connection (at most 32)
    to self.serve(conn) in a thread of its own; close() stops it, joins every thread and closes
    every connection. A subclass's serve is the misbehaviour its tests need; this one holds the
    connection and never answers (test_host_safety's silent broker, test_host_bounds' huge
    PUBLISH)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.threads = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set() and len(self.threads) < 32:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(c)
            t = threading.Thread(target=self.serve, args=(c,), daemon=True)
            self.threads.append(t)
            t.start()

    def serve(self, c):
        pass

    def close(self):
        self.stop.set()
        self.t.join(10)
        for t in self.threads:
            t.join(10)
        for c in self.conns:
            c.close()
        self.sock.close()


class Subscriber:
    """A QoS 1 subscriber to '#' that records (topic, payload) pairs."""

    def __init__(self, port):
        import paho.mqtt.client as mqtt

        self.got = []
        self.lock = threading.Lock()
        ready = threading.Event()
        self.c = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id="ddq-test-sub-%d" % os.getpid()
        )
        self.c.on_message = self._on_message
        self.c.on_subscribe = lambda *a: ready.set()
        self.c.connect("127.0.0.1", port)
        self.c.subscribe("#", qos=1)
        self.c.loop_start()
        assert ready.wait(10), "subscription not acknowledged"

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.got.append((msg.topic, bytes(msg.payload)))

    def wait_for(self, n, timeout=120, prefix=""):
        """Wait until n messages whose topic starts with prefix arrived (timeout: a bound for a
        broken run only; a slow machine just takes longer); return every message so far."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if sum(1 for t, _p in self.got if t.startswith(prefix)) >= n:
                    break
            time.sleep(0.02)
        time.sleep(0.2)  # anything beyond n (a duplicate) would arrive now
        with self.lock:
            return list(self.got)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()
