"""A real bare-metal board (docs/HOST.md "qemu board"): the user's MicroPython firmware for the
MPS2-AN385 (MicroPython >= 1.25 ports/qemu, Cortex-M3, 32-bit, with VfsLfs2) under qemu-system-arm,
LittleFS on a RAM disk (ddq's boot code mounts it where the firmware mounts none), driven through
the project's own CLI: `ddq board qemu start|stop|status|kill`, `ddq flash --board ARMV7M_GENERIC`,
`ddq test --mpy --each` (a soft reset before each module: the heap is given back), `ddq stats`,
`ddq pull`, `ddq verify`, `ddq replay`.

One qemu for the module (it spins a host core at 100 % while it runs), ended in a finally by its
pid and checked gone. The firmware is $DDQ_QEMU_FIRMWARE (ddq ships none: a user builds one);
without it or qemu-system-arm the module skips, naming what is missing (.ci/run installs
qemu-system-arm; CI has no firmware). $DDQ_QEMU_SUITE=all runs every module of the shared suite
(about 10 minutes under emulation); the default is the modules below (about 4 minutes).

What is covered and what is not: docs/HOST.md "qemu board".
"""

import json
import os
import re
import shutil

import emulators
import pytest

from conftest import Subscriber, check_suite_run, ddq
from ddqhost import qboard, testrun

FIRMWARE = qboard.BOARD.default_firmware()
pytestmark = [
    pytest.mark.skipif(
        not shutil.which("qemu-system-arm"),
        reason="needs qemu-system-arm (apt-get install qemu-system-arm)",
    ),
    pytest.mark.skipif(
        not (FIRMWARE and os.path.isfile(FIRMWARE)),
        reason="set DDQ_QEMU_FIRMWARE to a MicroPython firmware for the MPS2-AN385 (%s)%s"
        % (qboard.FIRMWARE_HELP, "; no file at %s" % FIRMWARE if FIRMWARE else ""),
    ),
]

# The default selection: the modules that failed on this board before it was supported (test_auth,
# test_spec: modules a port lacks; test_reclaim: the heap of earlier modules), the queue's own
# operations and recovery (test_core, test_core_reads, test_regressions) and the index's; the
# message layer's MQTT codec (test_mqtt: it skipped whole in 140 KiB before its 32-bit figure).
# test_window and test_outbox pass here as the first module of a session (88 passed, 0 failed
# with test_mqtt_limits, test_mqtt_clients, test_auth) but not after these nine: the free heap
# at a session's start falls from module to module (114.8 KB to 99 KB) although the board is
# soft-reset between them and has 139 KB free at the prompt after them (not explained yet).
MODULES = [
    "test_auth",
    "test_auth_aes",
    "test_core",
    "test_core_reads",
    "test_index_regressions",
    "test_mqtt",
    "test_reclaim",
    "test_regressions",
    "test_spec",
    "test_support",
]
READINGS = 24
OPTS = ["--board", "ARMV7M_GENERIC"]


qemu = emulators.fixture("qemu", "qemu_pid", 60, qboard.kill, "qemu")


def _device(q):
    from ddqhost.device import Device

    return Device(q.tty, soft_reset=True, timeout=30)


