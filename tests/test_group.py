# ddq_group (SPEC §14): durable-on-return writes for concurrent callers sharing one sync. Shared
# suite: subset Python, no real sleeping, bounded loops. Power cuts are simulated by copying the
# queue directory as a cut would leave it (each file cut to its synced length).
import time

import ddq
import ddq_group
import shared
import support
from faults import FaultStorage

PAY = b"p" * 100


class CutFS(FaultStorage):
    """FaultStorage that remembers each file's synced length; cut() copies a directory as a
    power cut right now would leave it (unsynced appends dropped)."""

    def __init__(self):
        super().__init__()
        self.synced = {}  # path -> synced length, for files written through this object
        self.paths = {}  # id(handle) -> path
        self.syncs = 0

    def open(self, path, mode):
        h = super().open(path, mode)
        if mode != "rb":
            self.paths[id(h)] = path
            if mode == "wb" or path not in self.synced:
                self.synced[path] = 0 if mode == "wb" else self.size(path)
        return h

    def sync(self, h):
        super().sync(h)
        self.syncs += 1
        p = self.paths.get(id(h))
        if p is not None:
            self.synced[p] = self.size(p)

    def close(self, h):
        self.paths.pop(id(h), None)
        super().close(h)

    def rename(self, src, dst):
        super().rename(src, dst)
        if src in self.synced:
            self.synced[dst] = self.synced.pop(src)

    def remove(self, path):
        super().remove(path)
        self.synced.pop(path, None)

    def cut(self, src):
        return shared.cut_copy(src, self.synced)


# Where a test skips in a small heap (support.needs_heap; measured on the unix port, 64-bit, the
# module beside the runner): a group of concurrent callers (threads or asyncio tasks, each with
# its frames and ops) and the power cuts it checks, a copy of the queue per cut.
_GROUP_HEAP = "concurrent callers (threads or asyncio tasks) and a queue copy per power cut"
# Two queues (one under a Group, one over a cut copy) open beside the runner: in the 140 KiB
# board's heap, 66 KB free at the module's start hold no 944-byte run for a queue's attribute
# table (fragmentation; tests/host/test_host_smallheap.py).
_TWO_QUEUES = "two queues, a group and a cut copy in a fragmented heap"


def _group(ack_durable=True, **kw):
    d, fs = support.tmpdir(), CutFS()
    q = ddq.Queue(d, sync="none", storage=fs, **kw)
    return d, fs, q, ddq_group.Group(q, ack_durable=ack_durable)


def _payload(t, i):
    return b"%d:%d:" % (t, i) + PAY


def _check_cut(img, returned):
    # Every put that had returned when the cut was taken is in the image, with its payload [G3].
    with ddq.Queue(img) as q:
        have = {}
        for it in q.items():
            have[it.seq] = it.state
        for seq, pay in returned:
            assert seq in have, "returned seq %d lost by a cut after it returned" % seq
            assert q.read(seq) == pay, seq


def _asyncio():
    return shared.needs_asyncio()


def _start(fn, args):
    # A thread on either interpreter; Skip where there are none (most boards).
    try:
        import _thread
    except ImportError:
        raise support.Skip("no _thread")
    _thread.start_new_thread(fn, args)


def _wait(cond):
    # Spin, yielding the GIL, until cond() holds; bounded (a hang fails instead).
    for _ in range(20000000):
        if cond():
            return
        time.sleep(0)
    raise AssertionError("threads did not finish")


def _run_threads(n, body):
    """Run body(t) in n threads; return the per-thread results (an exception is a result)."""
    out = [None] * n
    left = [n]
    mk = None
    try:
        import _thread

        mk = _thread.allocate_lock
    except ImportError:
        raise support.Skip("no _thread")
    mu = mk()

    def one(t):
        try:
            r = body(t)
        except Exception as e:
            r = e
        out[t] = r
        mu.acquire()
        left[0] -= 1
        mu.release()

    for t in range(n):
        _start(one, (t,))
    _wait(lambda: left[0] == 0)
    return out


# ---------------------------------------------------------------------------------- threads


def test_threads_every_returned_put_survives_a_cut():
    # EVIDENCE-OF: G1 G2 G3
    support.needs_heap(256 * 1024, _GROUP_HEAP)
    d, fs, q, g = _group()
    returned = []  # (seq, payload), appended after the put returned
    cuts = []  # (image, returned-before-it)
    n, per = 4, 12
    try:
        import _thread
    except ImportError:
        raise support.Skip("no _thread")
    # The test's own lists under a lock: the unix port runs threads without a GIL
    # (sys.implementation._thread == "unsafe"), where appends from several threads are lost.
    mu = _thread.allocate_lock()

    def body(t):
        for i in range(per):
            p = _payload(t, i)
            seq = g.enqueue(p)
            with mu:
                returned.append((seq, p))
                # returned before the image is taken: all must be in it
                snap = list(returned) if t == 0 and i % 4 == 3 else None
            if snap is not None:
                cuts.append((g.locked(fs.cut, d), snap))
        return True

    res = _run_threads(n, body)
    assert res == [True] * n, res
    g.close()
    seqs = [s for s, _p in returned]
    assert len(seqs) == n * per and len(set(seqs)) == n * per, seqs
    assert g.writes == n * per and 1 <= g.syncs <= n * per, (g.writes, g.syncs)
    assert len(cuts) == 3
    for img, snap in cuts:
        _check_cut(img, snap)
    _check_cut(d, returned)
    print("threads", n, "puts", n * per, "syncs", g.syncs)


