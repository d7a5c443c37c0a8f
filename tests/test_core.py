# The queue's operations, state machine, recovery and fail-stop (shared suite: CPython, and
# MicroPython over POSIX, LittleFS and FAT). Ids refer to docs/SPEC.md.
import ddq
import support
from faults import FaultStorage

T0 = 1767225600000
SMALL = {"segment_bytes": 256, "max_payload_bytes": 128, "max_items": 64, "max_segments": 16}


def _q(d=None, clock=None, **kw):
    o = dict(SMALL)
    o.update(kw)
    if d is None:
        d = support.tmpdir() + "/q"
    return ddq.Queue(d, clock=clock or support.FakeClock(T0), **o), d


def _last_segment(d):
    return d + "/" + [n for n in support.listdir_sorted(d) if n.endswith(".log")][-1]


def _append(path, data):
    f = open(path, "ab")
    try:
        f.write(data)
    finally:
        f.close()


def test_lock_same_process():
    # EVIDENCE-OF: L1 L3 O16
    q, d = _q()
    support.raises(ddq.Locked, ddq.Queue, d, **SMALL)
    q.close()
    q2 = ddq.Queue(d, **SMALL)
    q2.close()
    q2.close()  # idempotent


def test_basic_scenario():
    # EVIDENCE-OF: O1 O2 O4 O5 O6 O9 O12 R1 R10 R17
    clock = support.FakeClock(T0)
    q, d = _q(clock=clock)
    assert [q.enqueue(p) for p in (b"alpha", b"beta", b"gamma")] == [1, 2, 3]
    c = q.claim(100000)
    assert (
        c.seq == 1 and c.attempts == 0 and c.payload_len == 5 and c.lease_until_ms == T0 + 100000
    )
    assert q.read(1) == b"alpha"
    assert q.ack(1) is True
    c = q.claim(100000)
    assert c.seq == 2
    q.retry(2, 0)
    c = q.claim(100000)
    assert c.seq == 2 and c.attempts == 1
    assert q.quarantine(2, b"permanent test failure") is True
    s = q.stats()
    assert (s.available_items, s.claimed_items, s.acknowledged_items, s.quarantined_items) == (
        1,
        0,
        1,
        1,
    )
    q.close()
    q, d = _q(d, clock=clock)
    c = q.claim(100000)
    assert c.seq == 3
    q.ack(3)
    s = q.stats()
    assert (s.available_items, s.acknowledged_items, s.quarantined_items, s.next_seq) == (
        0,
        2,
        1,
        4,
    )
    q.close()
    _append(_last_segment(d), b"garbage")
    q, d = _q(d, clock=clock)
    assert q.stats().recovered_tail_bytes >= 7
    assert q.claim(1000) is None
    assert q.reason(2) == b"permanent test failure"
    assert q.stats().next_seq == 4
    q.close()


def _states(clock):
    # One item in each state: 1 available, 2 claimed (live), 3 claimed (expired), 4 acked,
    # 5 quarantined.
    q, d = _q(clock=clock)
    for i in range(5):
        q.enqueue(b"p%d" % i)
    q.claim(1000)  # 1
    q.claim(100000)  # 2
    q.claim(1)  # 3: expires at T0+1
    q.claim(1000)  # 4
    q.claim(1000)  # 5
    q.ack(4)
    q.quarantine(5, b"why")
    q.retry(1, 0)  # 1 back to available
    clock.advance(10)  # 3's lease is now expired (not yet swept)
    return q


