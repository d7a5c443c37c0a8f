"""The host tools look before they read (docs/HOST.md "Trust"): a FIFO, a link, a sparse file, a
name in another script's digits, a settings file with Infinity, an argument past its range, a name
that holds a newline or ESC: each gets one line (or an escaped line), never a hang, a traceback,
memory or disk in proportion to a file's apparent size, or a forged line of output.

Every command runs as a real `ddq` process (conftest.ddq); the limits that make a hang or an
unbounded read fail fast (RLIMIT_AS, RLIMIT_FSIZE, a timeout) are the kernel's own.
"""

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import HOST, PORT_DIR, REPO, cli_env, ddq, one_line_error, option_flags, tree_hash
from ddqhost import locate, qdir

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}
FLAGS = option_flags(OPTS)
SEG0 = "segment-00000000000000000000.log"
SEG1 = "segment-00000000000000000001.log"


def _queue(d, n=3, opts=OPTS, options_file=True):
    ddqmod = locate.load_ddq()
    q = ddqmod.Queue(str(d), **opts)
    try:
        for i in range(n):
            q.enqueue(b"item %d " % i + b"x" * 100)
    finally:
        q.close()
    if options_file:
        (d / qdir.OPTIONS_FILE).write_text(json.dumps(opts))
    return d


def _limited(*args, as_bytes=None, fsize=None, env=None, timeout=60):
    """`ddq ARGS` under kernel limits: address space as_bytes, file size fsize."""

    def pre():
        if as_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "ddqhost.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=timeout,
        cwd=REPO,
        preexec_fn=pre,
    )


# ---------------------------------------------------------------- 1. FIFOs, links, sparse files


def test_fifo_staged_cut_is_reported_not_opened(tmp_path):
    # SPEC N7: verify and records report it without opening it (an open blocks forever);
    # inspect refuses in one line; nothing in the directory changes.
    d = _queue(tmp_path / "q")
    os.mkfifo(d / (SEG1 + ".reserve"))
    before = sorted(os.listdir(d))
    r = ddq("verify", d, timeout=30)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "a FIFO, not a regular file" in r.stdout and "result: corrupt" in r.stdout
    js = json.loads(ddq("verify", d, "--json", timeout=30).stdout)
    assert js["verdict"] == "corrupt" and js["problems"][0]["file"] == SEG1 + ".reserve"
    line = one_line_error(ddq("records", d, timeout=30), 2)  # corrupt: verify's exit status
    assert "`ddq salvage %s OUT`" % d in line, line
    line = one_line_error(ddq("inspect", d, timeout=30), 1)
    assert "is a FIFO" in line
    assert sorted(os.listdir(d)) == before


@pytest.mark.parametrize("gib", [2, 8])
def test_sparse_segment_is_refused_without_reading_it(tmp_path, gib):
    # A segment can never exceed segment_bytes (SPEC R15): verify and records say so within a
    # 1 GiB address space (they read 4.2 GB for 2 GiB before, a MemoryError at 8 GiB); inspect
    # refuses before copying it (it copied the whole apparent size into $TMPDIR).
    d = _queue(tmp_path / "q")
    with open(d / SEG0, "r+b") as f:
        f.truncate(gib << 30)
    for args in (("verify", d), ("verify", d, *FLAGS), ("records", d)):
        r = _limited(*args, as_bytes=1 << 30)
        assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr
        if args[0] == "verify":
            assert r.returncode == 2 and "larger than segment_bytes" in r.stdout, r.stdout
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(cli_env(), TMPDIR=str(tmp))
    line = one_line_error(_limited("inspect", d, as_bytes=1 << 30, fsize=64 << 20, env=env), 1)
    assert "larger than segment_bytes (4096)" in line and SEG0 in line
    assert os.listdir(tmp) == []


def test_staged_cut_linked_to_dev_zero_is_reported_not_read(tmp_path):
    d = _queue(tmp_path / "q")
    os.symlink("/dev/zero", d / (SEG0 + ".reserve"))
    r = _limited("verify", d, as_bytes=1 << 30, timeout=30)
    assert r.returncode == 2 and "a symbolic link, not a regular file" in r.stdout, r.stdout
    line = one_line_error(_limited("inspect", d, as_bytes=1 << 30, timeout=30), 1)
    assert "a symbolic link" in line


def test_oversized_index_and_manifest_are_read_within_their_bounds(tmp_path):
    # The index and the manifest have their own small bounds (SPEC X2, M2): a sparse 4 GiB
    # queue.index is a damaged index (ddq replays), a sparse manifest a corrupt one.
    d = _queue(tmp_path / "q")
    with open(d / "queue.index", "wb") as f:
        f.truncate(4 << 30)
    r = _limited("verify", d, "--json", as_bytes=1 << 30)
    js = json.loads(r.stdout)
    assert js["index"]["status"] == "damaged" and "larger than" in js["index"]["reason"]
    os.remove(d / "queue.index")
    with open(d / "queue.manifest", "wb") as f:
        f.truncate(4 << 30)
    r = _limited("verify", d, as_bytes=1 << 30)
    assert r.returncode == 2 and "queue.manifest is 4294967296 bytes, larger than 48" in r.stdout