def test_threads_failed_sync_raises_in_every_caller():
    # EVIDENCE-OF: G4
    support.needs_heap(256 * 1024, _GROUP_HEAP)
    d, fs, q, g = _group()
    assert g.enqueue(PAY) == 1
    fs.arm("sync", errno=5)  # the next sync fails, once; the queue fail-stops [R20]
    res = _run_threads(4, lambda t: g.enqueue(_payload(t, 0)))
    for r in res:
        assert isinstance(r, ddq.IOFailure), res  # nobody is told durable; nobody hangs
    assert q.stats().failed
    support.raises(ddq.IOFailure, g.enqueue, PAY)
    g.close()
    _check_cut(fs.cut(d), [(1, PAY)])


def test_threads_close_while_callers_wait():
    # EVIDENCE-OF: G6
    support.needs_heap(256 * 1024, _GROUP_HEAP)
    _start(lambda: None, ())  # Skip where there are no threads
    d, fs, q, g = _group()
    gate = [0]  # 1: a sync is held inside storage; 2: let it finish
    real_sync = fs.sync

    def slow_sync(h):
        if gate[0] == 0:
            gate[0] = 1
            _wait(lambda: gate[0] == 2)
        real_sync(h)

    fs.sync = slow_sync
    out = {}
    left = [3]
    import _thread

    mu = _thread.allocate_lock()

    def put(name):
        try:
            out[name] = g.enqueue(name.encode() * 10)
        except Exception as e:
            out[name] = e
        mu.acquire()
        left[0] -= 1
        mu.release()

    _start(put, ("a",))
    _wait(lambda: gate[0] == 1)  # a leads, its sync is held
    _start(put, ("b",))
    _start(put, ("c",))
    for _ in range(200):  # give b and c the GIL: they gather behind a's sync (or not yet)
        time.sleep(0)
    closed = []

    def closer():
        g.close()  # waits for the running sync, then closes the queue
        closed.append(1)

    _start(closer, ())
    for _ in range(200):
        time.sleep(0)
    gate[0] = 2
    _wait(lambda: left[0] == 0 and closed)
    assert out["a"] == 1, out  # the running sync completed: a is durable
    for k in ("b", "c"):  # gathered behind it, or refused: an int or IOFailure, never a hang
        assert isinstance(out[k], (int, ddq.IOFailure)), out
    support.raises(ddq.IOFailure, g.enqueue, PAY)
    _check_cut(fs.cut(d), [(v, k.encode() * 10) for k, v in out.items() if isinstance(v, int)])


# ---------------------------------------------------------------------------------- asyncio


def test_asyncio_tasks_share_syncs_and_survive_cuts():
    # EVIDENCE-OF: G1 G2 G3 G7
    support.needs_heap(256 * 1024, _GROUP_HEAP)
    asyncio = _asyncio()
    d, fs, q, g = _group()
    returned, cuts = [], []
    n, per = 8, 5
    s0 = fs.syncs

    async def task(t):
        for i in range(per):
            p = _payload(t, i)
            seq = await g.aenqueue(p)
            returned.append((seq, p))
            if t == 3:
                cuts.append((fs.cut(d), list(returned)))

    async def main():
        await asyncio.gather(*[task(t) for t in range(n)])

    asyncio.run(main())
    assert len(returned) == n * per and len(set(s for s, _p in returned)) == n * per
    # each round every task joins the leader's batch: one sync per round, no timer [G7]
    assert g.writes == n * per and g.syncs == per, (g.writes, g.syncs)
    assert fs.syncs - s0 == per, fs.syncs - s0
    for img, snap in cuts:
        _check_cut(img, snap)
    g.close()
    print("asyncio tasks", n, "puts", n * per, "syncs", g.syncs)


def test_asyncio_failed_sync_raises_in_every_covered_task():
    # EVIDENCE-OF: G4
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    asyncio = _asyncio()
    d, fs, q, g = _group()
    res = []

    async def task(t):
        try:
            res.append(await g.aenqueue(_payload(t, 0)))
        except ddq.IOFailure as e:
            res.append(e)

    async def main():
        await asyncio.gather(*[task(t) for t in range(5)])

    fs.arm("sync", errno=5)
    asyncio.run(main())
    assert len(res) == 5
    for r in res:
        assert isinstance(r, ddq.IOFailure), res
    assert q.stats().failed
    res.clear()
    asyncio.run(main())  # fail-stopped: every later call raises at once, no hang
    for r in res:
        assert isinstance(r, ddq.IOFailure), res
    g.close()


