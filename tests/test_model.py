# Model-based randomized test: random operations (enqueue of random sizes, claim, claim_ordered,
# ack, retry, quarantine, clock advances, close/reopen) checked after every step against a plain
# in-memory model of DDQ's state machine, with limits tight enough that compaction runs often.
# A seeded PRNG drives it, so CPython and MicroPython run the very same sequence. Reopens go
# through the recovery index (queue.index, written at close) two times in three and through the
# full replay otherwise, so the index is checked against the model after every kind of history.
import os

import ddq
import shared
import support

T0 = 1767225600000
OPTS = {"segment_bytes": 320, "max_payload_bytes": 24, "max_items": 8, "max_segments": 5}
STEPS = 10000


Rng = shared.Xorshift32  # seeded with the seed itself: the same sequence on both interpreters


class Model:
    def __init__(self):
        self.items = {}  # seq -> [state, attempts, lease, nb, payload, reason, swept_lease]
        self.next = 1

    def sweep(self, now, upto=None):
        for seq in sorted(self.items):
            it = self.items[seq]
            if it[0] == "claimed" and it[2] <= now:
                it[0], it[6], it[2] = "available", it[2], 0
            if upto is not None and it[0] in ("available", "claimed"):
                return seq
        return None

    def claim(self, now, ordered):
        if ordered:
            head = self.sweep(now, True)
            if head is None:
                return None
            it = self.items[head]
            return head if it[0] == "available" and it[3] <= now else None
        self.sweep(now)
        for seq in sorted(self.items):
            it = self.items[seq]
            if it[0] == "available" and it[3] <= now:
                return seq
        return None

    def compacted(self):
        for seq in list(self.items):
            it = self.items[seq]
            if it[0] == "acked":
                del self.items[seq]
            else:
                it[6] = None  # the snapshot made RAM state durable

    def reopened(self):
        for it in self.items.values():
            if it[6] is not None and it[0] == "available":
                it[0], it[2] = "claimed", it[6]  # a sweep is RAM only
            it[6] = None


def _disk(d):
    n = 0
    for name in os.listdir(d):
        if name.endswith(".log") or name.startswith("queue.manifest"):
            n += support.file_size(d + "/" + name)
    return n


def _check(q, m):
    got = [(i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms) for i in q.items()]
    want = [
        (s, m.items[s][0], m.items[s][1], m.items[s][2], m.items[s][3]) for s in sorted(m.items)
    ]
    assert got == want, (got, want)
    s = q.stats()
    assert s.next_seq == m.next, (s.next_seq, m.next)
    assert s.total_items == len(m.items)


def run(seed, steps, d):
    rng = Rng(seed)
    clock = support.FakeClock(T0)
    m = Model()
    q = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)
    gen = 0
    counts = {
        "compactions": 0,
        "full": 0,
        "reopens": 0,
        "max_disk": 0,
        "claims": 0,
        "purged": 0,
        "index_opens": 0,
        "index_tail_records": 0,
    }
    bound = 2 * OPTS["max_segments"] * OPTS["segment_bytes"] + 96
    last_seq = 0
    for step in range(steps):
        op = rng.below(100)
        now = clock()
        live = [s for s in sorted(m.items) if m.items[s][0] == "claimed"]
        if op < 30:
            n = rng.below(OPTS["max_payload_bytes"] + 1)
            payload = bytes([(step + k) & 0xFF for k in range(n)])
            try:
                seq = q.enqueue(payload)
            except ddq.Full:
                counts["full"] += 1
                seq = None
            if seq is not None:
                assert seq == m.next and seq > last_seq, (step, seq, m.next)
                last_seq = seq
                m.items[seq] = ["available", 0, 0, 0, payload, None, None]
                m.next += 1
        elif op < 50:
            ordered = op < 35
            lease = 1 + rng.below(5000)
            want = m.claim(now, ordered)
            c = q.claim_ordered(lease) if ordered else q.claim(lease)
            got = c.seq if c is not None else None
            assert got == want, (step, ordered, got, want)
            if c is not None:
                counts["claims"] += 1
                it = m.items[c.seq]
                assert c.attempts == it[1] and c.payload_len == len(it[4])
                it[0], it[2], it[6] = "claimed", now + lease, None
        elif op < 62 and live:
            seq = live[rng.below(len(live))]
            assert q.ack(seq) is True
            m.items[seq][0], m.items[seq][2] = "acked", 0
        elif op < 72 and live:
            seq = live[rng.below(len(live))]
            delay = rng.below(4) * rng.below(3000)
            q.retry(seq, delay)
            it = m.items[seq]
            it[0], it[1], it[2], it[3], it[6] = "available", it[1] + 1, 0, now + delay, None
        elif op < 74 and live:
            seq = live[rng.below(len(live))]
            why = b"r%d" % rng.below(1000)
            assert q.quarantine(seq, why) is True
            it = m.items[seq]
            it[0], it[2], it[5] = "quarantined", 0, why
        elif op < 77:
            qs = [x for x in sorted(m.items) if m.items[x][0] == "quarantined"]
            if len(qs) >= 2:
                assert q.purge(qs[:1]) == 1
                counts["purged"] += 1
                del m.items[qs[0]]
        elif op < 82 and m.items:
            seqs = sorted(m.items)
            seq = seqs[rng.below(len(seqs))]
            it = m.items[seq]
            assert q.read(seq) == it[4]
            if it[0] == "acked":
                assert q.ack(seq) is False
            elif it[0] == "quarantined":
                assert q.quarantine(seq, b"x") is False and q.reason(seq) == it[5]
            elif it[0] == "available":
                support.raises(ddq.BadState, q.ack, seq)
        elif op < 95:
            clock.advance(rng.below(3000))
        else:
            q.close()
            q = ddq.Queue(d, clock=clock, index_bytes=1 if counts["reopens"] % 3 else 0, **OPTS)
            counts["reopens"] += 1
            if q.index_used:
                counts["index_opens"] += 1
                counts["index_tail_records"] += q.replayed_records
            m.reopened()
        g = q.stats().generation
        if g != gen:
            counts["compactions"] += g - gen
            gen = g
            m.compacted()
        disk = _disk(d)
        if disk > counts["max_disk"]:
            counts["max_disk"] = disk
        assert disk <= bound, (step, disk, bound)
        _check(q, m)
    q.close()
    return counts


def test_model_random_operations():
    # EVIDENCE-OF: O2 O3 O4 O5 O6 O7 O11 O14 R9 C1 C9 A7 A8 T2 X3 X5
    # On the 140 KiB board of tests/host/test_host_smallheap.py one of its reopens ran out of
    # heap (MemoryError in Queue()); the unix port's default 2 MiB heap runs it whole.
    support.needs_heap(
        192 * 1024,
        "the model of %d random steps and its queue, reopened "
        "through queue.index with ddq_recover, ddq_compact and ddq_index "
        "loaded" % STEPS,
    )
    d = support.tmpdir() + "/q"
    counts = run(20261130, STEPS, d)
    print("model:", counts)
    assert counts["compactions"] > 50 and counts["reopens"] > 100, counts
    # Some reopens resumed from an index (some with records after it, left by a queue opened
    # without one); the rest replayed everything.
    assert counts["index_opens"] > 50 and counts["index_tail_records"] > 0, counts
