"""The CPython parts of the benchmarks; bench/run.py runs each as its own process.

    python bench/cp_bench.py PART key=value ...

Parts (each prints one "RESULT <json>" line; all times in microseconds, best of `reps`):
    lifecycle  raw append+fsync loop; ddq sync="always" / "ack" / group commit; persist-queue
               SQLiteAckQueue; litequeue (default and synchronous=FULL). Round-robin blocks.
    counts     fsyncs (file and directory) and bytes written per operation, through a counting
               wrapper around ddq.PosixStorage, for each sync policy.
    scaling    enqueue / claim / ack cost at `small` and at `big` pending items.
    inflight   claim cost with `many` claims in flight vs with none.
    recovery   open (recover) of a log of `mib` MiB vs a raw sequential read + crc32 of its files,
               twice: without queue.index (full replay, as after a crash) and after a clean
               close (the index path); and the close that writes the index.
    profile    cProfile of the CPU side of a lifecycle (sync="none") and of a full replay.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "port"))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(REPO, "tests"))  # tests/shared.py: steps the tests take too

import common  # noqa: E402
from common import best, emit, fresh, now_us, since_us  # noqa: E402

import ddq  # noqa: E402
import ddq_outbox  # noqa: E402
import shared  # noqa: E402

CLOCK_MS = [1767225600000]


def clock():
    # A fixed wall clock (leases never expire inside a run); the default clock costs a syscall.
    return CLOCK_MS[0]


# --- lifecycle ------------------------------------------------------------------------------


# Each subject is a generator (common.subject): primed with next(), then send(k) runs k
# lifecycles (or raw lifecycles' worth of records) and returns the elapsed microseconds; close()
# cleans up. The setup (opening a queue, a database, a file) stays outside the timings.


def raw_subject(d, payload):
    """Raw appends: the three record sizes of a lifecycle, each written and fsynced."""
    sizes = (48 + payload, 48, 48)
    buf = memoryview(bytearray(48 + payload))
    f = open(d + "/raw.log", "ab")
    fd = f.fileno()

    def loop(k):
        for _ in range(k):
            for s in sizes:
                f.write(buf[:s])
                f.flush()
                os.fsync(fd)

    return common.subject(loop, f.close)


def ddq_subject(d, payload, sync, every=0):
    q = ddq.Queue(d + "/q", sync=sync, clock=clock)
    p = bytes(payload)

    def loop(k):
        for i in range(k):
            q.enqueue(p)
            q.ack(q.claim(30000).seq)
            if every and i % every == every - 1:
                q.sync()
        q.sync()

    return common.subject(loop, q.close)


def outbox_subject(d, payload, every):
    """Group commit through ddq_outbox.Outbox(sync_every=...): put, get, ack; sync_every counts
    records, three a lifecycle."""
    ob = ddq_outbox.Outbox(d + "/ob", sync_every=3 * every, clock=clock)
    p = bytes(payload)

    def loop(k):
        for _ in range(k):
            ob.put("t", p)
            ob.ack(ob.get())
        ob.sync()

    return common.subject(loop, ob.close)


def pq_subject(d, payload):
    import persistqueue

    q = persistqueue.SQLiteAckQueue(d + "/pq")
    p = bytes(payload)

    def loop(k):
        for _ in range(k):
            q.put(p)
            q.ack(id=q.get(block=False, raw=True)["pqid"])

    return common.subject(loop, q.close)


def lq_subject(d, payload, full):
    import litequeue

    q = litequeue.LiteQueue(d + "/lq.sqlite3")
    if full:
        q.conn.execute("PRAGMA synchronous = FULL;")
    p = "x" * payload

    def loop(k):
        for _ in range(k):
            q.put(p)
            q.done(q.pop().message_id)

    return common.subject(loop, q.close)


def part_lifecycle(a):
    """Subjects run in small blocks, round-robin, so that a subject and its baseline always see
    the same moment of a shared machine; run.py takes the median of per-block ratios."""
    n, fast, payload, every = a["n"], a["fast"], a["payload"], a["every"]
    base = fresh(a["dir"])
    subjects = [
        ("raw_sync", 3, n, raw_subject(fresh(base + "/raw"), payload)),
        ("ddq_always", 1, n, ddq_subject(fresh(base + "/a"), payload, "always")),
        ("ddq_ack", 1, n, ddq_subject(fresh(base + "/k"), payload, "ack")),
        ("ddq_group", 1, fast, ddq_subject(fresh(base + "/g"), payload, "none", every)),
        ("persistqueue", 1, n, pq_subject(fresh(base + "/p"), payload)),
        ("litequeue_default", 1, fast, lq_subject(fresh(base + "/l"), payload, False)),
        ("litequeue_full", 1, n, lq_subject(fresh(base + "/f"), payload, True)),
    ]
    subjects.append(("outbox_group", 1, n, outbox_subject(fresh(base + "/o"), payload, every)))
    try:
        blocks = common.run_blocks(subjects, a["blocks"])
    finally:
        common.rmtree(base)
    emit(
        {
            "us_per": {k: best(v) for k, v in blocks.items()},
            "blocks": blocks,
            "n": n,
            "fast": fast,
            "payload": payload,
            "every": every,
        }
    )


# --- counts -----------------------------------------------------------------------------------


class CountingStorage(ddq.PosixStorage):
    """ddq.PosixStorage that counts bytes written, file syncs and directory syncs."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.syncs = 0
        self.dir_syncs = 0

    def write(self, f, buf):
        self.bytes += len(buf)
        super().write(f, buf)

    def sync(self, f):
        self.syncs += 1
        super().sync(f)

    def sync_dir(self, path):
        self.dir_syncs += 1
        super().sync_dir(path)

    def snap(self):
        return (self.syncs, self.dir_syncs, self.bytes)


