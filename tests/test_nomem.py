# Heap exhaustion (SPEC O23): a MemoryError anywhere inside a queue operation reaches the caller
# as ddq.NoMemory (code -5, libddq's DDQ_NO_MEMORY), never raw; an operation that had not yet
# appended a record leaves the queue as it was and still working, one that had is fail-stopped
# (R20), and the directory then opens as the state before the operation or after it. Shared
# suite: CPython and MicroPython over POSIX, LittleFS and FAT. The MemoryError is injected at
# the k-th storage call or index allocation of a fixed script, for every k the script reaches
# (tests/cpython/test_nomem_heap.py exhausts a real MicroPython heap).
import ddq
import support
from faults import FaultStorage

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 40, "max_segments": 8, "max_items": 64}


class Oom:
    """Counts the points where the script may meet a MemoryError; raises one at the armed one."""

    def __init__(self):
        self.left = -1  # points to pass before raising; -1: disarmed
        self.hits = 0

    def hit(self):
        self.hits += 1
        if self.left == 0:
            self.left = -1
            raise MemoryError("injected")
        if self.left > 0:
            self.left -= 1


def _storage(oom):
    class S(FaultStorage):
        def _hit(self, method):  # every seam call may be the one that meets a MemoryError
            oom.hit()

    return S()


def _patch_index(oom):
    # The index's allocations after a record is written: a new item, a new live entry.
    add, hist = ddq._Index.add, ddq._Index.set_history

    def a(self, seq, sg, ln):
        oom.hit()
        add(self, seq, sg, ln)

    def h(self, i, attempts, lease, nb):
        oom.hit()
        hist(self, i, attempts, lease, nb)

    ddq._Index.add, ddq._Index.set_history = a, h
    return add, hist


def _script():
    # (name, operation) pairs; each reads the queue only, so a replay gives the same results.
    ops = []
    for k in range(6):
        ops.append(("enqueue", lambda q, k=k: q.enqueue(b"p%02d" % k + b"." * 20)))
    ops.append(("claim", lambda q: q.claim(1000)))
    ops.append(("ack 1", lambda q: q.ack(1)))
    ops.append(("claim", lambda q: q.claim(1000)))
    ops.append(("retry 2", lambda q: q.retry(2, 0)))
    ops.append(("claim", lambda q: q.claim(1000)))
    ops.append(("quarantine 2", lambda q: q.quarantine(2, b"bad")))
    ops.append(("read 3", lambda q: q.read(3)))
    ops.append(("stats", lambda q: q.stats().total_items))
    for k in range(6, 10):
        ops.append(("enqueue", lambda q, k=k: q.enqueue(b"p%02d" % k + b"." * 20)))
    ops.append(("claim", lambda q: q.claim(1000)))
    ops.append(("ack 3", lambda q: q.ack(3)))
    ops.append(("compact", lambda q: q.compact()))
    ops.append(("sync", lambda q: q.sync()))
    return ops


def _state(q):
    return [(i.seq, i.state, i.attempts, i.not_before_ms) for i in q.items()]


def _open(d, st, opts):
    return ddq.Queue(d, clock=support.FakeClock(T0), storage=st, sync="always", **opts)


def _reference(opts):
    # The state after each operation of the script, run without a fault: [S0, S1, ...].
    oom = Oom()
    d = support.tmpdir() + "/ref"
    q = _open(d, _storage(oom), opts)
    states = [_state(q)]
    for _name, op in _script():
        op(q)
        states.append(_state(q))
    q.close()
    return states


def _run(opts):
    ref = _reference(opts)
    oom = Oom()
    saved = _patch_index(oom)
    stopped = kept = absorbed = 0
    try:
        d0 = support.tmpdir() + "/count"
        q = _open(d0, _storage(oom), opts)
        oom.hits = 0
        for _name, op in _script():
            op(q)
        points = oom.hits
        q.close()
        assert points > 50, points
        for k in range(points):
            # (tmpdir makes a directory each call: remove it whole, not only d, or a 1 MiB
            # board's LittleFS runs out of blocks for the empty directories left behind)
            t = support.tmpdir()
            d = t + "/k%d" % k
            q = _open(d, _storage(oom), opts)
            oom.left = k
            failed_at = -1
            for j, (name, op) in enumerate(_script()):
                before = _state(q)
                try:
                    op(q)
                except ddq.NoMemory as e:
                    assert e.code == -5 and isinstance(e, ddq.Error), (k, name)
                    failed_at = j
                    break
            assert oom.left < 0, (k, oom.left)  # the k-th point was met
            if failed_at < 0:  # absorbed: the optional queue.index not written (X9), only
                assert _state(q) == ref[-1], k
                absorbed += 1
                q.close()
                support.rmtree(t)
                continue
            name = _script()[failed_at][0]
            if q.stats().failed:
                stopped += 1
                support.raises(ddq.IOFailure, q.enqueue, b"x")  # fail-stopped until recover()
                q.recover()
                assert _state(q) in (ref[failed_at], ref[failed_at + 1]), (k, name)
            else:
                kept += 1
                assert _state(q) == before, (k, name)  # nothing changed ...
                q.sync()  # ... and the queue still works
            q.close()
            q = _open(d, _storage(oom), opts)  # what is on disk opens: before or after
            got = _state(q)
            assert got in (ref[failed_at], ref[failed_at + 1]), (k, name, got)
            # the queue goes on: a new item gets a seq above every one it holds
            assert q.enqueue(b"after") > max([s[0] for s in got] + [0]), (k, name)
            q.close()
            support.rmtree(t)  # (a RAM disk holds a few of them)
    finally:
        ddq._Index.add, ddq._Index.set_history = saved
    assert stopped and kept and absorbed < points // 20, (stopped, kept, absorbed)
    return points


def test_heap_exhaustion_is_nomemory_and_the_queue_opens_as_before_or_after():
    # EVIDENCE-OF: O23 R20 O19
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    _run(OPTS)


def test_heap_exhaustion_under_the_hold_rule():
    # EVIDENCE-OF: O23 H2
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    _run(dict(OPTS, window=4, evidence_bytes=128))


def test_nomemory_is_a_ddq_error_with_libddqs_code():
    # EVIDENCE-OF: O23 O19
    assert ddq.NoMemory.code == -5 and issubclass(ddq.NoMemory, ddq.Error)
    from ddq import NoMemory

    assert NoMemory is ddq.NoMemory


def test_nomemory_while_iterating_items_after_an_ack_does_not_fail_stop():
    # EVIDENCE-OF: O23
    # items() appends nothing: a MemoryError inside it is NoMemory and the queue keeps working,
    # even when the caller acked (appended) between two items.
    import ddq_extra

    d = support.tmpdir() + "/q"
    q = _open(d, ddq.PosixStorage(), OPTS)
    for k in range(3):
        q.enqueue(b"i%d" % k)
    c = q.claim(1000)
    it = q.items()
    assert next(it).seq == 1
    q.ack(c.seq)  # an append between two items
    item = ddq_extra.Item

    def broken(*a):
        raise MemoryError("injected")

    ddq_extra.Item = broken
    try:
        support.raises(ddq.NoMemory, next, it)
    finally:
        ddq_extra.Item = item
    assert not q.stats().failed
    assert q.enqueue(b"after") == 4
    q.close()
