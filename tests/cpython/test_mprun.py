"""Self-test of tests/mprun.py: run the shared suite's support tests through it on CPython and,
when the venv has it, on MicroPython over each filesystem; check the closing line and status."""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPRUN = os.path.join(REPO, "tests", "mprun.py")
MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")
CLOSING = re.compile(r"^(\w+: )?(\d+) passed, (\d+) failed(, (\d+) skipped)?$")


def run(*args: str) -> tuple[int, list[str]]:
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=120, cwd=REPO)
    return p.returncode, p.stdout.splitlines()


def test_cpython_posix() -> None:
    rc, lines = run(sys.executable, MPRUN, "test_support")
    assert rc == 0, "\n".join(lines)
    m = CLOSING.match(lines[-1])
    assert m and m.group(1) == "posix: " and int(m.group(2)) > 0 and m.group(3) == "0", lines
    assert all(line.startswith(("mprun:", "PASS ", "SKIP ")) for line in lines[:-1]), lines


def test_no_test_ran_is_status_5() -> None:
    rc, lines = run(sys.executable, MPRUN, "-k", "no-such-test")
    assert rc == 5 and lines[-1] == "posix: 0 passed, 0 failed", lines


def test_bad_usage_is_status_2() -> None:
    rc, lines = run(sys.executable, MPRUN, "--fs", "ntfs")
    assert rc == 2 and lines[-1].startswith("usage:"), lines


@pytest.mark.parametrize("fs", ["posix", "lfs2", "fat", "flash"])
def test_micropython(fs: str) -> None:
    assert os.path.exists(MICROPYTHON), "no micropython in the venv: make venv"
    rc, lines = run(MICROPYTHON, "-X", "heapsize=8M", MPRUN, "--fs", fs, "test_support")
    assert rc == 0, "\n".join(lines)
    assert CLOSING.match(lines[-1]) and lines[-1].startswith(fs + ": "), lines


NO_SOCKET = """\
import sys
sys.path.insert(0, %r)  # socket.py here raises ImportError: a port without networking
sys.path.insert(0, %r)
import mprun
sys.exit(mprun.main(sys.argv[1:]))
"""


def test_micropython_without_socket(tmp_path) -> None:
    # A port without networking (no socket module): the MQTT modules of the shared suite load
    # and pass (their fake brokers need no socket); a test module whose own import needs socket
    # is skipped with that reason, not failed (mprun.OPTIONAL_MODULES).
    assert os.path.exists(MICROPYTHON), "no micropython in the venv: make venv"
    (tmp_path / "socket.py").write_text("raise ImportError(\"no module named 'socket'\")\n")
    (tmp_path / "test_zz_needs_socket.py").write_text("import socket\ndef test_x():\n    pass\n")
    (tmp_path / "test_zz_broken.py").write_text(
        "import no_such_module_zz\ndef test_x():\n    pass\n"
    )
    wrapper = tmp_path / "run.py"
    wrapper.write_text(NO_SOCKET % (str(tmp_path), os.path.join(REPO, "tests")))
    mods = ["test_mqtt", "test_mqtt_clients", "test_window", "test_zz_needs_socket"]
    rc, lines = run(MICROPYTHON, str(wrapper), *mods)
    assert rc == 0, "\n".join(lines)
    assert "SKIP test_zz_needs_socket: this port has no socket module" in lines, lines
    assert not [ln for ln in lines if ln.startswith("FAIL")], lines
    m = CLOSING.match(lines[-1])
    assert m and int(m.group(2)) > 10 and m.group(3) == "0" and m.group(5) == "1", lines[-1]
    # Any other missing module still fails the module.
    rc, lines = run(MICROPYTHON, str(wrapper), "test_zz_broken")
    assert rc == 1, lines
    assert any(ln.startswith("FAIL test_zz_broken: ImportError") for ln in lines), lines
