"""Bounded, always (issue 35 items 7 and 8): whatever a broker sends, `ddq replay` stays within
256 MB and ends in one line; what a directory truly holds, not its apparent size, sets the work
of `inspect`, `verify` and `replay --dry-run`.

The broker here is a real TCP peer on 127.0.0.1 (a thread of this test): it accepts the CONNECT
and answers with the header of a 255 MiB PUBLISH, then streams its body for as long as the
client reads. The memory a ddq process used is its own peak RSS, as the kernel reports it to
its parent (os.wait4), never a time.
"""

import os
import subprocess
import sys
import threading

import pytest

from conftest import REPO, HostileServer, cli_env
from ddqhost import locate

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}
RSS_LIMIT = 256 * 1000 * 1000  # bytes (issue 35: "<= 256 MB RSS")
HUGE = (1 << 28) - 1  # the largest remaining length MQTT can announce: 255.99 MiB
HUGE_HEADER = b"\x30\xff\xff\xff\x7f"  # PUBLISH, remaining length HUGE


def _queue(path, n=3):
    q = locate.load_ddq().Queue(str(path), **OPTS)
    for i in range(n):
        q.enqueue(b"m%d" % i)
    q.close()
    return str(path)


def _states(path):
    q = locate.load_ddq().Queue(str(path), **OPTS)
    try:
        return [(it.state, it.attempts) for it in q.items()]
    finally:
        q.close()


def run_measured(tmp_path, *args):
    """`python -m ddqhost.cli ARGS` as a real process: (status, stdout, stderr, peak RSS in
    bytes). A watchdog kills it after 600 s (a bound for a broken ddq, not a timed assert)."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(
            [sys.executable, "-m", "ddqhost.cli", *map(str, args)],
            stdout=fo,
            stderr=fe,
            env=cli_env(),
            cwd=REPO,
        )
        dog = threading.Timer(600, p.kill)
        dog.start()
        try:
            _pid, status, ru = os.wait4(p.pid, 0)
        finally:
            dog.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out.read_text(), err.read_text(), ru.ru_maxrss * 1024


class HugePublishBroker(HostileServer):
    """A hostile broker: every connection gets, after the client's CONNECT, a CONNACK (unless
    connack=False) and then the header of a PUBLISH of HUGE bytes, whose body it streams while
    the client reads (at most HUGE bytes; it stops when the client closes). At most 32
    connections; each in its own thread."""

    def __init__(self, connack=True):
        self.connack = connack
        self.streamed = []  # body bytes the client took, per connection
        super().__init__()

    def serve(self, c):
        with c:
            c.settimeout(60)
            try:
                head = c.recv(1)
                n, mult = 0, 1
                for _ in range(4):  # CONNECT's remaining length
                    b = c.recv(1)[0]
                    n += (b & 127) * mult
                    mult *= 128
                    if not b & 128:
                        break
                while n > 0 and head:
                    n -= len(c.recv(min(n, 65536)) or b"x" * n)
                if self.connack:
                    c.sendall(b"\x20\x02\x00\x00")
                c.sendall(HUGE_HEADER)
                chunk, sent = bytes(1 << 20), 0
                while sent < HUGE and not self.stop.is_set():
                    sent += c.send(chunk[: HUGE - sent])
                    self.streamed.append(sent)
            except (OSError, IndexError):
                pass  # the client refused the packet and closed: what it should do


@pytest.mark.parametrize("connack", [True, False])
def test_replay_refuses_a_huge_publish_from_its_header_within_256_mb(tmp_path, connack):
    # Issue 35 item 7: paho buffered the whole 255 MiB packet (645 MB RSS), then waited for a
    # PUBACK; now the packet is refused from its header: one line, exit 1, the message released.
    q = _queue(tmp_path / "q")
    b = HugePublishBroker(connack=connack)
    try:
        rc, out, err, rss = run_measured(
            tmp_path, "replay", q, "--to", "mqtt://127.0.0.1:%d" % b.port, "--timeout", "5"
        )
    finally:
        b.close()
    assert rss <= RSS_LIMIT, "peak RSS %d bytes" % rss
    lines = err.strip().splitlines()
    assert (rc, out, len(lines)) == (1, "", 1), (rc, out, err)
    assert lines[0].startswith("ddq: broker 127.0.0.1:%d sent an MQTT packet 0x30" % b.port)
    assert "announcing 128 or more bytes" in lines[0], lines[0]
    assert "Traceback" not in err
    if connack:  # a message was published, then released with retry(0): due again, nothing lost
        assert [s for s, _a in _states(q)] == ["available"] * 3
    else:  # refused before the connection was accepted: DIR untouched
        assert _states(q) == [("available", 0)] * 3


def test_replay_of_four_directories_stays_within_256_mb(tmp_path):
    # "1.85 GB for four": each connection's packet is refused from its header.
    dirs = [_queue(tmp_path / ("d%d" % i)) for i in range(4)]
    b = HugePublishBroker()
    try:
        rc, out, err, rss = run_measured(
            tmp_path, "replay", *dirs, "--to", "mqtt://127.0.0.1:%d" % b.port, "--timeout", "5"
        )
    finally:
        b.close()
    assert rss <= RSS_LIMIT, "peak RSS %d bytes" % rss
    assert rc == 1 and err == "", (rc, out, err)
    lines = out.strip().splitlines()
    assert len(lines) == 4, out
    for d, line in zip(dirs, lines):
        assert line.startswith("%s: error: broker 127.0.0.1:%d sent" % (d, b.port)), line


# ---------------------------------------------------------------- item 8: sparse segments

BIG = 64 << 20  # segment_bytes at its SPEC §7.1 maximum
BIG_FLAGS = ["--segment-bytes", BIG, "--max-payload-bytes", 1000, "--max-items", 1000,
             "--max-segments", 64]  # fmt: skip
IO_SCRIPT = """import sys
from ddqhost import cli
try:
    rc = cli.main(sys.argv[2:])
