"""`make demo`: a device outbox delivering to a real MQTT broker through broker restarts and power
cuts.

    python demo/run.py [--gateway micropython|cpython] [--storage fs|raw] [--messages N] [--rate R]
                       [--seed S]
                       [--broker-restarts K] [--kills K] [--broker auto|mosquitto|amqtt] ...

What runs (all on 127.0.0.1, a free port; every process is ended by pid in `finally`):
  * a broker: mosquitto (persistence on, stopped with SIGTERM so it saves its sessions), else the
    embedded amqtt broker from PyPI (installed into this venv only when needed). amqtt keeps
    sessions in memory and drops them on restart, so with amqtt a "restart" is an outage instead:
    a relay in front of it cuts the device's connections and refuses new ones for a while;
  * a subscriber (paho-mqtt, persistent session, QoS 1) recording every message;
  * the device: the virtual board (MicroPython unix port on a LittleFS image behind a pty) running
    demo/devapp.py, installed with `ddq flash` and started over mpremote without waiting; or with
    --gateway cpython the same app as a CPython process with paho-mqtt; --storage raw keeps the
    board's queue on its raw flash region instead (`ddq flash --layout raw`: ddq_flash over the
    board's NOR image, STATE_DIR/raw.img), and the power-cut images and the final pull are images
    of that region, recovered on the host through the same port code (ddq_flash.FlashStorage);
  * a chaos loop from a printed seed: broker stop/start and SIGKILL of the device process (a power
    cut: only what LittleFS had synced survives on the image) at random moments, then a restart.
    After each kill the image (or directory) is copied and its queue recovered on the host: which
    seqs were durably enqueued and acked at that moment.
At the end the device drains and says "done"; the demo runs `ddq pull`, `ddq verify`, `ddq inspect`
and prints a summary. Exit status 0 only when nothing was lost and every check held.

Counting. enqueued = the pulled queue's next_seq - 1: the app samples reading n only after the
enqueue of n-1 returned, and every returned enqueue is durable (sync="always"), so this is the
number of enqueues that returned (at most one more: a kill after the record was durable and before
enqueue returned, which is delivered like the rest). lost = seqs below next_seq that the subscriber
never received and that are not still in the queue. A duplicate is at-least-once at work; each one
must be a copy sent while its ack was not yet durable: a copy sent by boot b of a seq that was
acked in the recovered image of an earlier power cut is a violation.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)  # a checkout; in a wheel (ddqhost/demo) the package, not one
CHECKOUT = os.path.isfile(os.path.join(REPO, "port", "ddq.py"))
for _p in (os.path.join(REPO, "host"), os.path.join(REPO, "port"), HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import devapp  # noqa: E402

import ddq  # noqa: E402
import ddq_flash  # noqa: E402
from ddqhost import boards, layout, qdir, vboard  # noqa: E402
from ddqhost.device import Device  # noqa: E402

AMQTT_PIN = "amqtt==0.12.1"
TOPIC_ROOT = "ddq/demo"
BOARD = "UNIX"
IMAGE_BLOCKS = 256  # 1 MiB LittleFS image, 4 KiB blocks (the virtual board's default)
RAW_BLOCKS = 128  # --storage raw: the UNIX profile's raw region, 512 KiB of 4 KiB blocks


class DemoError(Exception):
    """Set-up failed (no broker, board did not start, ...): one line for the user."""


def now():
    return time.monotonic()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout, proc=None):
    end = now() + timeout
    while now() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def start_broker(argv, workdir, port, timeout, name):
    """Start a broker process (its output appended to workdir/broker.log) and wait until it
    listens on 127.0.0.1:port; DemoError (the process killed) if it does not within timeout s."""
    log = open(os.path.join(workdir, "broker.log"), "ab")
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
    )
    log.close()
    if not wait_port(port, timeout, proc):
        stop_proc(proc, signal.SIGKILL)
        raise DemoError(
            "%s did not listen on 127.0.0.1:%d (see %s/broker.log)" % (name, port, workdir)
        )
    return proc


def stop_proc(proc, sig=signal.SIGTERM, timeout=5.0):
    """End proc's process group (sig, then SIGKILL after timeout); wait for it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# ---------------------------------------------------------------- brokers


