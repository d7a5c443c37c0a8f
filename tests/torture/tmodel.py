# tmodel: seeded workloads, the history they leave, and the Jepsen-style checker that judges a
# recovered queue against that history. Subset Python: the same code runs the CPython crash-state
# enumeration and the MicroPython power-cut sweeps, so a seed means the same workload on both.

import shared

LEASE_MS = 3600000  # long leases: no lease expires inside a workload, so states compare exactly
CLOCK0 = 1767225600000


class Rng(shared.Xorshift32):
    """tests/shared.py's xorshift32 seeded from a workload's seed (every entry point puts tests/ on
    sys.path): identical sequences on both interpreters."""

    def __init__(self, seed):
        shared.Xorshift32.__init__(self, (seed * 2654435761 + 12345) & 0xFFFFFFFF)


class Clock:
    def __init__(self, t=CLOCK0):
        self.t = t

    def __call__(self):
        return self.t

    def advance(self, ms):
        self.t += ms


def params(seed, sync=None, index=None):
    """Queue options for a seed: tight limits so rotation and compaction happen often.

    index: None leaves index_bytes at ddq's default (1 MiB: these logs never reach it, so an
    index is read if present but never written); a number sets it (1: every close writes
    queue.index, SPEC 12.1; 0: never read or written) and adds save_index steps to the workload."""
    r = Rng(seed ^ 0x5EED)
    seg = (256, 320, 384, 448, 512)[r.below(5)]
    opts = {
        "segment_bytes": seg,
        "max_payload_bytes": 64,
        "max_items": 3 + r.below(6),
        "max_segments": 4 + r.below(5),
    }
    if sync is None:
        sync = ("always", "ack")[r.below(2)]
    opts["sync"] = sync
    if index is not None:
        opts["index_bytes"] = index
    if r.below(2):
        # Half the seeds reclaim through a generation staged over many calls (SPEC C13, C14):
        # cuts land in every step of it (the start, the copy, the carried tail, the publish,
        # the unlinks) and, with s = 1 (a build whose tail never catches up), in the whole
        # compaction that abandons it.
        opts["reclaim_step"] = 1 + r.below(5)
    return opts


def queue_opts(opts):
    """Options for ddq.Queue (the harness's own keys removed)."""
    out = {}
    for k in opts:
        if k != "outbox_every":
            out[k] = opts[k]
    return out


def counters(names, **fixed):
    """A part's result dict: each of the space-separated names at 0, "fail" an empty list (for
    tally), and the fixed fields."""
    res = {"fail": []}
    for k in names.split():
        res[k] = 0
    for k in fixed:
        res[k] = fixed[k]
    return res


def tally(res, bad, max_fail, where, cut=400):
    """Count each (category, detail) of bad in res[category]; keep the first max_fail of them in
    res["fail"] as records: the fields of where (seed, workload, point...), the category and
    the detail cut to `cut` characters."""
    for cat, detail in bad:
        res[cat] += 1
        if len(res["fail"]) < max_fail:
            rec = dict(where)
            rec["category"] = cat
            rec["detail"] = detail[:cut]
            res["fail"].append(rec)


def exc_name(e):
    return type(e).__name__


def _item_tuple(it, payloads, reasons):
    return (
        it.seq,
        it.state,
        it.attempts,
        it.lease_until_ms,
        it.not_before_ms,
        payloads.get(it.seq),
        reasons.get(it.seq, b"") if it.state == "quarantined" else b"",
    )


# step()'s draw r in [0, 100) (in [0, 108) with a small index_bytes): the first operation whose
# bound is above r.
_DRAWS = (
    (36, "enqueue"),
    (56, "claim"),
    (61, "claim_ordered"),
    (74, "ack"),
    (80, "retry"),
    (84, "quarantine"),
    (88, "compact"),
    (92, "reopen"),
    (97, "read"),
    (100, "sync"),
    (104, "save_index"),
    (108, "reopen"),
)