def test_operation_state_table():
    # EVIDENCE-OF: O7 O11 O4 O5 O6 O12 O13
    clock = support.FakeClock(T0)
    q = _states(clock)
    st = {i.seq: i.state for i in q.items()}
    assert st == {1: "available", 2: "claimed", 3: "claimed", 4: "acked", 5: "quarantined"}, st
    # ack
    support.raises(ddq.BadState, q.ack, 1)
    assert q.ack(4) is False
    support.raises(ddq.BadState, q.ack, 5)
    support.raises(ddq.NotFound, q.ack, 99)
    # retry
    support.raises(ddq.BadState, q.retry, 1, 0)
    support.raises(ddq.BadState, q.retry, 4, 0)
    support.raises(ddq.BadState, q.retry, 5, 0)
    support.raises(ddq.NotFound, q.retry, 99, 0)
    # quarantine
    support.raises(ddq.BadState, q.quarantine, 1, b"x")
    support.raises(ddq.BadState, q.quarantine, 4, b"x")
    assert q.quarantine(5, b"second") is False
    assert q.reason(5) == b"why"
    support.raises(ddq.NotFound, q.quarantine, 99, b"x")
    # read works in every state
    for s in (1, 2, 3, 4, 5):
        assert q.read(s) == b"p%d" % (s - 1)
    support.raises(ddq.NotFound, q.read, 99)
    support.raises(ddq.BadState, q.reason, 1)
    # an expired lease can still be acked until a claim sweeps it [O11]
    assert q.ack(3) is True
    q.close()
    q = _states(support.FakeClock(T0))
    c = q.claim(1000)  # sweeps 3 (expired), then takes the first ready: 1 (retry(0) is due)
    assert c.seq == 1
    st = {i.seq: i.state for i in q.items()}
    assert st[3] == "available", st
    support.raises(ddq.BadState, q.ack, 3)
    assert q.claim(1000).seq == 3
    assert q.claim(1000) is None  # 2 is live, 4 acked, 5 quarantined
    q.close()


def test_claim_skips_and_ordered_blocks():
    # EVIDENCE-OF: O2 O3 T2
    clock = support.FakeClock(T0)
    q, d = _q(clock=clock)
    for _ in range(3):
        q.enqueue(b"x")
    c = q.claim(5000)
    q.retry(c.seq, 60000)  # 1 backs off for a minute
    assert q.claim_ordered(1000) is None  # strict FIFO: the head (1) is not ready
    assert q.claim(1000).seq == 2  # skip-ahead
    clock.advance(60000)
    assert q.claim_ordered(1000).seq == 1
    assert q.claim_ordered(1000) is None  # head is 2, claimed and live
    clock.advance(1001)  # 2's lease expired: ordered sweeps the head
    c = q.claim_ordered(1000)
    assert c.seq == 1 or c.seq == 2
    q.close()


def test_restart_replay_keeps_state():
    # EVIDENCE-OF: R1 R5 R6 R9 O14 O10
    clock = support.FakeClock(T0)
    q, d = _q(clock=clock)
    for i in range(4):
        q.enqueue(b"v%d" % i)
    q.claim(1000)
    q.retry(1, 7000)
    q.claim(50)
    q.ack(2)
    q.claim(1)  # 3 claimed, lease expires
    before = [(i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms) for i in q.items()]
    q.close()
    clock.advance(100)
    q, d = _q(d, clock=clock)
    after = [(i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms) for i in q.items()]
    assert before == after, (before, after)
    assert q.ack(3) is True  # recovery keeps an expired claim ackable [R9]
    assert q.enqueue(b"next") == 5
    q.close()


def test_torn_tail_every_length():
    # EVIDENCE-OF: R10 R11 R17 S1 R12 S8
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    q, d = _q()
    q.enqueue(b"one")
    q.close()
    path = _last_segment(d)
    good = support.read_file(path)
    rec = good  # one 51-byte DATA record
    for cut in range(1, len(rec)):
        q, d2 = _q()
        q.enqueue(b"one")
        q.enqueue(b"two")
        q.close()
        p2 = _last_segment(d2)
        data = support.read_file(p2)
        support.write_file(p2, data[: len(data) - cut])
        q, d2 = _q(d2)
        s = q.stats()
        assert s.total_items == 1 and s.recovered_tail_bytes == len(rec) - cut, (cut, s.as_dict())
        assert s.next_seq == 2
        assert q.enqueue(b"again") == 2  # the tail was really removed
        q.close()
        q, d2 = _q(d2)
        assert q.read(2) == b"again" and q.stats().recovered_tail_bytes == 0
        q.close()
        support.rmtree(d2)


def test_tails_of_fill_and_garbage():
    # EVIDENCE-OF: R10 R11 R13 S5
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    for tail, torn in (
        (b"\0" * 300, False),
        (b"\0" * 100, True),
        (b"\xff" * 100, True),
        (b"\0" * 39, True),
        (b"junk" * 9, True),
        (b"junk" * 12, False),
        (b"\0\0\0\0" + b"\xff" * 60, False),
    ):
        q, d = _q()
        q.enqueue(b"one")
        q.close()
        _append(_last_segment(d), tail)
        if torn:
            q, d = _q(d)
            assert q.stats().recovered_tail_bytes == len(tail), (tail[:8], q.stats().as_dict())
            assert q.read(1) == b"one"
            q.close()
        else:
            e = support.raises((ddq.Corrupt, ddq.Full), _q, d)
            if len(tail) == 300:
                assert isinstance(e, ddq.Corrupt)