def find_mosquitto():
    for cand in (shutil.which("mosquitto"), "/usr/sbin/mosquitto"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class Mosquitto:
    """mosquitto on 127.0.0.1:port with persistence; stop() is SIGTERM, which saves the sessions
    (the subscriber's queued QoS 1 messages) to disk, so a restart loses nothing it
    acknowledged."""

    kind = "mosquitto"

    def __init__(self, workdir, port, exe):
        self.dir, self.port, self.exe = workdir, port, exe
        self.proc = None
        os.makedirs(workdir, exist_ok=True)
        self.conf = os.path.join(workdir, "mosquitto.conf")
        lines = [
            "listener %d 127.0.0.1" % port,
            "allow_anonymous true",
            "persistence true",
            "persistence_location %s/" % workdir,
            "max_queued_messages 0",  # never drop QoS 1 messages queued for the subscriber
            "log_dest stdout",
            "log_type error",
            "log_type warning",
            "log_type notice",
        ]
        if os.geteuid() == 0:
            lines.append("user root")  # else it drops to user mosquitto and cannot write workdir
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        out = subprocess.run([exe, "-h"], capture_output=True, text=True).stdout.split("\n")[0]
        self.version = out.replace("mosquitto version", "mosquitto").strip() or "mosquitto"

    def start(self):
        self.proc = start_broker([self.exe, "-c", self.conf], self.dir, self.port, 10, "mosquitto")

    def stop(self):
        stop_proc(self.proc, signal.SIGTERM)
        self.proc = None

    # the chaos loop's calls: a real restart
    interrupt, resume, close = stop, start, stop
    outage = "restart"
    sub_port = property(lambda self: self.port)


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target that can be cut: down() closes the listener
    and every relayed connection (clients see the broker vanish), up() listens again."""

    def __init__(self, port, target):
        self.port, self.target = port, target
        self.lock = threading.Lock()
        self.lsock = None
        self.socks = []

    def up(self):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(8)
        self.lsock = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def down(self):
        with self.lock:
            socks, self.socks = self.socks, []
            ls, self.lsock = self.lsock, None
        for x in socks + ([ls] if ls else []):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def _accept(self, ls):
        while True:
            try:
                a, _ = ls.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                b.settimeout(None)
            except OSError:
                a.close()
                continue
            with self.lock:
                if self.lsock is not ls:  # cut meanwhile
                    a.close()
                    b.close()
                    return
                self.socks += [a, b]
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b):
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while True:
                for key, _ in sel.select():
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except (OSError, ValueError):
            return
        finally:
            sel.close()
            for x in (a, b):
                try:
                    x.close()
                except OSError:
                    pass


class Amqtt:
    """The embedded amqtt broker (PyPI), as a process. It keeps sessions in memory only: across a
    restart a message it had acknowledged to the device but not yet passed to the subscriber is the
    broker's to lose (mosquitto with persistence does not have that gap)."""

    kind = "amqtt"

    outage = "outage"

    def __init__(self, workdir, port, python):
        self.dir, self.port, self.python = workdir, port, python
        self.sub_port = free_port()  # the subscriber connects here directly, the device via relay
        self.relay = Relay(port, self.sub_port)
        self.proc = None
        os.makedirs(workdir, exist_ok=True)
        self.conf = os.path.join(workdir, "amqtt.yaml")
        with open(self.conf, "w") as f:
            f.write(
                "listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:%d\n"
                "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
                "    allow_anonymous: true\n" % self.sub_port
            )
        try:
            from importlib.metadata import version

            self.version = "amqtt " + version("amqtt")
        except Exception:
            self.version = "amqtt"

    def start(self):
        code = (
            "import sys; from amqtt.scripts.broker_script import main; "
            "sys.argv = ['amqtt', '-c', %r]; main()" % self.conf
        )
        argv = [self.python, "-c", code]
        self.proc = start_broker(argv, self.dir, self.sub_port, 20, "amqtt")
        self.relay.up()

    def close(self):
        self.relay.down()
        stop_proc(self.proc, signal.SIGINT)
        self.proc = None

    # the chaos loop's calls: the device loses the broker (every connection cut, new ones
    # refused) while the broker and the subscriber's session live on
    def interrupt(self):
        self.relay.down()

    def resume(self):
        self.relay.up()


def ensure_amqtt(log):
    try:
        import amqtt  # noqa: F401

        return
    except ImportError:
        pass
    log("no mosquitto: installing the embedded broker %s into %s" % (AMQTT_PIN, sys.prefix))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", AMQTT_PIN]
    )
    if r.returncode != 0:
        raise DemoError(
            "pip install %s failed; install mosquitto (apt-get install mosquitto)" % AMQTT_PIN
        )


def make_broker(choice, workdir, port, log):
    exe = find_mosquitto()
    if choice == "mosquitto" or (choice == "auto" and exe):
        if not exe:
            raise DemoError("mosquitto not found (apt-get install mosquitto)")
        return Mosquitto(workdir, port, exe)
    ensure_amqtt(log)
    return Amqtt(workdir, port, sys.executable)


# ---------------------------------------------------------------- subscriber


class Subscriber:
    """paho-mqtt, persistent session (clean_session=False), QoS 1 on ddq/demo/#. Every telemetry
    message is recorded (before paho sends the PUBACK) as (seq, boot, attempts, payload, dup)."""

    def __init__(self, port, client_id):
        import paho.mqtt.client as mqtt

        self.lock = threading.Lock()
        self.receipts = []  # (seq, boot, attempts, payload, dup, t)
        self.bad = []  # (topic, payload): unparsable or failed checksum
        self.hb = {}  # boot -> highest "enq" a heartbeat reported
        self.done = []  # (boot, enq)
        self.replay_boot = None  # the field loop's `ddq replay` copies count as this boot
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
        c.reconnect_delay_set(1, 1)
        c.on_connect = self._on_connect
        c.on_subscribe = lambda *_a: self.subscribed.set()
        c.on_disconnect = lambda *_a: self.connected.clear()
        c.on_message = self._on_message
        self.c, self.port = c, port

    def start(self, timeout=10):
        self.c.connect("127.0.0.1", self.port, keepalive=10)
        self.c.loop_start()
        if not self.subscribed.wait(timeout):
            raise DemoError("the subscriber did not get its SUBACK")

    def stop(self):
        try:
            self.c.disconnect()
        except Exception:
            pass
        self.c.loop_stop()

    def _on_connect(self, c, _u, _f, rc, _p):
        if not rc.is_failure:
            self.connected.set()
            c.subscribe(TOPIC_ROOT + "/#", qos=1)

    def _on_message(self, _c, _u, m):
        t, parts = now(), m.topic.split("/")
        with self.lock:
            replayed = m.topic == devapp.TOPIC and self.replay_boot is not None
            if replayed or (m.topic.startswith(devapp.TOPIC + "/") and len(parts) == 5):
                seq = devapp.check_reading(m.payload)
                if seq <= 0 or m.payload != devapp.reading(seq):
                    self.bad.append((m.topic, bytes(m.payload)))
                else:
                    # `ddq replay` sends to the stored topic: its copies count as a boot of
                    # their own (the field loop's), attempt 0
                    boot, att = (
                        (self.replay_boot, 0) if replayed else (int(parts[3]), int(parts[4]))
                    )
                    self.receipts.append((seq, boot, att, bytes(m.payload), bool(m.dup), t))
            elif m.topic in (devapp.STATUS + "/hb", devapp.STATUS + "/done"):
                f = dict(kv.split("=") for kv in m.payload.decode().split())
                boot, enq = int(f["boot"]), int(f["enq"])
                self.hb[boot] = max(self.hb.get(boot, 0), enq)
                if m.topic.endswith("/done"):
                    self.done.append((boot, enq))
            else:
                self.bad.append((m.topic, bytes(m.payload)))

    def snapshot(self):
        with self.lock:
            return list(self.receipts), dict(self.hb), list(self.done), list(self.bad)


# ---------------------------------------------------------------- queue state on the host


class ImageFlash:
    """A raw region image in RAM as an extended block device with NOR semantics (a program
    clears bits, an erase sets a block to 0xFF): the queue of an image, recovered on the host."""

    def __init__(self, path, bs=vboard.DEFAULT_BLOCK_SIZE):
        with open(path, "rb") as f:
            self.data = bytearray(f.read())
        self.bs = bs

    def readblocks(self, n, buf, off=0):
        a = n * self.bs + off
        buf[:] = self.data[a : a + len(buf)]

    def writeblocks(self, n, buf, off=0):
        a = n * self.bs + (off or 0)
        for i, b in enumerate(bytes(buf)):
            self.data[a + i] &= b

    def ioctl(self, op, arg):
        if op == 6:
            self.data[arg * self.bs : (arg + 1) * self.bs] = b"\xff" * self.bs
        return len(self.data) // self.bs if op == 4 else self.bs if op == 5 else 0


