"""ddq_group when a caller is killed (SPEC §14 [G4] [G6], issue 35 item 4): an exception
delivered to a waiting follower, a leader or a caller holding the group's mutex (an
asynchronous exception, PyThreadState_SetAsyncExc; KeyboardInterrupt has the same windows in
the main thread) leaves no lock held: the other producers return, close() returns, and nobody
waits for ever. CPython only (async exceptions, real threads); every wait here is bounded.

Each test parks a thread at the exact window through a hook (the leader's yield, the lock
factory) or finds it blocked at the gate from its frame, injects the exception, then lets it
go. On the code before issue 35 the others hung for ever (these tests time out in seconds).

Also Outbox(lock=True) (OUTBOX [E16]): a caller killed as it takes the lock (blocked in its
acquire, the exception raised as the acquire returns) left it held for every later call."""

# EVIDENCE-OF: G4 G6 E16
import ctypes
import linecache
import sys
import threading

import ddq
import ddq_group
import ddq_outbox

BOUND_S = 10.0  # how long a thread may take to end here (they end in milliseconds)


class Killed(BaseException):
    """What an asynchronous exception delivers (a BaseException, like KeyboardInterrupt)."""


class HeldSync(ddq.PosixStorage):
    """PosixStorage whose syncs block while `held` is cleared (bounded)."""

    def __init__(self):
        super().__init__()
        self.held = threading.Event()
        self.held.set()

    def sync(self, f):
        assert self.held.wait(3 * BOUND_S)  # (longer than any wait of the test itself)
        super().sync(f)


def _kill(t):
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(t.ident), ctypes.py_object(Killed)
    )
    assert n == 1, n


def _where(t):
    # The line that thread t runs in Group.call (or in whatever ddq_group function it is in).
    f = sys._current_frames().get(t.ident)
    while f is not None and not f.f_code.co_filename.endswith("ddq_group.py"):
        f = f.f_back
    return "" if f is None else linecache.getline(f.f_code.co_filename, f.f_lineno).strip()


def _until(cond, what):
    ev = threading.Event()
    for _ in range(int(BOUND_S / 0.001)):
        if cond():
            return
        ev.wait(0.001)
    raise AssertionError("never: " + what)


def _at_gate(t):
    # A follower blocked on the running batch's gate (this code's line, or the old one's).
    w = _where(t)
    return w.startswith("with run[0]") or w == "gate.acquire()"


def _at_mu(t):
    w = _where(t)
    return w == "with mu:" or w == "mu.acquire()"


class Producers:
    def __init__(self, g):
        self.g, self.out, self.threads = g, {}, {}

    def start(self, name):
        def run():
            try:
                self.out[name] = self.g.enqueue(name.encode() * 8)
            except BaseException as e:  # noqa: B036 (the injected one is the point)
                self.out[name] = e

        t = threading.Thread(target=run, daemon=True)
        self.threads[name] = t
        t.start()
        return t

    def join(self, names):
        ev = threading.Event()
        for _ in range(int(BOUND_S / 0.001)):
            if all(not self.threads[n].is_alive() for n in names):
                return
            ev.wait(0.001)
        stuck = [n for n in names if self.threads[n].is_alive()]
        raise AssertionError("producers %s still waiting (%s)" % (stuck, self.out))


def _close(g):
    # close() in a thread, joined with a bound: it must return.
    t = threading.Thread(target=g.close, daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), "close() did not return"


def _payloads(d):
    with ddq.Queue(d) as q:
        return sorted(q.read(it.seq) for it in q.items())


def _parked_leader(tmp_path, monkeypatch, followers):
    # Leader "a" parked in its yield (the batch before it had 6 writes), followers waiting at
    # its gate with their ops in its batch-to-be.
    d = str(tmp_path / "q")
    q = ddq.Queue(d, sync="none", storage=HeldSync())
    g = ddq_group.Group(q)
    parked, go = threading.Event(), threading.Event()

    def park():
        parked.set()
        assert go.wait(BOUND_S)

    monkeypatch.setattr(ddq_group, "_yield", park)
    g._last = 6  # as after a batch of 6: the leader yields once for callers to join [G2]
    p = Producers(g)
    a = p.start("a")
    assert parked.wait(BOUND_S)
    for n in followers:  # one by one: each blocked at the gate before the next comes
        t = p.start(n)
        _until(lambda t=t: _at_gate(t), n + " at the gate")
    return d, q, g, p, a, go