def test_unfinished_final_record_is_torn():
    # EVIDENCE-OF: R11 S5
    q, d = _q()
    q.enqueue(b"one")
    q.enqueue(b"two")
    q.close()
    p = _last_segment(d)
    data = bytearray(support.read_file(p))
    for k in range(len(data) - 8, len(data)):  # the last record's footer never landed
        data[k] = 0
    support.write_file(p, bytes(data))
    q, d = _q(d)
    assert q.stats().total_items == 1 and q.stats().recovered_tail_bytes == 51
    q.close()


def test_mid_log_corruption_is_reported():
    # EVIDENCE-OF: R13 F2 F5 F6 V1
    q, d = _q()
    q.enqueue(b"one")
    q.enqueue(b"two")
    q.enqueue(b"three")
    q.close()
    p = _last_segment(d)
    data = bytearray(support.read_file(p))
    data[60] ^= 0x40  # inside the second record
    support.write_file(p, bytes(data))
    e = support.raises(ddq.Corrupt, _q, d)
    msg = str(e)
    assert "segment-00000000000000000000.log" in msg and "offset 51" in msg, msg
    # a complete final record with a bad CRC is corrupt too (C DDQ's rule)
    data[60] ^= 0x40
    data[len(data) - 12] ^= 1
    support.write_file(p, bytes(data))
    support.raises(ddq.Corrupt, _q, d)


def test_corruption_in_an_earlier_segment():
    # EVIDENCE-OF: R10 R13 N5 R4
    q, d = _q(max_payload_bytes=16)
    for _ in range(10):
        q.enqueue(b"x" * 16)
    q.close()
    names = [n for n in support.listdir_sorted(d) if n.endswith(".log")]
    assert len(names) >= 3
    first = d + "/" + names[0]
    data = support.read_file(first)
    support.write_file(first, data[: len(data) - 3])  # a short tail, but not in the last segment
    e = support.raises(ddq.Corrupt, _q, d)
    assert names[0] in str(e)
    support.write_file(first, data)
    support.write_file(d + "/unrelated.txt", b"keep me")
    import os

    os.remove(d + "/" + names[1])  # a missing segment id
    support.raises(ddq.Corrupt, _q, d)
    assert support.read_file(d + "/unrelated.txt") == b"keep me"


def test_read_into_and_buffer_too_small():
    # EVIDENCE-OF: O12 S6
    q, d = _q()
    q.enqueue(b"0123456789")
    buf = bytearray(10)
    assert q.read_into(1, buf) == 10 and bytes(buf) == b"0123456789"
    e = support.raises(ddq.BufferTooSmall, q.read_into, 1, bytearray(4))
    assert e.needed == 10 and e.code == -10
    big = bytearray(32)
    assert q.read_into(1, memoryview(big)) == 10 and bytes(big[:10]) == b"0123456789"
    q.enqueue(b"")
    assert q.read(2) == b""
    q.close()


def test_invalid_arguments_change_nothing():
    # EVIDENCE-OF: O8 O14 O15 O18
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    d = support.tmpdir() + "/q"
    for kw in (
        {"segment_bytes": 255},
        {"segment_bytes": 64 * 1048576 + 1},
        {"max_payload_bytes": 0},
        {"max_payload_bytes": 256 - 47, "segment_bytes": 256},
        {"max_items": 0},
        {"max_items": 1000001},
        {"max_segments": 0},
        {"max_segments": 4097},
        {"segment_bytes": "big"},
        {"sync": "sometimes"},
        {"clock": 5},
    ):
        support.raises(ddq.InvalidArgument, ddq.Queue, d, **kw)
    support.raises(ddq.InvalidArgument, ddq.Queue, "")
    q, d = _q()
    q.enqueue(b"a")
    for bad in (0, 604800001, -1, "1", 1.5, True):
        support.raises(ddq.InvalidArgument, q.claim, bad)
    support.raises(ddq.InvalidArgument, q.enqueue, 5)
    support.raises(ddq.InvalidArgument, q.enqueue, None)
    support.raises(ddq.TooLarge, q.enqueue, b"x" * 129)
    c = q.claim(1000)
    support.raises(ddq.InvalidArgument, q.retry, c.seq, -1)
    support.raises(ddq.InvalidArgument, q.retry, c.seq, 1 << 32)
    support.raises(ddq.TooLarge, q.quarantine, c.seq, b"r" * 129)
    support.raises(ddq.InvalidArgument, q.quarantine, c.seq, b"a\0b")
    support.raises(ddq.NotFound, q.read, "1")
    s = q.stats()
    assert s.total_items == 1 and s.claimed_items == 1 and s.next_seq == 2
    assert q.enqueue(b"b") == 2
    q.close()
    f = support.tmpdir() + "/file"
    support.write_file(f, b"")
    support.raises(ddq.InvalidArgument, ddq.Queue, f)