def queue_state(path, options):
    """Recovered state of a queue directory or a raw region image (on a copy): next_seq and the
    seqs per state."""
    tmp = tempfile.mkdtemp(prefix="ddq-demo-q-")
    try:
        clock = lambda: int(time.time() * 1000)  # noqa: E731
        if os.path.isfile(path):  # --storage raw: the queue "outbox" in the region's image
            st = ddq_flash.FlashStorage(ImageFlash(path))
            q = ddq.Queue("outbox", clock=clock, storage=st, **options)
        else:
            work = os.path.join(tmp, "q")
            qdir.copy_queue(path, work)
            q = ddq.Queue(work, clock=clock, **options)
        try:
            st = q.stats()
            by = {"available": set(), "claimed": set(), "acked": set(), "quarantined": set()}
            for it in q.items():
                by[it.state].add(it.seq)
            return {
                "next_seq": st.next_seq,
                "by_state": by,
                "generation": st.generation,
                "recovered_tail_bytes": st.recovered_tail_bytes,
            }
        finally:
            q.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def acked_set(state):
    """Seqs below next_seq that are durably acked: everything not still pending or quarantined
    (compaction drops acked items, so absent below next_seq means acked)."""
    keep = (
        state["by_state"]["available"]
        | state["by_state"]["claimed"]
        | state["by_state"]["quarantined"]
    )
    return set(range(1, state["next_seq"])) - keep


def lfs_extract(image, remote_dir, dest, block_size=vboard.DEFAULT_BLOCK_SIZE):
    """Copy remote_dir of a LittleFS image (as the virtual board wrote it) into dest."""
    from littlefs import LittleFS

    with open(image, "rb") as f:
        data = f.read()
    fs = LittleFS(block_size=block_size, block_count=len(data) // block_size, mount=False)
    fs.context.buffer = bytearray(data)
    fs.mount()
    os.makedirs(dest)
    for name in fs.listdir(remote_dir):
        with fs.open(remote_dir + "/" + name, "rb") as f:
            body = f.read()
        with open(os.path.join(dest, name), "wb") as out:
            out.write(body)


# ---------------------------------------------------------------- devices


def ddq_cli():
    exe = os.path.join(os.path.dirname(sys.executable), "ddq")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "ddqhost.cli"]


def run_cli(args, log, cwd=None):
    """Run `ddq ARGS`; return (exit status, stdout)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([os.path.join(REPO, "host"), os.path.join(REPO, "port")]),
    )
    log("$ ddq " + " ".join(args))
    r = subprocess.run(
        ddq_cli() + args,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    if r.stderr.strip():
        for line in r.stderr.strip().splitlines():
            log("  " + line)
    return r.returncode, r.stdout


class VirtualBoard:
    """The virtual board running devapp.py; kill() is a power cut (SIGKILL of micropython)."""

    label = "virtual board (MicroPython unix port, LittleFS image, pty)"

    def __init__(self, workdir, app_kw, log):
        self.dir = os.path.join(workdir, "board")
        self.image = os.path.join(self.dir, "flash.img")
        self.app_kw, self.log = app_kw, log
        self.boot = -1
        self.options = boards.queue_options(boards.load(BOARD))

    def install(self):
        os.makedirs(self.dir, exist_ok=True)
        st = vboard.start(self.dir, image=self.image, blocks=IMAGE_BLOCKS)
        self.tty = st["device"]
        rc, out = run_cli(["flash", "--device", self.tty, "--board", BOARD], self.log)
        if rc != 0:
            raise DemoError("ddq flash failed: %s" % out.strip())
        self.log("  " + out.strip().splitlines()[-1])
        with Device(self.tty, soft_reset=False) as dev:
            with open(os.path.join(HERE, "devapp.py"), "rb") as f:
                dev.write_file("devapp.py", f.read())
        self.log("  wrote :devapp.py (the demo app)")

    def start(self, boot):
        if not vboard.status(self.dir)["running"]:
            st = vboard.start(self.dir, image=self.image, blocks=IMAGE_BLOCKS)
            self.tty = st["device"]
        kw = dict(self.app_kw, boot=boot, options=self.options, log=False)
        code = (
            "import devapp\ntry:\n devapp.main(**%r)\nexcept Exception as e:\n"
            " import sys\n f = open('devapp-error.txt', 'w')\n sys.print_exception(e, f)\n"
            " f.close()\n raise\n" % (kw,)
        )
        # Start the app and return at once: it keeps running on the board after we let go.
        Device(self.tty, soft_reset=False).start(code)
        self.boot = boot

    def kill(self, snapdir):
        """Power cut; return the directory holding the queue as it was on the image."""
        vboard.kill(self.dir)
        img = os.path.join(snapdir, "flash.img")
        shutil.copyfile(self.image, img)
        return img

    def snapshot_queue(self, snap, dest):
        lfs_extract(snap, "outbox", dest)

    def alive(self):
        return vboard.status(self.dir)["running"]

    def error_text(self):
        try:
            with Device(self.tty, soft_reset=False) as dev:
                if dev.exists("devapp-error.txt"):
                    return dev.read_file("devapp-error.txt").decode("utf-8", "replace")
        except Exception as e:
            return "could not read the device: %s" % e
        return ""

    def pull(self, dest):
        rc, out = run_cli(["pull", "--device", self.tty, ":outbox", dest], self.log)
        if out.strip():
            self.log("  " + out.strip())
        if rc != 0:
            raise DemoError("ddq pull failed (exit %d)" % rc)

    def stop(self):
        vboard.stop(self.dir)
        vboard.kill(self.dir)  # no-op unless stop left something behind


class RawBoard(VirtualBoard):
    """The virtual board with its queue on the raw flash region (`ddq flash --layout raw`)."""

    label = "virtual board (MicroPython unix port, queue on its raw NOR flash region, pty)"
    image_what = "raw flash image"

    def __init__(self, workdir, app_kw, log):
        super().__init__(workdir, dict(app_kw, raw=True), log)
        self.raw = os.path.join(self.dir, "raw.img")
        self.options = layout.raw_options(boards.load(BOARD))

    def install(self):
        os.makedirs(self.dir, exist_ok=True)
        st = vboard.start(self.dir, image=self.image, blocks=IMAGE_BLOCKS, raw_blocks=RAW_BLOCKS)
        self.tty = st["device"]
        rc, out = run_cli(
            ["flash", "--device", self.tty, "--board", BOARD, "--layout", "raw", "--yes"], self.log
        )
        if rc != 0:
            raise DemoError("ddq flash --layout raw failed: %s" % out.strip())
        for line in out.strip().splitlines()[:1] + out.strip().splitlines()[-1:]:
            self.log("  " + line)
        with Device(self.tty, soft_reset=False) as dev:
            with open(os.path.join(HERE, "devapp.py"), "rb") as f:
                dev.write_file("devapp.py", f.read())
        self.log("  wrote :devapp.py (the demo app)")

    def kill(self, snapdir):
        """Power cut; return a copy of the raw region's image as it was."""
        vboard.kill(self.dir)
        img = os.path.join(snapdir, "raw.img")
        shutil.copyfile(self.raw, img)
        return img

    def snapshot_queue(self, snap, dest):
        shutil.copyfile(snap, dest)  # queue_state opens the image's queue

    def pull(self, dest):
        rc, out = run_cli(["pull", "--device", self.tty, "--raw", ":outbox", dest], self.log)
        if out.strip():
            self.log("  " + out.strip())
        if rc != 0:
            raise DemoError("ddq pull --raw failed (exit %d)" % rc)


