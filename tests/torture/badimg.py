"""Part 3: bad images on CPython: every mutation of mutate.all_mutations for a few seeded base
images, each open under a storage-call budget (mutate.BUDGET) and a 2 s wall-clock alarm, plus
Hypothesis-drawn mutations. Distinct images are counted by content hash."""

import hashlib
import signal

import mutate
import tmodel


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def image_hash(files):
    h = hashlib.blake2b(digest_size=12)
    for n in sorted(files):
        h.update(n.encode() + b"\0%d\0" % len(files[n]))
        h.update(files[n])
    return h.digest()


def judge_timed(
    ddq, base, files, acceptable, opts, payloads=None, forged=False, seconds=2.0, view=None
):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return mutate.judge(
            ddq, base, files, acceptable, opts, payloads=payloads, forged=forged, view=view
        )
    except Timeout:
        return "error", [("unexpected", "open did not finish within %.1f s" % seconds)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def index_timed(ddq, files, opts, res, got, seconds=2.0):
    """mutate.judge_index under the alarm (got: the judged open's view); counts into res.
    Returns [(category, detail)]."""
    if mutate.INDEX not in files:
        return []
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        used, diff = mutate.judge_index(ddq, files, opts, got=got[0] if len(got) == 1 else None)
    except Timeout:
        return [("unexpected", "index comparison did not finish within %.1f s" % seconds)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    res["index_compared"] += 1
    if used:
        res["index_opens"] += 1
    if diff is not None:
        return [("forged_index", diff)]
    return []


def run_seed(ddq, seed, nops, hashes=None, max_fail=5, limit=None, index=None):
    base, wl, acceptable = mutate.build_base(ddq, seed, nops, index=index)
    res = tmodel.counters(
        "images distinct corrupt clean forged relabel undetectable_cut lost resurrected "
        "reused_seq unexpected generation index_compared index_opens forged_index",
        seed=seed,
        base_bytes=sum(len(v) for v in base.values()),
        index=index,
        old_indexes=len(wl.old_indexes),
    )
    seen = hashes if hashes is not None else set()
    for n, (desc, files) in enumerate(mutate.all_mutations(base, wl.old_indexes)):
        if limit is not None and n >= limit:
            break
        h = image_hash(files)
        if h in seen:
            continue
        seen.add(h)
        res["distinct"] += 1
        res["images"] += 1
        got = []
        # Forgeries no checksummed log can see: valid-CRC records (rec:), a cut at a record
        # boundary (truncate-undetectable), and a segment duplicated as the next one whose
        # records are all valid (seg:dup-as-next; with no DATA record in it and a rotation F7
        # allows, its CLAIM/RETRY/ACK records replay as a legal history: docs/RELIABILITY.md).
        forged = desc.startswith(("rec:", "truncate-undetectable", "seg:dup-as-next"))
        outcome, bad = judge_timed(
            ddq, base, files, acceptable, wl.opts, wl.payloads, forged, view=got
        )
        if outcome == "forged-relabel":
            res["forged"] += 1
            res["relabel"] += 1
        elif outcome == "forged" and desc.startswith("truncate-undetectable"):
            res["forged"] += 1
            res["undetectable_cut"] += 1
        elif outcome in ("corrupt", "clean", "forged"):
            res[outcome] += 1
        if index:
            bad = bad + index_timed(ddq, files, wl.opts, res, got)
        where = {"seed": seed, "nops": nops, "index": index, "mutation": desc}
        tmodel.tally(res, bad, max_fail, where)
    return res


def hypothesis_run(ddq, seed, nops, examples, max_fail=5, index=None):
    """Hypothesis draws: a file, a kind and its parameters (CPython only). With index
    (index_bytes), queue.index is drawn as often as all other files together, an "old" edit swaps
    in an older queue.index of the same run, and every example is also judged by
    mutate.judge_index."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    base, wl, acceptable = mutate.build_base(ddq, seed, nops, index=index)
    names = sorted(n for n in base if n != "queue.lock")
    olds = wl.old_indexes
    kinds = ["flip", "set", "cut", "splice", "fill"]
    if index and mutate.INDEX in base:
        names = names + [mutate.INDEX] * len(names)
        if olds:
            kinds.append("old")
    res = {
        "seed": seed,
        "examples": 0,
        "corrupt": 0,
        "clean": 0,
        "unexpected": 0,
        "fail": [],
        "index": index,
        "index_compared": 0,
        "index_opens": 0,
        "forged_index": 0,
    }

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def prop(data):
        name = data.draw(st.sampled_from(names))
        b = bytearray(base[name])
        n = len(b)
        for _ in range(data.draw(st.integers(1, 3))):
            kind = data.draw(st.sampled_from(kinds))
            n = len(b)
            if (
                kind == "old"
            ):  # an older queue.index (edits drawn before on another file are dropped)
                name = mutate.INDEX
                b = bytearray(olds[data.draw(st.integers(0, len(olds) - 1))])
            elif kind == "flip" and n:
                i = data.draw(st.integers(0, n * 8 - 1))
                b[i >> 3] ^= 1 << (i & 7)
            elif kind == "set" and n:
                i = data.draw(st.integers(0, n - 1))
                b[i] = data.draw(st.integers(0, 255))
            elif kind == "cut":
                del b[data.draw(st.integers(0, len(b))) :]
            elif kind == "splice":
                i = data.draw(st.integers(0, len(b)))
                b[i:i] = data.draw(st.binary(min_size=1, max_size=64))
            elif kind == "fill":
                i = data.draw(st.integers(0, len(b)))
                b[i:] = bytes([data.draw(st.sampled_from([0, 255]))]) * (len(b) - i)
        files = dict(base)
        files[name] = bytes(b)
        got = []
        outcome, bad = judge_timed(ddq, base, files, acceptable, wl.opts, view=got)
        res["examples"] += 1
        if outcome in ("corrupt", "clean"):
            res[outcome] += 1
        if index:
            bad = bad + index_timed(ddq, files, wl.opts, res, got)
        for cat, detail in bad:
            res["forged_index" if cat == "forged_index" else "unexpected"] += 1
            if len(res["fail"]) < max_fail:
                res["fail"].append(
                    {
                        "seed": seed,
                        "nops": nops,
                        "mutation": "hypothesis on " + name,
                        "category": cat,
                        "detail": detail[:400],
                    }
                )

    prop()
    return res