def test_fail_stop_after_write_failure():
    # EVIDENCE-OF: R20 R1
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), **SMALL)
    q.enqueue(b"one")
    fs.arm("write")
    e = support.raises(ddq.IOFailure, q.enqueue, b"two")
    assert e.code == -2 and e.errno == 5
    assert q.stats().failed is True
    for call, args in (
        (q.enqueue, (b"x",)),
        (q.claim, (1000,)),
        (q.read, (1,)),
        (q.ack, (1,)),
        (q.retry, (1, 0)),
        (q.quarantine, (1, b"")),
        (q.claim_ordered, (10,)),
    ):
        support.raises(ddq.IOFailure, call, *args)
    q.stats()
    q.recover()
    assert q.stats().failed is False
    assert q.read(1) == b"one"
    n = q.stats().total_items
    assert n in (1, 2)  # an append that reported failure may still be on disk
    assert q.enqueue(b"three") == n + 1
    q.close()


def test_fail_stop_after_sync_failure():
    # EVIDENCE-OF: R20 W2
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), **SMALL)
    fs.arm("sync")
    support.raises(ddq.IOFailure, q.enqueue, b"one")
    support.raises(ddq.IOFailure, q.enqueue, b"two")
    q.close()
    q = ddq.Queue(d, clock=support.FakeClock(T0), **SMALL)
    assert q.stats().total_items <= 1
    q.close()


def test_lease_and_retry_deadlines_with_injected_clock():
    # EVIDENCE-OF: T1 T2 O5
    clock = support.FakeClock(T0)
    q, d = _q(clock=clock)
    q.enqueue(b"x")
    c = q.claim(30000)
    assert c.lease_until_ms == T0 + 30000
    assert q.claim(1000) is None
    clock.advance(29999)
    assert q.claim(1000) is None
    clock.advance(1)
    c = q.claim(1000)
    assert c.seq == 1 and c.attempts == 0
    q.retry(1, 5000)
    assert [i.not_before_ms for i in q.items()] == [clock() + 5000]
    clock.advance(4999)
    assert q.claim(1000) is None
    clock.advance(1)
    assert q.claim(1000).attempts == 1
    q.close()


def _default_clock_without(missing, use=None):
    # ddq imported afresh over a time module lacking the names in missing; returns the fresh
    # module and what use(fresh) gives (default: its default clock's reading), or raises: the
    # exception. The parts use loads are dropped; the old ddq, its parts and time are put back.
    support.needs_heap(160 * 1024, "a second ddq (23 KB) imported beside the first", 128 * 1024)
    import sys
    import time

    class Stub:
        pass

    stub = Stub()
    for name in dir(time):
        if name not in missing and not name.startswith("__"):
            setattr(stub, name, getattr(time, name))
    old_ddq, old_time = sys.modules.get("ddq"), sys.modules.get("time")
    parts = [(k, sys.modules[k]) for k in sys.modules if k.startswith("ddq_")]
    for k, _ in parts:  # the fresh ddq loads its own parts
        del sys.modules[k]
    try:
        sys.modules["time"] = stub
        del sys.modules["ddq"]
        fresh = __import__("ddq")
        try:
            return fresh, (use or (lambda m: m._wall_ms()))(fresh)
        except Exception as e:
            return fresh, e
    finally:
        for k in [k for k in sys.modules if k.startswith("ddq_")]:
            del sys.modules[k]
        for k, m in parts:
            sys.modules[k] = m
        sys.modules["ddq"] = old_ddq
        if old_time is None:
            del sys.modules["time"]
        else:
            sys.modules["time"] = old_time


