# Heap allocation on the steady-state enqueue / claim / ack path (STYLE 6), MicroPython only:
# micropython.heap_lock() and gc.mem_alloc() do not exist on CPython.
#
# Each op is first called under micropython.heap_lock() (results bound to locals). An op that
# runs there allocates nothing. For an op that does not (yet), the test measures the mean bytes
# it allocates in steady state with the collector off, and asserts it stays under the bound
# measured on the unix port, independent of the payload size (no payload copy) and growing at
# most logarithmically with the queue (no O(n) allocation). `bench/allocprof.py` names the
# allocating lines; docs/BENCHMARKS.md keeps the table.
#
# Measured at the time of writing (unix port, 64-bit; bytes per op, after warm-up):
#   enqueue ~270 (no heap_lock): a tuple in _bytes_arg's isinstance, two lists and a tuple in
#           _admit_with, array growth in _Index.add
#   claim   ~800-900: array('Q') reads (an mpz each) in _Index.find / next_fresh /
#           set_history, the live-list, the dict items() view, the Claim object
#   ack     ~800-1050: array('Q') reads in two binary searches, history()'s tuple
# Function frames over 11 words also go on the heap (freed on return, and they fall back to
# the C stack under heap_lock), so they are not counted here.
import gc

import shared
import support

try:
    import micropython
except ImportError:
    micropython = None

# Bounds per op in bytes: the measured values above plus headroom for array growth steps and
# one more binary-search level. Lower them as port/ddq.py stops allocating; 0 = heap_lock proof.
ENQUEUE_MAX = 400
CLAIM_MAX = 1400
ACK_MAX = 1600
# Growth allowed from 100 to 1,000 retained items: about log2(10) more array('Q') reads of
# 64 bytes in each of (at most) two binary searches.
LOG_GROWTH = 512


def _need_mp():
    if (
        micropython is None
        or not hasattr(micropython, "heap_lock")
        or not hasattr(gc, "mem_alloc")
    ):
        raise support.Skip("micropython.heap_lock / gc.mem_alloc are MicroPython-only")


def _need_quiet_fs(d):
    """Skip where the filesystem itself allocates per write + flush: the unix port's lfs2 and
    fat runs sit on a RAM block device written in Python (tests/mprun.py), whose readblocks /
    writeblocks slice memoryviews. ddq's own allocation is then measured by the posix run; a
    board's C block device allocates nothing here, so the test runs there."""
    buf = bytearray(48)
    f = open(d + "/probe.bin", "wb")
    try:
        f.write(buf)
        f.flush()
        gc.collect()
        gc.disable()
        try:
            m0 = gc.mem_alloc()
            for _ in range(8):
                f.write(buf)
                f.flush()
            m1 = gc.mem_alloc()
        finally:
            gc.enable()
    finally:
        f.close()
    if m1 != m0:
        raise support.Skip(
            "write + flush on this filesystem allocates %d bytes (its block "
            "device is Python code)" % (m1 - m0)
        )


def _queue(path, pending, payload):
    """Open path with `pending` more items (added without a sync each), warmed up."""
    import ddq

    q = ddq.Queue(path, clock=support.FakeClock(), sync="none", max_items=10000)
    try:
        for _ in range(pending):
            q.enqueue(payload)
    finally:
        q.close()
    q = ddq.Queue(path, clock=support.FakeClock(), sync="always", max_items=10000)
    for _ in range(20):  # warm-up: buffers, arrays and dicts reach their working size
        seq = q.enqueue(payload)
        c = q.claim(30000)
        q.ack(c.seq)
    assert seq > pending
    return q


def _mean_allocs(q, payload, rounds):
    tot_e, tot_c, tot_a = shared.alloc_totals(q, payload, rounds)
    return tot_e // rounds, tot_c // rounds, tot_a // rounds


_locked = shared.heap_locked  # one call under heap_lock: (True, result) or (False, None)