class Gateway:
    """The same app on CPython with paho-mqtt; kill() is SIGKILL of the python process."""

    label = "Linux gateway (CPython, paho-mqtt, queue on the host filesystem)"

    def __init__(self, workdir, app_kw, log):
        self.dir = os.path.join(workdir, "gateway")
        self.qdir = os.path.join(self.dir, "outbox")
        self.app_kw, self.log = app_kw, log
        self.proc = None
        self.boot = -1
        self.options = boards.queue_options(boards.load(BOARD))

    def install(self):
        os.makedirs(self.dir, exist_ok=True)

    def start(self, boot):
        kw = dict(self.app_kw, boot=boot, link="paho", queue_dir=self.qdir)
        args = ["%s=%s" % (k, v) for k, v in sorted(kw.items()) if v is not None]
        args.append("options=" + json.dumps(self.options))
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "port"))
        log = open(os.path.join(self.dir, "gateway.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "devapp.py")] + args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=self.dir,
            start_new_session=True,
        )
        log.close()
        self.boot = boot

    def kill(self, snapdir):
        stop_proc(self.proc, signal.SIGKILL)
        dest = os.path.join(snapdir, "outbox")
        qdir.copy_queue(self.qdir, dest)
        return dest

    def snapshot_queue(self, snap, dest):
        qdir.copy_queue(snap, dest)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def error_text(self):
        try:
            with open(os.path.join(self.dir, "gateway.log"), errors="replace") as f:
                return "".join(f.readlines()[-15:])
        except OSError:
            return ""

    def pull(self, dest):
        # No board to pull from: the queue directory is on this host; copy it.
        if self.proc is not None:
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        qdir.copy_queue(self.qdir, dest)
        with open(os.path.join(dest, qdir.OPTIONS_FILE), "w") as f:
            json.dump(self.options, f, sort_keys=True)  # what `ddq pull` records from the profile
        self.log(
            "copied the gateway's queue %s to %s (no `ddq pull`: it is a host directory)"
            % (self.qdir, dest)
        )

    def stop(self):
        stop_proc(self.proc, signal.SIGKILL)


# ---------------------------------------------------------------- the run


class Chaos:
    """Broker restarts and device power cuts at random moments from the seed (two threads)."""

    def __init__(self, cfg, broker, device, stats, stop, log):
        self.cfg, self.broker, self.device = cfg, broker, device
        self.stats, self.stop, self.log = stats, stop, log
        self.kills = []  # (boot ended, snapshot path, t)
        self.errors = []
        self.t0 = now()
        # one disruption at a time: a broker outage, a power cut or the field loop
        self.busy = threading.Lock()

    def _times(self, rng, k):
        w = self.cfg.window
        return sorted(rng.uniform(0.08 * w, 0.9 * w) for _ in range(k))

    def _wait_until(self, t):
        return self.stop.wait(max(0.0, self.t0 + t - now()))

    def broker_loop(self, rng):
        for t in self._times(rng, self.cfg.broker_restarts):
            if self._wait_until(t):
                return
            down = rng.uniform(0.5, 2.5)
            with self.busy:
                self.broker.interrupt()
                self.stats["broker"] = "down"
                if self.stop.wait(down):
                    return
                self.broker.resume()
                self.stats["broker"] = "up"
                self.stats["broker_restarts"] += 1

    def device_loop(self, rng):
        for t in self._times(rng, self.cfg.kills):
            if self._wait_until(t):
                return
            with self.busy:
                k = len(self.kills)
                snap = os.path.join(self.cfg.workdir, "powercut-%d" % k)
                os.makedirs(snap)
                ended = self.device.boot
                path = self.device.kill(snap)
                self.kills.append((ended, path, now()))
                self.stats["kills"] += 1
                self.stats["device"] = "off"
                if self.stop.wait(rng.uniform(0.2, 1.5)):
                    return
                self.device.start(ended + 1)
                self.stats["device"] = "boot %d" % (ended + 1)

    def loop_field(self, rng):
        """The field engineer's loop once, at a random moment of the run (FieldLoop)."""
        if self._wait_until(rng.uniform(0.08, 0.2) * self.cfg.window):
            return
        with self.busy:
            self.stats["device"] = "field loop"
            self.field.at = round(now() - self.t0, 1)
            self.field.run()
            self.stats["device"] = "boot %d" % self.device.boot

    def run(self, fn, rng):
        try:
            fn(rng)
        except Exception as e:  # reported in the verdict; the main thread ends the run
            self.errors.append("%s: %s" % (fn.__name__, e))
            self.stop.set()


SAID = ("salvage", "replay", "push")  # steps whose result line the summary shows


def _said(out):
    """A command's result line: its `result: ...` line, else its last."""
    lines = out.strip().splitlines() or [""]
    return ([ln for ln in lines if ln.startswith("result: ")] or lines)[-1][:160]


class FieldLoop:
    """The field engineer's loop (demo/README.md; docs/HOST.md "pull / push"), run on the board
    while the chaos goes on: stop the app, pull its outbox, verify and inspect the copy, damage it
    (a flipped payload byte of an acked item), salvage it, replay the salvaged copy to the broker,
    push it back to the same board, pull and verify the board's queue, and start the app again on
    it.
    Each `ddq` step's exit status must be the one the step expects: `ddq verify --board UNIX` is
    clean at every step but the damaged copy's (2). Accounting: the replay's copies count as boot
    b+1 and the app after the push as boot b+2, where b is the boot the pull ended; what the pull
    held as acked must never be sent again (analyse)."""

    def __init__(self, cfg, device, broker, sub, log):
        self.cfg, self.device, self.broker, self.sub, self.log = cfg, device, broker, sub, log
        self.dir = os.path.join(cfg.workdir, "field")
        self.steps = []  # {"step", "command", "exit", "expected", "s"}
        self.checkpoints = []  # (first boot after, seqs acked then)
        self.boots = None  # (boot the pull ended, replay's boot, the app's boot after the push)
        self.at = None  # seconds since the run started
        self.took = None

    def _ddq(self, name, args, expect=0):
        t = now()
        rc, out = run_cli(args, self.log)
        self.steps.append(
            {
                "step": name,
                "command": "ddq " + " ".join(args),
                "exit": rc,
                "expected": expect,
                "s": round(now() - t, 1),
                "said": _said(out) if name in SAID else "",
            }
        )
        if rc != expect:
            raise DemoError(
                "field loop: `ddq %s` exited %d, expected %d: %s"
                % (" ".join(args), rc, expect, out.strip()[-300:])
            )
        return out

    def _damage(self, pulled, acked):
        """Flip the last payload byte of the first acked DATA record (not the newest seq, so the
        salvaged queue keeps next_seq); return what was damaged."""
        t = now()
        recs = json.loads(self._ddq("records", ["records", pulled, "--json"]))
        last = max([r["seq"] for sg in recs["segments"] for r in sg["records"]] + [0])
        for sg in recs["segments"]:
            for r in sg["records"]:
                if r["type_name"] == "DATA" and r["seq"] in acked and r["seq"] < last:
                    off = r["offset"] + 40 + r["payload_length"] - 1  # SPEC F1: 40-byte header
                    with open(os.path.join(pulled, sg["name"]), "r+b") as f:
                        f.seek(off)
                        b = f.read(1)
                        f.seek(off)
                        f.write(bytes([b[0] ^ 0xFF]))
                    what = "flipped byte %d of %s (seq %d, acked)" % (off, sg["name"], r["seq"])
                    self.steps.append(
                        {
                            "step": "damage",
                            "command": what,
                            "exit": None,
                            "expected": None,
                            "s": round(now() - t, 1),
                        }  # fmt: skip
                    )
                    return what
        raise DemoError("field loop: the pulled queue holds no acked DATA record to damage")

    def run(self):
        t0 = now()
        dev, tty = self.device, self.device.tty
        b = dev.boot
        # let the app reach its loop (an interrupt inside its queue's open would leave the lock)
        # and deliver some readings (acked ones to damage)
        end = now() + 60
        while now() < end:
            rec, hb, _d, _b = self.sub.snapshot()
            if b in hb and len(rec) >= 50:
                break
            time.sleep(0.1)
        os.makedirs(self.dir)
        pulled, salvaged, again = (
            os.path.join(self.dir, n) for n in ("pulled", "salvaged", "again")
        )
        board = ["--board", BOARD]
        self._ddq("app stop", ["app", "stop", "-d", tty])
        self._ddq("pull", ["pull", "-d", tty, ":outbox", pulled])
        self._ddq("verify", ["verify"] + board + [pulled])
        self._ddq("inspect", ["inspect", pulled])
        acked = acked_set(queue_state(pulled, dev.options))
        self.checkpoints.append((b + 1, acked))
        self._damage(pulled, acked)
        self._ddq("verify damaged", ["verify"] + board + [pulled], 2)
        self._ddq("salvage", ["salvage", pulled, salvaged], 1)  # 1: damaged bytes, no seq lost
        self._ddq("verify", ["verify"] + board + [salvaged])
        self.sub.replay_boot = b + 1
        url = "mqtt://127.0.0.1:%d" % self.broker.port
        self._ddq("replay", ["replay", salvaged, "--to", url])
        self._ddq("verify", ["verify"] + board + [salvaged])
        self.checkpoints.append((b + 2, acked_set(queue_state(salvaged, dev.options))))
        self._ddq("push", ["push", "-d", tty, salvaged, ":outbox"])
        self._ddq("pull", ["pull", "-d", tty, ":outbox", again])
        self._ddq("verify", ["verify"] + board + [again])
        t = now()
        dev.start(b + 2)
        self.steps.append(
            {
                "step": "app start",
                "command": "boot %d on the pushed queue" % (b + 2),
                "exit": None,
                "expected": None,
                "s": round(now() - t, 1),
            }  # fmt: skip
        )
        self.boots = (b, b + 1, b + 2)
        self.took = round(now() - t0, 1)


class Progress:
    """One updating line on stderr."""

    def __init__(self, enabled, stats, sub, t0):
        self.enabled, self.stats, self.sub, self.t0 = enabled, stats, sub, t0
        self.shown = False

    def line(self):
        rec, hb, _d, _b = self.sub.snapshot()
        seqs = {r[0] for r in rec}
        uniq = len(seqs)
        enq = max(list(hb.values()) + [max(seqs, default=0)])  # heartbeats lag behind
        el = now() - self.t0
        s = self.stats
        return (
            "%5.0fs  enqueued %d  delivered %d  dup %d  broker %s (%d %ss)  device %s "
            "(%d kills)  %.0f msg/s"
            % (
                el,
                enq,
                uniq,
                len(rec) - uniq,
                s["broker"],
                s["broker_restarts"],
                s["outage"],
                s["device"],
                s["kills"],
                uniq / el if el > 0 else 0,
            )
        )

    def show(self):
        if self.enabled:
            sys.stderr.write("\r\x1b[K" + self.line())
            sys.stderr.flush()
            self.shown = True

    def clear(self):
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def analyse(cfg, sub, final, kills, device, log, loops=()):
    """Compare what the subscriber got with the recovered queues; return the result dict.
    loops: the field loops' checkpoints, (first boot after, seqs acked then) each."""
    receipts, hb, done, bad = sub.snapshot()
    enq = final["next_seq"] - 1
    by = final["by_state"]
    pending = by["available"] | by["claimed"]
    quarantined = by["quarantined"]
    got = {}
    for r in receipts:
        got.setdefault(r[0], []).append(r)
    errors, violations = [], []
    for topic, payload in bad[:5]:
        errors.append("bad message on %s: %r" % (topic, payload[:60]))
    if len(bad) > 5:
        errors.append("... %d bad messages in all" % len(bad))
    ghosts = sorted(s for s in got if s > enq)
    if ghosts:
        errors.append(
            "received seqs above the queue's next_seq-1 = %d (an enqueue that did not "
            "survive): %s" % (enq, ghosts[:10])
        )
    lost = sorted(
        s for s in range(1, enq + 1) if s not in got and s not in pending and s not in quarantined
    )
    # Power cuts: each recovered image must hold every enqueue that boot saw return, and no seq
    # durably acked there may be sent again by a later boot.
    acked_before = {}  # boot -> seqs durably acked at a power cut or pull before that boot
    checkpoints = list(loops)
    last_enq = 0
    cuts = []
    for i, (ended, path, _t) in enumerate(kills):
        tmp = tempfile.mkdtemp(prefix="ddq-demo-cut-")
        try:
            dest = os.path.join(tmp, "q")
            device.snapshot_queue(path, dest)
            st = queue_state(dest, device.options)
        except Exception as e:
            errors.append(
                "power cut %d: the queue on the image does not recover: %s: %s"
                % (i, type(e).__name__, e)
            )
            continue
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        e_k = st["next_seq"] - 1
        a_k = acked_set(st)
        seen = max([hb.get(ended, 0)] + [r[0] for r in receipts if r[1] == ended])
        if seen > e_k:
            errors.append(
                "power cut %d: boot %d saw enqueue of seq %d return, but the recovered "
                "image ends at %d" % (i, ended, seen, e_k)
            )
        if e_k < last_enq:
            errors.append("power cut %d: next_seq went back (%d < %d)" % (i, e_k, last_enq))
        last_enq = max(last_enq, e_k)
        checkpoints.append((ended + 1, a_k))
        cuts.append(
            {
                "boot": ended,
                "enqueued": e_k,
                "acked": len(a_k),
                "pending": len(st["by_state"]["available"] | st["by_state"]["claimed"]),
                "recovered_tail_bytes": st["recovered_tail_bytes"],
            }
        )
    acc = set()
    for boot, a_k in sorted(checkpoints, key=lambda c: c[0]):
        acc |= a_k  # acks only accumulate
        acked_before[boot] = set(acc)
    boots = sorted(acked_before)
    loop_boots = {c[0] for c in loops}
    dup_causes = {"power cut": 0, "field loop": 0, "publish retry": 0, "broker redelivery": 0}
    dup_flagged = 0  # copies that carried MQTT's DUP flag (a broker resending to the subscriber)
    for seq, rs in got.items():
        if len({r[3] for r in rs}) > 1:
            errors.append("seq %d arrived with different payloads" % seq)
        for j, r in enumerate(rs):
            # the latest power cut before boot r[1] holds the most acks (they only accumulate)
            prior = [b for b in boots if b <= r[1]]
            if prior and seq in acked_before[prior[-1]]:
                violations.append(
                    "seq %d sent by boot %d (attempt %d) after its ack was durable "
                    "at an earlier power cut" % (seq, r[1], r[2])
                )
            if j:
                p = rs[j - 1]
                cause = (
                    "field loop"  # sent before the pull, not acked in it: replayed or resent
                    if r[1] != p[1] and any(p[1] < b <= r[1] for b in loop_boots)
                    else "power cut"
                    if r[1] != p[1]
                    else "publish retry"
                    if r[2] != p[2]
                    else "broker redelivery"
                )
                dup_causes[cause] += 1
                dup_flagged += bool(r[4])
    delivered = sum(1 for s in got if s <= enq)
    return {
        "enqueued": enq,
        "delivered": delivered,
        # copies received per boot ([boot, n]; the field loop's replay counts as a boot)
        "by_boot": sorted(
            [b, sum(1 for r in receipts if r[1] == b)] for b in {r[1] for r in receipts}
        ),
        "duplicates": len(receipts) - len(got),
        "duplicate_causes": dup_causes,
        "duplicates_dup_flag": dup_flagged,
        "lost": len(lost),
        "lost_seqs": lost[:50],
        "pending": len(pending),
        "quarantined": len(quarantined),
        "done": done,
        "power_cuts": cuts,
        "errors": errors,
        "violations": violations[:50],
        "violation_count": len(violations),
    }


class Config:
    def __init__(self, **kw):
        self.gateway = "micropython"
        self.storage = "fs"
        self.messages = 6000
        self.rate = 60
        self.seed = None
        self.broker_restarts = 4
        self.kills = 4
        self.broker = "auto"
        self.workdir = None
        self.drain_timeout = 180.0
        self.progress = None
        self.inflight = 16  # the device's delivery window (OUTBOX E25); the paho gateway: 1
        self.field_loop = True  # the field engineer's loop once during the chaos (fs board only)
        self.__dict__.update(kw)
        if self.seed is None:
            self.seed = random.SystemRandom().randrange(1, 10**6)
        self.window = self.messages / float(self.rate)


def default_workdir():
    """build/demo in a checkout (`make demo`); ./ddq-demo where ddq is an installed wheel."""
    return os.path.join(REPO, "build", "demo") if CHECKOUT else os.path.abspath("ddq-demo")


def replay_command(cfg, checkout=None):
    """The command that replays this run's chaos: `make demo SEED=N` in a checkout, `ddq demo
    --seed N` where ddq is an installed wheel (no Makefile there)."""
    raw, cpy = cfg.storage == "raw", cfg.gateway == "cpython"
    if CHECKOUT if checkout is None else checkout:
        return "make demo SEED=%d%s%s" % (
            cfg.seed, " GATEWAY=cpython" if cpy else "", " STORAGE=raw" if raw else ""
        )  # fmt: skip
    return "ddq demo --seed %d%s%s" % (
        cfg.seed, " --gateway cpython" if cpy else "", " --storage raw" if raw else ""
    )  # fmt: skip


def run(cfg, log=None, out=None):
    """Run the demo; return the result dict (result["passed"] is the verdict)."""
    log = log or (lambda s: sys.stderr.write(s + "\n"))
    t0 = now()
    workdir = cfg.workdir or default_workdir()
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    os.makedirs(workdir)
    cfg.workdir = workdir
    port = free_port()
    broker = make_broker(cfg.broker, os.path.join(workdir, "broker"), port, log)
    app_kw = {
        "host": "127.0.0.1",
        "port": port,
        "total": cfg.messages,
        "rate": cfg.rate,
        "seed": cfg.seed,
        "window": cfg.inflight,
    }
    if cfg.storage == "raw" and cfg.gateway == "cpython":
        raise DemoError(
            "--storage raw is the virtual board's raw flash: not with --gateway cpython"
        )
    dev_cls = (
        Gateway if cfg.gateway == "cpython" else RawBoard if cfg.storage == "raw" else VirtualBoard
    )
    device = dev_cls(workdir, app_kw, log)
    stats = {
        "broker": "up",
        "broker_restarts": 0,
        "device": "boot 0",
        "kills": 0,
        "outage": broker.outage,
    }
    stop = threading.Event()
    sub = Subscriber(broker.sub_port, "ddq-demo-subscriber-%d" % os.getpid())
    threads, chaos, progress = [], None, None
    res = {
        "seed": cfg.seed,
        "gateway": cfg.gateway,
        "storage": cfg.storage,
        "device": device.label,
        "delivery_window": 1 if cfg.gateway == "cpython" else cfg.inflight,
        "broker": broker.kind,
        "port": port,
        "messages": cfg.messages,
        "rate": cfg.rate,
        "workdir": workdir,
    }
    log("ddq demo: seed %d (replay: %s)" % (cfg.seed, replay_command(cfg)))
    try:
        broker.start()
        res["broker_version"], res["broker_outage"] = broker.version, broker.outage
        log("broker: %s on 127.0.0.1:%d" % (broker.version, port))
        sub.start()
        log("subscriber: paho-mqtt, persistent session, QoS 1 on %s/#" % TOPIC_ROOT)
        log("device: %s" % device.label)
        device.install()
        t_run = now()
        device.start(0)
        log(
            "running: %d readings at %d/s, %d broker restarts and %d power cuts at random moments"
            % (cfg.messages, cfg.rate, cfg.broker_restarts, cfg.kills)
        )
        chaos = Chaos(cfg, broker, device, stats, stop, log)
        rng = random.Random(cfg.seed)
        loops = [
            (chaos.broker_loop, random.Random(rng.random())),
            (chaos.device_loop, random.Random(rng.random())),
        ]
        field_rng = random.Random(rng.random())
        if not cfg.field_loop:
            res["field_loop"] = {"run": False, "why": "--no-field-loop"}
        elif cfg.gateway == "cpython" or cfg.storage == "raw":
            why = (
                "a gateway's queue is a host directory"
                if cfg.gateway == "cpython"
                else ("`ddq push` puts directories, not raw regions")
            )
            res["field_loop"] = {"run": False, "why": why}
        else:
            chaos.field = field = FieldLoop(cfg, device, broker, sub, log)
            loops.append((chaos.loop_field, field_rng))
        for fn, r in loops:
            th = threading.Thread(target=chaos.run, args=(fn, r), daemon=True)
            th.start()
            threads.append(th)
        enabled = sys.stderr.isatty() if cfg.progress is None else cfg.progress
        progress = Progress(enabled, stats, sub, t_run)
        while any(th.is_alive() for th in threads):
            progress.show()
            time.sleep(0.25)
        if chaos.errors:
            raise DemoError("chaos: " + "; ".join(chaos.errors))
        # Drain: wait for "done" from the device's current boot (nothing pending, all acked).
        stats["broker"] = "up"
        deadline = now() + cfg.drain_timeout
        drained = False
        gone = None
        while now() < deadline:
            progress.show()
            if any(b == device.boot for b, _e in sub.snapshot()[2]):
                drained = True
                break
            if not device.alive():  # a gateway exits after "done": give its message a moment
                gone = gone or now()
                if now() - gone > 3:
                    break
            time.sleep(0.25)
        elapsed = now() - t_run
        progress.clear()
        if not drained:
            err = device.error_text()
            raise DemoError(
                "the device did not finish draining within %.0f s%s"
                % (cfg.drain_timeout, (":\n" + err) if err else "")
            )
        time.sleep(0.5)  # the last PUBACKs to the subscriber
        pulled = os.path.join(workdir, "pulled")
        device.pull(pulled)
        if cfg.storage == "raw":
            # `ddq verify`/`inspect` read directories; the image's queue is recovered below
            # through ddq_flash on the host (queue_state), which must succeed
            rc, res["verify_rc"], res["verify"] = 0, None, "not run (a raw region image)"
        else:
            rc, vout = run_cli(["verify", pulled], log)
            res["verify_rc"], res["verify"] = rc, vout.strip()
            for line in vout.strip().splitlines()[-3:]:
                log("  " + line)
            _rc, iout = run_cli(["inspect", pulled], log)
            with open(os.path.join(workdir, "inspect.txt"), "w") as f:
                f.write(iout)
            for line in iout.strip().splitlines()[:3]:
                log("  " + line)
            res["inspect_head"] = iout.strip().splitlines()[:3]
        final = queue_state(pulled, device.options)
        field = getattr(chaos, "field", None)
        if field is not None:
            res["field_loop"] = {
                "run": field.boots is not None,
                "at_s": field.at,
                "took_s": field.took,
                "boots": field.boots,
                "steps": field.steps,
            }
        res.update(
            analyse(cfg, sub, final, chaos.kills, device, log, field.checkpoints if field else ())
        )
        res.update(
            {
                "broker_restarts": stats["broker_restarts"],
                "device_kills": stats["kills"],
                "elapsed_s": round(elapsed, 1),
                "msgs_per_s": round(res["delivered"] / elapsed, 1) if elapsed else 0.0,
            }
        )
        fl = res.get("field_loop") or {}
        res["passed"] = (
            res["lost"] == 0
            and (fl.get("run") or "why" in fl)
            and all(st["exit"] == st["expected"] for st in fl.get("steps", ()))
            and not res["errors"]
            and not res["violation_count"]
            and res["pending"] == 0
            and rc == 0
        )
    except BaseException as e:
        stop.set()
        if progress is not None:
            progress.clear()
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if not isinstance(e, DemoError):
            raise
        res.update({"passed": False, "failure": str(e)})
    finally:
        stop.set()
        for th in threads:
            th.join(10)
        for fn in (device.stop, sub.stop, broker.close):
            try:
                fn()
            except Exception as e:
                log("cleanup: %s: %s" % (fn.__self__.__class__.__name__, e))
        res["total_s"] = round(now() - t0, 1)
        with open(os.path.join(workdir, "result.json"), "w") as f:
            json.dump(res, f, indent=2, sort_keys=True, default=sorted)
    return res


def render(res):
    if "failure" in res and "enqueued" not in res:
        return "ddq demo FAILED: %s\n(seed %d; files in %s)\n" % (
            res["failure"],
            res["seed"],
            res["workdir"],
        )
    c = res["duplicate_causes"]
    fl = res.get("field_loop") or {}
    lines = [
        "",
        "ddq demo summary (seed %d)" % res["seed"],
        "  device           %s" % res["device"],
        "  broker           %s on 127.0.0.1:%d"
        % (res.get("broker_version", res["broker"]), res["port"]),
        "  enqueued         %6d   (enqueue returned: the pulled queue's next_seq - 1)"
        % res["enqueued"],
        "  delivered        %6d   (distinct readings the subscriber received, CRC checked)"
        % res["delivered"],
        "  delivery window  %6d   (QoS 1 publishes in flight, OUTBOX E25)"
        % res.get("delivery_window", 1),
        "  duplicates       %6d   (at-least-once: %d after a power cut, %d across the field "
        "loop, %d publish retries, %d window resends or broker redeliveries; %d with MQTT's DUP "
        "flag)"
        % (
            res["duplicates"],
            c["power cut"],
            c.get("field loop", 0),
            c["publish retry"],
            c["broker redelivery"],
            res.get("duplicates_dup_flag", 0),
        ),
        "  lost             %6d" % res["lost"],
        "  quarantined      %6d" % res["quarantined"],
        "  still pending    %6d" % res["pending"],
        (
            "  broker restarts  %6d   (stopped with SIGTERM, started again)"
            if res.get("broker_outage", "restart") == "restart"
            else "  broker outages   %6d   (a relay cut the device's connections: amqtt keeps "
            "sessions "
            "in memory only, so a restart would lose what it had acknowledged)"
        )
        % res["broker_restarts"],
        "  device kills     %6d   (SIGKILL of the %s process; each %s recovered on the host)"
        % (
            res["device_kills"],
            *(
                ("python", "queue directory")
                if res["gateway"] == "cpython"
                else ("micropython", "raw flash image")
                if res.get("storage") == "raw"
                else ("micropython", "LittleFS image")
            ),
        ),
        "  elapsed          %6.1f s" % res["elapsed_s"],
        "  throughput       %6.1f messages/s" % res["msgs_per_s"],
        "  ddq verify       %s"
        % (
            res.get("verify")
            if res.get("verify_rc") is None
            else "clean"
            if res.get("verify_rc") == 0
            else "exit %s" % res.get("verify_rc")
        ),
    ]
    if fl.get("run"):
        b = fl["boots"]
        lines.append(
            "  field loop       at %.1f s, %.1f s: boot %d's outbox pulled, damaged, salvaged, "
            "replayed (its copies: boot %d), pushed back; the app goes on as boot %d"
            % (fl["at_s"], fl["took_s"], b[0], b[1], b[2])
        )
        for st in fl["steps"]:
            lines.append(
                "    %-15s %-8s %5.1f s  %s"
                % (
                    st["step"],
                    "-" if st["exit"] is None else "exit %d" % st["exit"],
                    st["s"],
                    st["command"],
                )
            )
            if st.get("said"):
                lines.append("    %-15s %-8s %5s    %s" % ("", "", "", st["said"]))
    elif fl:
        lines.append("  field loop       not run (%s)" % fl.get("why", "the run ended first"))
    for e in res["errors"]:
        lines.append("  ERROR: " + e)
    for v in res["violations"][:10]:
        lines.append("  VIOLATION: " + v)
    if res.get("lost_seqs"):
        lines.append("  lost seqs: %s" % res["lost_seqs"][:20])
    if res["passed"]:
        lines.append(
            "VERDICT: PASS - all %d enqueued messages were delivered and none was lost; "
            "no message was sent again after its ack was durable." % res["enqueued"]
        )
    else:
        why = res.get("failure") or "see the errors above"
        lines.append(
            "VERDICT: FAIL - %s (replay with --seed %d; files in %s)"
            % (why, res["seed"], res["workdir"])
        )
    return "\n".join(lines) + "\n"


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--gateway",
        choices=["micropython", "cpython"],
        default="micropython",
        help="the device: the virtual board (default) or a CPython gateway process",
    )
    ap.add_argument(
        "--storage",
        choices=["fs", "raw"],
        default="fs",
        help="the virtual board's queue on its LittleFS (default) or on its raw flash region "
        "(`ddq flash --layout raw`)",
    )
    ap.add_argument("--messages", type=int, default=6000, help="readings to enqueue (%(default)s)")
    ap.add_argument("--rate", type=int, default=60, help="readings per second (%(default)s)")
    ap.add_argument("--seed", type=int, help="chaos seed (default: random, printed)")
    ap.add_argument("--broker-restarts", type=int, default=4)
    ap.add_argument("--kills", type=int, default=4, help="device power cuts (%(default)s)")
    ap.add_argument(
        "--broker",
        choices=["auto", "mosquitto", "amqtt"],
        default="auto",
        help="auto: mosquitto if installed, else amqtt from PyPI",
    )
    ap.add_argument(
        "--workdir",
        help="where logs, power-cut images and the pull go, emptied first (default build/demo "
        "in a checkout, ./ddq-demo from an installed ddq)",
    )
    ap.add_argument("--drain-timeout", type=float, default=180.0)
    ap.add_argument(
        "--no-field-loop",
        dest="field_loop",
        action="store_false",
        help="skip the field engineer's loop (pull, damage, salvage, replay, push back) that runs "
        "once during the chaos",
    )
    ap.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="progress line even when stderr is not a terminal",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    if a.messages < 1 or a.rate < 1:
        ap.error("--messages and --rate must be positive")
    cfg = Config(**{k: v for k, v in vars(a).items() if k != "json"})

    def on_term(_s, _f):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        res = run(cfg)
    except KeyboardInterrupt:
        sys.stderr.write("\nddq demo: interrupted (everything it started was stopped)\n")
        return 130
    except DemoError as e:
        sys.stderr.write("ddq demo: %s\n" % e)
        return 1
    sys.stdout.write(
        json.dumps(res, indent=2, sort_keys=True, default=sorted) + "\n" if a.json else render(res)
    )
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