class Workload:
    """Runs a seeded mix of enqueue/claim/ack/retry/quarantine/compact/reopen/read on one queue.

    After every operation it records the logical state L[i+1] (items with state, attempts,
    deadlines, payload and reason), the operation and its outcome, and the storage position (pos())
    before and after, so a crash state cut at position k can be judged against L[i] / L[i+1] of the
    op in flight.
    """

    def __init__(self, ddq, path, make_storage, seed, nops, opts=None, pos=None, clock=None):
        self.ddq = ddq
        self.path = path
        self.make_storage = make_storage
        self.seed = seed
        self.nops = nops
        self.opts = opts if opts is not None else params(seed)
        self.pos = pos if pos is not None else (lambda: 0)
        self.clock = clock if clock is not None else Clock()
        self.rng = Rng(seed)
        self.payloads = {}
        self.reasons = {}
        self.ops = []  # (name, arg, outcome) ; outcome = ("ok", value) | ("err", excname)
        self.starts = []  # pos() before op i
        self.ends = []  # pos() after op i
        self.snaps = []  # snaps[i] = logical state before op i; snaps[-1] = final
        self.returned = []  # max seq returned by a completed enqueue before op i
        self.max_seq = 0
        self.q = None
        self.outbox = None
        self.synced = []  # per op: did an Outbox group commit sync during it
        self.synced_at = {}
        self.unexpected = []

    def open(self):
        st = self.make_storage()
        kw = {}
        for k in self.opts:
            if k != "outbox_every":
                kw[k] = self.opts[k]
        every = self.opts.get("outbox_every")
        if every:
            # group commit of the message layer: ddq_outbox.Outbox over a path opens its Queue with
            # sync="none" and syncs after every `every` records it writes [E15]
            del kw["sync"]
            self.outbox = __import__("ddq_outbox").Outbox(
                self.path, clock=self.clock, storage=st, sync_every=every, ticks=lambda: 0, **kw
            )
            self.q = self.outbox.queue
        else:
            self.outbox = None
            self.q = self.ddq.Queue(self.path, clock=self.clock, storage=st, **kw)

    def snapshot(self):
        out = []
        for it in self.q.items():
            out.append(_item_tuple(it, self.payloads, self.reasons))
        return tuple(out)

    def _pick(self, snap, states):
        c = [t[0] for t in snap if t[1] in states]
        if not c:
            return None
        return c[self.rng.below(len(c))]

    def step(self, snap):
        """Choose and run one operation. Returns (name, arg, outcome)."""
        # With a small index_bytes, one draw in 13 is a save_index or a close + reopen (each
        # writes queue.index); other workloads draw exactly as before (same seeds, same runs).
        r = self.rng.below(108 if self.opts.get("index_bytes") else 100)
        q = self.q
        arg = None
        name = "reopen"
        for below, drawn in _DRAWS:
            if r < below:
                name = drawn
                break
        if name in ("ack", "retry", "quarantine"):
            arg = self._pick(snap, ("claimed",))
            if arg is None:
                name = "enqueue"
        if name == "read":
            arg = self._pick(snap, ("available", "claimed", "quarantined", "acked"))
            if arg is None:
                name = "enqueue"
        if name == "enqueue":
            arg = self.rng.bytes(self.rng.below(self.opts["max_payload_bytes"] // 2 + 1))
        delay = 0
        reason = b""
        if name == "retry":
            delay = (0, 2000)[self.rng.below(2)]
        if name == "quarantine":
            reason = bytes(b % 255 + 1 for b in self.rng.bytes(self.rng.below(12)))  # no NUL
        self.clock.advance(1000)
        try:
            if name == "enqueue":
                if self.outbox is not None:
                    d0 = q.stats().durable_seq
                    v = self.outbox.put(b"t", arg)
                    self.payloads[v] = q.read(v)  # the stored envelope is what must come back
                    self.synced.append(q.stats().durable_seq > d0 and q.stats().durable_seq == v)
                    how = "put"
                else:
                    v = q.enqueue(arg)
                    self.payloads[v] = arg
                    how = "enqueue"
                if v <= self.max_seq:
                    self.unexpected.append(
                        ("reused_seq", "%s returned %d after %d" % (how, v, self.max_seq))
                    )
                self.max_seq = v
            elif name == "claim" or name == "claim_ordered":
                c = q.claim(LEASE_MS) if name == "claim" else q.claim_ordered(LEASE_MS)
                v = None if c is None else c.seq
            elif name == "ack":
                v = q.ack(arg)
            elif name == "retry":
                v = q.retry(arg, delay)
            elif name == "quarantine":
                v = q.quarantine(arg, reason)
                if v:
                    self.reasons[arg] = reason
            elif name == "compact":
                v = q.compact()
            elif name == "reopen":
                if self.outbox is not None:
                    self.outbox.close()
                else:
                    q.close()
                self.q = None
                self.open()
                v = None
            elif name == "save_index":
                v = q.save_index()
            elif name == "read":
                v = q.read(arg)
                if v != self.payloads.get(arg):
                    self.unexpected.append(("wrong_payload", "live read(%d)" % arg))
                v = len(v)
            else:
                v = q.sync()
            out = ("ok", v)
        except (self.ddq.Error, OSError) as e:
            out = ("err", exc_name(e))
            if not (exc_name(e) == "Full" and name in ("enqueue", "compact")):
                self.unexpected.append(
                    ("live_error", "%s(%r) raised %s: %s" % (name, arg, exc_name(e), e))
                )
        if self.outbox is not None and name == "enqueue" and out[0] == "ok":
            self.synced_at[len(self.ops)] = self.synced[-1]
        return (name, arg if name != "enqueue" else len(arg), out)

    def run(self, stop=None):
        """Run the whole workload (stop(i) -> True ends it early). Exceptions other than ddq.Error
        propagate (a power cut in 'raise' mode surfaces here)."""
        self.starts.append(self.pos())
        self.open()
        self.ends.append(self.pos())
        self.ops.append(("open", None, ("ok", None)))
        self.snaps.append(())
        self.returned.append(0)
        snap = self.snapshot()
        self.snaps.append(snap)
        dmax = 0  # highest seq made durable by a completed op (what sync="none" promises)
        for i in range(self.nops):
            if stop is not None and stop(i):
                break
            if self.opts.get("sync") == "none" or self.opts.get("outbox_every"):
                if self.durable(len(self.ops) - 1):
                    dmax = self.max_seq
                self.returned.append(dmax)
            else:
                self.returned.append(self.max_seq)
            self.starts.append(self.pos())
            op = self.step(snap)
            self.ends.append(self.pos())
            self.ops.append(op)
            if self.q is None:
                break
            snap = self.snapshot()
            self.snaps.append(snap)
        if self.opts.get("sync") == "none" or self.opts.get("outbox_every"):
            self.returned.append(self.max_seq if self.durable(len(self.ops) - 1) else dmax)
        else:
            self.returned.append(self.max_seq)

    def close(self):
        if self.q is not None:
            q = self.q
            self.q = None
            if self.outbox is not None:
                self.outbox.close()
            else:
                q.close()

    def inflight(self, k):
        """Index i of the operation in flight when the storage was cut after position k: the first
        op whose writes extend past k (None: all ops complete)."""
        lo = 0
        hi = len(self.ends)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.ends[mid] > k:
                hi = mid
            else:
                lo = mid + 1
        return lo if lo < len(self.ends) else None

    def durable(self, j):
        """Did op j, once it returned, make every record written so far durable?"""
        name, arg, out = self.ops[j]
        if out[0] != "ok":
            return False
        if name in ("open", "reopen", "sync", "compact", "save_index"):
            return True
        if self.opts.get("outbox_every"):
            return name == "enqueue" and self.synced_at.get(j, False)
        mode = self.opts.get("sync", "always")
        if mode == "always":
            return True
        if mode == "ack":
            # sync="ack": CLAIM and RETRY records wait for the next synced record (port/ddq.py).
            return name == "enqueue" or (name in ("ack", "quarantine") and out[1] is True)
        return False

    def allowed(self, i):
        """Logical states a recovery may show with op i in flight: any state from just after the
        last op that made everything durable up to the state after op i; and (compaction can run
        inside any op) each of those with the acked items reclaimed."""
        n = len(self.ops)
        top = n if i is None else i + 1  # snaps index of the newest state
        d = (n if i is None else i) - 1
        while d > 0 and not self.durable(d):
            d -= 1
        out = []
        for j in range(max(d + 1, 0), top + 1):
            s = self.snaps[j]
            if s not in out:
                out.append(s)
            c = compacted(s)
            if c not in out:
                out.append(c)
        if self.opts.get("reclaim_step"):
            # A staged generation (SPEC C13) drops the items acked when it started, not those
            # acked since: any subset of the acked items may be gone (check() reads the mark).
            out.append("partial")
        return out, self.returned[n if i is None else i]


def compacted(snap):
    return tuple(t for t in snap if t[1] != "acked")


def recovered_state(q):
    """The logical state of a recovered queue, reading every payload and reason back."""
    out = []
    for it in q.items():
        p = q.read(it.seq)
        r = q.reason(it.seq) if it.state == "quarantined" else b""
        out.append(
            (
                it.seq,
                it.state,
                it.attempts,
                it.lease_until_ms,
                it.not_before_ms,
                bytes(p),
                bytes(r),
            )
        )
    return tuple(out)


def meta_state(q):
    """The logical state without reading payloads back (cheap; for idempotence comparisons)."""
    return tuple(
        (it.seq, it.state, it.attempts, it.lease_until_ms, it.not_before_ms, it.payload_len)
        for it in q.items()
    )


def meta_of(state):
    return tuple((t[0], t[1], t[2], t[3], t[4], len(t[5])) for t in state)


def check(q, allowed, returned, sync):
    """Judge a recovered queue. Returns [(category, detail)]; categories: lost, resurrected,
    reused_seq, unexpected."""
    bad = []
    rec = recovered_state(q)
    seqs = [t[0] for t in rec]
    for j in range(1, len(seqs)):
        if seqs[j] <= seqs[j - 1]:
            bad.append(("unexpected", "items() out of order: %r" % (seqs,)))
            break
    st = q.stats()
    maxp = seqs[-1] if seqs else 0
    if st.next_seq <= returned or st.next_seq <= maxp:
        bad.append(
            (
                "reused_seq",
                "next_seq %d but seq %d was returned, %d present" % (st.next_seq, returned, maxp),
            )
        )
    cnt = {"available": 0, "claimed": 0, "acked": 0, "quarantined": 0}
    for t in rec:
        cnt[t[1]] = cnt.get(t[1], 0) + 1
    if (
        st.total_items != len(rec)
        or st.available_items != cnt["available"]
        or st.claimed_items != cnt["claimed"]
        or st.acknowledged_items != cnt["acked"]
        or st.quarantined_items != cnt["quarantined"]
    ):
        bad.append(
            (
                "unexpected",
                "stats %r disagree with items %r"
                % (
                    (
                        st.total_items,
                        st.available_items,
                        st.claimed_items,
                        st.acknowledged_items,
                        st.quarantined_items,
                    ),
                    cnt,
                ),
            )
        )
    nrec = rec
    norm = allowed
    partial = bool(norm) and norm[-1] == "partial"
    if partial:
        norm = norm[:-1]
    if nrec in norm:
        return bad
    if partial:  # the non-acked items of an allowed state, and some of its acked ones
        racked = [t for t in rec if t[1] == "acked"]
        crec = compacted(rec)
        for a in norm:
            if compacted(a) == crec and all(t in a for t in racked):
                return bad
    # classify against the union of allowed states
    live = {}  # seq -> set of allowed (state, payload) ; "gone" when absent
    for a in norm:
        for t in a:
            live.setdefault(t[0], []).append(t)
    got = {}
    for t in nrec:
        got[t[0]] = t
    for s in got:
        t = got[s]
        opts = live.get(s)
        if not opts:
            if s <= returned and s not in [x[0] for x in allowed[0]]:
                bad.append(
                    (
                        "resurrected",
                        "seq %d is back as %s but is not in the queue any more" % (s, t[1]),
                    )
                )
            else:
                bad.append(("unexpected", "seq %d (%s) was never enqueued" % (s, t[1])))
            continue
        if t[5] not in [o[5] for o in opts]:
            bad.append(("unexpected", "seq %d payload differs" % s))
            continue
        if t[1] != "acked" and all(o[1] == "acked" for o in opts) and len(opts) == len(norm):
            bad.append(("resurrected", "seq %d acked, recovered as %s" % (s, t[1])))
    for s in live:
        opts = live[s]
        if s not in got and len(opts) == len(norm) and all(o[1] != "acked" for o in opts):
            bad.append(("lost", "seq %d (%s) missing" % (s, opts[0][1])))
    if not bad:
        bad.append(
            (
                "unexpected",
                "state matches no allowed state: got %r allowed %r"
                % (_short(nrec), [_short(a) for a in norm]),
            )
        )
    return bad


def _short(snap):
    return [(t[0], t[1][:2], t[2], len(t[5] or b""), t[3] % 100000, t[4] % 100000) for t in snap]


# -- the recovery index (SPEC 12.1): an open through queue.index must equal a full replay --------

# Stats an index open may report otherwise than a full replay: the same torn tail found again
# is not part of the state, nor what this object's salvages counted.
NOT_STATE = ("recovered_tail_bytes", "salvaged", "salvage_lost")


def index_view(q, state=None):
    """What an index open and a full replay (index_bytes=0) must agree on: every item with its
    state, attempts, lease, not_before, payload and reason, and the stats but recovered_tail_bytes
    (an index open may find the same torn tail; the counter is not part of the state)."""
    st = q.stats().as_dict()
    return (
        recovered_state(q) if state is None else state,
        tuple((k, st[k]) for k in sorted(st) if k not in NOT_STATE),
    )


def probe_view(ddq, q):
    """The same few operations on two recovered queues must answer the same: claim order (the
    `fresh` boundary), admission (the stored plan is an upper bound, the A-rules decide), the
    sequence an enqueue gets."""
    out = []
    for op in ("claim", "enqueue", "claim_ordered", "enqueue", "compact", "enqueue"):
        try:
            if op == "claim":
                c = q.claim(LEASE_MS)
                out.append(None if c is None else c.seq)
            elif op == "claim_ordered":
                c = q.claim_ordered(LEASE_MS)
                out.append(None if c is None else c.seq)
            elif op == "enqueue":
                out.append(q.enqueue(b"index probe"))
            else:
                out.append(q.compact())
        except ddq.Error as e:
            out.append(exc_name(e))
    out.append(meta_state(q))
    return tuple(out)


def index_diff(a, b):
    """A short description of how two index_views (or probe_views) differ."""
    if a[0] != b[0]:
        return (
            "items %r vs %r" % (_short(a[0]), _short(b[0]))
            if isinstance(a[0], tuple)
            else "%r vs %r" % (a, b)
        )
    return "%r vs %r" % (a[1:], b[1:])