def test_import_on_a_port_without_gmtime():
    # EVIDENCE-OF: T1 (a port without time.gmtime, as MicroPython's stock qemu firmware, imports
    # ddq; the default clock then takes time() as Unix, with no 2000-epoch offset)
    import time

    if not hasattr(time, "time"):
        raise support.Skip("this port's time module has no time() (no clock): pass clock=")
    t0 = int(time.time()) * 1000
    fresh, now = _default_clock_without(("gmtime", "localtime", "mktime"))
    t1 = int(time.time()) * 1000 + 1000
    assert fresh is not ddq and not hasattr(fresh.time, "gmtime")
    assert t0 <= now <= t1, (t0, now, t1)


def test_import_on_a_port_without_a_clock_says_pass_clock():
    # EVIDENCE-OF: T4 (a port whose time module has neither time() nor time_ns(), as upstream
    # MicroPython's ports/qemu: a queue with the default clock opens and enqueues; the claim that
    # reads the clock raises IOFailure saying clock=, where it raised AttributeError)
    d = support.tmpdir() + "/q"

    def use(fresh):
        q = fresh.Queue(d, **SMALL)
        try:
            q.enqueue(b"x")
            try:
                q.claim(1000)
            except fresh.IOFailure as e:
                return e
            return "claimed"
        finally:
            q.close()

    import time

    if hasattr(time, "time") or hasattr(time, "time_ns"):  # a port with a clock: simulated
        fresh, err = _default_clock_without(("time", "time_ns", "gmtime"), use)
    else:  # a port without one (the qemu board's firmware): the real thing
        fresh, err = ddq, use(ddq)
    assert isinstance(err, fresh.IOFailure) and "clock=" in str(err), err
    q = ddq.Queue(d, clock=support.FakeClock(T0), **SMALL)
    assert q.stats().available_items == 1  # the enqueue held; the claim changed nothing
    q.close()


def test_clock_went_back_guard():
    # EVIDENCE-OF: T3 T4
    clock = support.FakeClock(T0)
    q, d = _q(clock=clock)
    q.enqueue(b"a")
    q.enqueue(b"b")
    q.claim(604800000)  # 1: a 7-day lease
    c = q.claim(1000)
    q.retry(c.seq, 4294967295)  # 2: the longest retry
    clock.set(T0 - 1000)  # the clock steps back: both deadlines now lie beyond legal
    c = q.claim(1000)
    assert c is not None and c.seq == 1, c
    c = q.claim(1000)
    assert c is not None and c.seq == 2
    q.close()
    bad = ddq.Queue(support.tmpdir() + "/q", clock=lambda: 0, **SMALL)
    bad.enqueue(b"x")
    support.raises(ddq.IOFailure, bad.claim, 1000)
    bad.close()


def test_sync_policies_and_durable_seq():
    # EVIDENCE-OF: D1 D2 D3 D4 S2
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), sync="ack", **SMALL)
    q.enqueue(b"a")
    n = fs.calls.get("sync", 0)
    c = q.claim(1000)
    assert fs.calls.get("sync", 0) == n  # an unsynced CLAIM
    q.retry(c.seq, 0)
    assert fs.calls.get("sync", 0) == n  # an unsynced RETRY
    q.claim(1000)
    q.ack(1)
    assert fs.calls.get("sync", 0) == n + 1  # the ACK is synced (and covers the rest)
    assert q.durable_seq == 1
    q.close()
    d = support.tmpdir() + "/q2"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), sync="none", **SMALL)
    q.enqueue(b"first")
    assert q.durable_seq == 0
    q.sync()
    n = fs.calls.get("sync", 0)
    for i in range(3):
        q.enqueue(b"g%d" % i)
    assert fs.calls.get("sync", 0) == n and q.durable_seq == 1
    assert q.sync() == 4 and q.durable_seq == 4
    q.close()
    q = ddq.Queue(d, clock=support.FakeClock(T0), **SMALL)
    assert q.stats().next_seq == 5 and q.durable_seq == 4
    q.close()


def test_empty_payload_and_binary_data():
    # EVIDENCE-OF: F9 O1
    q, d = _q()
    data = bytes(range(128))
    assert q.enqueue(data) == 1
    assert q.enqueue(b"") == 2
    assert q.enqueue(bytearray(b'\0\\"')) == 3
    q.close()
    q, d = _q(d)
    assert q.read(1) == data and q.read(2) == b"" and q.read(3) == b'\0\\"'
    q.close()