class OutboxAsQueue:
    """Outbox put/get/ack under the Queue names the counting loop uses."""

    def __init__(self, ob):
        self.ob = ob
        self.m = None

    def enqueue(self, p):
        return self.ob.put("t", p)

    def claim(self, lease):
        self.m = self.ob.get(lease)
        return self.m

    def ack(self, seq):
        return self.ob.ack(self.m)

    def sync(self):
        return self.ob.sync()

    def close(self):
        self.ob.close()
        self.ob.queue.close()


def part_counts(a):
    n, payload, every = a["n"], a["payload"], a["every"]
    out = {}
    policies = ["always", "ack", "group", "outbox"]
    for policy in policies:
        fs = CountingStorage()
        d = fresh("%s/%s" % (a["dir"], policy))
        q = ddq.Queue(
            d + "/q",
            sync=policy if policy in ("always", "ack") else "none",
            clock=clock,
            storage=fs,
            segment_bytes=a["segment"],
        )
        if policy == "outbox":
            ob = ddq_outbox.Outbox(q, sync_every=3 * every, clock=clock)
            q = OutboxAsQueue(ob)
        p = bytes(payload)
        per = {"enqueue": [0, 0, 0], "claim": [0, 0, 0], "ack": [0, 0, 0], "sync": [0, 0, 0]}

        def acc(op, before, after, per=per):
            for k in range(3):
                per[op][k] += after[k] - before[k]

        for i in range(n):
            s0, s1, s2, s3 = shared.marks(q, p, 30000, fs.snap)
            acc("enqueue", s0, s1)
            acc("claim", s1, s2)
            acc("ack", s2, s3)
            if policy == "group" and i % every == every - 1:
                q.sync()
                acc("sync", s3, fs.snap())
        s4 = fs.snap()
        q.sync()
        acc("sync", s4, fs.snap())
        q.close()
        out[policy] = {
            op: {"fsyncs": v[0] / n, "dir_fsyncs": v[1] / n, "bytes": v[2] / n}
            for op, v in per.items()
        }
        common.rmtree(d)
    emit({"n": n, "payload": payload, "every": every, "segment": a["segment"], "per_op": out})


# --- scaling ----------------------------------------------------------------------------------


def part_scaling(a):
    """Both queues open at once; each round times the small one, then the big one, so that a
    pair of figures always sees the same moment of the machine (run.py: median of the pairs).
    Acked items stay in both indexes until the compaction at the end (m more a round)."""
    sizes, qs, out = common.scaling_open(ddq, a, lambda: clock)
    common.scaling_rounds(sizes, qs, out, a)
    # Compaction, and the first enqueue after it (the admission plan is rebuilt then: O(n)).
    p = bytes(a["payload"])
    for k, q in zip(sizes, qs):
        r = out[str(k)]
        t0 = now_us()
        q.compact()
        r["compact_us"] = since_us(t0)
        t0 = now_us()
        q.enqueue(p)
        r["first_enqueue_after_compact_us"] = since_us(t0)
        t0 = now_us()
        q.enqueue(p)
        r["second_enqueue_after_compact_us"] = since_us(t0)
    common.scaling_emit(sizes, qs, out, a)


def part_inflight(a):
    out = {}
    for many in (0, a["many"]):
        d = fresh("%s/i%d" % (a["dir"], many))
        q = ddq.Queue(d + "/q", sync="none", clock=clock, max_items=1000000)
        p = bytes(a["payload"])
        for _ in range(many + a["m"] * a["reps"] + 10):
            q.enqueue(p)
        for _ in range(many):
            q.claim(600000)
        runs = []
        for _ in range(a["reps"]):
            t = 0
            for _ in range(a["m"]):
                t0 = now_us()
                c = q.claim(30000)
                t += since_us(t0)
                q.ack(c.seq)
            runs.append(t / a["m"])
        out[str(many)] = best(runs)
        q.close()
        common.rmtree(d)
    emit({"many": a["many"], "claim_us": out})


# --- recovery ---------------------------------------------------------------------------------


def build_log(d, mib, payload):
    """A log of about mib MiB: DATA records, half of them claimed and acked."""
    q = ddq.Queue(d, sync="none", clock=clock, max_items=1000000)
    p = bytes(payload)
    goal = mib * 1048576
    i = 0
    while q.stats().stored_bytes < goal:
        for _ in range(256):
            q.enqueue(p)
            if i % 2 == 0:
                c = q.claim(30000)
                q.ack(c.seq)
            i += 1
    q.close()


