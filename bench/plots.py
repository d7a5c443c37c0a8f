"""The benchmark pictures beside docs/BENCHMARKS.md, drawn from the figures the docs already hold.

    .venv/bin/python bench/plots.py          # redraw docs/bench-*.png from the current docs

`make bench` calls draw() after it rewrote docs/BENCHMARKS.md, so the pictures always show the
run the tables show. Sources, all written by the project's own runs: docs/BENCHMARKS.md (the
summary rows, the standing-backlog tables, the drain section), boards/*.json (max_items: the
readings each profile holds) and docs/RELIABILITY.md (the `torture:` line of the latest run).
Nothing is measured here. matplotlib (pinned in the Makefile's DEV_PKGS) draws with the Agg
backend; the PNGs are checked in and referenced from BENCHMARKS.md (PICTURES).
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DOCS = os.path.join(REPO, "docs")
BOARDS = os.path.join(REPO, "boards")

# (file, title): what render() in bench/run.py links from BENCHMARKS.md, in this order.
PICTURES = (
    (
        "bench-heap.png",
        "heap held vs pending items on MicroPython: ddq (rows 5, 5b, 5r) vs the "
        "72 B of C DDQ and the 32 B of iotspool per item",
    ),
    (
        "bench-latency.png",
        'per-call latency under a standing backlog (90 %, sync="always", '
        "20,000 messages): inline vs staged reclamation vs the filesystem "
        "floor",
    ),
    (
        "bench-drain.png",
        "drain rate vs window size through the 100 ms relay: ddq's senders, "
        "`ddq replay` and the board app vs paho (rows D1-D6)",
    ),
    ("bench-capacity.png", "readings each board profile holds (max_items of boards/*.json)"),
    (
        "bench-torture.png",
        "the torture scoreboard of the latest run, by part (docs/RELIABILITY.md)",
    ),
)


def _num(text):
    """The first number in text ('3.80 B', '1,155', '97.8'), or None."""
    m = re.search(r"-?[0-9][0-9,]*(?:\.[0-9]+)?", text or "")
    return float(m.group(0).replace(",", "")) if m else None


def _rows(lines):
    """Cells of every markdown table row in lines (header and rule rows included)."""
    return [
        [c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if ln.startswith("|")
    ]


def _section(text, head):
    """The lines of the first section whose heading starts with head (## level)."""
    out, on = [], False
    for ln in text.splitlines():
        if ln.startswith("## "):
            if on:
                break
            on = ln[3:].startswith(head)
            continue
        if on:
            out.append(ln)
    return out


def read_figures(docs=DOCS, boards=BOARDS):
    """The figures the pictures show, from the docs and the profiles (a dict, JSON-able)."""
    with open(os.path.join(docs, "BENCHMARKS.md"), encoding="utf-8") as f:
        bench = f.read()
    summary = {}
    for r in _rows(_section(bench, "Summary")):
        if len(r) >= 7 and r[0] not in ("#", "") and not r[0].startswith("-"):
            summary.setdefault(r[0], r)
    fig = {"heap_b_per_item": {}, "latency": {}, "drain": {}, "capacity": {}, "torture": {}}
    for rid, what in (
        ("5", "fresh"),
        ("5b", "reopened (queue.index)"),
        ("5r", "reopened after a power cut"),
    ):
        if rid in summary:
            fig["heap_b_per_item"][what] = _num(summary[rid][2])
    m = re.search(r"\((\d[\d,]*) pending", summary.get("5", ["", ""])[1])
    fig["heap_items"] = _num(m.group(1)) if m else 10000.0
    for interp in ("CPython", "MicroPython"):
        for r in _rows(_section(bench, "Standing backlog, " + interp)):
            if len(r) < 6 or r[0] != "90 %" or r[2] != "always":
                continue
            kind = (
                "floor"
                if r[3].startswith("none")
                else "staged"
                if r[3].startswith("staged")
                else "inline"
            )
            ops = [[_num(x) for x in part.split(", ")] for part in r[5].split("/")]
            fig["latency"].setdefault(interp, {})[kind] = dict(
                zip(("enqueue", "claim", "ack"), ops)
            )
    for ln in _section(bench, "Drain over a 100 ms round trip"):
        m = re.match(r"- (\w+): ([0-9.,]+) msg/s", ln)
        if m:
            fig["drain"][m.group(1)] = _num(m.group(2))
    for name in sorted(os.listdir(boards)):
        if name.endswith(".json"):
            with open(os.path.join(boards, name)) as f:
                fig["capacity"][name[:-5]] = json.load(f)["max_items"]
    with open(os.path.join(docs, "RELIABILITY.md"), encoding="utf-8") as f:
        m = re.search(r"^torture: (.*)$", f.read(), re.M)
    if m:
        for k, v in re.findall(r"(\w+)=(\d+)", m.group(1)):
            fig["torture"][k] = int(v)
    return fig


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(ax, xlabel, ylabel, title, grid="both", legend=8):
    """Label one panel: its axes, title, grid and (legend: its font size, 0 none) legend."""
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9 if len(title) > 60 else None)
    if legend:
        ax.legend(fontsize=legend)
    ax.grid(alpha=0.3, axis=grid)


