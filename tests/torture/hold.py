"""Torture part 1h: the hold rule (Queue option window > 0, SPEC §10.1) at its limit, power cuts.

    python tests/torture/hold.py SEED NOPS      prints "RESULT <json>"

The crash-state enumeration of part 1 (crash.py: every prefix of the storage log, under the
POSIX, LittleFS and FAT models) over a workload whose queue runs at the hold rule's limit: tight
segments, max_items out of the way, window 1-3 and a small evidence budget (odd seeds with staged
reclamation, reclaim_step 2-16: SPEC H8), so enqueue meets Full
often and claim and quarantine meet the limit (claim only takes items with history, quarantine
cuts its reason or raises Full: both legal, SPEC H3/H4). Every crash state is judged as in part
1 (lost, resurrected, reused seq, unexpected) and every 3rd distinct one is then drained with the
same options, the clock moved past every lease and backoff: claim and ack until claim returns
None; an item left that is not quarantined, or a claim/ack that raises, is *stranded* (H5).

crash.run_seed is reused as it is: this process swaps in the seed's options, a workload that
records a cut reason as the reason written, and a judge that drains (module attributes of
crash/tmodel, in this process only), so part 1's code stays the one judging.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "port"))
sys.path.append(os.path.join(HERE, ".."))

import crash  # noqa: E402
import tmodel  # noqa: E402

COUNT = {"drained": 0, "stranded": 0, "full": 0, "claim_none": 0, "q_cut": 0, "q_refused": 0}
DRAIN_EVERY = 3


def params(seed, sync=None, index=None):
    """Options that put the hold rule's limit first: max_items far away, few small segments."""
    r = tmodel.Rng(seed ^ 0x401D)
    opts = {
        "segment_bytes": (384, 448, 512)[r.below(3)],
        "max_payload_bytes": 64,
        "max_items": 1000,
        "max_segments": 4 + r.below(4),
        "sync": sync or ("always", "ack")[r.below(2)],
        "window": 1 + r.below(3),
        "evidence_bytes": (0, 64, 256)[r.below(3)],
    }
    if seed & 1:
        # Odd seeds stage their generations (SPEC H8, C13): cuts land in a build's start, copy,
        # carried tail, publish and unlinks at the rule's limit, and the drain runs staged too.
        opts["reclaim_step"] = (2, 4, 8, 16)[r.below(4)]
    return opts


class HoldWorkload(tmodel.Workload):
    def step(self, snap):
        n = len(self.unexpected)
        op = self._fill() if len(self.ops) <= self.nops // 3 else super().step(snap)
        name, arg, out = op
        if out == ("err", "Full") and name == "enqueue":
            COUNT["full"] += 1
        if (
            name in ("claim", "claim_ordered")
            and out == ("ok", None)
            and any(t[1] == "available" for t in snap)
        ):
            COUNT["claim_none"] += 1
        if name == "quarantine" and out == ("err", "Full"):
            del self.unexpected[n:]  # H4: refused, nothing written, still claimed
            COUNT["q_refused"] += 1
        elif name == "quarantine" and out == ("ok", True):
            r = bytes(self.q.reason(arg))  # H4: the reason may be cut to the room left
            if r != self.reasons.get(arg):
                COUNT["q_cut"] += 1
            self.reasons[arg] = r
        return op

    def _fill(self):
        # The first third of the operations enqueue (as the base workload's enqueue does) to
        # bring the queue to the hold rule's limit; the rest is the usual mix at that limit.
        arg = self.rng.bytes(16 + self.rng.below(33))
        self.clock.advance(1000)
        try:
            v = self.q.enqueue(arg)
        except self.ddq.Full:
            return ("enqueue", len(arg), ("err", "Full"))
        self.payloads[v] = arg
        self.max_seq = v
        return ("enqueue", len(arg), ("ok", v))


class HoldJudge(crash.Judge):
    def judge(self, files, dirs, i, holes, h=None):
        bad = super().judge(files, dirs, i, holes, h)
        if bad or holes:
            return bad
        self.k = getattr(self, "k", 0) + 1
        if self.k % DRAIN_EVERY:
            return bad
        return bad + self._drain(files, dirs)

    def _drain(self, files, dirs):
        # Every admitted item can still be claimed and acked (or was quarantined) [H5].
        fs = crash.memfs.MemFS(files, dirs, budget=500000, can_truncate=self.can_truncate)
        clock = tmodel.Clock(tmodel.CLOCK0 + 30 * 86400000)  # past every lease and backoff
        kw = tmodel.queue_opts(self.wl.opts)
        try:
            q = self.ddq.Queue(self.wl.path, storage=fs, clock=clock, **kw)
        except Exception as e:
            return [("unexpected", "drain open raised %s: %s" % (type(e).__name__, e))]
        COUNT["drained"] += 1
        try:
            for _ in range(10000):
                c = q.claim(tmodel.LEASE_MS)
                if c is None:
                    break
                q.ack(c.seq)
            left = [it.seq for it in q.items() if it.state in ("available", "claimed")]
        except Exception as e:
            COUNT["stranded"] += 1
            return [("unexpected", "stranded: the drain raised %s: %s" % (type(e).__name__, e))]
        finally:
            q.close()
        if left:
            COUNT["stranded"] += len(left)
            return [
                (
                    "unexpected",
                    "stranded: %d items left after the drain: %r" % (len(left), left[:8]),
                )
            ]
        return []


def main(argv):
    import ddq

    seed, nops = int(argv[0]), int(argv[1])
    tmodel.params = params
    tmodel.Workload = HoldWorkload
    crash.Judge = HoldJudge
    res = crash.run_seed(ddq, seed, nops, depth2=0)
    res.update(COUNT)
    res["window"] = params(seed)["window"]
    res["reclaim_step"] = params(seed).get("reclaim_step", 0)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main(sys.argv[1:])
