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

from ddq import InvalidArgument, IOFailure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional


# ============================================================================ group
# An op is [fn, args, result, error, done]. A batch is a list of ops. A running batch (threads)
# is [gate, waiters]: the gate is a lock the leader holds while it applies and syncs the batch;
# a follower waits by acquire() + release() on it (each lock is released by the thread that
# acquired it: MicroPython's unix port uses pthread mutexes).


def _sleep0() -> None:
    time.sleep(0)


# One scheduling round for the other threads, no timer: it releases the GIL so that callers
# that a finished sync just woke can add their ops first. sched_yield where os has it (CPython,
# which releases the GIL around it): CPython's time.sleep(0) is a clock_nanosleep that costs
# ~100 us of timer slack on Linux, which the leader paid per batch (DESIGN §6.1). Elsewhere
# (MicroPython) time.sleep(0), which releases the GIL there.
_yield: "Callable[[], Any]" = getattr(os, "sched_yield", None) or _sleep0


class _NoLock:
    # Where _thread does not exist only asyncio tasks call in: nothing to exclude.
    def acquire(self, *a: "Any") -> bool:
        return True

    def release(self) -> None:
        pass


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
            self._mk = _NoLock
        if lock is True:
            lock = self._mk()
        if lock is not None and not (hasattr(lock, "acquire") and hasattr(lock, "release")):
            raise InvalidArgument("lock: True, None or an object with acquire/release")
        self.target = target
        self.lock = lock
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
    def _add(self, fn: "Callable[..., Any]", args: "tuple[Any, ...]") -> "list[Any]":
        op: "list[Any]" = [fn, args, None, None, False]
        mu = self._mu
        mu.acquire()
        try:
            if self._closed:
                raise IOFailure("group is closed")
            if self._open is None:
                self._open = [op]
            else:
                self._open.append(op)
        finally:
            mu.release()
        return op

    def _take(self) -> "list[Any]":
        mu = self._mu
        mu.acquire()
        b, self._open = self._open, None
        mu.release()
        return b or []

    def _apply(self, batch: "list[Any]") -> None:
        # The leader's work [G2]: apply every op of the batch in arrival order under the target's
        # lock, then one sync covering them all. Whatever happens, every op ends done, with its
        # result only if that sync completed [G3]; anything else gets an error [G4].
        lk, err, n, synced = self.lock, None, 0, False
        self._last = len(batch)
        if lk is not None:
            lk.acquire()
        try:
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
            if lk is not None:
                lk.release()
            for op in batch:
                if op[3] is None and not synced:
                    op[2] = None
                    op[3] = err if err is not None else IOFailure("interrupted before the sync")
                op[4] = True

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
        mu = self._mu
        mu.acquire()
        if self._closed:
            mu.release()
            raise IOFailure("group is closed")
        b = self._open
        if b is None:
            self._open = [op]
        else:
            b.append(op)
        while True:  # at most three rounds: a batch runs, then the one holding op [G2]
            if op[4]:  # covered by a batch that ran while this caller waited for mu
                mu.release()
                break
            run = self._run
            if run is None:  # no sync running: lead one for every op gathered so far
                gate, self._spare = self._spare or self._mk(), None
                gate.acquire()  # free (new or spare): does not block
                run = self._run = [gate, 0]
                last = self._last
                b = self._open
                if last > 1 and (b is None or len(b) < last):
                    # Callers run concurrently and some that the last sync woke have not added
                    # their next op yet: one round for them to join (a lone caller, or a batch
                    # already as large as the last one, goes on at once).
                    mu.release()
                    self.yields += 1
                    _yield()
                    mu.acquire()
                b, self._open = self._open, None
                mu.release()
                try:
                    self._apply(b or [])
                finally:
                    mu.acquire()
                    self._run = None
                    gate.release()
                    if not run[1]:
                        self._spare = gate  # no follower holds it: reuse
                    mu.release()
            else:  # a sync is running: wait for it, then lead or be covered [G2]
                run[1] += 1
                mu.release()
                gate = run[0]
                gate.acquire()
                gate.release()
            if op[4]:  # set before the gate was released: read without mu
                break
            mu.acquire()
        if op[3] is not None:
            raise op[3]
        return op[2]

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
        lk = self.lock
        if lk is None:
            return fn(*args)
        lk.acquire()
        try:
            return fn(*args)
        finally:
            lk.release()

    def close(self) -> None:
        """Refuse new calls; close the target once the running sync ended. Callers still waiting
        get IOFailure (or complete): none hangs [G6]. Idempotent."""
        mu = self._mu
        mu.acquire()
        self._closed = True
        mu.release()
        self.locked(self.target.close)

    # ------------------------------------------------------------------ asyncio
    async def acall(self, fn: "Callable[..., Any]", *args: "Any") -> "Any":
        """call() for the tasks of one asyncio loop (not mixed with threads on one Group): the
        first task to arrive leads; it yields one round, so that every ready task joins its
        batch, then applies and syncs it while the others await its Event [G2] [G7]."""
        import asyncio

        _fn(fn)
        op = self._add(fn, args)
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
