"""End to end against a virtual board: flash, run the example app, power cycle, pull, inspect,
replay to a real mosquitto (interrupted and resumed), push back; and the failure cases, each one
line, the right exit status, nothing modified.

The queue directory on the device has a name unique to this run: ddq's lock on the unix port is an
abstract socket named after the path, shared by every process of the machine.
"""

import contextlib
import json
import os
import time

from conftest import (
    PORT_CORE,
    PORT_CORE_LFS,
    REPO,
    Subscriber,
    ddq,
    one_line_error,
    port_files,
    tree_hash,
)
from ddqhost import cli, locate, qdir, vboard
from ddqhost.device import Device

QD = "outbox-%d" % os.getpid()
PENDING_N = 8


def _start_again(board):
    r = ddq("board", "virtual", "start", "--dir", board.dir, "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    board.pids.update([st["bridge_pid"], st["micropython_pid"]])
    return st


def _device_stats(board):
    r = ddq("stats", "--device", board.tty, ":" + QD, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# The ten counts of DDQ's stats (docs/SPEC.md), written out here, not read from the port.
DDQ_STATS = (
    "total_items available_items claimed_items acknowledged_items quarantined_items"
    " stored_bytes segment_count next_seq recovered_tail_bytes generation"
).split()
# The rest of the port, in flash order, on a board that loads everything (UNIX).
FULL = (
    "ddq_admit ddq_index ddq_reclaim ddq_outbox ddq_seal ddq_window ddq_batch ddq_mqtt ddq_tls"
    " ddq_clients ddq_group ddq_salvage"
)


def test_flash_py_then_mpy(board):
    r = ddq("flash", "--device", board.tty, "--format", "py", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    mods = port_files(":%s.py", PORT_CORE, FULL)
    assert res["board"] == "UNIX" and [w["path"] for w in res["written"]] == mods
    assert (
        res["imported_from"].endswith("ddq.py") and res["version"] == locate.load_ddq().__version__
    )
    r = ddq("flash", "--device", board.tty, "--example-app", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    # The example app imports ddq_app (and through it ddq, ddq_outbox and ddq_mqtt; ddq_window,
    # ddq_outbox's windowed delivery, comes with a network): those are installed as .mpy, with
    # ddq_reclaim for the UNIX profile's staged reclamation, and every .py the first flash put
    # there is removed (no stale copy beside the new ddq); no ddq_fat on LittleFS (FAT's lock key).
    app_mods = "ddq_reclaim ddq_outbox ddq_window ddq_mqtt ddq_app"
    mpys = port_files(":%s.mpy", PORT_CORE_LFS, app_mods)
    assert [w["path"] for w in res["written"]] == mpys + [":main.py"]
    assert sorted(res["removed"]) == sorted(mods) and res["imported_from"].endswith("ddq.mpy")
    with Device(board.tty, soft_reset=False) as dev:
        sizes = {n: size for n, _d, size in dev.listdir(":")}
        mpy = dev.read_file(":ddq.mpy")
    assert "ddq.mpy" in sizes and "ddq.py" not in sizes  # never both side by side
    # --json gives the size of every file written (docs/HOST.md points there for sizes), and
    # the .mpy names its source "ddq.py", not the host's path (mpy-cross -s).
    assert all(sizes[w["path"][1:]] == w["bytes"] > 0 for w in res["written"])
    assert REPO.encode() not in mpy and b"ddq.py" in mpy


def test_flash_skips_what_the_board_cannot_load(board, tmp_path):
    # PYBV11's profile says network false (no socket): without an app ddq_mqtt is neither
    # installed nor left behind from an earlier flash. (--format py: the unix port does not load
    # armv7emsp .mpy.)
    r = ddq("flash", "--device", board.tty, "--board", "UNIX", "--format", "py", "--json")
    assert r.returncode == 0, r.stderr
    r = ddq("flash", "--device", board.tty, "--board", "PYBV11", "--format", "py", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [w["path"] for w in res["written"]] == port_files(
        ":%s.py",
        PORT_CORE,
        "ddq_admit ddq_index ddq_reclaim ddq_outbox ddq_seal ddq_batch ddq_group ddq_salvage",
    )
    assert res["removed"] == [":ddq_window.py", ":ddq_mqtt.py", ":ddq_tls.py", ":ddq_clients.py"]
    # An app that imports ddq_mqtt gets it there too: the module loads without socket (its
    # adapters need none; only its own Sender imports socket, when it connects).
    app = tmp_path / "main.py"
    app.write_text("import ddq_mqtt\n")
    r = ddq(
        "flash",
        "--device",
        board.tty,
        "--board",
        "PYBV11",
        "--format",
        "py",
        "--app",
        app,
        "--json",
    )
    assert r.returncode == 0, r.stderr
    written = json.loads(r.stdout)["written"]
    # (PYBV11's profile compacts inline, no reclaim_step: an app gets no ddq_reclaim)
    assert [w["path"] for w in written] == port_files(":%s.py", PORT_CORE, "ddq_mqtt main")


APP = """
import main, ddq_outbox
main.RETRY_BASE_MS = main.RETRY_MAX_MS = 1
failed_once = []
def sender(m):
    n = int(m.payload.split(b' ')[0][2:])
    if n == 3:
        raise ddq_outbox.Rejected('rejected reading %%d' %% n)
    if n == 5 and not failed_once:
        failed_once.append(n)
        raise OSError(113)  # host unreachable: nacked (attempts 1), retried 1 ms later, delivered
    return True
main.run(rounds=5, period_ms=0, sender=sender, queue_dir=%(qd)r, drain_ms=5000)
# Then the uplink goes away: readings are only queued.
main.run(rounds=%(n)d, period_ms=0, sender=sender, queue_dir=%(qd)r, budget=0)
"""
TOPIC = "ddq/unix/temp"  # boards/UNIX/main.py's


def test_outbox_power_cycle_pull_inspect_replay_push(board, mosquitto, tmp_path):
    r = ddq("flash", "--device", board.tty, "--example-app")
    assert r.returncode == 0, r.stderr
    with Device(board.tty, soft_reset=False) as dev:
        dev.exec(APP % {"qd": QD, "n": PENDING_N})
    before = _device_stats(board)
    # 1,2,4,5 acked (5 after one retry); 3 quarantined; 6..13 (PENDING_N) never sent.
    assert (
        before["acknowledged_items"],
        before["quarantined_items"],
        before["available_items"],
    ) == (4, 1, PENDING_N)

    # Power cut and restart: everything enqueue/ack returned for was synced, so nothing changes.
    r = ddq("board", "virtual", "kill", "--dir", board.dir)
    assert r.returncode == 0
    assert not any(vboard.pid_alive(p) for p in board.pids)
    _start_again(board)
    assert _device_stats(board) == before

    local = tmp_path / "pulled"
    with Device(board.tty, soft_reset=False) as dev:
        dev_files_before = dev.hash_dir(":" + QD)
    r = ddq("pull", "--device", board.tty, ":" + QD, local, "--json")
    assert r.returncode == 0, r.stderr
    pulled = json.loads(r.stdout)
    assert pulled["board"] == "UNIX" and pulled["files"] == len(dev_files_before)
    with Device(board.tty, soft_reset=False) as dev:
        assert dev.hash_dir(":" + QD) == dev_files_before  # pull never modifies the device
    meta = json.loads((local / qdir.PULL_META).read_text())
    # Private like ddq's own files: the directory 0700, every pulled file and the metadata 0600.
    assert os.stat(local).st_mode & 0o777 == 0o700
    assert {os.stat(local / n).st_mode & 0o777 for n in os.listdir(local)} == {0o600}
    # The UNIX profile's options, used by inspect and replay below.
    assert meta["options"]["segment_bytes"] == 4096

    r = ddq("inspect", local, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert {k: info["stats"][k] for k in DDQ_STATS} == {k: before[k] for k in DDQ_STATS}
    assert {k: info["stats"][k] for k in before} == before  # failed, durable_seq too
    by_seq = {it["seq"]: it for it in info["items"]}
    assert (
        by_seq[3]["state"] == "quarantined"
        and by_seq[3]["reason"] == "rejected: rejected reading 3"
    )
    assert by_seq[5]["attempts"] == 1 and by_seq[5]["state"] == "acked"
    assert by_seq[6]["envelope"]["payload_preview"].startswith("n=1 ")  # the counter restarted
    assert ddq("verify", local).returncode == 0

    # Replay to mosquitto: interrupted after 3 (--limit), then resumed; every pending message once.
    pending = sorted(s for s, it in by_seq.items() if it["state"] == "available")
    sub = Subscriber(mosquitto)
    try:
        url = "mqtt://127.0.0.1:%d/dev1" % mosquitto
        r = ddq("replay", local, "--to", url, "--dry-run", "--json")
        assert r.returncode == 0 and len(json.loads(r.stdout)["would_send"]) == PENDING_N
        assert (
            json.loads(ddq("inspect", local, "--json").stdout)["stats"]["available_items"]
            == PENDING_N
        )
        r = ddq("replay", local, "--to", url, "--limit", "3", "--json")
        assert r.returncode == 0, r.stderr
        first = json.loads(r.stdout)
        assert (first["sent"], first["remaining"], first["failed"]) == (3, PENDING_N - 3, 0)
        r = ddq("replay", local, "--to", url, "--json")
        assert r.returncode == 0, r.stderr
        second = json.loads(r.stdout)
        assert (second["sent"], second["remaining"], second["skipped"]) == (PENDING_N - 3, 0, 0)
        assert first["sent_seqs"] + second["sent_seqs"] == pending
        got = sub.wait_for(PENDING_N)
    finally:
        sub.close()
    assert len(got) == PENDING_N  # delivered once: nothing re-sent after the interruption
    assert all(t == "dev1/" + TOPIC for t, _ in got)  # the app's Outbox envelopes, routed
    assert [p for _t, p in got] == [
        by_seq[s]["envelope"]["payload_preview"].encode() for s in pending
    ]
    r = ddq("replay", local, "--to", url, "--json")
    assert json.loads(r.stdout)["sent"] == 0

    after = json.loads(ddq("inspect", local, "--json").stdout)
    assert after["stats"]["available_items"] == 0
    assert after["stats"]["acknowledged_items"] == before["acknowledged_items"] + PENDING_N
    assert ddq("verify", local).returncode == 0

    # Push the acks back; the device's own ddq now sees them.
    r = ddq("push", "--device", board.tty, local, ":" + QD, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["appended"]
    assert os.stat(local / qdir.PULL_META).st_mode & 0o777 == 0o600  # rewritten by push
    now = _device_stats(board)
    assert (
        now["available_items"] == 0
        and now["acknowledged_items"] == after["stats"]["acknowledged_items"]
    )

    # The device moves on (enqueues one more); a second push of the stale copy is refused, and so
    # is --force: it would move next_seq back and reuse the new message's seq.
    with Device(board.tty, soft_reset=False) as dev:
        dev.exec("import main\nmain.run(rounds=1, period_ms=0, queue_dir=%r, budget=0)" % QD)
        changed = dev.hash_dir(":" + QD)
    line = one_line_error(ddq("push", "--device", board.tty, local, ":" + QD), 1)
    assert "changed on the device since the pull" in line
    with Device(board.tty, soft_reset=False) as dev:
        assert dev.hash_dir(":" + QD) == changed
    line = one_line_error(ddq("push", "--device", board.tty, local, ":" + QD, "--force"), 1)
    assert (
        "refusing --force: the device used seqs %d..%d"
        % (
            now["next_seq"],
            now["next_seq"],
        )
        in line
    )
    with Device(board.tty, soft_reset=False) as dev:
        assert dev.hash_dir(":" + QD) == changed
    assert _device_stats(board)["next_seq"] == now["next_seq"] + 1


def test_c_format_directory_from_the_independent_writer_inspects_the_same(tmp_path):
    import cwriter

    d = str(tmp_path / "c")
    opts, items, stats = cwriter.compacted_scenario(d)
    (tmp_path / "c" / qdir.OPTIONS_FILE).write_text(json.dumps(opts))
    r = ddq("inspect", d, "--json", "--payloads")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert {k: info["stats"][k] for k in stats} == stats
    for it in info["items"]:
        e = items[it["seq"]]
        assert (it["state"], it["attempts"], it["lease_until_ms"], it["not_before_ms"]) == (
            e["state"],
            e["attempts"],
            e["lease_until_ms"],
            e["not_before_ms"],
        )
        assert bytes.fromhex(it["payload_hex"]) == e["payload"]
        if "reason" in e:
            assert bytes.fromhex(it["reason_hex"]) == e["reason"]
    r = ddq("verify", d, "--json")
    assert r.returncode == 0
    assert json.loads(r.stdout)["stats"] == dict(stats)


# ---------------------------------------------------------------- failures


def test_no_device_at_the_port(tmp_path):
    line = one_line_error(
        ddq("pull", "--device", tmp_path / "ttyNONE", ":outbox", tmp_path / "x"), 1
    )
    assert "no device at" in line
    assert not (tmp_path / "x").exists()
    one_line_error(ddq("flash", "--device", tmp_path / "ttyNONE"), 1)


def test_device_errors_map_to_cpython_oserrors(board):
    import pytest

    with Device(board.tty, soft_reset=False) as dev:
        with pytest.raises(FileNotFoundError):
            dev.stat(":no/such/file")
        with pytest.raises(FileNotFoundError):
            dev.read_file(":no-such-file")
        dev.mkdir(":adir", exist_ok=True)
        with pytest.raises(FileExistsError):
            dev.mkdir(":adir")
        with pytest.raises(FileNotFoundError):
            dev.rename(":no-such-file", ":x")
        with pytest.raises(FileNotFoundError):  # mkdir/remove: mpremote's fs_mkdir/fs_rmfile
            dev.remove(":no-such-file")
        dev.remove(":adir")


@contextlib.contextmanager
def _without_ddq(board):
    """The board with its ddq.mpy / ddq.py renamed away (and unloaded), restored at the end."""
    with Device(board.tty, soft_reset=False) as dev:
        for n in ("ddq.mpy", "ddq.py"):
            if dev.exists(":" + n):
                dev.rename(":" + n, ":" + n + ".off")
        dev.exec("import sys\nsys.modules.pop('ddq', None)")
    try:
        yield
    finally:
        with Device(board.tty, soft_reset=False) as dev:
            for n in ("ddq.mpy", "ddq.py"):
                if dev.exists(":" + n + ".off"):
                    dev.rename(":" + n + ".off", ":" + n)


def test_device_without_ddq(board):
    with Device(board.tty, soft_reset=False) as dev:
        dev.mkdir(":noddq", exist_ok=True)
        dev.write_file(":noddq/segment-00000000000000000000.log", b"")
    with _without_ddq(board):
        line = one_line_error(ddq("stats", "--device", board.tty, ":noddq"), 1)
        assert "ddq is not installed" in line


def test_pull_refuses_what_is_not_a_queue_and_missing_dirs(board, tmp_path):
    line = one_line_error(ddq("pull", "--device", board.tty, ":", tmp_path / "root"), 1)
    assert "not a ddq queue directory" in line
    line = one_line_error(ddq("pull", "--device", board.tty, ":nowhere", tmp_path / "nowhere"), 1)
    assert "no such directory" in line
    assert not (tmp_path / "root").exists() and not (tmp_path / "nowhere").exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".ddq-pull-")] == []


def test_pulled_file_whose_hash_differs(board, tmp_path, monkeypatch, capsys):
    with Device(board.tty, soft_reset=False) as dev:
        dev.mkdir(":hq", exist_ok=True)
        dev.write_file(":hq/segment-00000000000000000000.log", b"\x44" * 100)
        before = dev.hash_dir(":hq")
    real = Device.read_file

    def flipping(self, path, progress=None, size=None):
        data = bytearray(real(self, path, progress, size))
        if data:
            data[10] ^= 0x20  # a bit flipped in transit
        return bytes(data)

    monkeypatch.setattr(Device, "read_file", flipping)
    rc = cli.main(["pull", "--device", board.tty, ":hq", str(tmp_path / "hq")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("ddq: hash mismatch for :hq/segment-")
    assert not (tmp_path / "hq").exists()
    monkeypatch.undo()
    with Device(board.tty, soft_reset=False) as dev:
        assert dev.hash_dir(":hq") == before


def test_corrupt_segment_is_refused_everywhere(tmp_path, mosquitto):
    import cwriter

    import ddqfmt

    d = tmp_path / "q"
    recs = b"".join(
        ddqfmt.encode_record(ddqfmt.T_DATA, i, 0, b"payload %d" % i) for i in (1, 2, 3)
    )
    bad = bytearray(recs)
    bad[60 + 40] ^= 0xFF  # inside seq 2's payload
    cwriter.write_dir(str(d), 0, [bytes(bad)])
    before = tree_hash(d)
    assert ddq("verify", d).returncode == 2
    one_line_error(ddq("inspect", d), 2)
    one_line_error(ddq("replay", d, "--to", "mqtt://127.0.0.1:%d/x" % mosquitto), 2)
    assert tree_hash(d) == before


def test_replay_broker_unreachable_leaves_dir_untouched(tmp_path):
    import cwriter

    import ddqfmt
    from conftest import free_port

    d = tmp_path / "q"
    cwriter.write_dir(str(d), 0, [ddqfmt.encode_record(ddqfmt.T_DATA, 1, 0, b"x")])
    before = tree_hash(d)
    line = one_line_error(ddq("replay", d, "--to", "mqtt://127.0.0.1:%d" % free_port()), 1)
    assert "cannot connect to broker" in line
    one_line_error(ddq("replay", d, "--to", "http://127.0.0.1:1"), 1)
    assert tree_hash(d) == before


def test_run_the_shared_suite_on_the_board(board):
    r = ddq("test", "--device", board.tty, "test_support", timeout=600)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert lines[-1].startswith("posix: ") and lines[-1].endswith(" passed, 0 failed"), lines[-3:]


def test_mip_installs_from_package_json(board):
    import subprocess
    import sys

    mpremote = os.path.join(os.path.dirname(sys.executable), "mpremote")
    r = subprocess.run(
        [
            mpremote,
            "connect",
            board.tty,
            "resume",
            "mip",
            "install",
            "--target",
            "/flash/miplib",
            os.path.join(REPO, "package.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    with Device(board.tty, soft_reset=False) as dev:
        with open(os.path.join(REPO, "port", "ddq.py"), "rb") as f:
            import hashlib

            assert dev.sha256(":/flash/miplib/ddq.py") == hashlib.sha256(f.read()).hexdigest()


ESCAPE = """
import os
def test_sees_only_the_staged_copy():
    names = sorted(os.listdir('/remote'))
    assert 'tests' in names and 'port' in names, names
    assert set(names) <= {'tests', 'port', 'fixtures'}, names
def test_cannot_write_the_mount():
    for what, f in (
        ('create', lambda: open('/remote/tests/zz_evil.py', 'w').close()),
        ('create', lambda: open('/remote/zz_evil', 'w').close()),
        ('append', lambda: open('/remote/tests/mprun.py', 'a').close()),
        ('mkdir', lambda: os.mkdir('/remote/zz_dir')),
        ('remove', lambda: os.remove('/remote/tests/mprun.py')),
        ('rename', lambda: os.rename('/remote/tests/support.py', '/remote/tests/zz.py')),
    ):
        try:
            f()
        except OSError:
            continue
        raise AssertionError('could ' + what + ' in the mount')
def test_cannot_leave_the_mount():
    for p in ('/remote/../../../../../etc/hostname', '/remote/tests/../../../../../etc/hostname'):
        try:
            open(p).close()
        except OSError:
            continue
        raise AssertionError('read ' + p)
"""


def test_ddq_test_mounts_only_a_private_read_only_copy(board):
    with Device(board.tty, soft_reset=False) as dev:
        dev.mkdir(":/flash/lib", exist_ok=True)
        dev.write_file(":/flash/lib/test_zz_escape.py", ESCAPE.encode())
    try:
        r = ddq("test", "--device", board.tty, "test_zz_escape", timeout=120)
        lines = r.stdout.strip().splitlines()
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr
        assert lines[-1] == "posix: 3 passed, 0 failed", lines[-5:]
    finally:
        with Device(board.tty, soft_reset=False) as dev:
            dev.remove(":/flash/lib/test_zz_escape.py")
    assert os.path.exists(os.path.join(REPO, "tests", "mprun.py"))
    assert not os.path.exists(os.path.join(REPO, "tests", "zz_evil.py"))


def test_ddq_test_installed_without_ddq_reports_the_import_error(board):
    with _without_ddq(board):
        line = one_line_error(
            ddq("test", "--device", board.tty, "--installed", "test_support", timeout=120), 1
        )
        assert "the test run failed on the device: ImportError" in line, line
        assert "ddq is not installed on the device" in line and "_rc" not in line


def test_the_patient_mount_leaves_mpremotes_code_as_it_is(board, tmp_path):
    """ddq's patient mount (device.MOUNT_REPLY_MS) is its own device code sent beside mpremote's
    (device.PATIENT_POLL_CODE): mpremote's fs_hook_code is never rewritten (issue 37 #5)."""
    import mpremote.transport_serial as ts

    from ddqhost import device

    code = ts.fs_hook_code
    (tmp_path / "f.txt").write_bytes(b"y" * 5)
    with Device(board.tty, soft_reset=True) as dev:
        dev.mount_local(str(tmp_path), read_only=True)
        try:
            out = dev.exec(
                "import os\nprint(os.stat('/remote/f.txt')[6], RemoteCommand.poll_in.__name__)"
            )
        finally:
            dev.umount_local()
    assert out.split()[-2:] == [b"5", b"_ddq_poll_in"], out
    assert ts.fs_hook_code == code and "ipoll(1000)" in code
    assert "ipoll(%d)" % device.MOUNT_REPLY_MS in device.PATIENT_POLL_CODE


def test_a_mount_waits_for_a_slow_host(board, tmp_path, monkeypatch):
    """A host that takes 1.5 s over one reply (a busy machine, a board under qemu) does not break
    the mount: mpremote's device side would give up after 1 s ("timeout waiting for remote");
    ddq's mount waits as long as the host side does (device.MOUNT_REPLY_MS; HOST.md Timeouts)."""
    from mpremote.transport_serial import PyboardCommand, fs_hook_cmds

    from ddqhost import device

    (tmp_path / "slow.txt").write_bytes(b"x" * 37)
    stat = PyboardCommand.cmd_table[fs_hook_cmds["CMD_STAT"]]
    slow = []

    def slow_stat(cmd):
        slow.append(1)
        time.sleep(1.5)  # the fault itself: the host is slow to answer
        return stat(cmd)

    monkeypatch.setitem(PyboardCommand.cmd_table, fs_hook_cmds["CMD_STAT"], slow_stat)
    with Device(board.tty, soft_reset=True) as dev:
        dev.mount_local(str(tmp_path), read_only=True)
        try:
            out = dev.exec("import os\nprint(os.stat('/remote/slow.txt')[6])")
        finally:
            dev.umount_local()
    assert slow and out.strip().endswith(b"37"), out
    assert device.MOUNT_REPLY_MS >= 10000
