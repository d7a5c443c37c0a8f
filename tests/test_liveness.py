# Liveness of the message layer at its limits (docs/OUTBOX.md E32, E33): a queue filled during an
# outage under the board profiles' hold rule (window, evidence_bytes: SPEC §10.1) whose dead
# letters find no room, and a message whose send resets the board, under each sync policy.
# Every admitted message reaches an end -- delivered, dead-lettered, or dropped and counted --
# within the bound OUTBOX E32 states, across reboots. Shared suite: subset Python, injected
# clock, bounded loops.
import support

support.needs_heap(192 * 1024, support.OUTBOX_HEAP, 128 * 1024)
import ddq  # noqa: E402
import ddq_outbox  # noqa: E402
import shared  # noqa: E402

T0 = 1767225600000
# A small board profile: the hold rule as every profile sets it, scaled down (SPEC H1).
HOLD = {
    "segment_bytes": 1024,
    "max_segments": 8,
    "max_payload_bytes": 256,
    "max_items": 1000,
    "window": 4,
    "evidence_bytes": 256,
}
LEASE = 30000


def _open(d, clock, **kw):
    k = dict(HOLD)
    k.update(kw)
    return ddq_outbox.Outbox(d, clock=clock, seed=5, lease_ms=LEASE, **k)


def _fill(d, clock, ttl_first=0, ttl=60000, **kw):
    # An outage: put until Full; the first ttl_first messages with a TTL. Returns the count.
    ob = _open(d, clock, **kw)
    n = 0
    for _ in range(1000):
        try:
            ob.put("t/%d" % n, b"r" * 40, ttl_ms=ttl if n < ttl_first else 0)
        except ddq.Full:
            break
        n += 1
    ob.close()
    return n


def _ends(ob):
    # Messages that reached an end this run: sent, dead-lettered (written) or dropped.
    c = ob.counters
    return c["sent"] + c["expired"] + c["rejected"] + c["exhausted"]


def _rounds(d, clock, send, rounds, **kw):
    # Reboot, pump, reboot ... (the Outbox abandoned without close: the device resets); returns
    # (ends, sent, dead_dropped, the last stats) summed over the runs, once nothing is pending.
    ends = sent = dropped = 0
    st = None
    for _ in range(rounds):
        ob = _open(d, clock, **kw)
        for _ in range(200):  # pump never raises, whatever the dead letters meet [E32]
            if ob.pump(send, 16) == 0 and ob.next_ready_ms() != 0:
                break
        ends += _ends(ob)
        sent += ob.counters["sent"]
        dropped += ob.counters["dead_dropped"]
        st = ob.stats()
        pending = st["pending"]
        ob.queue.close()  # a reset: no Outbox.close
        if pending == 0:
            return ends, sent, dropped, st
        clock.advance(LEASE + 1)  # waiting dead letters come back as lapsed claims
    return ends, sent, dropped, st


def test_expired_messages_without_room_for_their_dead_letters_never_strand_the_rest():
    # EVIDENCE-OF: E32 E7 H4 E18
    # Measured on main: 40 messages with a 60 s TTL among 331 under a profile's hold rule ->
    # every pump raised Full, 0 of the 291 others delivered, on every reboot. Here at small
    # scale: the expired ones come first, the evidence budget fills after a few reasons.
    d, clock = support.tmpdir(), support.FakeClock(T0)
    n = _fill(d, clock, ttl_first=20)
    assert n > 40, n
    clock.advance(120000)  # the outage ends after the TTLs
    got = []

    def send(m):
        got.append(m.seq)
        return True

    ends, sent, dropped, st = _rounds(d, clock, send, 4)
    assert sent == n - 20 and sorted(got) == list(range(21, n + 1)), (sent, n)
    assert st["pending"] == 0 and ends == n, (ends, n, st)
    # each expired message is a dead letter, or dropped and counted with its class [E32]
    assert st["quarantined"] + dropped == 20, (st, dropped)
    assert dropped > 0 and st["quarantined_by_reason"] == {"expired": st["quarantined"]}