# ---------------------------------------------------------------- 2. ASCII digits only


def test_a_segment_name_in_other_digits_is_not_a_segment(tmp_path):
    # SPEC N4: "segment-...\u0661.log" (ARABIC-INDIC DIGIT ONE) is no segment to ddq, so not to
    # verify either: both see 2 items and next_seq 3 (verify saw 3 and 4 with \d).
    d = tmp_path / "q"
    ddqmod = locate.load_ddq()
    opts = {"segment_bytes": 1024, "max_payload_bytes": 500, "max_items": 64, "max_segments": 16}
    q = ddqmod.Queue(str(d), **opts)
    for i in range(3):
        q.enqueue(b"%d" % i + b"x" * 400)
    q.close()
    assert SEG1 in os.listdir(d)
    (d / qdir.OPTIONS_FILE).write_text(json.dumps(opts))
    os.rename(d / SEG1, d / (SEG1[:-5] + "\u0661.log"))
    v = json.loads(ddq("verify", d, "--json").stdout)
    i = json.loads(ddq("inspect", d, "--json").stdout)
    assert (v["stats"]["total_items"], v["stats"]["next_seq"]) == (2, 3)
    assert (i["stats"]["total_items"], i["stats"]["next_seq"]) == (2, 3)
    assert SEG1[:-5] + "\u0661.log" in v["ignored_files"]


# ------------------------------------------------------------ 3. numbers in settings, arguments


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e400", "4096.9", "true"])
@pytest.mark.parametrize("where", [qdir.OPTIONS_FILE, qdir.PULL_META])
def test_settings_that_are_not_whole_numbers_are_refused(tmp_path, value, where):
    d = _queue(tmp_path / "q", options_file=False)
    body = '{"segment_bytes": %s}' % value
    (d / where).write_text(body if where == qdir.OPTIONS_FILE else '{"options": %s}' % body)
    for cmd in ("verify", "inspect"):
        line = one_line_error(ddq(cmd, d), 1)
        assert where in line and ("not an integer" in line or "not a JSON number" in line), line


@pytest.mark.parametrize("t", ["nan", "inf", "0", "-1", "1e400"])
def test_replay_timeout_out_of_range_is_one_line(tmp_path, t):
    d = _queue(tmp_path / "q")
    before = tree_hash(d)
    for extra in ((), ("--dry-run",)):
        line = one_line_error(
            ddq("replay", d, "--to", "mqtt://127.0.0.1:1/x", "--timeout", t, *extra), 2
        )
        assert "--timeout must be more than 0" in line
    assert tree_hash(d) == before


def test_replay_client_id_too_long_is_one_line(tmp_path):
    d = _queue(tmp_path / "q")
    line = one_line_error(
        ddq("replay", d, "--to", "mqtt://127.0.0.1:1/x", "--client-id", "c" * 70000), 2
    )
    assert "--client-id must be 1 to 65535 bytes" in line and "70000 bytes" in line


# ---------------------------------------------------------------- 4. output injection


def test_a_file_name_cannot_forge_a_verify_line(tmp_path):
    d = _queue(tmp_path / "q")
    data = bytearray((d / SEG0).read_bytes())
    data[60] ^= 0xFF  # a payload byte of seq 1: a crc mismatch, corrupt
    (d / SEG0).write_bytes(bytes(data))
    (d / "evil\nresult: clean").write_bytes(b"")
    (d / "segment-\x1b[2J.log").write_bytes(b"")
    r = ddq("verify", d)
    assert r.returncode == 2
    results = [ln for ln in r.stdout.splitlines() if ln.startswith("result:")]
    assert results == ["result: corrupt (1 problem)"], r.stdout
    assert "ignored: evil\\nresult: clean" in r.stdout and "\x1b" not in r.stdout
    js = json.loads(ddq("verify", d, "--json").stdout)
    assert "evil\nresult: clean" in js["ignored_files"]  # JSON stays exact


def test_inspect_escapes_topics_and_reasons(tmp_path):
    ddqmod = locate.load_ddq()
    import ddq_outbox

    d = tmp_path / "q"
    topic = "t/\nresult: clean\x1b[2J"
    # put refuses such a topic (OUTBOX E4): a tampered directory holds it, written here by hand
    safe = topic.replace("\n", "_").replace("\x1b", "_")
    q = ddqmod.Queue(str(d), **OPTS)
    try:
        for p in (b"x", b"y"):
            q.enqueue(ddq_outbox.encode_envelope(safe, p).replace(safe.encode(), topic.encode()))
        c = q.claim(60000)
        q.quarantine(c.seq, b"bad\nresult: clean\x1b]0;owned\x07")
    finally:
        q.close()
    r = ddq("inspect", d)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert not any(ln.startswith("result") for ln in r.stdout.splitlines()), r.stdout
    assert "topic t/\\nresult: clean\\x1b[2J" in r.stdout
    assert "reason: bad\\nresult: clean\\x1b]0;owned\\x07" in r.stdout
    js = json.loads(ddq("inspect", d, "--json").stdout)
    assert js["items"][0]["envelope"]["topic"] == topic
    r = ddq("replay", d, "--to", "mqtt://127.0.0.1:1/x", "--dry-run")
    # (its topic cannot be published: the plan names it as a dead letter, E4/E10)
    assert "\x1b" not in r.stdout and "unpublishable: seq 2" in r.stdout, r.stdout


