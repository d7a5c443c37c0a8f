"""Drain benchmarks (BENCHMARKS rows D1-D6): a backlog of 100-byte messages over a 100 ms
round trip.

A loopback TCP relay of our own (`relay`, an asyncio process) sits between each sender and a
mosquitto on 127.0.0.1 and delays every segment by 50 ms each way, keeping order and letting
segments overlap (a long fat pipe, not stop-and-wait). Through it, in one run:
  - the device sender (ddq_mqtt.WindowSender under Outbox.pump) on MicroPython and CPython,
    W = 16 and W = 1 (bench/drain_dev.py);
  - paho-mqtt publishing the same messages with max_inflight_messages = 16 (the baseline);
  - `ddq replay` of one directory (--window 16 and --window 1) and of 8 directories at once.
W = 1 drains fewer messages (n1): at 10 messages/s the full 2,000 would take 200 s each; the
rate is what is compared. Used by bench/run.py (step "drain", rows D1-D5); alone:
    .venv/bin/python bench/drain_bench.py [--smoke]
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable
MP = os.path.join(os.path.dirname(PY), "micropython")
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
DELAY_MS = 50
SIZES = ({"n": 2000, "n1": 200, "dirs": 8}, {"n": 60, "n1": 8, "dirs": 2})  # full, smoke


class DrainFailed(subprocess.SubprocessError):
    """A drain part failed (bench/run.py's step() reports it and goes on)."""


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def wait_port(port: int, what: str, proc: "subprocess.Popen[bytes]") -> None:
    for _ in range(200):
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise DrainFailed("%s did not start on port %d" % (what, port))


# --- the relay (runs as its own process: `drain_bench.py relay LISTEN TARGET DELAY_MS`) -------


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, delay: float) -> None:
    # Each segment read is written delay seconds later; order kept; reads never wait for writes.
    q: "asyncio.Queue[tuple[float, bytes]]" = asyncio.Queue()

    async def out() -> None:
        loop = asyncio.get_running_loop()
        while True:
            t, b = await q.get()
            if not b:
                break
            d = t - loop.time()
            if d > 0:
                await asyncio.sleep(d)
            w.write(b)
            await w.drain()
        w.close()

    task = asyncio.ensure_future(out())
    loop = asyncio.get_running_loop()
    try:
        while True:
            b = await r.read(65536)
            q.put_nowait((loop.time() + delay, b))
            if not b:
                break
    except OSError:
        q.put_nowait((0.0, b""))
    try:
        await task
    except OSError:
        pass


async def _relay(listen: int, target: int, delay: float) -> None:
    async def conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        s = w.get_extra_info("socket")
        if s is not None:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            w.close()
            return
        us = uw.get_extra_info("socket")
        if us is not None:
            us.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pipe(r, uw, delay), _pipe(ur, w, delay))

    srv = await asyncio.start_server(conn, "127.0.0.1", listen)
    async with srv:
        await srv.serve_forever()


