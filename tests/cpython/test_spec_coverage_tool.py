"""tools/spec_coverage.py --strict (`make spec-coverage`) fails on an id no test cites, as on a
citation no doc defines (docs/SPEC.md, top: it used to say "cited by no test (1): C11" and
pass)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "spec_coverage.py")
MARK = "EVIDENCE" + "-OF:"  # not written whole here: the tool would read this file's lines


def _run(root, *args):
    return subprocess.run(
        [sys.executable, TOOL, "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_strict_fails_on_an_uncited_id_and_passes_when_all_are_cited(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "docs" / "SPEC.md").write_text("- [Z1] one rule.\n- [Z2] another.\n")
    (tmp_path / "tests" / "test_x.py").write_text("# %s Z1\n" % MARK)
    r = _run(tmp_path, "--strict")
    assert r.returncode == 1 and "cited by no test (1):" in r.stdout and "Z2" in r.stdout, r.stdout
    assert _run(tmp_path).returncode == 0  # the report alone never fails
    (tmp_path / "tests" / "test_x.py").write_text("# %s Z1 Z2\n" % MARK)
    r = _run(tmp_path, "--strict")
    assert r.returncode == 0 and r.stdout.strip() == "spec coverage: 2 of 2 ids cited", r.stdout


def test_the_repository_cites_every_id():
    r = _run(ROOT, "--strict")
    assert r.returncode == 0, r.stdout
