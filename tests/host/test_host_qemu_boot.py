"""The qemu board without qemu (docs/HOST.md "qemu board"): ddq's boot code (qboard.BOOT, which
mounts a VfsLfs2 on a RAM block device where the user's firmware mounted nothing) run on the unix
port over a bytearray, and `ddq board qemu start` without a firmware."""

import json
import os
import subprocess

import pytest

from conftest import ddq
from ddqhost import qboard, vboard

MICROPYTHON = vboard.default_micropython()

# The boot code over a 64-block RAM disk at /ram (the unix port has "/" mounted already, its
# own VfsPosix: left alone). Each line printed is a step's result.
DRIVER = """
import os, vfs
buf = bytearray(64 * 4096)
print(_ddq_boot(buf, "/ram", 4096))  # blank: formatted, mounted
with open("/ram/q.bin", "wb") as f:
    f.write(b"kept")
print(_ddq_boot(buf, "/ram", 4096))  # mounted already: nothing done
print(_ddq_boot(buf, "/", 4096))  # the port's own "/": nothing done
vfs.umount("/ram")  # a soft reset: the mount is gone, the RAM (the PSRAM) stays
print(_ddq_boot(buf, "/ram", 4096))  # its filesystem mounted again, not formatted
print(open("/ram/q.bin").read())
print(sorted(os.listdir("/ram")))
"""


def _run_mp(code, tmp_path):
    src = tmp_path / "boot_driver.py"
    src.write_text(code)
    return subprocess.run(
        [MICROPYTHON, str(src)], capture_output=True, text=True, timeout=60, cwd=str(tmp_path)
    )


@pytest.mark.skipif(not os.path.exists(MICROPYTHON), reason="needs the unix port (make venv)")
def test_boot_code_formats_mounts_and_remounts_a_ram_disk(tmp_path):
    r = _run_mp(qboard.BOOT + DRIVER, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["2", "0", "0", "1", "kept", "['q.bin']"], r.stdout


@pytest.mark.skipif(not os.path.exists(MICROPYTHON), reason="needs the unix port (make venv)")
def test_boot_code_as_sent_is_valid_micropython(tmp_path):
    # What Device runs after a reset: BOOT, then the call over the PSRAM. Compiled only (the
    # unix port has no PSRAM at 0x21000000): every name it uses resolves on a firmware.
    code = qboard.boot_code()
    assert "uctypes.bytearray_at(0x21000000, %d)" % qboard.RAMDISK_BYTES in code
    r = _run_mp("compile(%r, 'boot', 'exec')\nprint('ok')\n" % code, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_start_without_a_firmware_says_what_to_pass(tmp_path, monkeypatch):
    monkeypatch.delenv("DDQ_QEMU_FIRMWARE", raising=False)
    r = ddq("board", "qemu", "start", "--state-dir", tmp_path / "q")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddq: no firmware: pass --firmware ELF"), lines
    assert "DDQ_QEMU_FIRMWARE" in lines[0] and "MPS2_AN385" in lines[0], lines
    r = ddq("board", "qemu", "start", "--state-dir", tmp_path / "q", "--firmware", tmp_path / "x")
    assert r.returncode == 2 and r.stderr.startswith("ddq: no firmware at "), r.stderr


def test_a_qemu_boards_tty_gets_the_boot_code(tmp_path):
    # Device runs the boot code only on a running qemu board's UART (its state.json names the pty
    # the tty links to); any other device is left as it is.
    d = tmp_path / "q"
    d.mkdir()
    pty = os.path.realpath("/dev/null")
    os.symlink(pty, d / "tty")
    assert not qboard.is_qemu_device(str(d / "tty"))
    (d / "state.json").write_text(json.dumps({"qemu_pid": 1, "pty": pty}))
    assert qboard.is_qemu_device(str(d / "tty"))
    (d / "state.json").write_text(json.dumps({"bridge_pid": 1, "pty": pty}))  # a virtual board
    assert not qboard.is_qemu_device(str(d / "tty"))
