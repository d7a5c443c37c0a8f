# ddq_group benchmarks (SPEC §14, DESIGN §6.1): durable-on-return writes from many producers
# sharing syncs. Runs on CPython (all parts) and MicroPython (asyncio); bench/run.py runs each part
# as its own process and renders the rows with report() below.
#
#   python bench/group_bench.py threads key=value ...   (CPython) round-robin blocks of:
#       always   one producer, Queue(sync="always").enqueue: the baseline rate
#       group    `threads` producers, each putting `m` messages through ddq_group.Group
#       pq       `threads` producers on persist-queue SQLiteAckQueue(multithreading=True)
#       life_g   one caller: Group enqueue + claim + ack (ack_durable: 2 fsyncs, claim unsynced)
#       life_a   one caller: Queue(sync="ack") enqueue + claim + ack (the same 2 fsyncs)
#       floor    the hand-off alone: `threads` producers through a Group over a target that
#                does nothing (no queue work, no fsync; its sync only releases the GIL)
#       work     the queue work alone: one caller, Queue(sync="none").enqueue on a storage
#                without fsync (the CPU a leader applies per message)
#   micropython bench/group_bench.py asyncio key=value ...  (and python): `tasks` asyncio tasks
#       each awaiting `m` Group enqueues: writes per sync
#
# fsyncs are counted by a storage wrapper (file syncs and directory syncs); no timers in ddq.
import sys

import common  # bench/ is sys.path[0]: the script's own directory
from common import emit, fresh, now_us, since_us

REPO = common.REPO
sys.path.insert(0, REPO + "/port")

import ddq  # noqa: E402
import ddq_group  # noqa: E402

CLOCK_MS = 1767225600000


def clock():
    return CLOCK_MS  # fixed: leases never expire inside a run; no syscall


class Counting(ddq.PosixStorage):
    """ddq.PosixStorage counting file and directory syncs, and the microseconds spent in them."""

    def __init__(self):
        super().__init__()
        self.syncs = 0
        self.us = 0

    def sync(self, f):
        self.syncs += 1
        t0 = now_us()
        super().sync(f)
        self.us += since_us(t0)

    def sync_dir(self, path):
        self.syncs += 1
        t0 = now_us()
        super().sync_dir(path)
        self.us += since_us(t0)


class CpuOnly(ddq.PosixStorage):
    """For the "work" block only: the queue's writes without their fsyncs (segment rotations
    sync too), so that it measures the per-message CPU that a group leader applies."""

    def sync(self, f):
        f.flush()

    def sync_dir(self, path):
        pass


# --- threads (CPython) -------------------------------------------------------------------------


class Null:
    """A Group target that does no queue work and no fsync: its sync only releases the GIL the
    way the group leader's yield does, so followers block and are woken as over a real queue
    (without it every caller would lead a batch of one and nobody would hand off)."""

    def __init__(self):
        self.n = 0

    def enqueue(self, payload):
        self.n += 1
        return self.n

    def sync(self):
        ddq_group._yield()
        return self.n

    def close(self):
        pass


def _threads(n, body):
    """Run body(t) in n threads started together; return the microseconds from the start to
    the last one's end (thread creation excluded)."""
    import threading

    bar = threading.Barrier(n + 1)

    def run(t):
        bar.wait()
        body(t)

    ts = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for t in ts:
        t.start()
    bar.wait()
    t0 = now_us()
    for t in ts:
        t.join()
    return since_us(t0)


