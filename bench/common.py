# Helpers shared by the benchmark parts on CPython and MicroPython (subset Python: no typing,
# no os.path, no f-strings). A part is run by bench/run.py as its own process and reports one
# line "RESULT <json>" on stdout; everything else it prints is commentary.
#
#   now_us()          a monotonic microsecond clock (perf_counter / ticks_us)
#   since_us(t0)      microseconds since t0
#   args(defaults)    "key=value" command-line arguments over a dict of defaults (ints kept int)
#   rmtree(p) mkdirs(p) file_size(p)
#   best(values)      the smallest (the machine is shared: the best of R runs is the least noisy)
#   emit(result)      print the RESULT line
import gc
import json
import os
import sys
import time

try:
    _pc = time.perf_counter

    def now_us():
        return int(_pc() * 1000000)

    def since_us(t0):
        return now_us() - t0

except AttributeError:
    _ticks_us = time.ticks_us
    _ticks_diff = time.ticks_diff

    def now_us():
        return _ticks_us()

    def since_us(t0):
        return _ticks_diff(_ticks_us(), t0)


MICROPYTHON = sys.implementation.name == "micropython"
_S_IFDIR = 0o040000


def args(defaults):
    out = {}
    for k in defaults:
        out[k] = defaults[k]
    for a in sys.argv[2:]:
        k, _, v = a.partition("=")
        if k not in out:
            raise SystemExit("unknown argument: " + a)
        out[k] = int(v) if isinstance(out[k], int) else v
    return out


def kind(path):
    try:
        mode = os.stat(path)[0]
    except OSError:
        return 0
    return 2 if mode & 0o170000 == _S_IFDIR else 1


def rmtree(path):
    k = kind(path)
    if k == 1:
        os.remove(path)
    elif k == 2:
        for name in os.listdir(path):
            rmtree(path + "/" + name)
        os.rmdir(path)


def mkdirs(path):
    if kind(path) == 2:
        return
    i = path.rfind("/")
    if i > 0:
        mkdirs(path[:i])
    os.mkdir(path)


def fresh(path):
    """Remove path and make it again, empty."""
    rmtree(path)
    mkdirs(path)
    return path


def file_size(path):
    return os.stat(path)[6]


def tree_bytes(path, suffix=""):
    n = 0
    for name in os.listdir(path):
        if name.endswith(suffix):
            n += file_size(path + "/" + name)
    return n


def best(values):
    return min(values)


def collect():
    gc.collect()
    gc.collect()
    return gc.mem_alloc() if hasattr(gc, "mem_alloc") else 0


def emit(result):
    print("RESULT " + json.dumps(result))


def part_name():
    return sys.argv[1] if len(sys.argv) > 1 else ""


# --- the standing-backlog FIFO run (issue 15), shared by both interpreters --------------------

# Bytes of the records a delivered message needs on its own: DATA (48 + payload), CLAIM (48),
# ACK (48) (docs/SPEC.md §5): the floor of bytes written per message, before any reclamation.
def record_bytes(payload):
    return 48 + payload + 48 + 48


def floor(opts, payload, backlog):
    """DESIGN.md §12's floor of bytes written per delivered message ÷ its records' own bytes,
    1 ÷ (1 − u) with u = K ÷ C, for a FIFO run of `payload`-byte messages over a standing
    backlog of `backlog` items: K, the copy of the live set (each item's DATA; FIFO items have
    no history), C, what a generation takes before admission forces a copy: max_segments ×
    segment_bytes less the control reserve of every pending item (SPEC §10 A5: a STATE, a CLAIM
    and a terminal record each) and the (m − 1) bytes A5 leaves at each segment's end. An
    estimate: next-fit waste is left out and p is taken as backlog + 1; C comes within a few %
    of what an inline run's generations hold, which at 90 % moves the floor by up to ~7 % (u is
    near 0.7 there). None when the backlog leaves no room."""
    seg, w = opts["segment_bytes"], opts["max_segments"]
    term = 48 + min(opts["max_payload_bytes"], 4096)
    m = max(72, term) if term <= seg // 2 else 72
    per = 72 + 48 + (term if term <= seg // 2 else 0)
    c = w * (seg - (m - 1)) - per * (backlog + 1)
    k = backlog * (48 + payload)
    if c <= k:
        return None
    return c / (c - k)


def fill_until_full(ddq, q, payload, limit):
    """Enqueue until Full (or limit); return how many the options admitted."""
    n = 0
    try:
        while n < limit:
            q.enqueue(payload)
            n += 1
    except ddq.Full:
        pass
    return n


def _spread(values):
    v = sorted(values)
    k = len(v)
    med = v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2
    return {"median": med, "p99": v[min(k - 1, (k * 99) // 100)], "max": v[-1]}


def steady_run(q, n, payload, lease=30000):
    """n FIFO lifecycles (enqueue, claim the oldest, ack it) on q, which holds the backlog:
    each call timed alone with the monotonic clock; per op median, p99 and max (µs), and the
    compactions (generation steps) the run made. Buffers are allocated before the run."""
    from array import array

    te = array("I", bytes(4 * n))
    tc = array("I", bytes(4 * n))
    ta = array("I", bytes(4 * n))
    g0 = q.stats().generation
    t_run = now_us()
    for i in range(n):
        t0 = now_us()
        q.enqueue(payload)
        te[i] = since_us(t0)
        t0 = now_us()
        c = q.claim(lease)
        tc[i] = since_us(t0)
        t0 = now_us()
        q.ack(c.seq)
        ta[i] = since_us(t0)
    run_us = since_us(t_run)
    st = q.stats()
    return {"enqueue": _spread(te), "claim": _spread(tc), "ack": _spread(ta),
            "compactions": st.generation - g0, "run_us": run_us, "pending_after":
            st.available_items + st.claimed_items}


def read_costs(q, m, reps=1, lease=30000):
    """µs per read() of a claimed item, and of pending items spread over the backlog (m reads
    each, best of reps rounds). The queue must have been worked FIFO only (its available items
    are the newest seqs)."""
    q.sync()  # with sync="none", records not yet synced are read from RAM: read the log
    c = q.claim(lease)
    st = q.stats()
    avail = st.available_items
    first = st.next_seq - avail
    step = avail // m if avail > m else 1
    seqs = [first + (j * step) % avail for j in range(m)]
    claimed = pending = None
    for _ in range(reps):
        t0 = now_us()
        for _ in range(m):
            q.read(c.seq)
        dt = since_us(t0) / m
        claimed = dt if claimed is None or dt < claimed else claimed
        t0 = now_us()
        for s in seqs:
            q.read(s)
        dt = since_us(t0) / m
        pending = dt if pending is None or dt < pending else pending
    q.ack(c.seq)
    return {"claimed": claimed, "pending": pending}