def test_status_and_one_process(qemu):
    r = ddq("board", "qemu", "status", "--state-dir", qemu.dir, "--json")
    st = json.loads(r.stdout)
    assert r.returncode == 0 and st["running"] and st["qemu_pid"] in qemu.pids
    assert os.path.realpath(qemu.tty) == st["pty"] and st["pty"].startswith("/dev/pts/")
    assert os.stat(qemu.dir).st_mode & 0o777 == 0o700
    with open("/proc/%d/cmdline" % st["qemu_pid"], "rb") as f:
        assert f.read().split(b"\0")[0].endswith(b"qemu-system-arm")
    r = ddq("board", "qemu", "start", "--state-dir", qemu.dir)  # one board per state directory
    assert r.returncode == 1 and r.stderr.startswith("ddq: qemu board already running"), r.stderr
    r = ddq("board", "probe", "--device", qemu.tty, "--json", timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["board"] == "ARMV7M_GENERIC", r.stdout


# Modules a board runs between two fresh starts. A soft reset before each module gives most of
# the heap back, but not all: the free heap at a session's start falls about 2 KB a module (114.6
# KB at the first, 97 KB at the ninth) and stays low for a later `ddq test` on the same board, so
# test_support's 5 KB files met MemoryError as the ninth; a fresh board starts at the top again.
PER_BOARD = 5


def test_flash_and_the_shared_suite(qemu):
    mods = testrun.suite_modules() if os.environ.get("DDQ_QEMU_SUITE") == "all" else MODULES
    for k in range(0, len(mods), PER_BOARD):
        group = mods[k : k + PER_BOARD]
        if k:
            r = ddq("board", "qemu", "kill", "--state-dir", qemu.dir)
            assert r.returncode == 0, r.stderr
            qemu.start("--fresh")
        r = ddq("flash", "--device", qemu.tty, *OPTS, timeout=300)
        assert r.returncode == 0 and "ddq 0.1.0 imports on" in r.stdout, r.stdout + r.stderr
        # --installed: ddq and its parts as flashed (the profile's -O3 armv7m build, read from the
        # board's own filesystem); the rest of port/ (ddq_outbox, ddq_mqtt) from the checkout.
        # Through mpremote's mount the same modules left 14.6 KB less heap before a module's
        # first test (54.0 KB free against 68.6 KB with test_auth), and a CI run met NoMemory
        # in test_auth's first Outbox test.
        r = ddq(
            "test", "--device", qemu.tty, "--installed", "--mpy", "--each", *group, timeout=3600
        )
        out = check_suite_run(r, group)
        # inside a session mpremote's mount, mprun's imports and the module take their part
        # (measured: 114.6 KB free at the first module, 100-103 KB at the later ones of a group;
        # without the soft resets the first runs on this board saw 85 KB after three modules
        # and MemoryError in test_reclaim)
        free = [int(x) for x in re.findall(r"device heap free (\d+) of \d+", out)]
        assert len(free) == len(group) and min(free) > 96 * 1024, free


def test_board_app_end_to_end(qemu, mosquitto, tmp_path):
    # The example app (ddq_app's loop with the profile's options) puts readings; a soft reset
    # (the board's reboot: the RAM disk stays); the next boot reopens the outbox with all of
    # them; the host pulls the directory and delivers it to the broker (the board has no
    # network): pull + verify + replay.
    # a fresh board: after the suite, flash's import check met MemoryError (1,976 B) once
    r = ddq("board", "qemu", "kill", "--state-dir", qemu.dir)
    assert r.returncode == 0, r.stderr
    qemu.start("--fresh")
    r = ddq("flash", "--device", qemu.tty, *OPTS, "--example-app", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with _device(qemu) as dev:
        dev.exec(
            "import os\nfor n in os.listdir('outbox') if 'outbox' in os.listdir() else []:"
            "\n os.remove('outbox/' + n)"
        )
        st = dev.eval(
            "__import__('main').run(rounds=%d, period_ms=0, budget=0)['pending']" % READINGS,
            check=lambda v: isinstance(v, int),
            what="the app's stats",
        )
        assert st == READINGS
        dev.reset()  # reboot: what put() returned for is on the filesystem
        dev.exec("import main, ddq_outbox\nob = ddq_outbox.Outbox('outbox', **main.OPTIONS)")
        got = dev.eval("ob.qsize()", check=lambda v: isinstance(v, int), what="qsize")
        dev.exec("ob.close()")
    assert got == READINGS, got
    r = ddq("stats", "--device", qemu.tty, ":outbox", "--json", timeout=120)  # the probed profile
    st = json.loads(r.stdout)
    assert r.returncode == 0 and st["available_items"] == READINGS, r.stdout + r.stderr
    out = str(tmp_path / "pulled")
    r = ddq("pull", "--device", qemu.tty, ":outbox", out, *OPTS, timeout=300)
    assert r.returncode == 0, r.stderr
    r = ddq("verify", out)
    assert r.returncode == 0, r.stdout + r.stderr
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", out, "--to", "mqtt://127.0.0.1:%d" % mosquitto, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        msgs = sub.wait_for(READINGS)
    finally:
        sub.close()
    # the device's own topic (replay adds no prefix unless asked); the readings n=1..24, in order
    assert {t for t, _p in msgs} == {"ddq/armv7m/temp"}, msgs
    assert [int(p.split(b" ")[0][2:]) for _t, p in msgs] == list(range(1, READINGS + 1)), msgs


def test_stop_saves_the_ram_disk_and_kill_does_not(qemu):
    with _device(qemu) as dev:
        dev.exec("f = open('kept.txt', 'w')\nf.write('before stop')\nf.close()")
    qemu.stop("disk.img", qboard.RAMDISK_BYTES)
    qemu.start()  # loads disk.img: the board's flash as the stop left it
    with _device(qemu) as dev:
        assert (
            dev.eval(
                "open('kept.txt').read()", check=lambda v: isinstance(v, str), what="kept.txt"
            )
            == "before stop"
        )
        dev.exec("f = open('lost.txt', 'w')\nf.write('after')\nf.close()")
    r = ddq("board", "qemu", "kill", "--state-dir", qemu.dir, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["killed"], r.stderr
    qemu.start()
    with _device(qemu) as dev:
        names = dev.eval(
            "__import__('os').listdir()", check=lambda v: isinstance(v, list), what="the listing"
        )
    assert "kept.txt" in names and "lost.txt" not in names, names


def test_missing_qemu_is_one_line(tmp_path):
    r = ddq(
        "board", "qemu", "start", "--state-dir", str(tmp_path / "q"), "--qemu", "no-such-qemu-exe"
    )
    assert r.returncode == 1 and r.stderr.strip() == (
        "ddq: no-such-qemu-exe not found: apt-get install qemu-system-arm (Debian/Ubuntu), "
        "or pass --qemu EXE"
    ), r.stderr
    r = ddq(
        "board",
        "qemu",
        "start",
        "--state-dir",
        str(tmp_path / "q"),
        "--firmware",
        str(tmp_path / "none.elf"),
    )
    assert r.returncode == 2 and r.stderr.startswith("ddq: no firmware at "), r.stderr