def part_threads(a):
    n, m, nt, k, payload = a["n"], a["m"], a["threads"], a["life"], a["payload"]
    base = fresh(a["dir"])
    p = b"x" * payload
    qa = ddq.Queue(base + "/a", sync="always", clock=clock)
    fs = Counting()
    qg = ddq.Queue(base + "/g", sync="none", clock=clock, storage=fs)
    g = ddq_group.Group(qg)
    ql = ddq.Queue(base + "/l", sync="none", clock=clock)
    gl = ddq_group.Group(ql)
    qk = ddq.Queue(base + "/k", sync="ack", clock=clock)
    qw = ddq.Queue(base + "/w", sync="none", clock=clock, storage=CpuOnly())
    gf = ddq_group.Group(Null())
    pq = None
    try:
        import persistqueue

        pq = persistqueue.SQLiteAckQueue(base + "/pq", multithreading=True)
    except ImportError:
        print("persist-queue missing: no pq rows")
    blocks = {
        "always": [],
        "group": [],
        "pq": [],
        "life_g": [],
        "life_a": [],
        "floor": [],
        "work": [],
        "fsync": [],
    }
    syncs = msgs = fl_syncs = 0

    def life(enq, claim, ack):
        t0 = now_us()
        for _ in range(k):
            enq(p)
            ack(claim(30000).seq)
        return since_us(t0) / k

    try:
        for b in range(a["blocks"] + 1):  # block 0 warms up (files, caches, threads)
            t0 = now_us()
            for _ in range(n):
                qa.enqueue(p)
            us_a = since_us(t0) / n
            s0, u0, b0 = fs.syncs, fs.us, g.syncs
            us_g = _threads(nt, lambda t: [g.enqueue(p) for _ in range(m)]) / (nt * m)
            ds = fs.syncs - s0
            us_s = (fs.us - u0) / max(g.syncs - b0, 1)  # the group's own sync time per batch
            us_p = None
            if pq is not None:
                us_p = _threads(nt, lambda t: [pq.put(p) for _ in range(a["pq_m"])]) / (
                    nt * a["pq_m"]
                )
            us_lg = life(gl.enqueue, lambda ms: gl.locked(ql.claim, ms), gl.ack)
            us_la = life(qk.enqueue, qk.claim, qk.ack)
            f0 = gf.syncs
            us_f = _threads(nt, lambda t: [gf.enqueue(p) for _ in range(m)]) / (nt * m)
            df = gf.syncs - f0
            t0 = now_us()
            for _ in range(n):
                qw.enqueue(p)
            us_w = since_us(t0) / n
            if not b:
                continue
            syncs += ds
            fl_syncs += df
            msgs += nt * m
            for key, v in (
                ("always", us_a),
                ("group", us_g),
                ("pq", us_p),
                ("life_g", us_lg),
                ("life_a", us_la),
                ("floor", us_f),
                ("work", us_w),
                ("fsync", us_s),
            ):
                if v is not None:
                    blocks[key].append(v)
    finally:
        g.close()
        gl.close()
        gf.close()
        qa.close()
        qk.close()
        qw.close()
        if pq is not None:
            pq.close() if hasattr(pq, "close") else None
        common.rmtree(base)
    emit(
        {
            "blocks": blocks,
            "threads": nt,
            "m": m,
            "pq_m": a["pq_m"],
            "payload": payload,
            "msgs": msgs,
            "fsyncs": syncs,
            "floor_syncs": fl_syncs,
            "n": n,
            "life": k,
        }
    )


# --- asyncio (both interpreters) ---------------------------------------------------------------


def part_asyncio(a):
    import asyncio

    nt, m, payload = a["tasks"], a["m"], a["payload"]
    base = fresh(a["dir"])
    p = b"x" * payload
    fs = Counting()
    q = ddq.Queue(base + "/g", sync="none", clock=clock, storage=fs)
    g = ddq_group.Group(q)

    async def task():
        for _ in range(m):
            await g.aenqueue(p)

    async def main():
        await asyncio.gather(*[task() for _ in range(nt)])

    s0 = fs.syncs
    t0 = now_us()
    try:
        asyncio.run(main())
        us = since_us(t0)
        syncs = fs.syncs - s0
    finally:
        g.close()
        common.rmtree(base)
    emit(
        {
            "tasks": nt,
            "m": m,
            "msgs": nt * m,
            "fsyncs": syncs,
            "group_syncs": g.syncs,
            "us": us,
            "payload": payload,
        }
    )


PARTS = {
    "threads": (
        part_threads,
        {
            "dir": "",
            "n": 100,
            "m": 50,
            "threads": 16,
            "pq_m": 10,
            "life": 30,
            "payload": 100,
            "blocks": 7,
        },
    ),
    "asyncio": (part_asyncio, {"dir": "", "tasks": 64, "m": 20, "payload": 100}),
}

