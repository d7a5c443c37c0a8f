# Steps two or more test modules of the shared suite take, kept out of support.py so that the
# modules that do not need them pay no heap for them on a small board. Subset Python.
#
#   Xorshift32(state)            a PRNG giving the same sequence on both interpreters
#   drain(ob, limit)             get and ack every message an Outbox has ready
#   cut_copy(src, synced)        a copy of a queue directory as a power cut leaves it
#   needs_asyncio()              asyncio with run(), else skip the test
#   CrashFS()                    PosixStorage remembering what was synced: .crash_copy(dir)
#   every_state(q, n, claims)    n items, then `claims` of them acked, retried, quarantined, held
#   live_items(q, missing)       {seq: (state, attempts, lease, not_before, payload, reason)}
#   marks(q, payload, lease, probe)      probe() around each op of one enqueue/claim/ack
#   alloc_totals(q, payload, rounds)     heap bytes those ops allocate (MicroPython)
#   heap_locked(fn, arg)                 one call under micropython.heap_lock()
# (support is imported where it is needed: tests/torture/tmodel.py imports this module too.)


class Xorshift32:
    """xorshift32 from a nonzero state: the same sequence on both interpreters (their random
    modules differ). tests/test_model.py and the torture workloads (tests/torture/tmodel.py)."""

    def __init__(self, state):
        self.s = state or 1

    def u32(self):
        x = self.s
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.s = x
        return x

    def below(self, n):
        return self.u32() % n if n > 0 else 0

    def bytes(self, n):
        b = bytearray(n)
        for i in range(n):
            b[i] = self.u32() & 0xFF
        return bytes(b)


def drain(ob, limit=1000):
    """Get and ack what the Outbox ob has ready (at most limit messages); returns them."""
    out = []
    for _ in range(limit):
        m = ob.get()
        if m is None:
            break
        out.append(m)
        ob.ack(m)
    return out


def cut_copy(src, synced):
    """A fresh copy of the queue directory src as a power cut leaves it: each file cut to the
    length synced[path] says was synced (files it does not name are whole), no queue.lock."""
    import support

    dst = support.tmpdir()
    for name in support.listdir_sorted(src):
        if name == "queue.lock":
            continue
        data = support.read_file(src + "/" + name)
        n = synced.get(src + "/" + name)
        support.write_file(dst + "/" + name, data if n is None else data[0:n])
    return dst


class CrashFS:
    """ddq.PosixStorage that remembers how much of each file it wrote was synced; crash_copy()
    copies a directory as a power cut would leave it (unsynced appends dropped)."""

    def __init__(self):
        import ddq

        self.fs = ddq.PosixStorage()
        self.synced = {}  # path -> synced length, for files written through this object
        self.paths = {}  # id(handle) -> path

    def open(self, path, mode):
        h = self.fs.open(path, mode)
        if mode != "rb":
            self.paths[id(h)] = path
            if mode == "wb" or path not in self.synced:
                self.synced[path] = 0 if mode == "wb" else self.fs.size(path)
        return h

    def sync(self, h):
        self.fs.sync(h)
        p = self.paths.get(id(h))
        if p is not None:
            self.synced[p] = self.fs.size(p)

    def close(self, h):
        self.paths.pop(id(h), None)
        self.fs.close(h)

    def rename(self, src, dst):
        self.fs.rename(src, dst)
        if src in self.synced:
            self.synced[dst] = self.synced.pop(src)

    def remove(self, path):
        self.fs.remove(path)
        self.synced.pop(path, None)

    def __getattr__(self, name):
        return getattr(self.fs, name)

    def crash_copy(self, src):
        return cut_copy(src, self.synced)


def needs_asyncio():
    """The asyncio module, with asyncio.run; else skip the running test (the port has no asyncio,
    or its asyncio has no run(): the WebAssembly port's runs on the JavaScript event loop)."""
    import support

    try:
        import asyncio
    except ImportError:
        raise support.Skip("no asyncio")
    if not hasattr(asyncio, "run"):
        raise support.Skip(
            "this port's asyncio has no run() (it runs on the JavaScript event loop)"
        )
    return asyncio


def live_items(q, missing=None):
    """Every item but the acked ones: {seq: (state, attempts, lease_until_ms, not_before_ms,
    payload, reason)}; the reason is `missing` for an item not quarantined."""
    out = {}
    for i in q.items():
        if i.state == "acked":
            continue
        r = bytes(q.reason(i.seq)) if i.state == "quarantined" else missing
        out[i.seq] = (
            i.state,
            i.attempts,
            i.lease_until_ms,
            i.not_before_ms,
            bytes(q.read(i.seq)),
            r,
        )
    return out


def marks(q, payload, lease, probe):
    """One lifecycle of payload (enqueue, claim with lease, ack): probe() before it and after each
    op, four values."""
    m0 = probe()
    q.enqueue(payload)
    m1 = probe()
    c = q.claim(lease)
    m2 = probe()
    q.ack(c.seq)
    return m0, m1, m2, probe()


def alloc_totals(q, payload, rounds, lease=30000):
    """Heap bytes (gc.mem_alloc, the collector off) that enqueue, claim and ack allocate, summed
    over `rounds` lifecycles; MicroPython only (bench/mp_bench.py and tests/test_heapalloc.py)."""
    import gc

    tot = [0, 0, 0]
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        try:
            m = marks(q, payload, lease, gc.mem_alloc)
        finally:
            gc.enable()
        for k in range(3):
            tot[k] += m[k + 1] - m[k]
    return tot


def heap_locked(fn, arg):
    """fn(arg) under micropython.heap_lock(): (True, result), or (False, None) on MemoryError."""
    import micropython

    import ddq

    # (made before the lock: a tuple in the except clause would allocate; ddq reports a
    # MemoryError as NoMemory where it can, SPEC O23)
    catch = (MemoryError, ddq.NoMemory)
    micropython.heap_lock()
    try:
        r = fn(arg)
        ok = True
    except catch:
        r = None
        ok = False
    finally:
        micropython.heap_unlock()
    return ok, r


def every_state(q, n, claims):
    """Enqueue n payloads of varied length, then claim `claims` of them in turn: ack one, retry
    the next (500 ms), quarantine the third with a reason, leave the fourth claimed."""
    for k in range(n):
        q.enqueue(b"payload %d " % k + b"x" * (k % 23))
    for k in range(claims):
        c = q.claim(1000)
        r = k % 4
        if r == 0:
            q.ack(c.seq)
        elif r == 1:
            q.retry(c.seq, 500)
        elif r == 2:
            q.quarantine(c.seq, b"reason %d" % k)