def _save(plt, f, path):
    """Save the figure f as path and free it."""
    f.tight_layout()
    f.savefig(path, dpi=100)
    plt.close(f)


def _finish(plt, f, ax, path, xlabel, ylabel, title, grid="both", legend=True):
    """Label a one-panel picture, save it as path and free it."""
    _label(ax, xlabel, ylabel, title, grid, 8 if legend else 0)
    _save(plt, f, path)


def _heap(plt, fig, path):
    n = fig["heap_items"]
    f, ax = plt.subplots(figsize=(7, 4))
    xs = [0, n]
    for label, per, style in (
        ("C DDQ (72 B an item)", 72, "--"),
        ("iotspool (32 B an item)", 32, ":"),
    ):
        ax.plot(xs, [0, per * n / 1024], style, color="grey", label=label)
    for label, per in fig["heap_b_per_item"].items():
        if per is not None:
            ax.plot(
                xs,
                [0, per * n / 1024],
                "-o",
                markevery=[1],
                label="ddq, %s (%.2f B an item)" % (label, per),
            )
    _finish(
        plt,
        f,
        ax,
        path,
        "pending items (measured at %d; the lines are per item x items)" % n,
        "heap held by the queue, KiB",
        "MicroPython heap vs pending items (1 KiB payloads)",
    )


def _latency(plt, fig, path):
    interps = [i for i in ("CPython", "MicroPython") if fig["latency"].get(i)]
    f, axes = plt.subplots(1, max(1, len(interps)), figsize=(11, 4), squeeze=False)
    kinds = ("floor", "inline", "staged")
    names = {
        "floor": "filesystem floor (no ddq)",
        "inline": "ddq, inline reclamation",
        "staged": "ddq, staged reclaim_step=16",
    }
    for ax, interp in zip(axes[0], interps):
        d = fig["latency"][interp]
        ops = ("enqueue", "claim", "ack")
        w = 0.27
        for k, kind in enumerate(kinds):
            if kind not in d:
                continue
            for j, alpha in ((2, 0.25), (1, 0.55), (0, 1.0)):  # max, p99, median on top
                vals = [d[kind][op][j] for op in ops]
                ax.bar(
                    [i + (k - 1) * w for i in range(3)],
                    vals,
                    w,
                    alpha=alpha,
                    color="C%d" % k,
                    label=names[kind] if j == 0 else None,
                )
        ax.set_yscale("log")
        ax.set_xticks(range(3))
        ax.set_xticklabels(ops)
        ylabel = "µs a call (bars: max, p99, median from light to dark)"
        _label(ax, None, ylabel, '%s, 90 %% backlog, sync="always"' % interp, "y", 7)
    _save(plt, f, path)


def _drain(plt, fig, path):
    d = fig["drain"]
    f, ax = plt.subplots(figsize=(7, 4))
    for key, label in (
        ("mp", "ddq WindowSender, MicroPython"),
        ("cp", "ddq WindowSender, CPython"),
        ("replay", "ddq replay"),
    ):
        if key + "_1" in d and key + "_16" in d:
            ax.plot([1, 16], [d[key + "_1"], d[key + "_16"]], "-o", label=label)
    if "app_16" in d:
        ax.plot([16], [d["app_16"]], "s", markersize=9, label="the board app (boards/UNIX)")
    if "paho_16" in d:
        ax.plot([16], [d["paho_16"]], "k*", markersize=13, label="paho, max_inflight=16")
    ax.plot([1, 16], [10, 160], ":", color="grey", label="ideal: W per 100 ms round trip")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16])
    ax.set_xticklabels(["1", "2", "4", "8", "16"])
    _finish(
        plt,
        f,
        ax,
        path,
        "window W (QoS 1 publishes in flight)",
        "messages a second",
        "Draining a backlog through a 100 ms round trip",
    )


