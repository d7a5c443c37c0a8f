"""The README's quick start works pasted into CPython and into MicroPython."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MICROPYTHON = os.path.join(ROOT, ".venv", "bin", "micropython")


def _blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("interp", ["cpython", "micropython"])
def test_quick_start_runs(tmp_path, interp):
    blocks = _blocks()
    assert len(blocks) >= 2
    exe = [sys.executable] if interp == "cpython" else [MICROPYTHON]
    if interp == "micropython":  # make venv installs it: a missing one is a failure, not a skip
        assert os.path.exists(MICROPYTHON), "no MicroPython unix port in .venv: make venv"
    for code in blocks:
        prog = "import sys\nsys.path.insert(0, %r)\n" % os.path.join(ROOT, "port") + code
        out = subprocess.run(exe + ["-c", prog], cwd=tmp_path, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr.decode()