# Sizes for bench/run.py: (full, smoke), and the parts it runs: (result key, interpreter, part).
SIZES = {
    "group_threads": ({"blocks": 7}, {"blocks": 1, "n": 10, "m": 5, "pq_m": 2, "life": 3}),
    "group_asyncio": ({"m": 20}, {"m": 3}),
}
RUNS = (
    ("cp_group_threads", "cp", "threads", "group_threads"),
    ("cp_group_asyncio", "cp", "asyncio", "group_asyncio"),
    ("mp_group_asyncio", "mp", "asyncio", "group_asyncio"),
)
TARGETS = {"g1": 8.0, "g2": 8.0, "g3": 10.0, "g5": 16.0}


def report(R, rep, h):
    """Add the ddq_group rows to run.py's report: h holds run.py's helpers (fmt, paired,
    median, rate, verdict)."""
    fmt, paired, median, rate, verdict = (
        h["fmt"],
        h["paired"],
        h["median"],
        h["rate"],
        h["verdict"],
    )
    th = R.get("cp_group_threads")
    if th:
        b = th["blocks"]
        per = th["msgs"] / th["fsyncs"] if th["fsyncs"] else None
        rep.row(
            "g1",
            "CPython ddq_group, %d producer threads, durable-on-return puts of %d B: "
            "messages per fsync (file + dir)" % (th["threads"], th["payload"]),
            fmt(per),
            "%s msgs, %s fsyncs" % (fmt(th["msgs"]), fmt(th["fsyncs"])),
            fmt(per),
            "≥ 8",
            verdict(per, TARGETS["g1"]),
        )
        r = paired(b["always"], b["group"])
        rep.row(
            "g2",
            'same, throughput vs one producer\'s sync="always" enqueues, msgs/s',
            fmt(rate(median(b["group"]))),
            'sync="always" %s/s' % fmt(rate(median(b["always"]))),
            fmt(r),
            "≥ 8×",
            verdict(r, TARGETS["g2"]),
        )
        if b.get("pq"):
            r = paired(b["pq"], b["group"])
            rep.row(
                "g3",
                "same vs persist-queue SQLiteAckQueue(multithreading=True), %d threads "
                "putting" % th["threads"],
                fmt(rate(median(b["group"]))),
                "persist-queue %s/s" % fmt(rate(median(b["pq"]))),
                fmt(r),
                "≥ 10×",
                verdict(r, TARGETS["g3"]),
            )
        if b.get("floor"):
            nt = th["threads"]
            rep.row(
                "g2f",
                "hand-off floor: the same %d threads through ddq_group over a target "
                "that does nothing (no queue work, no fsync; its sync only releases the GIL), "
                "msgs/s" % nt,
                fmt(rate(median(b["floor"]))),
                "%s µs a message (%s per sync); queue work alone %s µs; ddq_group %s µs"
                % (
                    fmt(median(b["floor"])),
                    fmt(th["msgs"] / th["floor_syncs"] if th.get("floor_syncs") else None),
                    fmt(median(b["work"])),
                    fmt(median(b["group"])),
                ),
                fmt(paired(b["group"], b["floor"])),
                "ddq_group ÷ floor (report)",
                "report",
            )
            cap_a, cap_p = _bounds(b, nt)
            r2 = paired(b["always"], b["group"])
            rep.row(
                "g2c",
                "ceiling of g2 for any leader/follower group of %d threads at this "
                'fsync: sync="always" µs ÷ min(2F/%d, F/%d + floor + queue work), F = the '
                "group's own sync µs per batch" % (nt, nt, nt),
                fmt(median(cap_a)),
                "g2 reached %s×%s"
                % (fmt(r2), "; ceiling of g3 %s×" % fmt(median(cap_p)) if cap_p else ""),
                fmt(r2 / median(cap_a) if median(cap_a) else None),
                "g2 ÷ ceiling (report)",
                "report",
            )
        r = paired(b["life_a"], b["life_g"])
        rep.row(
            "g4",
            "one caller, ddq_group lifecycle (enqueue + claim + durable ack) ÷ Queue "
            'sync="ack" (the same 2 fsyncs): no cost',
            fmt(rate(median(b["life_g"]))),
            'sync="ack" %s/s' % fmt(rate(median(b["life_a"]))),
            fmt(r),
            "≈ 1 (report)",
            "report",
        )
    for key, interp in (("cp_group_asyncio", "CPython"), ("mp_group_asyncio", "MicroPython")):
        t = R.get(key)
        if t:
            per = t["msgs"] / t["fsyncs"] if t["fsyncs"] else None
            rep.row(
                "g5",
                "%s ddq_group, %d asyncio tasks awaiting puts: messages per fsync"
                % (interp, t["tasks"]),
                fmt(per),
                "%s msgs, %s fsyncs, %s/s"
                % (fmt(t["msgs"]), fmt(t["fsyncs"]), fmt(t["msgs"] * 1e6 / t["us"])),
                fmt(per),
                "≥ 16",
                verdict(per, TARGETS["g5"]),
            )


