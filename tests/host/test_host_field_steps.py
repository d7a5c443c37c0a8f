"""The field engineer's loop, the steps around it (issue 39, items 3, 4, 7): `ddq test
--installed` on a default virtual board (test_nomem within its free room, test_parts after
`--example-app`, no bytes/str warnings, no ddq-test/ left, the run's size said up front and its
progress), `ddq app start` failing when main.py stopped, `ddq app status`, `ddq app init`,
`ddq board start|stop`, `ddq stats` a line per field, `inspect` without "attempts 0" on a
delivered item, the app saying when nothing gets delivered, and `ddq demo` (docs/HOST.md)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, ddq, fresh_board, one_line_error
from ddqhost import vboard

MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")


@pytest.fixture
def vb(tmp_path):
    """A virtual board with the defaults a user gets (1 MiB LittleFS image)."""
    with fresh_board(str(tmp_path / "vb")) as (st, _pids):
        yield st["device"]


def _device_eval(tty, expr):
    from ddqhost.device import Device

    with Device(tty, soft_reset=False) as dev:
        return dev.eval(expr, check=lambda v: True, what="a test's value")


def test_test_nomem_fits_the_free_room_of_a_default_virtual_board(vb):
    # `ddq flash` on a default board leaves ~870 KiB of its LittleFS free; test_nomem used to
    # leave an empty directory per injection point (4 blocks each) and ran out of them
    # (IOFailure: write: OSError(28,)). The same suite module on a LittleFS RAM disk of exactly
    # that many free blocks, run by the same unix port: it passes.
    r = ddq("flash", "-d", vb)
    assert r.returncode == 0, r.stderr
    st = _device_eval(vb, "__import__('os').statvfs('/flash')")
    free = st[3]
    assert 100 < free < 256, st
    r = subprocess.run(
        [MICROPYTHON, "-X", "heapsize=8M", "tests/mprun.py", "--fs", "lfs2", "--blocks"]
        + [str(free - 4), "test_nomem"],  # (mprun's own root and the RAM disk's metadata)
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert r.returncode == 0 and "lfs2: 4 passed, 0 failed" in r.stdout, r.stdout + r.stderr


def test_installed_suite_after_the_example_app_finds_every_part_and_leaves_nothing(vb):
    # After `ddq flash --example-app` the board holds only what the app imports (no ddq_admit,
    # ddq_index, ddq_salvage, ...): test_parts copies each part from where an import finds it
    # (the board, else the mounted port/), so it passes; the run says its size first, shows its
    # progress, and removes its ddq-test/ from the board.
    r = ddq("flash", "-d", vb, "--example-app")
    assert r.returncode == 0, r.stderr
    have = _device_eval(vb, "sorted(__import__('os').listdir())")
    assert "ddq_admit.mpy" not in have and "ddq_salvage.mpy" not in have, have
    r = ddq("test", "-d", vb, "--installed", "test_parts", timeout=600)
    out = r.stdout
    assert r.returncode == 0 and out.strip().endswith("posix: 2 passed, 0 failed"), out + r.stderr
    first = out.splitlines()[0]
    assert first.startswith("ddq test: 1 of the suite's ") and "progress" in first, first
    assert re.search(r"^ddq test: \[1/1\] test_parts \(\d+:\d\d\)$", out, re.M), out
    assert "Warning" not in out
    assert "ddq-test" not in _device_eval(vb, "__import__('os').listdir()")


def test_the_whole_suite_run_says_what_it_will_take():
    from ddqhost import testrun

    line = testrun.plan_line("/dev/x", [])
    n = len(testrun.suite_modules())
    assert "%d modules" % n in line and "about %d min" % testrun.SUITE_MINUTES_VIRTUAL in line
    line = testrun.plan_line("/dev/x", [], "nomem")
    assert "matching 'nomem' in %d modules" % n in line and "min" not in line, line
    # progress: a line before each module's first result, device output otherwise unchanged
    got = []
    t = iter([0.0, 5.0, 75.0])
    p = testrun.Progress(got.append, 2, lambda: next(t))
    p(b"mprun: x\nPASS test_a.test_1\nPA")
    p(b"SS test_a.test_2\nSKIP test_b: no socket\n")
    p(b"tail")
    p.flush()
    assert b"".join(got) == (
        b"mprun: x\nddq test: [1/2] test_a (0:05)\nPASS test_a.test_1\nPASS test_a.test_2\n"
        b"ddq test: [2/2] test_b (1:15)\nSKIP test_b: no socket\ntail"
    )


def test_no_bytes_str_comparison_warnings_in_the_suite():
    # The unix port warns on bytes == str ("Warning: Comparison between bytes and str"): the
    # fuzz of test_index_forged compared a payload with the name of an error, six times a run.
    r = subprocess.run(
        [MICROPYTHON, "-X", "heapsize=8M", "tests/mprun.py", "test_index_forged"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Warning" not in r.stdout + r.stderr


def test_app_start_fails_when_main_py_stops_and_status_says_whether_it_runs(vb):
    # `ddq flash --example-app`, then a plain `ddq flash`: main.py stays, ddq_app is gone.
    # `ddq app start` used to say "app started" (exit 0) beside main.py's ImportError.
    assert ddq("flash", "-d", vb, "--example-app").returncode == 0
    assert ddq("flash", "-d", vb).returncode == 0
    r = ddq("app", "start", "-d", vb, "--seconds", "3")
    line = one_line_error(r, 1)
    assert "main.py on %s stopped: ImportError: no module named 'ddq_app'" % vb in line, line
    assert "ddq flash --example-app" in line
    assert "app started" not in r.stdout and not r.stdout.startswith("\n"), r.stdout
    r = ddq("app", "status", "-d", vb)
    assert r.returncode == 3 and "no app is running" in r.stdout, r.stdout + r.stderr


def test_app_status_start_stop_and_stats_a_line_per_field(vb):
    assert ddq("flash", "-d", vb, "--example-app").returncode == 0
    r = ddq("app", "start", "-d", vb, "--seconds", "1")
    assert r.returncode == 0 and "app started on" in r.stdout, r.stdout + r.stderr
    assert not r.stdout.startswith("\n"), r.stdout  # no blank line first
    r = ddq("app", "status", "-d", vb)
    assert r.returncode == 0 and "an app is running" in r.stdout, r.stdout + r.stderr
    r = ddq("app", "stop", "-d", vb)
    assert r.returncode == 0 and "stopped the app" in r.stdout, r.stdout + r.stderr
    r = ddq("app", "status", "-d", vb, "--json")
    assert r.returncode == 3 and '"running": false' in r.stdout, r.stdout + r.stderr
    r = ddq("stats", "-d", vb, ":outbox")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) > 5 and all(re.match(r"^\w+ +\S", ln) for ln in lines), r.stdout


def test_app_init_copies_the_profiles_example_to_edit(tmp_path):
    d = tmp_path / "myapp"
    r = ddq("app", "init", d, "--board", "UNIX")
    assert r.returncode == 0, r.stderr
    with open(os.path.join(REPO, "boards", "UNIX", "main.py"), "rb") as f:
        assert (d / "main.py").read_bytes() == f.read()
    assert "ddq flash --board UNIX --app %s" % (d / "main.py") in r.stdout, r.stdout
    line = one_line_error(ddq("app", "init", d, "--board", "UNIX"), 1)
    assert "exists" in line and "--force" in line
    assert ddq("app", "init", d, "--board", "UNIX", "--force").returncode == 0
    assert "ddq board list" in one_line_error(ddq("app", "init", d, "--board", "NOPE"), 1)
    assert "ddq app init DIR --board" in one_line_error(ddq("app", "init", d), 1)
    # `ddq board show` says where the example is and how to get a copy (a wheel's is in
    # site-packages; the profile names only UNIX/main.py)
    r = ddq("board", "show", "UNIX")
    assert r.returncode == 0, r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith("example app: ") and "ddq app init DIR --board UNIX" in last, last
    assert os.path.isfile(last.split()[2]), last


def test_board_start_and_stop_are_the_virtual_boards(tmp_path):
    d = str(tmp_path / "vb")
    r = ddq("board", "start", "--state-dir", d, "--json")
    try:
        assert r.returncode == 0, r.stderr
        assert ddq("board", "virtual", "status", "--state-dir", d).returncode == 0
        r = ddq("board", "stop", "--state-dir", d)
        assert r.returncode == 0 and "virtual board stopped" in r.stdout, r.stdout + r.stderr
        assert ddq("board", "virtual", "status", "--state-dir", d).returncode == 3
    finally:
        vboard.kill(d)


def test_inspect_says_no_attempts_0_beside_a_delivered_item(tmp_path):
    import ddq as port_ddq

    q = port_ddq.Queue(str(tmp_path / "q"), segment_bytes=4096, max_payload_bytes=64, max_items=64)
    for k in range(2):
        q.enqueue(b"r%d" % k)
    q.ack(q.claim(1000).seq)
    q.close()
    r = ddq("inspect", tmp_path / "q", "--segment-bytes", "4096", "--max-payload-bytes", "64")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"^ +\d+ (acked|available) ", ln)]
    assert len(rows) == 2, r.stdout
    assert "acked" in rows[0] and "attempts" not in rows[0], rows
    assert "available" in rows[1] and "attempts 0" in rows[1], rows


def test_the_app_says_when_nothing_gets_delivered(capsys, tmp_path):
    # A send that keeps failing (the broker away after the connection was up): the loop pauses
    # and says so on the console, where it used to say nothing while readings piled up.
    import ddq_app

    g = {
        "OPTIONS": {"segment_bytes": 4096, "max_payload_bytes": 128, "max_items": 64},
        "TOPIC": "t/x",
        "read_sensor": lambda: b"21.5",
        "BROKER": "broker.example",
        "BROKER_PORT": 1883,
    }
    ddq_app.bind(g)
    now = [0]

    def sleep_ms(ms):
        now[0] += ms

    def send(m):
        raise OSError(113, "host unreachable")

    st = g["run"](
        rounds=3,
        period_ms=1000,
        sender=send,
        queue_dir=str(tmp_path / "ob"),
        clock=(lambda: now[0], sleep_ms),
    )
    out = capsys.readouterr().out
    assert st["sent"] == 0 and st["pending"] == 3, st  # nothing delivered, all 3 wait
    assert re.search(
        r"mqtt: broker\.example:1883: nothing delivered, \d+ waiting; next try in \d+ s", out
    ), out


def test_ddq_demo_is_make_demos_run():
    # `make demo` runs `ddq demo` (demo/run.py's main); the wheel carries demo/ as ddqhost/demo.
    with open(os.path.join(REPO, "Makefile")) as f:
        mk = f.read()
    assert re.search(
        r"^\tPYTHONPATH=host:port \$\(PY\) -m ddqhost\.cli demo \$\(DEMO_FLAGS\)", mk, re.M
    )
    r = ddq("demo", "-h")
    assert r.returncode == 0 and r.stdout.startswith("usage: ddq demo"), r.stdout + r.stderr
    assert "--workdir" in r.stdout and "--seed" in r.stdout
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        st = tomllib.load(f)["tool"]["setuptools"]
    assert st["package-dir"]["ddqhost.demo"] == "demo" and "ddqhost.demo" in st["packages"]


def test_app_failure_is_main_py_over_not_a_traceback_it_caught():
    from ddqhost import cli

    crash = (
        b'Traceback (most recent call last):\n  File "main.py", line 24, in <module>\n'
        b"ImportError: no module named 'ddq_app'\nMicroPython 1.28 on x; linux\r\n"
        b'Type "help()" for more information.\r\n>>> '
    )
    assert cli._app_failure(crash) == "ImportError: no module named 'ddq_app'"
    assert cli._app_failure(b"hello\r\n>>> ") == "main.py returned (the REPL is back)"
    # an app that prints a traceback it caught and goes on is running
    caught = b"Traceback (most recent call last):\nOSError: 113\nmqtt: retry in 2 s\n"
    assert cli._app_failure(caught) is None
    assert cli._app_failure(b"") is None


def test_the_virtual_boards_test_run_waits_longer_for_a_silent_test():
    # test_model prints nothing until its thousands of steps end: on a busy host (load 11, 2
    # cores) the virtual board ran it silent for 380 s and the default --idle-timeout of 300
    # interrupted the installed suite. The unix port shares this host's cores: it gets 900.
    from ddqhost import cli, testrun

    assert testrun.idle_default({"platform": "linux"}) == 900
    assert testrun.idle_default({"platform": "rp2"}) == testrun.RUN_IDLE_TIMEOUT == 300
    args = cli.build_parser().parse_args(["test"])
    assert args.idle_timeout is None  # the default is the device's, decided once it is probed


def test_ddq_demo_names_the_replay_command_a_wheel_user_has(tmp_path):
    # From the wheel there is no Makefile: the seed line says `ddq demo --seed N` there, and
    # `make demo SEED=N` only in a checkout (the wheel-only walk of issue 39 read "make demo").
    import importlib.util
    import types

    spec = importlib.util.spec_from_file_location(
        "ddq_demo_run_seed", os.path.join(REPO, "demo", "run.py")
    )
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    class Stop(Exception):
        pass

    lines = []

    def log(s):
        lines.append(s)
        raise Stop  # the seed line is the run's first: end there, nothing started

    stub = types.SimpleNamespace(outage=False, sub_port=1, kind="stub")
    demo.make_broker = lambda *a: stub
    demo.Subscriber = lambda *a: stub
    demo.CHECKOUT = False
    cfg = demo.Config(seed=4242, gateway="cpython", workdir=str(tmp_path / "d"))
    with pytest.raises(Stop):
        demo.run(cfg, log=log)
    assert lines == ["ddq demo: seed 4242 (replay: ddq demo --seed 4242 --gateway cpython)"]
    raw = demo.Config(seed=7, storage="raw")
    assert demo.replay_command(raw, checkout=False) == "ddq demo --seed 7 --storage raw"
    assert demo.replay_command(raw, checkout=True) == "make demo SEED=7 STORAGE=raw"