def _locked_ops(path, payload):
    """Which of enqueue / claim / ack complete under heap_lock. A MemoryError may strike in the
    middle of an op, so each attempt gets a freshly opened queue, closed after it."""
    import ddq

    clock = support.FakeClock()
    q = ddq.Queue(path, clock=clock, sync="always", max_items=10000)
    try:
        gc.collect()
        ok_e, seq = _locked(q.enqueue, payload)
    finally:
        q.close()
    q = ddq.Queue(path, clock=clock, sync="always", max_items=10000)
    try:
        q.enqueue(payload)
        gc.collect()
        ok_c, c = _locked(q.claim, 30000)
    finally:
        q.close()
    q = ddq.Queue(path, clock=clock, sync="always", max_items=10000)
    try:
        c = q.claim(30000)
        assert c is not None
        cs = c.seq
        gc.collect()
        ok_a, r = _locked(q.ack, cs)
    finally:
        q.close()
    if ok_e:
        assert seq > 0
    if ok_a:
        assert r is True
    return ok_e, ok_c, ok_a


# EVIDENCE-OF: W1 O1 O2 O4
def test_steady_state_lifecycle_allocation_is_bounded():
    _need_mp()
    support.needs_heap(
        256 * 1024,
        "the queue under measure has the default options (4 MiB "
        "segments, 1 MiB payloads): its reopen reads through a 62 KB window",
    )
    d = support.tmpdir()
    _need_quiet_fs(d)
    small = bytes(16)
    large = bytes(1024)
    q = _queue(d + "/q", 100, small)
    try:
        e1, c1, a1 = _mean_allocs(q, small, 40)
        _mean_allocs(q, large, 1)  # the first 1 KiB length widens the index chunk, once
        e2, c2, a2 = _mean_allocs(q, large, 40)
    finally:
        q.close()
    q = _queue(d + "/q", 900, small)
    try:
        e3, c3, a3 = _mean_allocs(q, small, 40)
    finally:
        q.close()
    ok_e, ok_c, ok_a = _locked_ops(d + "/q", small)
    print(
        "heapalloc: bytes/op enqueue %d %d %d, claim %d %d %d, ack %d %d %d; heap_lock ok: "
        "enqueue %r claim %r ack %r" % (e1, e2, e3, c1, c2, c3, a1, a2, a3, ok_e, ok_c, ok_a)
    )
    for ok, per, bound in (
        (ok_e, (e1, e2, e3), ENQUEUE_MAX),
        (ok_c, (c1, c2, c3), CLAIM_MAX),
        (ok_a, (a1, a2, a3), ACK_MAX),
    ):
        if ok:
            continue  # ran under heap_lock: allocates nothing
        assert per[0] <= bound and per[1] <= bound and per[2] <= bound, (per, bound)
    # No payload copy: a 1 KiB payload allocates no more than a 16-byte one (one array-growth
    # step of slack). The one conversion of the index chunk that the first 1 KiB length brings
    # (DESIGN §4: ~2 KiB once, 2,304 B on the 32-bit port) is a warm-up round, not measured.
    assert e2 <= e1 + 64, (e1, e2)
    assert c2 <= c1 + 64, (c1, c2)
    assert a2 <= a1 + 64, (a1, a2)
    # Ten times the items: at most logarithmic growth.
    assert e3 <= e1 + LOG_GROWTH and c3 <= c1 + LOG_GROWTH and a3 <= a1 + LOG_GROWTH


# EVIDENCE-OF: D3 D4
def test_sync_and_durable_seq_do_not_allocate_when_clean():
    _need_mp()
    import ddq

    d = support.tmpdir()
    q = ddq.Queue(d + "/q", clock=support.FakeClock(), sync="none")
    try:
        q.enqueue(b"x")
        q.sync()
        gc.collect()
        micropython.heap_lock()
        try:
            s = q.sync()  # nothing dirty: no write, no allocation
            t = q.durable_seq
        finally:
            micropython.heap_unlock()
        assert s == 1 and t == 1
    finally:
        q.close()