def test_follower_killed_at_the_gate_does_not_strand_the_others(tmp_path, monkeypatch):
    # Issue 35 item 4: b, the first follower at the gate, gets an exception the moment it has
    # acquired the gate (between acquire and release); c..f, whose records were written and
    # synced in a's batch, must return, and close() must return.
    fs = ["b", "c", "d", "e", "f"]
    d, q, g, p, a, go = _parked_leader(tmp_path, monkeypatch, fs)
    _kill(p.threads["b"])  # pending until b runs again: right after its acquire returns
    go.set()
    p.join(["a"] + fs)
    assert isinstance(p.out["b"], Killed), p.out
    for n in ["a"] + fs[1:]:
        assert isinstance(p.out[n], int), p.out
    _close(g)
    # Every write was in a's batch and synced (b's too: a call that raised may have been made)
    assert _payloads(d) == sorted(n.encode() * 8 for n in ["a"] + fs)


def test_leader_killed_before_it_took_its_batch_does_not_strand_the_followers(
    tmp_path, monkeypatch
):
    # "A killed producer hangs group commit": the leader dies in its yield, after it published
    # its batch (the gate held) and before it took it. The followers lead the next batch.
    d, q, g, p, a, go = _parked_leader(tmp_path, monkeypatch, ["b", "c"])
    _kill(a)
    go.set()
    p.join(["a", "b", "c"])
    assert isinstance(p.out["a"], Killed), p.out
    assert isinstance(p.out["b"], int) and isinstance(p.out["c"], int), p.out
    _close(g)
    assert len(_payloads(d)) in (2, 3)  # a's op may have been applied by the next leader


def test_caller_killed_holding_the_group_mutex_does_not_strand_the_others(tmp_path):
    # A caller dies while it holds the group's own mutex (here in the lock factory its first
    # lead calls): the mutex is free again and the others go on.
    d = str(tmp_path / "q")
    q = ddq.Queue(d, sync="none", storage=HeldSync())
    g = ddq_group.Group(q)
    parked, go, real = threading.Event(), threading.Event(), g._mk
    first = [True]

    def mk():
        if first[0]:
            first[0] = False
            parked.set()
            assert go.wait(BOUND_S)
        return real()

    g._mk = mk
    p = Producers(g)
    a = p.start("a")
    assert parked.wait(BOUND_S)
    b = p.start("b")
    _until(lambda: _at_mu(b), "b waiting for the mutex")
    _kill(a)
    go.set()
    p.join(["a", "b"])
    assert isinstance(p.out["a"], Killed) and isinstance(p.out["b"], int), p.out
    p.start("c")
    p.join(["c"])
    assert isinstance(p.out["c"], int), p.out
    _close(g)


def test_close_ends_every_caller_still_waiting(tmp_path):
    # [G6] close() while a batch syncs: the running batch completes; callers whose writes wait
    # in the open batch end at once with IOFailure, not after a race for the queue's lock.
    d = str(tmp_path / "q")
    fs = HeldSync()
    q = ddq.Queue(d, sync="none", storage=fs)
    g = ddq_group.Group(q)
    p = Producers(g)
    fs.held.clear()
    a = p.start("a")
    _until(lambda: "sync" in _where(a) or _where(a).startswith("self.target.sync"), "a syncing")
    for n in ("b", "c"):
        t = p.start(n)
        _until(lambda t=t: _at_gate(t), n + " at the gate")
    closer = threading.Thread(target=g.close, daemon=True)
    closer.start()
    _until(lambda: g._closed and g._open is None, "close() took the open batch")
    fs.held.set()
    p.join(["a", "b", "c"])
    closer.join(BOUND_S)
    assert not closer.is_alive()
    assert p.out["a"] == 1, p.out
    for n in ("b", "c"):
        assert isinstance(p.out[n], ddq.IOFailure) and "closed" in str(p.out[n]), p.out
    assert _payloads(d) == [b"a" * 8]


# ---------------------------------------------------------------- Outbox(lock=True) [E16]


def _blocked_in_outbox_lock(t):
    # Thread t is inside ddq_outbox's lock wrapper, waiting for the lock.
    f = sys._current_frames().get(t.ident)
    return f is not None and f.f_code.co_name == "call" and "ddq_outbox" in f.f_code.co_filename


def test_a_caller_killed_as_it_takes_the_lock_leaves_it_free(tmp_path):
    ob = ddq_outbox.Outbox(str(tmp_path / "q"), lock=True, clock=lambda: 1000)
    ob.put("t", b"x")
    acquire, release = ob._lk
    assert acquire()  # the test holds the Outbox's lock
    out = []

    def victim():
        try:
            ob.qsize()
        except Killed:
            out.append("killed")

    t = threading.Thread(target=victim, daemon=True)
    t.start()
    _until(lambda: _blocked_in_outbox_lock(t), "the victim waits for the lock")
    _kill(t)
    release()  # the victim takes the lock, then meets Killed
    t.join(BOUND_S)
    assert not t.is_alive() and out == ["killed"]
    res = []
    t2 = threading.Thread(target=lambda: res.append(ob.qsize()), daemon=True)
    t2.start()
    t2.join(BOUND_S)
    assert res == [1], "the lock stayed held: a later call waited for ever"
    ob.close()
