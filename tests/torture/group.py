"""Part 1g: crash states of durable-on-return group writes (port/ddq_group.py, SPEC §14 G3).

A seeded asyncio workload (one event loop: deterministic) of `tasks` tasks, each enqueuing
`per` messages through a ddq_group.Group over a recording MemFS (Queue sync="none", tight
limits: rotations and compactions happen), some also claiming and acking through it
(ack_durable). Each call records the storage-log position at which it returned. The log is
replayed step by step (crash.Sim) and every legal crash state under the posix, lfs and fat
models is opened with ddq: a put that had returned by then must be retained with its payload,
an ack that had returned must be acked (or its item reclaimed). A miss is `returned_lost`;
a state ddq cannot open (other than Corrupt on a state with holes, crash.py's rule) is
`unexpected`. Calls still waiting at the cut may be lost (G3): not checked. With `threads`
the same calls come from real threads (CPython's scheduler picks the interleaving).
"""

import asyncio

import crash
import memfs
import tmodel


def workload(ddq, ddq_group, seed, tasks, per, threads=False):
    """Run the workload; return (fs, events, opts): events are (log position after return,
    "put"|"ack", seq, payload). threads: the same calls from real threads (the interleaving
    is the scheduler's, not the seed's; every storage call still happens under the group's
    lock, and a position read after the return is at or after the sync that covered it)."""
    rng = tmodel.Rng(seed)
    memfs.MemFS.Locked = ddq.Locked
    fs = memfs.MemFS(dirs=("/q",), record=True, can_truncate=seed % 2 == 0)
    opts = tmodel.params(seed, "none")
    # the group writes more than tmodel's tiny queues hold; still small enough to rotate and,
    # as acked items pile up, to compact
    opts.update({"max_items": 64, "segment_bytes": 1024, "max_segments": 4})
    q = ddq.Queue("/q", storage=fs, clock=tmodel.Clock(), **tmodel.queue_opts(opts))
    g = ddq_group.Group(q)
    events = []  # an ack is recorded before its call too ("acking"): from then on its item may
    # be reclaimed by a compaction before the ack returned

    # each task's payloads and ack choices are drawn up front: the same for both forms
    plan = [
        [(b"%d.%d." % (t, i) + rng.bytes(rng.below(24)), rng.below(2) == 0) for i in range(per)]
        for t in range(tasks)
    ]

    def put(s, p, ack):
        # a put returned: log it; to be acked, claim it (the seq to ack) and log the attempt
        events.append((len(fs.log), "put", s, p))
        if not ack:
            return None
        c = g.locked(q.claim_seq, s, tmodel.LEASE_MS)
        events.append((-1, "acking", s, None))
        return c.seq

    async def task(t):
        for p, ack in plan[t]:
            try:
                s = await g.aenqueue(p)
            except ddq.Full:
                continue
            seq = put(s, p, ack)
            if seq is not None and await g.aack(seq):
                events.append((len(fs.log), "ack", s, None))

    def thread(t):
        for p, ack in plan[t]:
            try:
                s = g.enqueue(p)
            except ddq.Full:
                continue
            seq = put(s, p, ack)
            if seq is not None and g.ack(seq):
                events.append((len(fs.log), "ack", s, None))

    async def main():
        await asyncio.gather(*[task(t) for t in range(tasks)])

    try:
        if threads:
            import threading

            ts = [threading.Thread(target=thread, args=(t,)) for t in range(tasks)]
            for x in ts:
                x.start()
            for x in ts:
                x.join()
        else:
            asyncio.run(main())
    finally:
        g.close()
    return fs, events, opts


def check(ddq, fs_files, dirs, must, events, opts):
    """Open one crash state; return [(category, detail)]."""
    fs = memfs.MemFS(fs_files, dirs, budget=500000)
    q = ddq.Queue(
        "/q", storage=fs, clock=tmodel.Clock(tmodel.CLOCK0 + 10**6), **tmodel.queue_opts(opts)
    )
    bad = []
    try:
        st = {}
        for it in q.items():
            st[it.seq] = it.state
        acked = set(e[2] for e in events if e[1] == "acking")
        for _pos, kind, seq, pay in must:
            if kind == "ack":
                if st.get(seq, "acked") != "acked":
                    bad.append(
                        ("returned_lost", "ack of %d returned, recovered %s" % (seq, st[seq]))
                    )
            elif seq not in st:
                if seq not in acked:  # an acked item may be reclaimed by a compaction
                    bad.append(("returned_lost", "put %d returned, then lost" % seq))
            elif q.read(seq) != pay:
                bad.append(("returned_lost", "put %d returned, payload differs" % seq))
    finally:
        q.close()
    return bad


def run_seed(
    ddq, ddq_group, seed, tasks=4, per=6, models=("posix", "lfs", "fat"), max_fail=5, threads=False
):
    fs, events, opts = workload(ddq, ddq_group, seed, tasks, per, threads)
    log = fs.log
    res = {
        "seed": seed,
        "threads": threads,
        "log": len(log),
        "puts": sum(1 for e in events if e[1] == "put"),
        "acks": sum(1 for e in events if e[1] == "ack"),
        "states": 0,
        "returned_lost": 0,
        "unexpected": 0,
        "reported": 0,
        "fail": [],
    }
    seen = set()
    sim = crash.Sim(dirs=("/q",))
    for k in range(len(log) + 1):
        if k:
            sim.apply(log[k - 1])
        must = [e for e in events if 0 <= e[0] <= k]
        for model in models:
            for variant, files, dirs, holes in sim.states(model):
                key = (crash.state_hash(files, dirs), len(must))
                if key in seen:
                    continue
                seen.add(key)
                res["states"] += 1
                try:
                    bad = check(ddq, files, dirs, must, events, opts)
                except ddq.Corrupt as e:
                    if holes:
                        res["reported"] += 1
                        continue
                    bad = [("unexpected", "Corrupt on a legal crash state: %s" % e)]
                except Exception as e:
                    bad = [("unexpected", "open raised %s: %s" % (type(e).__name__, e))]
                if bad:
                    where = {"seed": seed, "crash_after_step": k, "model": model}
                    where["variant"] = variant
                    where["storage_op"] = repr(log[k - 1])[:120] if k else None
                    tmodel.tally(res, bad, max_fail, where)
    return res
