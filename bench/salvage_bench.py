# ddq_salvage resynchronisation (SPEC §15; BENCHMARKS rows s1, s2): the cost of scanning a crafted
# segment, as a ratio against a plain segment of the same size scanned in the same run. Runs on
# CPython and MicroPython; bench/run.py runs each part as its own process and renders the rows with
# report() below.
#
#   python bench/salvage_bench.py resync kib=1024,4096 reps=3 dir=...   (and micropython)
#
# For each size: three source directories, each a segment of that size and a small next one
# (so the first is not the log's end), salvaged into a new directory:
#   plain    valid DATA records of 8 B payloads (56 B each): the least work per byte a scan
#            of real records does (a record every 56 B)
#   headers  one valid record, then a plausible header every 40 B, each claiming a record that
#            runs to the end of the segment (no footer): before the fix, every one was read and
#            CRC-checked whole (quadratic: 125 s for 4 MiB)
#   frames   the same headers, each with a footer of its own (nested records, all with bad
#            CRCs): a footer check alone would still read each whole
# Reported: the best time of `reps` per size, and the bytes read through the storage seam (a
# count, deterministic: its ratio to the segment size is the work per byte).
import sys

import common  # bench/ is sys.path[0]: the script's own directory
from common import emit, fresh, now_us, since_us

REPO = common.REPO
sys.path.insert(0, REPO + "/port")

import ddq  # noqa: E402
import ddq_salvage  # noqa: E402

sys.path.append(REPO + "/tests")
from salvage_craft import Counting, segment  # noqa: E402  (tests/salvage_craft.py: the shapes)


def part_resync(a):
    out = {"sizes": []}
    for kib in [int(x) for x in a["kib"].split(",")]:
        size = kib * 1024
        opts = {"segment_bytes": max(size, 4194304), "max_payload_bytes": max(size, 4194304) - 48}
        row = {"kib": kib}
        for kind in ("plain", "headers", "frames"):
            src = fresh(a["dir"] + "/" + kind)
            data = segment(kind, size)
            with open(src + "/" + ddq.segment_name(0, 0), "wb") as f:
                f.write(data)
            data = None
            with open(src + "/" + ddq.segment_name(0, 1), "wb") as f:
                f.write(ddq_salvage.encode_record(1, 10**9, 0, b"next"))
            times = []
            nread = 0
            for _ in range(a["reps"]):
                dst = a["dir"] + "/out"
                common.rmtree(dst)
                fs = Counting()
                common.collect()
                t0 = now_us()
                rep = ddq_salvage.salvage(src, dst, storage=fs, **opts)
                times.append(since_us(t0))
                nread = fs.n
                if rep["output"] is None:
                    raise SystemExit("salvage of %s kept nothing" % kind)
            common.rmtree(a["dir"] + "/out")
            common.rmtree(src)
            row[kind] = {"us": common.best(times), "read": nread}
        out["sizes"].append(row)
        print("resync %d KiB: %r" % (kib, row))
    emit(out)


PARTS = {"resync": (part_resync, {"dir": "", "kib": "1024,4096", "reps": 3})}

# Sizes for bench/run.py: (full, smoke), and the parts it runs: (result key, interpreter,
# part, size key, MicroPython heap).
SIZES = {
    "cp_resync": ({"kib": "1024,4096", "reps": 3}, {"kib": "64,256", "reps": 1}),
    "mp_resync": ({"kib": "128,512", "reps": 5}, {"kib": "32,128", "reps": 1}),
}
RUNS = (
    ("cp_resync", "cp", "resync", "cp_resync", None),
    ("mp_resync", "mp", "resync", "mp_resync", "16M"),
)
TARGET = 4.0  # crafted ÷ plain, time per MiB, at every size: a small constant
GROWTH = 2.0  # crafted time per MiB at the largest size ÷ at the smallest (4×: linear is 1)


def report(R, rep, h, smoke):
    """Add rows s1/s2 to run.py's report (h: its helpers fmt and verdict). A smoke run's tiny
    sizes judge nothing: its verdicts read "report"."""
    fmt, verdict = h["fmt"], h["verdict"]
    for key, rid, interp in (("cp_resync", "s1", "CPython"), ("mp_resync", "s2", "MicroPython")):
        t = R.get(key)
        if not t:
            continue
        for k, row in enumerate(t["sizes"]):
            kib = row["kib"]
            size = kib * 1024
            plain = row["plain"]["us"] * 1024.0 / kib  # µs per MiB
            for kind, what in (
                ("headers", "a plausible header every 40 B, each to the end"),
                ("frames", "nested records with footers, bad CRCs"),
            ):
                per = row[kind]["us"] * 1024.0 / kib
                ratio = per / plain if plain else None
                rep.row(
                    "%s%s%d" % (rid, "h" if kind == "headers" else "f", k + 1),
                    "%s salvage resync of a crafted %d KiB segment (%s): time per MiB ÷ a "
                    "plain segment's (56 B records); bytes read %s× its size"
                    % (interp, kib, what, fmt(row[kind]["read"] / float(size))),
                    "%s ms/MiB" % fmt(per / 1000.0),
                    "plain %s ms/MiB" % fmt(plain / 1000.0),
                    fmt(ratio),
                    "≤ %s×" % fmt(TARGET),
                    "report" if smoke else verdict(ratio, TARGET, False),
                )
        lo, hi = t["sizes"][0], t["sizes"][-1]
        for kind in ("headers", "frames"):
            a = lo[kind]["us"] / float(lo["kib"])
            b = hi[kind]["us"] / float(hi["kib"])
            g = b / a if a else None
            rep.row(
                "%s%sg" % (rid, "h" if kind == "headers" else "f"),
                "same (%s), linear: time per MiB at %d KiB ÷ at %d KiB (quadratic: %s×)"
                % (kind, hi["kib"], lo["kib"], fmt(hi["kib"] / float(lo["kib"]))),
                "%s ms/MiB" % fmt(b * 1.024),
                "%s ms/MiB" % fmt(a * 1.024),
                fmt(g),
                "≤ %s×" % fmt(GROWTH),
                "report" if smoke else verdict(g, GROWTH, False),
            )


if __name__ == "__main__":
    common.dispatch(PARTS, "salvage_bench.py resync key=value ...")
