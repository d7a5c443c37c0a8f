# The hold rule (Queue option window > 0; SPEC §10.1, port/ddq_hold.py): more items held, every
# admitted item still drains, libddq's admission unchanged without the option. Shared suite.
import ddq
import support

T0 = 1767225600000
SEG, PAYLOAD, SEGS = 4096, 256, 6  # small: the suite runs on a 140 KiB board too
READING = b"r" * 62  # the board app's enveloped reading (docs/BOARDS.md)


def _open(d, window=4, evidence=1024, segs=SEGS, clock=None, **kw):
    if window is not None:
        kw["window"] = window
        kw["evidence_bytes"] = evidence
    return ddq.Queue(
        d,
        segment_bytes=SEG,
        max_payload_bytes=PAYLOAD,
        max_items=100000,
        max_segments=segs,
        clock=clock or support.FakeClock(T0),
        **kw,
    )


def _start(**kw):
    # A fresh directory, its clock, a queue over it with kw, filled until Full; and the count.
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock=clock, **kw)
    return d, clock, q, _fill(q)


def _fill(q, payload=READING):
    n = 0
    for _ in range(100000):
        try:
            q.enqueue(payload)
        except ddq.Full:
            return n
        n += 1
    raise AssertionError("never Full")


def bound(n, window, segs=SEGS, seg=SEG):
    # DESIGN §5.1: the most n-byte items whose DATA records, a STATE for each of the window's
    # claims and one 48-byte record (the claim or ack being written) fit by next-fit in segs.
    def fits(k):
        used, off = 1, 0
        for r in [48 + n] * k + [72] * window + [48]:
            if off + r > seg:
                used, off = used + 1, 0
            off += r
        return used <= segs

    lo, hi = 0, segs * seg // (48 + n) + 1
    while lo < hi:
        m = (lo + hi + 1) // 2
        if fits(m):
            lo = m
        else:
            hi = m - 1
    return lo


def _count(path, window):
    # How many readings a fresh queue at path with this window takes before Full.
    q = _open(path, window=window)
    n = _fill(q)
    q.close()
    return n


def test_hold_option_default_keeps_libddq_admission():
    # EVIDENCE-OF: H1 A1
    base = support.tmpdir()
    a, b = _count(base + "/a", None), _count(base + "/b", 0)
    assert a == b, (a, b)
    for w, ev in ((-1, 1024), (65536, 1024), (4, -1)):
        support.raises(ddq.InvalidArgument, _open, base + "/c", window=w, evidence=ev)


def test_hold_rule_is_loaded_at_open():
    # EVIDENCE-OF: O21 H1
    # The open chooses the admission rule by window and loads its module then, not at the first
    # enqueue or claim: a queue that only opens has it (and one that never enqueues pays no
    # lookup later). The module is taken out of sys.modules for the while (an earlier test
    # loaded it), then put back.
    import sys

    saved = sys.modules.pop("ddq_hold", None)
    try:
        q = _open(support.tmpdir() + "/q", window=4)
        assert "ddq_hold" in sys.modules
        q.close()
    finally:
        if saved is not None:
            sys.modules["ddq_hold"] = saved


def test_hold_holds_three_times_and_three_quarters_of_the_bound():
    # EVIDENCE-OF: H2 H7
    base = support.tmpdir()
    libddq, held = _count(base + "/l", None), _count(base + "/h", 4)
    b = bound(len(READING), 4)
    assert held >= 3 * libddq, (held, libddq)
    assert held * 4 >= b * 3 and held <= b, (held, b)
    # A refused enqueue stored nothing; a reopen holds the same and refuses the same [H2].
    q = _open(base + "/h", window=4)
    s = q.stats()
    assert s.available_items == s.total_items == held, s.as_dict()
    support.raises(ddq.Full, q.enqueue, READING)
    assert q.stats().next_seq == held + 1
    q.close()