def test_asyncio_one_bad_op_does_not_fail_the_batch():
    # EVIDENCE-OF: G3 G4
    asyncio = _asyncio()
    d, fs, q, g = _group(max_payload_bytes=200)
    res = []

    async def task(p):
        try:
            res.append(await g.aenqueue(p))
        except ddq.Error as e:
            res.append(type(e).__name__)

    async def main():
        await asyncio.gather(task(PAY), task(b"x" * 300), task(PAY))

    asyncio.run(main())
    assert res == [1, "TooLarge", 2], res
    assert g.syncs == 1
    g.close()


def test_asyncio_close_while_tasks_wait():
    # EVIDENCE-OF: G6
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    asyncio = _asyncio()
    d, fs, q, g = _group()
    res = {}

    async def put(name):
        try:
            res[name] = await g.aenqueue(PAY)
        except ddq.IOFailure:
            res[name] = "IOFailure"

    async def close():
        g.close()  # the leader has not applied its batch yet: everyone in it is refused

    async def main():
        await asyncio.gather(put("a"), put("b"), close(), put("c"))

    asyncio.run(main())
    assert res == {"a": "IOFailure", "b": "IOFailure", "c": "IOFailure"}, res
    assert q.stats().failed  # closed


# ---------------------------------------------------------------------------------- acks, cost


def test_ack_durable_and_not():
    # EVIDENCE-OF: G5
    support.needs_heap(160 * 1024, _TWO_QUEUES, 144 * 1024)
    for durable in (True, False):
        d, fs, q, g = _group(ack_durable=durable)
        s = g.enqueue(PAY)
        c = g.locked(q.claim, 30000)
        assert c.seq == s and g.ack(s) is True
        with ddq.Queue(fs.cut(d)) as q2:
            st = [it.state for it in q2.items()]
        assert st == (["acked"] if durable else ["available"]), (durable, st)
        assert g.syncs == (2 if durable else 1)
        g.close()


def test_single_caller_pays_one_sync_per_write_like_always():
    # EVIDENCE-OF: G1 G5
    support.needs_heap(160 * 1024, _TWO_QUEUES, 144 * 1024)
    d, fs, q, g = _group()
    fs2 = CutFS()
    q2 = ddq.Queue(support.tmpdir(), sync="always", storage=fs2)
    s0, s2 = fs.syncs, fs2.syncs
    for i in range(5):
        assert g.enqueue(PAY) == q2.enqueue(PAY) == i + 1
    c = g.locked(q.claim, 30000)
    g.ack(c.seq)
    q2.ack(q2.claim(30000).seq)
    assert fs.syncs - s0 == 6 and g.syncs == 6, fs.syncs - s0
    assert fs2.syncs - s2 == 7  # sync="always" also syncs the claim
    g.close()
    q2.close()


def test_lone_caller_never_yields():
    # EVIDENCE-OF: G2
    # A lone caller leads every batch of its own and goes straight to its sync: the yield that
    # lets woken callers join only follows a batch that had company [G2].
    d, fs, q, g = _group()
    for _ in range(5):
        g.enqueue(PAY)
    g.ack(g.locked(q.claim, 30000).seq)
    assert g.yields == 0 and g.syncs == 6, (g.yields, g.syncs)
    g.close()


class Counter:
    def __init__(self):
        self.acquired = self.released = 0

    def acquire(self):
        self.acquired += 1
        return True

    def release(self):
        self.released += 1


def test_outbox_target():
    # EVIDENCE-OF: G1 G5
    support.needs_heap(224 * 1024, support.OUTBOX_HEAP)
    import ddq_outbox

    d, fs = support.tmpdir(), CutFS()
    q = ddq.Queue(d, sync="none", storage=fs)
    lk = Counter()  # the Outbox locks each call itself: an object with acquire/release
    ob = ddq_outbox.Outbox(q, lock=lk, seed=1)
    g = ddq_group.Group(ob, lock=None)
    s = g.put("t/1", b"hello")
    assert s == 1
    with ddq.Queue(fs.cut(d)) as q2:
        assert [it.seq for it in q2.items()] == [1]
    m = ob.get()
    assert g.ack(m) is True
    with ddq.Queue(fs.cut(d)) as q2:
        assert [it.state for it in q2.items()] == ["acked"]
    assert lk.acquired == lk.released and lk.acquired >= 5, lk.acquired
    g.close()
    q.close()


def test_bad_arguments():
    # EVIDENCE-OF: G1
    support.raises(ddq.InvalidArgument, ddq_group.Group, object())
    d, fs, q, g = _group()
    support.raises(ddq.InvalidArgument, ddq_group.Group, q, lock=5)
    g.close()
    g.close()  # idempotent
    support.raises(ddq.IOFailure, g.enqueue, PAY)
