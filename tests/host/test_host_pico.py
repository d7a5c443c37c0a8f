"""An emulated Raspberry Pi Pico (docs/HOST.md "pico board"): the official MicroPython RPI_PICO
firmware (the .uf2 a user downloads) on rp2040py's RP2040, its own LittleFS on the emulated
flash, its USB console on a pty, driven through the project's own CLI as a Pico is:
`ddq board pico start|stop|status|kill`, `ddq flash --board RPI_PICO --example-app`,
`ddq test --installed --mpy` (a smoke selection), `ddq app start|stop`, `ddq pull`, `ddq verify`,
and an emulated power-off (`stop`: the flash's filesystem saved, the next `start` boots on it)
that the pulled queue survives.

One emulator for the module (it spins a host core at 100 % while it runs), ended in a finally by
its pid and checked gone. The firmware is $DDQ_PICO_FIRMWARE (ddq ships none; no registry serves
one: CI has none): without it the tests that need one skip, naming the variable. It runs at
emulation speed (boot 10-20 s, code about 100 x slower than the chip): a smoke selection of the
shared suite, not the whole of it. The argument errors run without a firmware.
"""

import json
import os
import subprocess
import sys

import emulators
import pytest

from conftest import REPO, check_suite_run, cli_env, ddq, one_line_error
from ddqhost import pboard

FIRMWARE = pboard.BOARD.default_firmware()
needs_firmware = pytest.mark.skipif(
    not (FIRMWARE and os.path.isfile(FIRMWARE)),
    reason="set DDQ_PICO_FIRMWARE to %s%s"
    % (pboard.FIRMWARE_HELP, "; no file at %s" % FIRMWARE if FIRMWARE else ""),
)
# The smoke selection: the queue's operation-state table and a restart's replay, on the board's
# LittleFS (test_core's whole module takes 15 minutes here, test_torn_tail_every_length 5 alone).
SMOKE = ["-k", "state", "test_core"]
OPTS = ["--board", "RPI_PICO"]


pico = emulators.fixture("pico", "pid", 400, pboard.kill, "rp2040py")