def _bounds(b, nt):
    """Per block: the ceiling of the ratio vs sync="always" (and vs persist-queue) for any
    leader/follower group of nt producers, one write outstanding each and one fsync at a time,
    at the group's own sync time per batch F in that block (file + directory syncs) and the
    per-message CPU c = floor + queue work (serialised by the GIL): either every fsync waits
    for all nt to come back (F/nt + c a message) or fsyncs run back to back and the producers
    split into two alternating halves (2F/nt). DESIGN §6.1."""
    cap_a, cap_p = [], []
    for i in range(len(b["group"])):
        c = b["floor"][i] + b["work"][i]
        f = b["fsync"][i] if b.get("fsync") else max(b["always"][i] - b["work"][i], 0.0)
        best = min(2 * f / nt, f / nt + c)
        cap_a.append(b["always"][i] / best if best else 0.0)
        if b.get("pq"):
            cap_p.append(b["pq"][i] / best if best else 0.0)
    return cap_a, cap_p


def notes(R, fmt, median):
    """run.py's "why missed" entries for g2 and g3, from this run's floor and ceiling."""
    th = R.get("cp_group_threads")
    if not th or not th["blocks"].get("floor"):
        return {}
    b, nt = th["blocks"], th["threads"]
    cap_a, cap_p = _bounds(b, nt)
    fl, w, a = median(b["floor"]), median(b["work"]), median(b["always"])
    f = median(b["fsync"]) if b.get("fsync") else a - w
    pq = " and %s× persist-queue" % fmt(median(cap_p)) if cap_p else ""
    need = '%s µs for 8× sync="always"' % fmt(a / 8 - f / nt)
    if b.get("pq"):
        need += ", %s µs for 10× persist-queue" % fmt(median(b["pq"]) / 10 - f / nt)
    text = (
        "Each message costs CPU that the GIL serialises: the hand-off (a follower blocks, is "
        "woken and takes the GIL back) %s µs in this run (row g2f: no queue work, no fsync) "
        "plus the queue work %s µs, against the group's sync time per batch F of %s µs (file + "
        'directory syncs; sync="always" took %s µs a message). With %d producers, '
        "one write outstanding each, no leader/follower group does better than min(2F/%d, "
        'F/%d + hand-off + work) a message (DESIGN §6.1): a ceiling of %s× sync="always"%s '
        "here (row g2c). The per-message CPU must stay under %s (F/%d + CPU within the "
        "target's time a message): a cheaper hand-off than CPython threads give, more "
        "producers, or slower fsyncs (the ratio tends to the messages per fsync, row g1, "
        "as F grows)."
        % (fmt(fl), fmt(w), fmt(f), fmt(a), nt, nt, nt, fmt(median(cap_a)), pq, need, nt)
    )
    return {"g2": text, "g3": text}


def main():
    common.dispatch(PARTS, "group_bench.py {threads|asyncio} key=value ...")


if __name__ == "__main__":
    main()
