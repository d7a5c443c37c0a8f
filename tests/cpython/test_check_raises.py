"""tools/check_raises.py: a queue module that makes a ddq error other than by _err is reported."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(REPO, "tools", "check_raises.py")

CORE = (
    '_ERRORS = ("Error", -1, "Corrupt", -3, "Full", -7)\n'
    "_PARTS = {'ddq_a': ' f ', 'ddq_b': ''}\n\n"
    "def _E(name):\n    return Exception\n\n"
    "def _err(name, m, *a):\n    return _E(name)(m % a if a else m)\n\n"
    "def g():\n    raise _err('Full', 0)\n"
)
PART = (
    "import ddq\nfrom ddq import _E, _err\n\n"
    "def f(x):\n    try:\n        x()\n    except _E('Corrupt'):\n"
    "        raise _err('Corrupt', 'bad %s', x)\n    raise ddq._err('Full', 'full')\n"
)


def _run(files, tmp_path):
    port = tmp_path / "port"
    port.mkdir()
    for name, text in files.items():
        (port / name).write_text(text)
    p = subprocess.run(
        [sys.executable, TOOL, "--port", str(port)], capture_output=True, text=True, timeout=60
    )
    return p.returncode, p.stdout


def test_the_repository_raises_one_way():
    p = subprocess.run([sys.executable, TOOL], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.endswith(" 0 findings\n"), p.stdout


def test_a_crafted_port_that_raises_by_err_alone_passes(tmp_path):
    # an add-on outside _PARTS keeps its own classes: not checked
    rc, out = _run(
        {"ddq.py": CORE, "ddq_a.py": PART, "ddq_x.py": "from ddq import Full\nraise Full('x')\n"},
        tmp_path,
    )
    assert rc == 0 and out == "raises: 2 modules, 3 _err calls, 0 findings\n", out


@pytest.mark.parametrize(
    "line, what",
    [
        ("raise _E('Corrupt')('bad')", "_E(...)(...)"),
        ("raise Corrupt('bad')", "Corrupt(...)"),
        ("raise ddq.Full('full')", "ddq.Full(...)"),
        ("e = ddq.Corrupt('bad')", "ddq.Corrupt(...)"),
        ("raise _err(name, 'bad')", "_err's class is not a literal name"),
        ("raise _err('Broken', 'bad')", "_err's class is not a literal name"),
        ("from ddq import Corrupt", "imports Corrupt from ddq"),
    ],
)
def test_a_part_that_raises_another_way_fails(tmp_path, line, what):
    rc, out = _run({"ddq.py": CORE, "ddq_a.py": PART, "ddq_b.py": line + "\n"}, tmp_path)
    assert rc == 1 and "port/ddq_b.py:1: " + what in out and out.endswith(" 1 findings\n"), out


def test_the_core_may_not_raise_another_way_outside_err(tmp_path):
    core = CORE + "\ndef h():\n    raise _E('Full')('full')\n"
    rc, out = _run({"ddq.py": core, "ddq_a.py": PART}, tmp_path)
    assert rc == 1 and "port/ddq.py:14: _E(...)(...)" in out, out