@needs_firmware
def test_status_and_one_process(pico):
    r = ddq("board", "pico", "status", "--state-dir", pico.dir, "--json")
    st = json.loads(r.stdout)
    assert r.returncode == 0 and st["running"] and st["pid"] in pico.pids, r.stdout
    assert os.path.realpath(pico.tty) == st["pty"] and st["pty"].startswith("/dev/pts/")
    assert os.stat(pico.dir).st_mode & 0o777 == 0o700
    with open("/proc/%d/cmdline" % st["pid"], "rb") as f:
        assert f.read().split(b"\0")[1:3] == [b"-m", b"rp2040py"]
    r = ddq("board", "pico", "start", "--state-dir", pico.dir)  # one board per state directory
    assert one_line_error(r, 1).startswith("ddq: pico board already running"), r.stderr
    r = ddq("board", "probe", "--device", pico.tty, "--json", timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["board"] == "RPI_PICO", r.stdout + r.stderr


@needs_firmware
def test_flash_and_a_smoke_selection(pico):
    r = ddq("flash", "--device", pico.tty, *OPTS, "--example-app", timeout=1200)
    assert r.returncode == 0 and "ddq 0.1.0 imports on" in r.stdout, r.stdout + r.stderr
    r = ddq("test", "--device", pico.tty, "--installed", "--mpy", "--each", *SMOKE, timeout=3600)
    check_suite_run(r, SMOKE)
    assert "PASS test_core.test_restart_replay_keeps_state" in r.stdout, r.stdout


ITEMS = 24
ENQUEUE = (
    "import ddq\n"
    "q = ddq.Queue('pq', segment_bytes=4096, max_payload_bytes=976, max_items=5392,"
    " max_segments=147, window=16, evidence_bytes=1024, clock=lambda: 1767225600000)\n"
    "for i in range(%d):\n"
    "    q.enqueue(b'reading %%d' %% i)\n"
    "q.close()\n" % ITEMS
)


@needs_firmware
def test_app_and_a_queue_survive_a_power_off(pico, tmp_path):
    # The example app (flashed above) runs as a reset runs it (a plain Pico has no network: its
    # readings wait on flash) and stops; a queue of ITEMS items is put on the board and pulled;
    # the power-off (stop: the flash saved); start again from the image (main.py runs at power-on,
    # as on a Pico, until the next command connects); the queue pulled again is the same queue,
    # byte for byte, and verifies; the app's outbox verifies too.
    from ddqhost.device import Device

    r = ddq("app", "start", "--device", pico.tty, "--seconds", "20", timeout=300)
    assert r.returncode == 0 and "no network on this port" in r.stdout, r.stdout + r.stderr
    r = ddq("app", "stop", "--device", pico.tty, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with Device(pico.tty, soft_reset=True, timeout=60) as dev:
        dev.exec(
            "import os\nfor n in os.listdir('pq') if 'pq' in os.listdir() else []:"
            "\n os.remove('pq/' + n)"
        )
        dev.exec(ENQUEUE)
    before = str(tmp_path / "before")
    r = ddq("pull", "--device", pico.tty, ":pq", before, *OPTS, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    pico.stop("flash.img", pboard.FS_BYTES)
    assert pico.start()["running"]  # boots on flash.img: the flash as the power-off left it
    after = str(tmp_path / "after")
    r = ddq("pull", "--device", pico.tty, ":pq", after, *OPTS, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for d in (before, after):
        r = ddq("verify", d, *OPTS)
        assert r.returncode == 0, r.stdout + r.stderr
    recs = []
    for d in (before, after):
        r = ddq("records", d, "--json", *OPTS)
        assert r.returncode == 0, r.stdout + r.stderr
        recs.append({k: v for k, v in json.loads(r.stdout).items() if k != "path"})
    assert recs[0] == recs[1] and recs[1]["verdict"] == "clean", recs
    r = ddq("inspect", after, "--json", *OPTS)
    assert json.loads(r.stdout)["stats"]["available_items"] == ITEMS, r.stdout[-500:]
    outbox = str(tmp_path / "outbox")
    r = ddq("pull", "--device", pico.tty, ":outbox", outbox, *OPTS, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    r = ddq("verify", outbox, *OPTS)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_firmware
def test_kill_keeps_the_last_power_off(pico):
    from ddqhost.device import Device

    with Device(pico.tty, soft_reset=True, timeout=60) as dev:
        dev.exec("f = open('lost.txt', 'w')\nf.write('after')\nf.close()")
    r = ddq("board", "pico", "kill", "--state-dir", pico.dir, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["killed"], r.stderr
    pico.start()
    with Device(pico.tty, soft_reset=True, timeout=60) as dev:
        names = dev.eval(
            "__import__('os').listdir()", check=lambda v: isinstance(v, list), what="the listing"
        )
    assert "outbox" in names and "lost.txt" not in names, names


def _no_firmware_env():
    env = cli_env()
    env.pop("DDQ_PICO_FIRMWARE", None)
    return env


def test_start_without_a_firmware_is_one_line(tmp_path):
    # No firmware given (no --firmware, no $DDQ_PICO_FIRMWARE): one line naming both, exit 2;
    # nothing is started and no state directory is made.
    d = str(tmp_path / "p")
    r = subprocess.run(
        [sys.executable, "-m", "ddqhost.cli", "board", "pico", "start", "--state-dir", d],
        capture_output=True,
        text=True,
        env=_no_firmware_env(),
        timeout=60,
        cwd=REPO,
    )
    line = one_line_error(r, 2)
    assert line.startswith("ddq: no firmware: pass --firmware UF2 or set DDQ_PICO_FIRMWARE ("), (
        line
    )
    assert not os.path.exists(d)
    missing = str(tmp_path / "none.uf2")
    r = ddq("board", "pico", "start", "--state-dir", d, "--firmware", missing)
    assert one_line_error(r, 2) == "ddq: no firmware at %s (%s)" % (
        missing,
        pboard.FIRMWARE_HELP,
    ), r.stderr
    elf = tmp_path / "firmware.elf"  # not the .uf2 a user downloads
    elf.write_bytes(b"\x7fELF")
    r = ddq("board", "pico", "start", "--state-dir", d, "--firmware", str(elf))
    assert one_line_error(r, 2).startswith("ddq: %s is not a .uf2 file" % elf), r.stderr
    assert not os.path.exists(d)


def test_status_stop_kill_of_no_board(tmp_path):
    d = str(tmp_path / "p")
    r = ddq("board", "pico", "status", "--state-dir", d, "--json")
    st = json.loads(r.stdout)
    assert r.returncode == 3 and not st["running"] and st["image_bytes"] is None, r.stdout
    r = ddq("board", "pico", "stop", "--state-dir", d)
    assert r.returncode == 0 and r.stdout == "pico board was not running\n", r.stdout + r.stderr
    r = ddq("board", "pico", "kill", "--state-dir", d)
    assert r.returncode == 0 and r.stdout == "pico board was not running\n", r.stdout + r.stderr


def test_a_wrong_sized_image_is_refused(tmp_path):
    # A flash.img that is not the Pico firmware's filesystem region is never booted on (nor
    # overwritten): one line, exit 1; --fresh drops it.
    d = tmp_path / "p"
    d.mkdir()
    (d / "flash.img").write_bytes(b"\xff" * 4096)
    fw = tmp_path / "RPI_PICO.uf2"
    fw.write_bytes(b"")
    r = ddq("board", "pico", "start", "--state-dir", str(d), "--firmware", str(fw))
    assert one_line_error(r, 1) == (
        "ddq: %s is 4096 bytes, not the %d-byte filesystem of a Pico: remove it or start with "
        "--fresh" % (d / "flash.img", pboard.FS_BYTES)
    ), r.stderr
    assert (d / "flash.img").read_bytes() == b"\xff" * 4096
