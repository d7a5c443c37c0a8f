"""The virtual board as a board: plain mpremote (which soft-resets on connect) resets it instead of
ending it, Ctrl-C interrupts code that runs on it, and `ddq app start|stop` runs the example app
as a board's reset does and stops it (docs/HOST.md "app")."""

import json
import os
import subprocess
import sys

import pytest

import brokers
from conftest import REPO, Subscriber, ddq, fresh_board, one_line_error
from ddqhost import vboard
from ddqhost.device import Device

MPREMOTE = os.path.join(os.path.dirname(sys.executable), "mpremote")


@pytest.fixture
def vb(tmp_path):
    d = str(tmp_path / "vb")
    with fresh_board(d) as (st, pids):
        yield d, st, pids


def mpremote(tty, *args):
    r = subprocess.run(
        [MPREMOTE, "connect", tty, *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def test_plain_mpremote_soft_resets_the_virtual_board_and_it_lives_on(vb):
    d, st, pids = vb
    tty = st["device"]
    with Device(tty, soft_reset=False) as dev:
        dev.write_file(":kept.txt", b"kept")
        dev.exec("x_from_before = 1")
    # mpremote's own soft reset on connect (no `resume`): the unix port restarts on the same pty
    # and image, the board's `MPY: soft reboot`; what the interpreter held is gone, as on a board.
    assert mpremote(tty, "exec", "print('x_from_before' in globals())").strip() == "False"
    assert mpremote(tty, "exec", "print(open('kept.txt').read())").strip() == "kept"
    assert mpremote(tty, "soft-reset", "fs", "ls", ":").count("kept.txt") == 1
    now = vboard.status(d)
    assert now["running"] and now["bridge_pid"] == st["bridge_pid"]
    assert now["micropython_pid"] != st["micropython_pid"]
    pids.add(now["micropython_pid"])
    assert vboard.read_state(d)["soft_resets"] >= 3
    # Ctrl-C while code runs interrupts it (KeyboardInterrupt), as a board's UART does; the next
    # session finds the REPL. A mount (which turns Ctrl-C off around its binary transfers) works.
    mpremote(tty, "resume", "exec", "--no-follow", "n = 0\nwhile True:\n    n += 1")
    assert (
        mpremote(tty, "resume", "exec", "print('interrupted', n > 0)").strip()
        == "interrupted True"
    )
    assert vboard.status(d)["micropython_pid"] == now["micropython_pid"]
    r = ddq("board", "probe", "-d", tty, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["probe"]["cwd"] == "/flash", r.stderr
    # A power cut still ends it: SIGKILL is not a soft reset.
    r = ddq("board", "virtual", "kill", "--state-dir", d, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["killed"], r.stderr
    assert not vboard.status(d)["running"]
    assert not any(vboard.pid_alive(p) for p in pids if p)


def test_app_start_and_stop_run_the_example_app_as_a_reset_does(vb, mosquitto, tmp_path):
    d, st, pids = vb
    tty = st["device"]
    r = ddq("app", "start", "-d", tty)
    line = one_line_error(r, 1)
    assert "has no main.py" in line and "ddq flash --example-app" in line
    # The example app, pointed at the test's broker and reading every 100 ms.
    with open(os.path.join(REPO, "boards", "UNIX", "main.py")) as f:
        src = f.read()
    src = src.replace(
        "BROKER_PORT = 1883",
        "BROKER_PORT = %d\nPERIOD_MS = 100" % mosquitto,
    )
    app = tmp_path / "main.py"
    app.write_text(src)
    r = ddq("flash", "-d", tty, "--app", app, "--json")
    assert r.returncode == 0, r.stderr
    sub = Subscriber(mosquitto)
    try:
        r = ddq("app", "start", "-d", tty, "--seconds", "0.5", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["started"]
        brokers.wait_until(lambda: len(sub.got) >= 5, 30, "five readings from the app")
        assert {t for t, _p in sub.got} == {"ddq/unix/temp"}
        r = ddq("app", "stop", "-d", tty)
        assert r.returncode == 0 and "stopped the app" in r.stdout, r.stdout + r.stderr
        # Stopped: the REPL answers and a second stop finds nothing running -- an event, where
        # counting the readings that arrive within a pause raced a busy machine's broker.
        r = ddq("app", "stop", "-d", tty)
        assert r.returncode == 0 and "nothing was running" in r.stdout, r.stdout
    finally:
        sub.close()
    got = len(sub.got)
    # What the app queued is on the image: at least every reading the broker got, none dead.
    r = ddq("pull", "-d", tty, ":outbox", tmp_path / "pulled", "--json")
    assert r.returncode == 0, r.stderr
    r = ddq("inspect", tmp_path / "pulled", "--json")
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)["stats"]
    assert stats["next_seq"] - 1 >= got and stats["quarantined_items"] == 0, stats
    now = vboard.status(d)
    assert now["running"] and now["bridge_pid"] == st["bridge_pid"]
    pids.add(now["micropython_pid"])