def test_only_expired_messages_end_in_the_get_that_finds_no_room():
    # EVIDENCE-OF: E32 E18
    # Nothing else is pending: nothing can return room, so no dead letter waits: each is written
    # while room lasts, then dropped and counted; a get ends up to 64 such messages.
    d, clock = support.tmpdir(), support.FakeClock(T0)
    n = _fill(d, clock, ttl_first=1000, ttl=1000)
    clock.advance(5000)
    ob = _open(d, clock)
    for _ in range(n // 32 + 1):
        assert ob.get() is None
    st = ob.stats()
    assert st["pending"] == 0 and st["dead_waiting"] == 0, st
    assert st["quarantined"] + st["dead_dropped"] == n and st["expired"] == n, (n, st)
    assert st["dead_dropped_by_reason"] == {"expired": st["dead_dropped"]} != {}, st
    ob.close()


def test_unauthenticated_dead_letters_without_room_end_too():
    # EVIDENCE-OF: E32 E22
    # A key given after an outage filled the queue with unsigned messages: every one is an
    # unauthenticated dead letter, written while room lasts, then dropped and counted.
    hl = __import__("hashlib")
    if not hasattr(hl, "sha256"):
        raise support.Skip("no hashlib.sha256")
    d, clock = support.tmpdir(), support.FakeClock(T0)
    n = _fill(d, clock)
    ob = _open(d, clock, hmac_key=bytes(range(32)))
    for _ in range(n // 32 + 1):
        assert ob.get() is None
    st = ob.stats()
    assert st["pending"] == 0 and st["unauthenticated"] == n, (n, st)
    assert st["quarantined"] + st["dead_dropped"] == n, st
    assert st["dead_dropped_by_reason"] == {"unauthenticated": st["dead_dropped"]} != {}, st
    ob.close()


def test_rejected_and_max_attempts_dead_letters_without_room_never_strand_the_rest():
    # EVIDENCE-OF: E32 E10 E17 H4
    # Measured on main: a send raising Rejected for 20 of 404 -> 0 delivered; max_attempts took
    # the same path. A message the send refuses is never sent again while its dead letter waits.
    for how in ("rejected", "max_attempts"):
        d, clock = support.tmpdir(), support.FakeClock(T0)
        n = _fill(d, clock, max_attempts=2)
        bad = list(range(1, 21))
        calls = {}

        def send(m, how=how, bad=bad, calls=calls):
            calls[m.seq] = calls.get(m.seq, 0) + 1
            if m.seq in bad:
                if how == "rejected":
                    raise ddq_outbox.Rejected("no")
                return False  # not now: attempts count up to max_attempts
            return True

        ends, sent, dropped, st = _rounds(
            d, clock, send, 8, max_attempts=2, min_retry_ms=1, max_retry_ms=1
        )
        assert sent == n - 20 and st["pending"] == 0, (how, sent, n, st)
        assert st["quarantined"] + dropped == 20, (how, st, dropped)
        cls = "rejected" if how == "rejected" else "max_attempts"
        assert set(st["quarantined_by_reason"]) <= {cls}, st
        limit = 1 if how == "rejected" else 2
        assert max([calls[s] for s in bad]) <= limit + 1, (how, calls)  # +1: after a reset


def test_a_message_that_resets_the_board_is_dead_lettered_under_every_sync_policy():
    # EVIDENCE-OF: E33 E10 D1 D2 D3 E15
    # The send of seq 1 resets the device (the Outbox is abandoned; only what was synced
    # survives). With max_attempts its claim is durable before the send under every policy, so
    # each reset is an attempt: after max_attempts boots it is a dead letter and seq 2 goes out.
    policies = (
        {},
        {"sync": "ack"},
        {"sync": "none"},
        {"sync_every": 50},
        {"sync_interval_ms": 3600000},
    )
    for pol in policies:
        d, clock = support.tmpdir(), support.FakeClock(T0)
        fs = shared.CrashFS()
        ob = ddq_outbox.Outbox(d, clock=clock, seed=1, lease_ms=1000, storage=fs, **pol)
        ob.put("t", b"poison")
        ob.put("t", b"fine")
        ob.close()
        resets, sent = 0, []
        for _ in range(8):
            ob = ddq_outbox.Outbox(
                d,
                clock=clock,
                seed=1,
                lease_ms=1000,
                max_attempts=3,
                min_retry_ms=1,
                max_retry_ms=1,
                storage=fs,
                **pol,
            )
            m = None
            for _ in range(8):
                m = ob.get()
                if m is None and ob.qsize():
                    clock.advance(2)  # a retry's backoff
                    continue
                if m is None or m.seq == 1:
                    break
                ob.ack(m)
                sent.append(m.seq)
            if m is None:
                ob.close()
                break
            # the send of seq 1 resets the board: what was not synced is lost
            resets += 1
            d2 = shared.cut_copy(d, fs.synced)
            ob.queue.close()
            fs = shared.CrashFS()
            d = d2
            clock.advance(1001)  # the lease runs out
        assert sent == [2], (pol, sent)
        assert resets == 3, (pol, resets)  # 3 attempts (three resets), then the dead letter
        with ddq.Queue(d) as q:
            assert [(i.seq, i.state) for i in q.items() if i.state != "acked"] == [
                (1, "quarantined")
            ], pol
            assert q.reason(1) == b"max_attempts: lease expired"


def test_drop_oldest_may_drop_a_waiting_dead_letter_whose_lease_ran_out():
    # EVIDENCE-OF: E32 E13
    # Liveness torture seed 11003: a waiting dead letter's lease ran out (a claim made it
    # available again); drop_oldest dropped it, and the Outbox, still holding it as waiting,
    # raised NotFound from every later get. Now it is dropped, counted, and waits no more.
    d, clock = support.tmpdir(), support.FakeClock(T0)
    ob = _open(d, clock, max_retry_ms=1000)
    n = 0
    for _ in range(1000):  # an outage: messages 2..21 with a TTL, the others without
        try:
            ob.put("t/%d" % n, b"r" * 40, ttl_ms=60000 if 0 < n <= 20 else 0)
        except ddq.Full:
            break
        n += 1
    ob.close()
    clock.advance(120000)  # the TTLs ran out
    ob = _open(d, clock, capacity="drop_oldest", max_retry_ms=1000)
    a = ob.get()
    assert a.seq == 1 and ob.nack(a) is not None  # backing off: ready again after the lease
    ob.ack(ob.get())  # the expired ones end on the way, a few wait (no room for their reason)
    assert ob.stats()["dead_waiting"] > 0, ob.stats()
    clock.advance(LEASE + 1)  # the waiting ones' leases run out
    a = ob.get()
    assert a.seq == 1  # (the claim made the waiting ones available again)
    for i in range(100):  # full: drop_oldest drops the oldest available, a waiting one
        ob.put("x/%d" % i, b"n" * 40)
        if ob.counters["dropped"]:
            break
    assert ob.counters["dropped"] == 1, ob.stats()
    ob.ack(a)
    for _ in range(200):
        m = ob.get()  # old: NotFound (the dropped one still counted as waiting)
        if m is None:
            break
        ob.ack(m)
    st = ob.stats()
    assert st["pending"] == 0 and st["dead_waiting"] == 0, st
    ends = st["sent"] + st["quarantined"] + st["dead_dropped"] + st["dropped"]
    assert ends == n + i + 1, (n, i, st)
    ob.close()
