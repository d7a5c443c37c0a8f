"""Rows h1-h5 of `make bench` (DESIGN §5.1, SPEC §10.1): readings each board profile holds, and
for how long.

Per profile (boards/*.json, through tools/board_capacity.py: the same options, message and fill
as docs/BOARDS.md), on CPython: the readings its queue takes before Full with the profile's own
options, the same with libddq's admission (the profile without `window`), the bound B(n, w) of
DESIGN §5.1 (the most n-byte items whose DATA records, a STATE for each of the window's claims
and one 48-byte record fit by next-fit in max_segments segments; `window` 1 where the profile
uses libddq's rule), and the hours that many readings last at the app's PERIOD_MS. The profile's
max_items is lifted so that the admission rule is what is measured.
"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))

TARGETS = {"x_today": 3.0, "x_bound": 0.75, "pico": 4000, "batched": 20000}
# What each profile held before the hold rule (DESIGN §5.1): its options then, libddq's rule.
TODAY = {"RPI_PICO": 1192, "ESP32_GENERIC": 1184, "ARMV7M_GENERIC": 152, "PYBV11": 32, "UNIX": 848}


def bound(n, window, segs, seg):
    """B(n, w), DESIGN §5.1: tests/test_hold.py computes it (one definition)."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from test_hold import bound as b

    return b(n, window, segs=segs, seg=seg)


def run(smoke=False, tmp=None):
    import board_capacity as bc

    from ddqhost import boards

    tmp = tmp or tempfile.mkdtemp(prefix="ddq-hold-")
    os.makedirs(tmp, exist_ok=True)
    out = {}
    for name in boards.names():
        prof = boards.load(name)
        opts = dict(boards.queue_options(prof), max_items=bc.BIG)
        payload = bc.message(prof)
        held = bc.fill_cpython(opts, payload, os.path.join(tmp, name + "-h"))[0]
        plain = {k: v for k, v in opts.items() if k not in boards.HOLD_KEYS}
        libddq = (
            bc.fill_cpython(plain, payload, os.path.join(tmp, name + "-l"))[0]
            if plain != opts
            else held
        )
        b = bound(
            len(payload), opts.get("window") or 1, opts["max_segments"], opts["segment_bytes"]
        )
        batch = boards.batch_options(prof)  # the app's BATCH_OPTIONS (ddq_app)
        bopts = dict(opts, **batch)
        out[name] = {
            "held": held,
            "libddq": libddq,
            "bound": b,
            "n": len(payload),
            "window": opts.get("window", 0),
            "period_ms": bc.period_ms(prof),
            "batched": batched(prof, bopts, os.path.join(tmp, name + "-b")),
            "batched_jitter": batched(prof, bopts, os.path.join(tmp, name + "-j"), JITTER_MS),
            "batch_options": batch,
        }
    return out


# A board's clock: the app takes a reading when its loop wakes at the slot (ddq_app.run), a few
# ms after it; readings JITTER_MS apart from the period at most (seeded, uniform) cost a gap's
# change each where readings exactly the period apart share one run (OUTBOX B2).
JITTER_MS = 3


def batched(prof, opts, path, jitter=0):
    """25-byte readings (board_capacity.READING) a BatchOutbox with the profile's options (its
    batch reserve, boards.batch_options, as the app's BATCH_OPTIONS) holds before Full,
    batch_bytes = max_payload_bytes (OUTBOX B1-B3), a reading every 10 s (with jitter: each up
    to jitter ms late, seeded)."""
    import random
    import shutil

    import board_capacity as bc

    import ddq
    from ddq_batch import BatchOutbox

    t = [1767225600000]
    rnd = random.Random(26)

    def clock():
        t[0] += 10000
        return t[0] + (rnd.randint(0, jitter) if jitter else 0)

    ob = BatchOutbox(
        path,
        clock=clock,
        ticks=lambda: 0,
        batch_bytes=opts["max_payload_bytes"],
        batch_ms=0,
        sync="none",
        **opts,
    )
    n = 0
    try:
        for _ in range(10**6):
            ob.put("sensors/%s/t" % prof["board"].lower(), bc.READING)
            n += 1
    except ddq.Full:
        pass
    ob.queue.close()
    shutil.rmtree(path, ignore_errors=True)
    return n


def rows(rep, R, fmt, verdict):
    """Add rows h1-h5 to bench/run.py's Report from run()'s results R."""
    if not R:
        return
    for k, name in enumerate(sorted(R)):
        r = R[name]
        hours = r["held"] * r["period_ms"] / 3600000.0
        rule = "window %d" % r["window"] if r["window"] else "libddq's rule"
        rid = "h%d" % (k + 1)
        today = TODAY.get(name, r["libddq"])
        rep.row(
            rid,
            "%s readings held (%d B enveloped, %s; libddq's rule on these options: %s) "
            "÷ before issue 26; %.1f h at 1 per %d s"
            % (name, r["n"], rule, fmt(r["libddq"]), hours, r["period_ms"] // 1000),
            fmt(r["held"]),
            fmt(today),
            fmt(r["held"] / today),
            "≥ 3",
            verdict(r["held"] / today, TARGETS["x_today"]),
        )
        rep.row(
            rid + "b",
            "%s readings held ÷ the bound B(n, w) (DESIGN §5.1)" % name,
            fmt(r["held"]),
            fmt(r["bound"]),
            fmt(r["held"] / r["bound"]),
            "≥ 0.75",
            verdict(r["held"] / r["bound"], TARGETS["x_bound"]),
        )
        if r.get("batched"):
            pico = name == "RPI_PICO"
            rep.row(
                rid + "c",
                "%s 25-byte readings held in shared items (ddq_batch, batch_bytes "
                "= max_payload_bytes, %s); %.1f h at 1 per %d s"
                % (
                    name,
                    _reserve(r),
                    r["batched"] * r["period_ms"] / 3600000.0,
                    r["period_ms"] // 1000,
                ),
                fmt(r["batched"]),
                "20,000" if pico else "—",
                fmt(r["batched"] / TARGETS["batched"]) if pico else "—",
                "≥ 20,000" if pico else "report",
                verdict(r["batched"] / TARGETS["batched"], 1.0) if pico else "report",
            )
        if r.get("batched_jitter"):
            pico = name == "RPI_PICO"
            rep.row(
                rid + "d",
                "%s the same, each reading up to %d ms late (a board's loop); %.1f h"
                % (name, JITTER_MS, r["batched_jitter"] * r["period_ms"] / 3600000.0),
                fmt(r["batched_jitter"]),
                "20,000" if pico else "—",
                fmt(r["batched_jitter"] / TARGETS["batched"]) if pico else "—",
                "≥ 20,000" if pico else "report",
                verdict(r["batched_jitter"] / TARGETS["batched"], 1.0) if pico else "report",
            )


def _reserve(r):
    b = r.get("batch_options") or {}
    if not b:
        return "the profile's reserve"
    return "batch reserve: window %s, evidence %s B" % (b.get("window"), b.get("evidence_bytes"))


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1, sort_keys=True))