# Readings each profile held before the hold rule of DESIGN §5.1 (libddq's admission, as
# bench/hold_bench.py's TODAY; UNIX from the BOARDS.md of the time): the picture's "before" bars.
BEFORE = {
    "ARMV7M_GENERIC": 152,
    "ESP32_GENERIC": 1184,
    "PYBV11": 32,
    "RPI_PICO": 1192,
    "UNIX": 848,
}


def _capacity(plt, fig, path):
    c = fig["capacity"]
    names = sorted(c, key=lambda n: c[n])
    f, ax = plt.subplots(figsize=(7, 3.5))
    y = list(range(len(names)))
    ax.barh(
        [i + 0.2 for i in y],
        [BEFORE.get(n, 0) for n in names],
        height=0.4,
        color="C7",
        label="before (libddq's admission)",
    )
    ax.barh(
        [i - 0.2 for i in y],
        [c[n] for n in names],
        height=0.4,
        color="C0",
        label="now (the profile's rule)",
    )
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    for i, n in enumerate(names):
        ax.text(c[n], i - 0.2, " %d" % c[n], va="center", fontsize=8)
    _finish(
        plt,
        f,
        ax,
        path,
        "readings the example app's queue holds (max_items)",
        None,
        "Readings held per board profile",
        grid="x",
    )


def _torture(plt, fig, path):
    t = fig["torture"]
    parts = [
        (k, label)
        for k, label in (
            ("crash_states", "1 crash states"),
            ("lfs_cuts", "2 LittleFS power cuts"),
            ("fat_cuts", "2 FAT power cuts"),
            ("bad_images", "3 bad images"),
            ("fault_points", "4 injected faults"),
            ("index_opens", "1-3 recovery-index opens"),
            ("continued_states", "1c written on after recovery"),
            ("enospc_points", "6 ENOSPC points"),
            ("hold_states", "1h hold rule at the limit"),
            ("salvage_images", "5 salvage images"),
            ("salvage_cut_states", "5b cuts inside salvage"),
        )
        if k in t
    ]
    bad = ", ".join(
        "%s %d" % (k, t[k])
        for k in ("lost", "resurrected", "reused_seq", "bricked", "hold_stranded")
        if k in t
    )
    f, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh([p[1] for p in parts], [t[p[0]] for p in parts], color="C2")
    for i, (k, _label) in enumerate(parts):
        ax.text(t[k], i, " %d" % t[k], va="center", fontsize=8)
    ax.set_xscale("log")
    _finish(
        plt,
        f,
        ax,
        path,
        "cases judged (log scale)",
        None,
        "Torture scoreboard, latest run: %s" % bad,
        grid="x",
        legend=False,
    )


def draw(out_dir=DOCS, fig=None):
    """Write the PICTURES into out_dir from fig (default: read_figures()); return their paths."""
    plt = _plt()
    fig = read_figures() if fig is None else fig
    out = []
    for (name, _title), fn in zip(PICTURES, (_heap, _latency, _drain, _capacity, _torture)):
        path = os.path.join(out_dir, name)
        fn(plt, fig, path)
        out.append(path)
    return out


def markdown():
    """The BENCHMARKS.md lines that show the pictures."""
    out = [
        "## Pictures",
        "",
        "Drawn by bench/plots.py from the tables of this file, boards/*.json and "
        "docs/RELIABILITY.md (`make bench` redraws them).",
        "",
    ]
    for name, title in PICTURES:
        out += ["![%s](%s)" % (title, name), "", "*%s%s*" % (title[0].upper(), title[1:]), ""]
    return out


if __name__ == "__main__":
    for p in draw():
        print("bench: drew %s" % os.path.relpath(p, REPO))
    sys.exit(0)
