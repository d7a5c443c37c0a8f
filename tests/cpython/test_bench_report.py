"""bench/run.py's report: a smoke run (`make bench-smoke`, inside `make test`) judges no target,
since its sizes cannot: no met/missed verdicts, so a passing `make test` prints no **missed**
(issue 27). A full run judges them."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_module():
    spec = importlib.util.spec_from_file_location("ddq_bench_run",
                                                  os.path.join(ROOT, "bench", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_rows_carry_no_verdict():
    run = _run_module()
    for smoke, want in ((True, "not judged (smoke)"), (False, "**missed**")):
        rep = run.Report(smoke)
        rep.row("1", "a rate", "5", "10", "0.50", ">= 1", run.verdict(0.5, 1.0))
        rep.row("2", "a figure", "5", "", "", "", "report")
        assert [r[6] for r in rep.rows] == [want, "report"]
        assert rep.misses == ([] if smoke else ["1"])