def _drain(q, clock, window, quarantine_every=0, reason=b"why" * 40):
    # Claim up to window + 2 at a time (more than the window: a claim may then return None),
    # retry one in five once, quarantine some, ack the rest; never Full or Limit.
    done, quar = 0, 0
    for _ in range(100000):
        cs = []
        for _ in range(window + 2):
            c = q.claim(60000)
            if c is None:
                break
            cs.append(c)
        if not cs:
            break
        for c in cs:
            if c.attempts == 0 and c.seq % 5 == 0:
                q.retry(c.seq, 0)
            elif quarantine_every and c.seq % quarantine_every == 0:
                assert q.quarantine(c.seq, reason)
                quar += 1
            else:
                assert q.ack(c.seq)
                done += 1
        clock.advance(1)
    return done, quar


def test_hold_full_queue_drains_without_full():
    # EVIDENCE-OF: H3 H4 H5 A8
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    d, clock, q, held = _start(window=4)
    done, quar = _drain(q, clock, 4, quarantine_every=7)
    s = q.stats()
    assert done + quar == held and s.quarantined_items == quar, (done, quar, held, s.as_dict())
    assert s.available_items == 0 and s.claimed_items == 0, s.as_dict()
    # Every reason is the one given or a prefix of it (cut to the room left) [H4].
    for it in q.items():
        if it.state == "quarantined":
            r = q.reason(it.seq)
            assert (b"why" * 40).startswith(r), r
    q.close()
    q = _open(d, window=4, clock=clock)  # and the directory reopens the same [H5]
    assert q.stats().quarantined_items == quar
    q.close()


def test_hold_claim_at_the_limit_only_takes_items_with_history():
    # EVIDENCE-OF: H3 H5
    d, clock, q, held = _start(window=2)
    seqs = []
    for _ in range(held):  # give items history (a retry far ahead) until claim refuses one
        c = q.claim(60000)
        if c is None:
            break
        q.retry(c.seq, 3600000)
        seqs.append(c.seq)
    assert 2 <= len(seqs) < held, (len(seqs), held)
    assert q.claim(60000) is None  # fresh items wait: no room for one more STATE
    assert q.claim_ordered(60000) is None
    fresh = seqs[-1] + 1
    support.raises(ddq.Full, q.claim_seq, fresh, 60000)
    clock.advance(3600000)
    c = q.claim(60000)  # an item with history is claimed (it costs nothing)
    assert c is not None and c.seq == seqs[0] and c.attempts == 1, c
    assert q.ack(c.seq)
    c = q.claim(60000)  # room again: the next one is claimed (lowest seq first)
    assert c is not None and c.seq in (seqs[1], fresh), (c.seq, seqs[1], fresh)
    q.close()


def test_hold_quarantine_cuts_the_reason_or_refuses():
    # EVIDENCE-OF: H4 H5
    d, clock, q, held = _start(window=1, evidence=0, segs=3)
    long_reason = b"e" * PAYLOAD
    cut = refused = 0
    for _ in range(held):
        c = q.claim(60000)
        if c is None:
            break
        try:
            assert q.quarantine(c.seq, long_reason)
        except ddq.Full:
            refused += 1
            assert q.stats().claimed_items == 1  # nothing written: still claimed, still ackable
            assert q.ack(c.seq)
            continue
        r = q.reason(c.seq)
        if len(r) < len(long_reason):
            cut += 1
            assert long_reason.startswith(r)
    assert refused > 0 and cut > 0, (cut, refused)
    s = q.stats()
    assert s.available_items == 0 and s.claimed_items == 0, s.as_dict()
    q.close()


def test_hold_directory_without_the_option():
    # EVIDENCE-OF: H6 V4
    d, clock, q, held = _start(window=4)
    q.close()
    q = _open(d, window=None, clock=clock)  # libddq's rule on a directory filled by the hold
    assert q.stats().total_items == held
    support.raises(ddq.Full, q.enqueue, READING)  # its reserve is not there: refused
    n = 0
    for _ in range(held):  # one claim in flight at a time (within the window): drains it
        c = q.claim(60000)
        if c is None:
            break
        assert q.read(c.seq) == READING
        assert q.ack(c.seq)
        n += 1
    assert n == held
    assert q.enqueue(READING) == held + 1
    q.close()