def part_recovery(a):
    """common.recovery over a log of `mib` MiB (built unless build=0)."""
    d = a["dir"] + "/log"
    if a["build"]:
        fresh(a["dir"])
        build_log(d, a["mib"], a["payload"])
    common.recovery(ddq, d, a, lambda: clock, {"payload": a["payload"]})


# --- profile ----------------------------------------------------------------------------------


def top(stats, total, k):
    rows = []
    for (fn, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        rows.append((tt, ct, nc, "%s:%d(%s)" % (os.path.basename(fn), line, name)))
    rows.sort(reverse=True)
    return [
        {
            "func": r[3],
            "calls": r[2],
            "tottime_pct": 100.0 * r[0] / total,
            "cumtime_pct": 100.0 * r[1] / total,
        }
        for r in rows[:k]
    ]


def profile_call(fn, k):
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    fn()
    pr.disable()
    st = pstats.Stats(pr)
    return top(st, st.total_tt or 1e-9, k)


def part_profile(a):
    d = fresh(a["dir"])
    q = ddq.Queue(d + "/q", sync="none", clock=clock)
    p = bytes(a["payload"])

    def life():
        for _ in range(a["n"]):
            q.enqueue(p)
            c = q.claim(30000)
            q.ack(c.seq)

    life_rows = profile_call(life, a["top"])
    q.close()
    build_log(d + "/r", a["mib"], 1024)
    # The full replay (the crash path): with the index it would be one crc32 pass instead.
    rec_rows = profile_call(
        lambda: ddq.Queue(d + "/r", clock=clock, index_bytes=0).close(), a["top"]
    )
    common.rmtree(d)
    emit({"lifecycle": life_rows, "recovery": rec_rows, "n": a["n"], "mib": a["mib"]})


# --- standing backlog (DESIGN §12) ---------------------------------------------------------------


def part_steady(a):
    # As bench/mp_bench.py part `steady`, on the host filesystem: what the options admit, then
    # for each standing backlog and sync policy a FIFO run of n messages, each call timed alone.
    opts = common.steady_opts(a, 1000000)
    p = bytes(a["payload"])
    d = fresh(a["dir"])
    q = ddq.Queue(d + "/cap", sync="none", clock=clock, **opts)
    cap = common.fill_until_full(ddq, q, p, 1000000)
    q.close()
    out = {}
    raw = {}
    for frac in a["backlogs"].split(","):
        b = cap * int(frac) // 100
        for sync, step in common.steady_cases(a):
            path = fresh("%s/q-%s-%s-%d" % (d, frac, sync, step)) + "/q"
            q = ddq.Queue(path, sync="none", clock=clock, **opts)
            for _ in range(b):
                q.enqueue(p)
            q.close()
            cs = CountingStorage()
            q = ddq.Queue(path, sync=sync, clock=clock, storage=cs, reclaim_step=step, **opts)
            cs.bytes = 0
            r = common.steady_run(q, a["n"], p, counter=cs)
            q.close()
            r["ddq_bytes"] = cs.bytes / a["n"]
            r["backlog"] = b
            r["floor"] = common.floor(opts, a["payload"], b)
            out["%s-%s-%d" % (frac, sync, step)] = r
            common.rmtree(path)
        if a["raw"]:  # the floor, no ddq: the same appends and fsyncs (common.raw_floor_run)
            path = fresh("%s/raw-%s" % (d, frac))
            raw[frac] = common.raw_floor_run(
                path, a["n"], a["payload"], a["segment_bytes"], common.held(out, frac, a)
            )
            common.rmtree(path)
    common.rmtree(d)
    common.steady_emit(cap, opts, a, out, raw, {})


PARTS = {
    "steady": (part_steady, common.STEADY_DEFAULTS),
    "lifecycle": (
        part_lifecycle,
        {"dir": "", "n": 25, "fast": 2000, "payload": 100, "every": 100, "blocks": 12},
    ),
    "counts": (
        part_counts,
        {"dir": "", "n": 2000, "payload": 100, "every": 100, "segment": 4194304},
    ),
    "scaling": (
        part_scaling,
        {"dir": "", "small": 100, "big": 100000, "m": 2000, "payload": 100, "reps": 3},
    ),
    "inflight": (part_inflight, {"dir": "", "many": 1000, "m": 1000, "payload": 100, "reps": 3}),
    "recovery": (
        part_recovery,
        {"dir": "", "mib": 64, "payload": 1024, "reps": 3, "build": 1, "index_bytes": 1048576},
    ),
    "profile": (part_profile, {"dir": "", "n": 20000, "payload": 100, "mib": 16, "top": 12}),
}


def main():
    common.dispatch(PARTS, "cp_bench.py {%s} key=value ..." % "|".join(sorted(PARTS)))


if __name__ == "__main__":
    main()