class Relay:
    def __init__(self, target: int, delay_ms: int = DELAY_MS) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [PY, os.path.abspath(__file__), "relay", str(self.port), str(target), str(delay_ms)]
        )
        wait_port(self.port, "relay", self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Mosquitto:
    def __init__(self, tmp: str) -> None:
        self.port = free_port()
        conf = os.path.join(tmp, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(
                "listener %d 127.0.0.1\nallow_anonymous true\nuser root\n"
                "max_inflight_messages 0\nmax_queued_messages 0\nlog_dest none\n" % self.port
            )
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.port, "mosquitto", self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# --- the subjects ------------------------------------------------------------------------------


def _result(p: "subprocess.CompletedProcess[str]", what: str) -> "dict[str, object]":
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res: "dict[str, object]" = json.loads(line[7:])
            return res
    raise DrainFailed(
        "%s failed (%d): %s %s" % (what, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    )


def device(interp: str, tmp: str, port: int, n: int, w: int) -> float:
    """messages/s of the device sender (interp: PY or MP) draining n messages at window w."""
    d = os.path.join(tmp, "dev-%s-%d" % (os.path.basename(interp), w))
    # MicroPython: an 8 MiB heap like the other big MicroPython parts (the unix port's 2 MiB
    # default fragments while the index of 2,000 items grows, P14).
    heap = ["-X", "heapsize=8M"] if interp == MP else []
    p = subprocess.run(
        [interp] + heap + [os.path.join(HERE, "drain_dev.py"), d, str(port), str(n), str(w)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    r = _result(p, "drain_dev %s W=%d" % (interp, w))
    shutil.rmtree(d, ignore_errors=True)
    if r["sent"] != n:
        raise DrainFailed("drain_dev sent %r of %d" % (r["sent"], n))
    return n * 1e6 / float(r["us"])  # type: ignore[arg-type]


def app(tmp: str, port: int, n: int) -> float:
    """messages/s of the board app itself (boards/UNIX/main.py on MicroPython, its default
    sender) draining n queued readings (bench/drain_app.py)."""
    d = os.path.join(tmp, "app")
    p = subprocess.run(
        [MP, "-X", "heapsize=8M", os.path.join(HERE, "drain_app.py"), d, str(port), str(n)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    r = _result(p, "drain_app")
    shutil.rmtree(d, ignore_errors=True)
    if r["sent"] != n or r["pending"] != 0:
        raise DrainFailed("drain_app sent %r of %d (%r pending)" % (r["sent"], n, r["pending"]))
    return n * 1e6 / float(r["us"])  # type: ignore[arg-type]


def paho(port: int, n: int, w: int) -> float:
    """messages/s of paho-mqtt publishing n QoS 1 messages, max_inflight_messages = w."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    done = threading.Event()
    acked = [0]

    def on_publish(c: object, u: object, mid: int, rc: object = None, pr: object = None) -> None:
        acked[0] += 1
        if acked[0] >= n:
            done.set()

    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="drain-paho", clean_session=True)
    c.max_inflight_messages_set(w)
    c.max_queued_messages_set(0)
    c.on_publish = on_publish
    c.connect("127.0.0.1", port, keepalive=60)
    c.loop_start()
    try:
        body = b"x" * 100
        t0 = time.perf_counter()
        for i in range(n):
            c.publish("bench/paho/%d" % (i % 8), body, qos=1)
        if not done.wait(600):
            raise DrainFailed("paho: %d of %d acked" % (acked[0], n))
        dt = time.perf_counter() - t0
    finally:
        c.disconnect()
        c.loop_stop()
    return n / dt


def fill_dirs(tmp: str, k: int, n: int) -> "list[str]":
    sys.path.insert(0, os.path.join(REPO, "port"))
    import ddq_outbox

    out = []
    parent = os.path.join(tmp, "fleet")
    shutil.rmtree(parent, ignore_errors=True)
    os.makedirs(parent)
    for j in range(k):
        d = os.path.join(parent, "dev%02d" % j)
        with ddq_outbox.Outbox(d, sync_every=256) as ob:
            for i in range(n):
                ob.put("t/%d" % (i % 8), b"x" * 100)
        out.append(d)
    return out


def replay(dirs: "list[str]", port: int, w: int) -> float:
    """messages/s of one `ddq replay DIR...` run (--window w) over dirs; all must be sent."""
    cmd = (
        [os.path.join(os.path.dirname(PY), "ddq"), "replay"]
        + dirs
        + [
            "--to",
            "mqtt://127.0.0.1:%d/bench" % port,
            "--window",
            str(w),
            "--json",
            "--prefix-per-dir",
        ]
    )
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    if p.returncode != 0:
        raise DrainFailed("ddq replay exited %d: %s" % (p.returncode, p.stderr[-2000:]))
    res = json.loads(p.stdout)
    per = res.get("dirs", [res])
    sent = sum(r["sent"] for r in per)
    if sent != sum(r["stats"]["total_items"] for r in per):
        raise DrainFailed("ddq replay sent %d, not everything: %s" % (sent, p.stdout[-2000:]))
    # The delivery phase (from each connection's CONNACK; the directories run at once, so the
    # slowest one's time is the run's), without the interpreter's start-up.
    return sent / max(r["seconds"] for r in per)


def run(smoke: bool = False, tmp: "str | None" = None) -> "dict[str, object]":
    size = SIZES[1 if smoke else 0]
    n, n1, k = size["n"], size["n1"], size["dirs"]
    if not os.path.exists(MOSQUITTO):
        return {"skipped": "mosquitto is not installed"}
    own = tmp is None
    tmp = tempfile.mkdtemp(prefix="ddq-drain-") if tmp is None else tmp
    os.makedirs(tmp, exist_ok=True)
    broker = Mosquitto(tmp)
    relay = Relay(broker.port)
    R: "dict[str, object]" = {"n": n, "n1": n1, "dirs": k, "rtt_ms": 2 * DELAY_MS}
    try:
        R["paho_16"] = paho(relay.port, n, 16)
        R["mp_16"] = device(MP, tmp, relay.port, n, 16)
        R["app_16"] = app(tmp, relay.port, n)
        R["cp_16"] = device(PY, tmp, relay.port, n, 16)
        R["mp_1"] = device(MP, tmp, relay.port, n1, 1)
        R["cp_1"] = device(PY, tmp, relay.port, n1, 1)
        R["replay_16"] = replay(fill_dirs(tmp, 1, n), relay.port, 16)
        R["replay_1"] = replay(fill_dirs(tmp, 1, n1), relay.port, 1)
        R["replay_fleet"] = replay(fill_dirs(tmp, k, n), relay.port, 16)
    finally:
        relay.stop()
        broker.stop()
        if own:
            shutil.rmtree(tmp, ignore_errors=True)
    return R


TARGETS = {"paho": 0.8, "w1": 10.0, "fleet": 6.0}


def paired_rows(
    rep: "Any", f: "Any", v: "Any", rates: "Any", vs_paho: "Any", vs_w1: "Any"
) -> None:
    """Two rows of one sender: W=16 ÷ paho max_inflight=16, and W=16 ÷ W=1 (rates: msg/s at
    W=16, at W=1, paho's)."""
    r16, r1, pa = rates
    rep.row(*vs_paho, f(r16), f(pa), f(r16 / pa), "≥ 0.8", v(r16 / pa, TARGETS["paho"]))
    rep.row(*vs_w1, f(r16), f(r1), f(r16 / r1), "≥ 10", v(r16 / r1, TARGETS["w1"]))


def rows(rep: "Any", R: "Any", fmt: "Any", verdict: "Any") -> None:
    """Add rows D1-D5 to bench/run.py's Report (rep.row) from run()'s results R."""
    if not R or "skipped" in R:
        return
    f, v = fmt, verdict
    pa = R["paho_16"]
    for rid, who, key in (("D1", "MicroPython", "mp"), ("D2", "CPython", "cp")):
        paired_rows(
            rep,
            f,
            v,
            (R[key + "_16"], R[key + "_1"], pa),
            (rid, "device sender on %s, W=16, msg/s ÷ paho max_inflight=16 (100 ms RTT)" % who),
            (rid + "b", "device sender on %s, W=16 ÷ W=1 (msg/s)" % who),
        )
    if "app_16" in R:
        ra = R["app_16"]
        rep.row(
            "D6",
            "the board app itself (boards/UNIX/main.py on MicroPython, its default "
            "sender: WindowSender W=16) draining %d queued readings, msg/s ÷ paho "
            "max_inflight=16" % R["n"],
            f(ra),
            f(pa),
            f(ra / pa),
            "≥ 0.8",
            v(ra / pa, TARGETS["paho"]),
        )
    r16, r1, fl = R["replay_16"], R["replay_1"], R["replay_fleet"]
    paired_rows(
        rep,
        f,
        v,
        (r16, r1, pa),
        ("D3", "`ddq replay` one dir, --window 16, msg/s ÷ paho max_inflight=16"),
        ("D4", "`ddq replay` one dir, --window 16 ÷ --window 1 (msg/s)"),
    )
    t5 = TARGETS["fleet"] * R["dirs"] / 8  # 6 for 8 directories (the smoke run has fewer)
    rep.row(
        "D5",
        "`ddq replay` of %d dirs at once ÷ one dir (msg/s)" % R["dirs"],
        f(fl),
        f(r16),
        f(fl / r16),
        "≥ %g" % t5,
        v(fl / r16, t5),
    )
    rep.section(
        "Drain over a 100 ms round trip (issue 17: rows D1-D5)",
        [
            "A relay of our own (bench/drain_bench.py, an asyncio process on 127.0.0.1) delays "
            "every TCP segment by %d ms each way between the sender and a local mosquitto, "
            "keeping order and letting segments overlap. Each sender drains %d queued 100-byte "
            "QoS 1 messages (W = 1 and `--window 1`: %d, since one at a time takes 100 ms each; "
            "rates compare). Device sender: ddq_mqtt.WindowSender under Outbox.pump (OUTBOX E25), "
            "group commit sync_interval_ms=50, its own process (bench/drain_dev.py; MicroPython "
            "with an 8 MiB heap: the unix port's 2 MiB default fragments as the index of 2,000 "
            "items grows, P14); paho-mqtt 2.2 with max_inflight_messages_set(16) publishes the "
            "same count and waits for every PUBACK; `ddq replay` rates use each run's own "
            "delivery time (after the CONNACK, from its --json summary: no interpreter start-up), "
            "and %d directories at once use the slowest one's. Ideal at W = 16: 160 msg/s. D6 "
            "(issue 27): the example app itself (boards/UNIX/main.py with ddq_app, "
            "bench/drain_app.py) queues the readings offline (budget 0), then main.run() drains "
            "them as after an outage, through the sender it picks by default; its queue options "
            "are the UNIX profile's with room for the "
            "backlog." % (R["rtt_ms"] // 2, R["n"], R["n1"], R["dirs"]),
            "",
        ]
        + [
            "- %s: %s msg/s" % (k, f(R[k]))
            for k in (
                "paho_16",
                "mp_16",
                "app_16",
                "cp_16",
                "mp_1",
                "cp_1",
                "replay_16",
                "replay_1",
                "replay_fleet",
            )
        ],
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "relay":
        asyncio.run(_relay(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) / 1000))
        return 0
    R = run("--smoke" in sys.argv)
    print(json.dumps(R, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