def test_hold_records_bound_with_large_records():
    # EVIDENCE-OF: H2 H5 C8
    # 976-byte payloads: 1,024-byte records, 4 to a 4 KiB segment. The records bound admits
    # more than the bytes bound would, and the drain at that limit (claims and retries that
    # fill the log, so compactions copy STATEs larger than the CLAIMs they replace) never
    # meets Full or Limit.
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = ddq.Queue(
        d,
        segment_bytes=SEG,
        max_payload_bytes=976,
        max_items=100000,
        max_segments=SEGS,
        clock=clock,
        window=4,
        evidence_bytes=0,
        sync="none",
    )
    held = _fill(q, b"b" * 976)
    w, bytes_bound = 4, SEGS * (SEG - 1024 + 1) - 1024 - 72 * 4
    assert held == SEGS * 4 - w - 1 - (w + 1) // 2, held  # the records bound, exactly
    assert held > bytes_bound // 1024, (held, bytes_bound // 1024)
    gen0 = q.stats().generation
    for _ in range(40):  # four in flight, retried again and again
        cs = [q.claim(60000) for _ in range(w)]
        assert None not in cs
        for c in cs:
            q.retry(c.seq, 0)
        clock.advance(1)
    assert q.stats().generation > gen0  # the log filled: compacted at the limit
    n = 0
    for _ in range(held):
        c = q.claim(60000)
        if c is None:
            break
        assert q.ack(c.seq)
        n += 1
    assert n == held, (n, held)
    q.close()


class _Records(ddq.PosixStorage):
    # The real storage, counting records appended (a record is one 48-byte write, or a 40-byte
    # header + payload + footer; READING is 62 bytes) and manifest renames.
    def __init__(self):
        super().__init__()
        self.n = [0, 0]

    def write(self, h, buf):
        if len(buf) in (40, 48):
            self.n[0] += 1
        super().write(h, buf)

    def rename(self, a, b):
        self.n[1] += 1
        super().rename(a, b)


def test_hold_with_staged_reclamation_admits_the_same_and_drains():
    # EVIDENCE-OF: H8 H5 C13
    # The hold rule depends on the directory's contents only, so a staged queue admits exactly
    # what an inline one does, and its full queue drains (claims, retries, quarantines) with
    # builds running and never meets Full or Limit.
    # (Two queues, then ddq_reclaim beside ddq_recover at the second open: on the 64-bit
    # 140 KiB model it ran within 32 B of ddq_recover's import heap, and recover's split into
    # steps, +192 B, met MemoryError there.)
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    inline = _start(window=4)
    inline[2].close()
    d, clock, q, held = _start(window=4, reclaim_step=8)
    assert held == inline[3], (held, inline[3])
    done, quar = _drain(q, clock, 4, quarantine_every=7)
    s = q.stats()
    assert done + quar == held and s.quarantined_items == quar, (done, quar, held)
    assert s.available_items == 0 and s.claimed_items == 0, s.as_dict()
    q.close()


def test_hold_with_staged_reclamation_never_compacts_whole_in_a_steady_run():
    # EVIDENCE-OF: H8 C13
    # A FIFO run over a standing backlog of half what the rule holds: every generation step is
    # a staged build (no call appends more than C13's 3s + 1 records besides its own), the
    # copies are published along the way, and the backlog reopens intact.
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    base = support.tmpdir()
    held = _count(base + "/n", 4)
    cs, s, clock = _Records(), 4, support.FakeClock(T0)
    q = _open(base + "/q", window=4, clock=clock, storage=cs, reclaim_step=s, sync="none")
    for _ in range(held // 2):
        q.enqueue(READING)
    g0, worst = q.stats().generation, 0
    for _ in range(held * 2):
        for op in range(3):
            r0 = cs.n[0]
            if op == 0:
                q.enqueue(READING)
            elif op == 1:
                c = q.claim(60000)
            else:
                assert q.ack(c.seq)
            if cs.n[0] - r0 > worst:
                worst = cs.n[0] - r0
        clock.advance(1)
    gens = q.stats().generation - g0
    assert gens >= 3 and cs.n[1] >= gens, (gens, cs.n)
    assert worst <= 3 * s + 2, worst
    q.close()
    q = _open(base + "/q", window=4, clock=clock)
    st = q.stats()
    assert st.available_items == held // 2, st.as_dict()
    q.close()
