"""Cross-process locking [L1][L2]: CPython (flock) and the MicroPython unix port (abstract unix
socket) exclude each other's second opener, and a lock left by a killed process is taken over."""

# EVIDENCE-OF: L1 L2 L3
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = os.path.join(ROOT, "port")
MICROPYTHON = os.path.join(ROOT, ".venv", "bin", "micropython")

HOLD = """
import sys
sys.path.insert(0, %r)
import ddq
q = ddq.Queue(%r)
print("held")
sys.stdout.flush() if hasattr(sys.stdout, "flush") else None
while True:
    pass
"""

TRY = """
import sys
sys.path.insert(0, %r)
import ddq
try:
    ddq.Queue(%r).close()
    print("opened")
except ddq.Locked:
    print("locked")
"""


def _interp(name):
    if name == "micropython":
        assert os.path.exists(MICROPYTHON), "no MicroPython unix port in .venv: make venv"
        return [MICROPYTHON]
    return [sys.executable]


def _hold(name, d):
    p = subprocess.Popen(
        _interp(name) + ["-c", HOLD % (PORT, d)], stdout=subprocess.PIPE, start_new_session=True
    )
    line = p.stdout.readline()
    assert line.strip() == b"held", line
    return p


def _try(name, d):
    out = subprocess.run(_interp(name) + ["-c", TRY % (PORT, d)], capture_output=True, timeout=60)
    return out.stdout.decode().strip()


@pytest.mark.parametrize("holder", ["cpython", "micropython"])
def test_second_process_is_locked_out_and_kill_releases(tmp_path, holder):
    d = str(tmp_path / "q")
    p = _hold(holder, d)
    try:
        assert _try(holder, d) == "locked"
        if holder == "cpython":
            # flock on queue.lock is also what C DDQ takes: one holder excludes the other.
            assert _try("cpython", d) == "locked"
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # a power cut: no close(), no unlock
        p.wait(timeout=30)
    # The kernel released the lock with the process (p.wait returned): the next opener takes it.
    assert _try(holder, d) == "opened"
