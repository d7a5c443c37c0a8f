"""`ddq board virtual start|stop|status|kill`: pids, state file, persistence, power cut, no
leftovers."""

import json
import os

from conftest import ddq, kill_board, one_line_error
from ddqhost import vboard
from ddqhost.device import Device


def _status(d):
    r = ddq("board", "virtual", "status", "--dir", d, "--json")
    return r.returncode, json.loads(r.stdout)


def test_start_status_stop_kill_leave_nothing_behind(tmp_path):
    d = tmp_path / "vb"
    pids = set()
    try:
        r = ddq("board", "virtual", "start", "--dir", d, "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        pids |= {st["bridge_pid"], st["micropython_pid"]}
        assert st["running"] and os.path.islink(st["device"]) and st["image_bytes"] == 1024 * 1024
        rc, st2 = _status(d)
        assert rc == 0 and st2["running"] and st2["micropython_pid"] == st["micropython_pid"]
        line = one_line_error(ddq("board", "virtual", "start", "--dir", d), 1)
        assert "already running" in line

        # Files written through mpremote land in the LittleFS image and survive a restart.
        with Device(st["device"], soft_reset=False) as dev:
            assert dev.probe()["cwd"] == "/flash"
            dev.write_file(":kept.txt", b"kept")
            dev.exec(
                "f = open('synced', 'wb'); f.write(b'x' * 100); f.flush()\n"
                "g = open('unsynced', 'wb'); g.write(b'y' * 3000)"
            )
        r = ddq("board", "virtual", "kill", "--dir", d, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["killed"]
        assert not any(vboard.pid_alive(p) for p in pids)
        rc, st3 = _status(d)
        assert rc == 3 and not st3["running"] and not os.path.lexists(d / "tty")

        r = ddq("board", "virtual", "start", "--dir", d, "--json")
        st = json.loads(r.stdout)
        pids |= {st["bridge_pid"], st["micropython_pid"]}
        with Device(st["device"], soft_reset=False) as dev:
            files = {n: size for n, _isdir, size in dev.listdir(":")}
            assert dev.read_file(":kept.txt") == b"kept"
        # Power cut: the flushed file is whole; the unflushed data never reached the image.
        assert files["synced"] == 100 and files.get("unsynced", 0) == 0
        r = ddq("board", "virtual", "stop", "--dir", d)
        assert r.returncode == 0 and "stopped" in r.stdout
        assert not any(vboard.pid_alive(p) for p in pids)
        r = ddq("board", "virtual", "stop", "--dir", d)
        assert r.returncode == 0 and "not running" in r.stdout
    finally:
        gone = kill_board(vboard.kill, str(d), pids)
    assert gone


def test_stale_state_file_is_cleaned_up(tmp_path):
    d = tmp_path / "vb"
    d.mkdir()
    (d / "state.json").write_text(
        json.dumps(
            {
                "bridge_pid": 2**22 + 1,
                "micropython_pid": 2**22 + 2,
                "link": str(d / "tty"),
                "ready": True,
            }
        )
    )
    rc, st = _status(d)
    assert rc == 3 and st["stale_state"] and not st["running"]
    r = ddq("board", "virtual", "stop", "--dir", d)
    assert r.returncode == 0 and not (d / "state.json").exists()


def test_bad_image_is_one_line_error(tmp_path):
    d = tmp_path / "vb"
    img = tmp_path / "bad.img"
    img.write_bytes(b"\x00" * 4096 * 8)  # right size, not a LittleFS
    try:
        line = one_line_error(ddq("board", "virtual", "start", "--dir", d, "--image", img), 1)
        assert "failed to start" in line
        assert img.read_bytes() == b"\x00" * 4096 * 8  # never reformatted behind the user's back
    finally:
        vboard.kill(str(d))


def test_state_dir_and_image_are_private_and_a_relative_device_is_the_virtual_board(tmp_path):
    import stat

    from conftest import REPO

    d = tmp_path / "vb"
    pids = set()

    def mode(p):
        return stat.S_IMODE(os.stat(p).st_mode)

    try:
        r = ddq("board", "virtual", "start", "--dir", d, "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        pids |= {st["bridge_pid"], st["micropython_pid"]}
        assert mode(d) == 0o700 and mode(d / "flash.img") == 0o600
        assert mode(d / "state.json") == 0o600

        # `-d vb/tty` relative to the cwd (the tests run ddq in REPO): recognised as the virtual
        # board, so it is not soft-reset (which would end the unix port).
        rel = os.path.relpath(d / "tty", REPO)
        assert not os.path.isabs(rel)
        r = ddq("board", "probe", "-d", rel, "--json")
        assert r.returncode == 0, r.stderr
        rc, st2 = _status(d)
        assert rc == 0 and st2["micropython_pid"] == st["micropython_pid"]
        with Device(st["device"], soft_reset=False) as dev:
            assert dev.probe()["cwd"] == "/flash"

        # An older state directory and image made with the umask's modes are tightened at start.
        assert ddq("board", "virtual", "stop", "--dir", d).returncode == 0
        os.chmod(d, 0o755)
        os.chmod(d / "flash.img", 0o644)
        r = ddq("board", "virtual", "start", "--dir", d, "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        pids |= {st["bridge_pid"], st["micropython_pid"]}
        assert mode(d) == 0o700 and mode(d / "flash.img") == 0o600
    finally:
        gone = kill_board(vboard.kill, str(d), pids)
    assert gone
