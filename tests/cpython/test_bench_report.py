"""bench/run.py's report: a smoke run (`make bench-smoke`, inside `make test`) judges no target,
since its sizes cannot: no met/missed verdicts, so a passing `make test` prints no **missed**
(docs/BENCHMARKS.md: targets are reported, never asserted). A full run judges them."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_module():
    spec = importlib.util.spec_from_file_location(
        "ddq_bench_run", os.path.join(ROOT, "bench", "run.py")
    )
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


def test_pictures_are_drawn_from_the_docs_and_referenced(tmp_path):
    # bench/plots.py reads the figures the docs hold (nothing measured) and draws the five PNGs;
    # BENCHMARKS.md links each, and the checked-in ones exist (matplotlib is pinned: no skip).
    import sys

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import plots

    fig = plots.read_figures()
    assert set(fig["heap_b_per_item"]) == {
        "fresh",
        "reopened (queue.index)",
        "reopened after a power cut",
    }
    assert all(v is not None and v < 32 for v in fig["heap_b_per_item"].values())
    for interp in ("CPython", "MicroPython"):
        assert set(fig["latency"][interp]) == {"floor", "inline", "staged"}
        assert all(len(v) == 3 for d in fig["latency"][interp].values() for v in d.values())
    assert {"paho_16", "mp_16", "mp_1", "app_16"} <= set(fig["drain"])
    assert "UNIX" in fig["capacity"] and fig["torture"]["lost"] == 0
    paths = plots.draw(str(tmp_path), fig)
    assert [os.path.basename(p) for p in paths] == [n for n, _t in plots.PICTURES]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", p
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), encoding="utf-8") as f:
        text = f.read()
    for name, _title in plots.PICTURES:
        assert "](%s)" % name in text and os.path.isfile(os.path.join(ROOT, "docs", name))