finally:
    with open("/proc/self/io") as f:
        io = f.read()
    with open(sys.argv[1], "w") as f:
        f.write(io)
sys.exit(rc)
"""


def run_io(tmp_path, *args):
    """`ddq ARGS` in a process of its own: (status, stdout, bytes it read, bytes it wrote), the
    kernel's count of what passed through its read and write calls (/proc/self/io rchar and
    wchar: a hole read counts as read). Imports count too: a few MB."""
    if not os.path.exists("/proc/self/io"):
        pytest.skip("no /proc/self/io on this system")
    io = tmp_path / "io"
    r = subprocess.run(
        [sys.executable, "-c", IO_SCRIPT, str(io), *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=600,
    )
    got = dict(line.split(": ") for line in io.read_text().splitlines() if line)
    return r.returncode, r.stdout + r.stderr, int(got["rchar"]), int(got["wchar"])


def _sparse_dir(path, segments, last_only=False, poke=False):
    """A queue of `segments` 4 KiB segments, each then made a sparse 64 MiB file (last_only: the
    last one only; poke: one 0x01 byte written at its end). Skips where the filesystem does not
    keep holes."""
    q = locate.load_ddq().Queue(
        str(path), segment_bytes=4096, max_payload_bytes=1000, max_items=1000, max_segments=64
    )
    i = 0
    while q.stats().segment_count < segments:
        q.enqueue(b"p%d" % i + b"x" * 900)
        i += 1
    q.close()
    segs = sorted(n for n in os.listdir(path) if n.startswith("segment-"))
    for n in segs[-1:] if last_only else segs:
        p = os.path.join(path, n)
        os.truncate(p, BIG)
        if poke:
            with open(p, "r+b") as f:
                f.seek(BIG - 1)
                f.write(b"\x01")
        if os.stat(p).st_blocks * 512 > 1 << 20:
            pytest.skip("this filesystem keeps no holes")
    return str(path), segs


MB = 1 << 20


def test_sparse_segments_cost_what_they_hold(tmp_path):
    # Issue 35 item 8: 23 sparse 64 MiB segments (a few KB held): inspect copied 1.5 GB to its
    # temporary directory (and read 3 GB), verify read 3 GB. Now the copy keeps holes and both
    # read only the data extents (SEEK_DATA/SEEK_HOLE): a few MB, most of it Python's imports.
    d, _segs = _sparse_dir(tmp_path / "q", 23)
    rc, out, rd, wr = run_io(tmp_path, "verify", d, *BIG_FLAGS)
    assert rc == 2 and "CORRUPT" in out, out
    assert rd < 16 * MB and wr < 1 * MB, (rd, wr)
    for args in (("inspect", d), ("replay", d, "--to", "mqtt://127.0.0.1:1", "--dry-run")):
        rc, out, rd, wr = run_io(tmp_path, *args, *BIG_FLAGS)
        assert rc == 2 and "corrupt: bad record header" in out, (args, out)
        assert rd < 16 * MB and wr < 1 * MB, (args, rd, wr)


def test_a_sparse_torn_tail_is_judged_from_its_data(tmp_path):
    # A valid queue whose last segment grew to 64 MiB of hole (a size that grew before its
    # data: a torn tail, R11). verify finds it torn without reading the hole; inspect's copy
    # holds no more than the source (ddq's own open of the copy reads that tail once: at
    # most one segment_bytes, as on a device).
    d, segs = _sparse_dir(tmp_path / "t", 3, last_only=True)
    rc, out, rd, wr = run_io(tmp_path, "verify", d, *BIG_FLAGS)
    assert rc == 1 and "result: torn tail" in out, out
    assert rd < 16 * MB, rd
    rc, out, rd, wr = run_io(tmp_path, "inspect", d, "--json", *BIG_FLAGS)
    assert rc == 0, out
    assert wr < 1 * MB and rd < BIG + 16 * MB, (rd, wr)
    # A byte that is not zero at the hole's end: not a torn tail but damage, found as cheaply.
    p, _ = _sparse_dir(tmp_path / "p", 3, last_only=True, poke=True)
    rc, out, rd, wr = run_io(tmp_path, "verify", p, *BIG_FLAGS)
    assert rc == 2 and "CORRUPT" in out, out
    assert rd < 16 * MB, rd