def test_large_payload_limits_use_wide_index_entries():
    # EVIDENCE-OF: O12 O1
    # max_payload_bytes over 65535 keeps the lengths in 32 bits: lengths and states survive.
    support.needs_heap(
        512 * 1024,
        "a 66,563-byte payload is written, read and compared whole "
        "(blocks of 65 KiB: the payload, its copy, the read window)",
    )
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    opts = {
        "segment_bytes": 262144,
        "max_payload_bytes": 70000,
        "max_items": 50,
        "max_segments": 16,
    }
    q = ddq.Queue(d, clock=clock, **opts)
    big = bytes(range(256)) * 260 + b"end"
    s1 = q.enqueue(big)
    s2 = q.enqueue(b"small")
    c = q.claim(1000)
    assert c.seq == s1 and c.payload_len == len(big)
    q.quarantine(s1, b"why")
    items = [(i.seq, i.state, i.payload_len) for i in q.items()]
    assert items == [(s1, "quarantined", len(big)), (s2, "available", 5)], items
    q.close()
    q = ddq.Queue(d, clock=clock, **opts)
    assert q.read(s1) == big and q.reason(s1) == b"why" and q.read(s2) == b"small"
    assert [(i.seq, i.state, i.payload_len) for i in q.items()] == items
    q.close()


def test_modules_beside_ddq_load_on_demand():
    # EVIDENCE-OF: O21
    import gc
    import sys

    lazy = ("ddq_compact", "ddq_extra")
    was = [m for m in lazy if m in sys.modules]  # (an earlier test may have loaded them)
    q, d = _q()
    # A heap of at most 128 KiB drops the open-time code after the open; a bigger one keeps it.
    small = hasattr(gc, "mem_free") and gc.mem_free() + gc.mem_alloc() < 135168
    assert ("ddq_recover" in sys.modules) != small
    s = q.enqueue(b"one")
    c = q.claim(1000)
    assert c is not None and c.seq == s and q.read(s) == b"one" and q.ack(s)
    q.enqueue(b"two")
    for m in lazy:
        assert m in was or m not in sys.modules, m
    # The first use of a moved method loads its module and works as if it had been there.
    assert [(i.seq, i.state) for i in q.items()] == [(s, "acked"), (s + 1, "available")]
    assert "ddq_extra" in sys.modules and isinstance(next(iter(q.items())), ddq.Item)
    assert q.compact() and "ddq_compact" in sys.modules
    assert [i.seq for i in q.items()] == [s + 1] and q.stats().generation == 1
    q.close()
    q, d = _q(d=d)
    assert q.oldest_available() == s + 1 and q.read(s + 1) == b"two"
    q.close()
    m = ddq.encode_manifest(1, 2, 3, 4, 5)
    assert len(m) == 48 and ddq.decode_manifest(m) == (1, 2, 3, 4, 5)
    support.raises(AttributeError, getattr, ddq, "no_such_name")


def test_rare_error_classes_are_made_at_first_use():
    # EVIDENCE-OF: O21
    names = (
        "InvalidArgument",
        "Corrupt",
        "Locked",
        "NotFound",
        "BadState",
        "BufferTooSmall",
        "IOFailure",
        "TooLarge",
        "Full",
        "Limit",
    )
    codes = (-1, -3, -4, -8, -9, -10, -2, -6, -7, -11)
    for n, code in zip(names, codes):
        cls = getattr(ddq, n)
        assert issubclass(cls, ddq.Error) and cls.__name__ == n and getattr(ddq, n) is cls
        assert ddq.__dict__[n] is cls  # kept in the module: one class, whoever asked first
        assert cls.code == code and issubclass(cls, Exception)
    assert ddq.Error.code == -1 and ddq.IOFailure.errno == 0 and ddq.__dict__["Error"] is ddq.Error
    q, d = _q()
    s = q.enqueue(b"four")
    support.raises(ddq.NotFound, q.read, s + 1)
    support.raises(ddq.BadState, q.ack, s)
    try:
        q.read_into(s, bytearray(2))
        raise AssertionError("no BufferTooSmall")
    except ddq.BufferTooSmall as e:
        assert e.needed == 4 and e.code == -10 and isinstance(e, ddq.Error)
    support.raises(ddq.Locked, ddq.Queue, d)
    q.close()
    support.raises(ddq.InvalidArgument, ddq.Queue, "")
