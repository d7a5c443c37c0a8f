"""tools/long_functions.py: a port/ function over 150 lines not listed in DESIGN §13 fails."""

import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
import long_functions  # (from tools/, above: no package)

DESIGN = (
    "## 13. Code map\n\n"
    "**Functions over 150 lines** (the target): the scanners: `scan` (port/ddq_a.py, at most\n"
    "160 lines: one pass), `Walk.step` (port/ddq_a.py, at most 155 lines: a walk).\n\n"
    "`other` (port/ddq_a.py, at most 999 lines: another paragraph, not the allowance)\n"
)


def _func(name, lines, indent=""):
    # def + (lines - 1) body lines
    body = "".join("%s    x = %d\n" % (indent, k) for k in range(lines - 1))
    return "%sdef %s():\n%s" % (indent, name, body)


def _run(files, tmp_path, design=DESIGN):
    (tmp_path / "port").mkdir()
    for name, text in files.items():
        (tmp_path / "port" / name).write_text(text)
    (tmp_path / "DESIGN.md").write_text(design)
    argv = ["--port", str(tmp_path / "port"), "--design", str(tmp_path / "DESIGN.md")]
    p = subprocess.run(
        [sys.executable, str(TOOLS / "long_functions.py")] + argv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.returncode, p.stdout


def test_the_repository_has_no_unlisted_long_function():
    out, files, long_, allowed = long_functions.check(
        str(TOOLS.parent / "port"), str(TOOLS.parent / "docs" / "DESIGN.md")
    )
    assert out == [] and files > 10 and long_ == allowed > 0, out


def test_listed_scanners_within_their_figures_pass(tmp_path):
    a = _func("scan", 160) + "\n\nclass Walk:\n" + _func("step", 155, "    ") + _func("f", 150)
    rc, out = _run({"ddq_a.py": a, "ddq_b.py": _func("g", 150)}, tmp_path)
    assert rc == 0 and out == "long functions: 2 files, 2 over 150 lines (2 allowed), 0 findings\n"


def test_a_crafted_long_function_not_listed_fails(tmp_path):
    a = _func("scan", 160) + "\n\nclass Walk:\n" + _func("step", 155, "    ")
    rc, out = _run({"ddq_a.py": a, "ddq_b.py": "import os\n\n\n" + _func("long", 151)}, tmp_path)
    assert rc == 1, out
    assert "port/ddq_b.py:4: long, 151 lines: over 150 and not listed in DESIGN §13" in out, out
    assert out.endswith("3 over 150 lines (2 allowed), 1 findings\n"), out


def test_a_long_nested_function_is_named_by_its_outer_one(tmp_path):
    a = _func("scan", 160) + "\n\nclass Walk:\n" + _func("step", 155, "    ")
    b = "def outer():\n" + _func("inner", 151, "    ") + "    return inner\n"
    rc, out = _run({"ddq_a.py": a, "ddq_b.py": b}, tmp_path)
    assert rc == 1 and "port/ddq_b.py:2: outer.inner, 151 lines: over 150" in out, out


def test_a_listed_function_longer_than_its_figure_fails(tmp_path):
    a = _func("scan", 161) + "\n\nclass Walk:\n" + _func("step", 155, "    ")
    rc, out = _run({"ddq_a.py": a}, tmp_path)
    assert rc == 1 and "port/ddq_a.py:1: scan, 161 lines: DESIGN §13 allows it at most 160" in out


def test_a_listed_function_split_or_gone_fails_until_its_entry_goes(tmp_path):
    rc, out = _run({"ddq_a.py": _func("scan", 150)}, tmp_path)
    assert rc == 1, out
    assert "port/ddq_a.py:1: scan, 150 lines: listed in DESIGN §13 but not over 150" in out, out
    assert "port/ddq_a.py:0: Walk.step: listed in DESIGN §13 but not found" in out, out
