"""ddq_group: durable-on-return writes for concurrent callers that share one sync.

Many producers (threads, or asyncio tasks) each want to know that *their* record is durable
when the call returns, without paying one fsync each. A Group wraps a Queue opened with
sync="none" (or an Outbox over such a queue) and makes every write wait for a sync that covers
it; writers that arrive while a sync runs gather behind it, and one of them leads the next
sync for all of them (leader/follower group commit, no timer). Optional: `import ddq` alone
never loads it.

    import ddq, ddq_group
    g = ddq_group.Group(ddq.Queue("outbox", sync="none"))
    seq = g.enqueue(b"reading")    # from any thread: durable when it returns
    seq = await g.aenqueue(b"x")   # from asyncio tasks (one event loop)
    g.close()

Guarantees: docs/SPEC.md §14 [G1]-[G7]; why leader/follower: docs/DESIGN.md.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import os
import time

from ddq import InvalidArgument, IOFailure, const

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional


# ============================================================================ group
# An op is [fn, args, result, error, done]. A batch is a list of ops. A running batch (threads)
# is [gate, waiters]: the gate is a lock the leader holds while it applies and syncs the batch;
# a follower waits by `with gate: pass` (each lock is released by the thread that acquired it:
# MicroPython's unix port uses pthread mutexes). Every lock is held inside a `with` (or, for the
# leader's gate, from before it is published until a `finally`), so an exception delivered to
# a caller at any point (KeyboardInterrupt, an asynchronous exception) leaves no lock held and
# no op of a taken batch without an end [G4].


def _sleep0() -> None:
    time.sleep(0)


# One scheduling round for the other threads, no timer: it releases the GIL so that callers
# that a finished sync just woke can add their ops first. sched_yield where os has it (CPython,
# which releases the GIL around it): CPython's time.sleep(0) is a clock_nanosleep that costs
# ~100 us of timer slack on Linux, which the leader paid per batch (DESIGN §6.1). Elsewhere
# (MicroPython) time.sleep(0), which releases the GIL there.
_yield: "Callable[[], Any]" = getattr(os, "sched_yield", None) or _sleep0


def _end(batch: "list[Any]", err: "Any", synced: bool) -> None:
    # Every op of a batch that has not ended ends now: with the error err (else one saying that
    # no sync covered it) unless the sync covering it completed [G3][G4].
    for op in batch:
        if not op[4]:
            if not synced and op[3] is None:
                op[2] = None
                op[3] = err if err is not None else IOFailure("interrupted before the sync")
            op[4] = True


class _Lock:
    # `with` over an object's acquire/release (a lock without __enter__); with none, no lock:
    # where _thread does not exist only asyncio tasks call in, and there is nothing to exclude.
    def __init__(self, lk: "Any" = None) -> None:
        self.lk = lk

    def acquire(self, *a: "Any") -> bool:
        if self.lk is not None:
            self.lk.acquire()
        return True

    def release(self) -> None:
        if self.lk is not None:
            self.lk.release()

    def __enter__(self) -> "_Lock":
        self.acquire()
        return self

    def __exit__(self, *a: "Any") -> None:
        self.release()


def _fn(fn: "Any") -> None:
    if not callable(fn):  # [O24]
        raise InvalidArgument("not a callable: %r" % (fn,))


class Group:
    """Durable-on-return writes over target (a Queue opened with sync="none", or an Outbox over
    one) for many threads or the tasks of one asyncio loop; see the module docstring.

    lock: True (a new _thread lock) guards the target: every call the group makes on it holds
    it, and so must any other call on the target (use locked()). None: the target locks itself
    (an Outbox made with lock=...). ack_durable: ack()/aack() wait for a sync like enqueue()
    (False: they return at once, durable at the next sync) [G5]."""

    def __init__(self, target: "Any", lock: "Any" = True, ack_durable: bool = True) -> None:
        if not callable(getattr(target, "sync", None)):
            raise InvalidArgument("target: a Queue or an Outbox (it needs sync())")
        try:  # missing on most boards: there only asyncio tasks call in
            import _thread

            self._mk: "Any" = _thread.allocate_lock
        except ImportError:
            self._mk = _Lock
        if lock is True:
            lock = self._mk()
        if lock is not None and not (hasattr(lock, "acquire") and hasattr(lock, "release")):
            raise InvalidArgument("lock: True, None or an object with acquire/release")
        self.target = target
        self.lock = lock
        # held by `with` (a _thread lock's own __enter__: no moment between acquire and the
        # release being certain); an object with acquire/release only, or none, wrapped
        self._lk: "Any" = lock if hasattr(lock, "__exit__") else _Lock(lock)
        self.ack_durable = bool(ack_durable)
        self._mu = self._mk()  # guards the fields below only: held for microseconds
        self._open: "Optional[list[Any]]" = None  # ops that the next sync will cover
        self._run: "Optional[list[Any]]" = None  # threads: [gate, waiters] while a leader syncs
        self._spare: "Any" = None  # a gate no follower waited on: reused (no lock per call)
        self._arun: "Any" = None  # asyncio: the Event of the batch a leader task gathers
        self._closed = False
        self._last = 0  # ops in the last batch: > 1 means concurrent callers
        self.writes = 0  # ops applied and covered by a completed sync (this Group's life)
        self.syncs = 0  # syncs this Group made
        self.yields = 0  # rounds a thread leader gave callers to join its batch [G2]

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *a: "Any") -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _add(self, op: "list[Any]") -> None:
        # op joins the open batch (the caller holds _mu): call()'s and acall()'s one way in.
        if self._closed:
            raise IOFailure("group is closed")
        if self._open is None:
            self._open = [op]
        else:
            self._open.append(op)

    def _take(self) -> "list[Any]":
        with self._mu:
            b, self._open = self._open, None
        return b or []

    def _apply(self, batch: "list[Any]") -> None:
        # The leader's work [G2]: apply every op of the batch in arrival order under the target's
        # lock, then one sync covering them all. Whatever happens, every op ends done, with its
        # result only if that sync completed [G3]; anything else gets an error [G4].
        err, n, synced = None, 0, False
        self._last = len(batch)
        try:
            with self._lk:
                for op in batch:
                    try:
                        op[2] = op[0](*op[1])
                        n += 1
                    except Exception as e:  # this op only (TooLarge, Full, ...): the rest go on
                        op[3] = e
                if n:
                    # A failed sync fail-stops a Queue [R20]: later calls raise IOFailure too.
                    self.target.sync()
                    self.syncs += 1
                    self.writes += n
                synced = True
        except Exception as e:
            err = e
        finally:
            _end(batch, err, synced)

    def _result(self, op: "list[Any]") -> "Any":
        if op[3] is not None:
            raise op[3]
        return op[2]

    # ------------------------------------------------------------------ threads
    def call(self, fn: "Callable[..., Any]", *args: "Any") -> "Any":
        """Run fn(*args) on the target in the next batch; return its result once a sync that
        covers it completed (raise its error, or the sync's) [G1]-[G4]. Thread-safe."""
        _fn(fn)
        op: "list[Any]" = [fn, args, None, None, False]
        mu, mine, b, y = self._mu, None, None, False
        try:
            # A caller waits for the running batch, then for the one holding op (another
            # caller's, or it leads it): the third round finds op done [G2]. The bound is for
            # what cannot happen; it ends in IOFailure, never in a wait [G4].
            for k in range(4):
                with mu:
                    if not k:
                        self._add(op)
                    elif op[4]:
                        break
                    run = self._run
                    if run is None:  # no sync running: lead one for every op gathered so far
                        gate, self._spare = self._spare or self._mk(), None
                        gate.acquire()  # free (new or spare) and nobody's but ours till published
                        mine = [gate, 0]
                        self._run = mine
                        last = self._last
                        # Callers run concurrently and some that the last sync woke have not
                        # added their next op yet: one round for them to join, below (a lone
                        # caller, or a batch already as large as the last one, goes on at once).
                        y = last > 1 and len(self._open or ()) < last
                        if not y:
                            b, self._open = self._open, None  # (b: a batch taken, never a peek)
                        break
                    run[1] += 1
                with run[0]:  # a sync is running: wait for it, then lead or be covered [G2]
                    pass
                if op[4]:  # set before the gate was released: read without mu
                    break
            else:
                raise IOFailure("group: the batch was not applied")
            if mine is not None:
                if y:
                    self.yields += 1
                    _yield()
                    with mu:
                        b, self._open = self._open, None
                self._apply(b or [])
        finally:
            if mine is not None:  # this caller led: its ops end, then its waiters go [G4]
                if b and not b[-1][4]:  # (ops end in order: the last one done, all are)
                    _end(b, None, False)
                with mu:
                    if self._run is mine:
                        self._run = None
                    if not mine[1]:
                        self._spare = mine[0]  # no follower holds it: reuse
                    mine[0].release()
        return self._result(op)

    def enqueue(self, payload: "Any") -> int:
        """target.enqueue(payload), durable on return; its seq [G1]."""
        return int(self.call(self.target.enqueue, payload))

    def put(self, *args: "Any") -> int:
        """Outbox target: put(topic, payload, ...), durable on return; its seq [G1]."""
        put: "Any" = getattr(self.target, "put", None)  # (None: a Queue's group) [O24]
        return int(self.call(put, *args))

    def ack(self, x: "Any") -> bool:
        """target.ack(x) (a seq, or an Outbox Message); durable on return if ack_durable [G5]."""
        if self.ack_durable:
            return bool(self.call(self.target.ack, x))
        return bool(self.locked(self.target.ack, x))

    def locked(self, fn: "Callable[..., Any]", *args: "Any") -> "Any":
        """Run fn(*args) under the target's lock now (claim, retry, stats): no sync awaited."""
        _fn(fn)
        with self._lk:
            return fn(*args)

    def close(self) -> None:
        """Refuse new calls and end every call in the open batch with IOFailure; close the
        target once the running sync ended (its callers complete). None hangs [G6]. Idempotent."""
        with self._mu:
            self._closed = True
            b, self._open = self._open, None
        _end(b or [], IOFailure("group is closed"), False)
        self.locked(self.target.close)

    # ------------------------------------------------------------------ asyncio
    async def acall(self, fn: "Callable[..., Any]", *args: "Any") -> "Any":
        """call() for the tasks of one asyncio loop (not mixed with threads on one Group): the
        first task to arrive leads; it yields one round, so that every ready task joins its
        batch, then applies and syncs it while the others await its Event [G2] [G7]."""
        import asyncio

        _fn(fn)
        op: "list[Any]" = [fn, args, None, None, False]
        with self._mu:
            self._add(op)
        for _ in range(3):  # a follower is covered by the batch it awaited [G2]
            if op[4]:
                break
            ev = self._arun
            if ev is None:
                ev = self._arun = asyncio.Event()
                try:
                    await asyncio.sleep(0)  # one round, no timer: the ready tasks gather
                finally:  # even if cancelled: the gathered ops are applied, none is stranded
                    try:
                        self._apply(self._take())
                    finally:
                        self._arun = None
                        ev.set()
            else:
                await ev.wait()
        if not op[4]:  # cannot happen while one loop drives the Group; never hang on it
            raise IOFailure("group: the batch was not applied")
        return self._result(op)

    async def aenqueue(self, payload: "Any") -> int:
        """enqueue() for asyncio tasks [G1] [G7]."""
        return int(await self.acall(self.target.enqueue, payload))

    async def aput(self, *args: "Any") -> int:
        """put() for asyncio tasks [G1] [G7]."""
        return int(await self.acall(self.target.put, *args))

    async def aack(self, x: "Any") -> bool:
        """ack() for asyncio tasks [G5] [G7]."""
        if self.ack_durable:
            return bool(await self.acall(self.target.ack, x))
        return bool(self.locked(self.target.ack, x))