def test_an_error_naming_a_hostile_path_is_one_line(tmp_path):
    # Error lines name the directory: a newline in it cannot add a line to stderr.
    d = _queue(tmp_path / "q\nddq: all good\x1b[2J")
    os.mkfifo(d / "queue.manifest")
    for cmd in ("inspect", "verify"):
        r = ddq(cmd, d)
        assert "\x1b" not in r.stderr + r.stdout
    line = one_line_error(ddq("inspect", d), 1)
    assert "q\\nddq: all good\\x1b[2J" in line


# ---------------------------------------------------------------- 5. read-only views, exact pids


def _as_nobody():
    """(python, preexec) that run the CLI as a user without write access to a root-owned
    directory: as root, `nobody` with a Python that user may run; None when there is none."""
    if os.getuid() != 0:
        return sys.executable, None

    def pre():
        os.setgid(65534)
        os.setuid(65534)

    for py in (sys.executable, "/usr/bin/python3", shutil.which("python3") or ""):
        if not py:
            continue
        try:
            r = subprocess.run(
                [py, "-c", "import json, zlib"], preexec_fn=pre, capture_output=True, timeout=30
            )
        except OSError:
            continue
        if r.returncode == 0:
            return py, pre
    return None


def test_inspect_and_dry_run_work_on_read_only_files():
    # A pulled directory of 0444 files in a 0755 directory: a read-only view must work for a
    # user who cannot write them (it took the copy's lock and failed with PermissionError).
    who = _as_nobody()
    if who is None:
        pytest.skip("running as root with no Python the nobody user may run")
    py, pre = who
    base = tempfile.mkdtemp(prefix="ddq-ro-")
    try:
        os.chmod(base, 0o755)
        d = os.path.join(base, "pulled")
        _queue(__import__("pathlib").Path(d))
        for n in os.listdir(d):
            os.chmod(os.path.join(d, n), 0o444)
        os.chmod(d, 0o555)
        before = tree_hash(d)
        env = dict(cli_env(), PYTHONPATH=os.pathsep.join([HOST, PORT_DIR]), TMPDIR="/tmp")
        for args in (["inspect", d], ["replay", d, "--to", "mqtt://127.0.0.1:1/x", "--dry-run"]):
            r = subprocess.run(
                [py, "-m", "ddqhost.cli", *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=REPO,
                preexec_fn=pre,
                timeout=120,
            )
            assert r.returncode == 0, (args, r.stderr)
            assert "PermissionError" not in r.stderr
        assert "would send seq 3" in r.stdout
        assert tree_hash(d) == before
    finally:
        os.chmod(os.path.join(base, "pulled"), 0o755)
        shutil.rmtree(base)


def test_board_stop_checks_its_own_state_dir_exactly(tmp_path):
    # vb's state names a process of vb2's (a substring of its path): stop --dir vb must not
    # end it.
    vb, vb2 = tmp_path / "vb", tmp_path / "vb2"
    vb.mkdir()
    vb2.mkdir()
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "bridge", str(vb2)]
    )
    try:
        (vb / "state.json").write_text(
            json.dumps({"bridge_pid": other.pid, "micropython_pid": other.pid})
        )
        r = ddq("board", "virtual", "stop", "--dir", vb)
        assert r.returncode in (0, 1), r.stderr
        time.sleep(0)  # (no wait: a SIGTERM would have been sent before ddq exited)
        assert other.poll() is None, "stop --dir vb ended vb2's process"
        r = ddq("board", "virtual", "status", "--dir", vb, "--json")
        assert '"running": false' in r.stdout.replace(" ", "").replace('":', '": '), r.stdout
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait(timeout=30)
    assert stat.S_ISDIR(os.stat(vb2).st_mode)


def test_pull_and_push_refuse_a_local_file_larger_than_any_queue_file(tmp_path):
    # transfer's change detection hashed every local file whole (an 8 GiB sparse segment: a
    # MemoryError); now it hashes in pieces and refuses what no ddq writes.
    from ddqhost import transfer

    d = _queue(tmp_path / "q")
    small = transfer._hash_local_dir(str(d))
    assert small[SEG0]["size"] == os.path.getsize(d / SEG0)
    with open(d / SEG0, "r+b") as f:
        f.truncate(8 << 30)
    with pytest.raises(transfer.TransferError, match="larger than any queue file"):
        transfer._hash_local_dir(str(d))
