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

# bench/ and the repository, from this file's own path (a part runs as a script: its directory,
# bench/, is sys.path[0] on both interpreters, so `import common` comes first).
_here = globals().get("__file__") or "bench/common.py"
if not _here.startswith("/"):
    _here = os.getcwd().rstrip("/") + "/" + _here
HERE = _here[: _here.rfind("/")]
REPO = HERE[: HERE.rfind("/")]
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


def dispatch(parts, usage):
    """Run the part sys.argv[1] names from parts {name: (fn, defaults)}, its key=value arguments
    over the defaults; dir= is required."""
    name = part_name()
    if name not in parts:
        print("usage: " + usage)
        raise SystemExit(2)
    fn, defaults = parts[name]
    a = args(defaults)
    if not a["dir"]:
        print("dir= is required")
        raise SystemExit(2)
    fn(a)


# --- the standing-backlog FIFO run (DESIGN §12), shared by both interpreters --------------------


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


def _nth(a, k):
    """The k-th smallest of array a (reordered in place): Hoare's selection, no allocation."""
    lo, hi = 0, len(a) - 1
    while lo < hi:
        p = a[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while a[i] < p:
                i += 1
            while a[j] > p:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[k]


def _spread(values, pick=None, f=None):
    """Median, p99 and max of values[i] (f(values[i]) if f) for the i that pick(i) accepts
    (all if no pick); None if none. One array of the picked values, selected in place: a
    sorted list of 60,000 calls would not fit the bench's MicroPython heap beside a queue."""
    from array import array

    n = len(values)
    k = n if pick is None else sum(1 for i in range(n) if pick(i))
    if not k:
        return None
    a = array("I", bytes(4 * k))
    j = 0
    for i in range(n):
        if pick is None or pick(i):
            a[j] = values[i] if f is None else f(values[i])
            j += 1
    h = k // 2
    med = _nth(a, h) if k % 2 else (_nth(a, h - 1) + _nth(a, h)) / 2
    return {"median": med, "p99": _nth(a, min(k - 1, (k * 99) // 100)), "max": _nth(a, k - 1)}


def _io(dev):
    # block reads in the low 20 bits' place, programs + erases above: one small int per probe
    return dev.reads + ((dev.progs + dev.erases) << 20)


def _split(io, pick=None):
    """Spreads of block reads and of programs + erases per call from _io differences."""
    return {
        "reads": _spread(io, pick, lambda v: v & 0xFFFFF),
        "writes": _spread(io, pick, lambda v: v >> 20),
    }


def steady_run(q, n, payload, lease=30000, counter=None, dev=None):
    """n FIFO lifecycles (enqueue, claim the oldest, ack it) on q, which holds the backlog:
    each call timed alone with the monotonic clock; per op median, p99 and max (µs), the
    compactions (generation steps) the run made, and the active generation's segment files
    (mean and max of a sample every 50 messages, taken between the timed calls; a staged
    build's files are not in it). Buffers are allocated before the run.
    counter: the storage counting the bytes ddq writes (.bytes); then also "one", the same
    spreads over the calls that wrote no more than one record (48 + len(payload) bytes: no
    reclamation work in them), read between the timed calls. dev: the counting block device
    (tests/blockdev.py); then also "io" (and one["io"]): the spreads of block reads and of
    programs + erases per call, the file system's work free of the host's scheduling noise."""
    from array import array

    te = array("I", bytes(4 * n))
    tc = array("I", bytes(4 * n))
    ta = array("I", bytes(4 * n))
    m = 3 * n if counter is not None else 0
    wb = array("I", bytes(4 * m))  # bytes each call wrote: enqueue, claim, ack of message i
    io = array("I", bytes(12 * n if dev is not None else 0))  # device ops, the same order
    g0 = q.stats().generation
    segs = [0, 0, 0]  # samples, sum, max of the active generation's segment files (every 50)
    b0 = b1 = d0 = d1 = 0
    t_run = now_us()
    for i in range(n):
        if i % 50 == 0:
            k = q.stats().segment_count
            segs[0] += 1
            segs[1] += k
            if k > segs[2]:
                segs[2] = k
        if m:
            b0 = counter.bytes
        if dev is not None:
            d0 = _io(dev)
        t0 = now_us()
        q.enqueue(payload)
        te[i] = since_us(t0)
        if m:
            b1 = counter.bytes
            wb[3 * i] = b1 - b0
        if dev is not None:
            d1 = _io(dev)
            io[3 * i] = d1 - d0
        t0 = now_us()
        c = q.claim(lease)
        tc[i] = since_us(t0)
        if m:
            b0 = counter.bytes
            wb[3 * i + 1] = b0 - b1
        if dev is not None:
            d0 = _io(dev)
            io[3 * i + 1] = d0 - d1
        t0 = now_us()
        q.ack(c.seq)
        ta[i] = since_us(t0)
        if m:
            wb[3 * i + 2] = counter.bytes - b0
        if dev is not None:
            io[3 * i + 2] = _io(dev) - d0
    run_us = since_us(t_run)
    st = q.stats()
    out = {
        "enqueue": _spread(te),
        "claim": _spread(tc),
        "ack": _spread(ta),
        "compactions": st.generation - g0,
        "run_us": run_us,
        "pending_after": st.available_items + st.claimed_items,
        "segments_mean": segs[1] / segs[0],
        "segments_max": segs[2],
    }
    if dev is not None:
        out["io"] = _split(io)
    if m:
        lim = 48 + len(payload)
        one = {"calls": 0, "of": m}
        for j, (name, t) in enumerate((("enqueue", te), ("claim", tc), ("ack", ta))):
            one[name] = _spread(t, lambda i, j=j: wb[3 * i + j] <= lim)
        one["calls"] = sum(1 for i in range(m) if wb[i] <= lim)
        if dev is not None:
            one["io"] = _split(io, lambda i: wb[i] <= lim)
        out["one"] = one
    return out


def held(runs, frac, a):
    """Files the raw floor holds at backlog frac: a["keep"] if set, else the mean segment
    files of the sync="always" runs' active generations at that backlog (steady_run samples),
    else (no such run) frac % of max_segments."""
    if a["keep"]:
        return a["keep"]
    v = [r["segments_mean"] for k, r in runs.items() if k.startswith(frac + "-always-")]
    if not v:
        return a["max_segments"] * int(frac) // 100
    return int(sum(v) / len(v) + 0.5)


def raw_floor_run(d, n, payload, seg_bytes, keep, dev=None):
    """The file system's own floor under steady_run at sync="always", with no ddq (DESIGN §12):
    per message, append a DATA-sized (48 + payload), a CLAIM-sized and an ACK-sized record to
    directory d, each followed by the sync (flush; flush + os.fsync where os has fsync), each
    timed alone; a new file of ddq's segment name pattern when the next record would not fit
    in seg_bytes (plus a directory fsync where ddq's storage does one); the oldest file removed
    whenever more than `keep` full files are held. d starts with `keep` full files (written
    before the timed run), so the directory and the device hold a standing backlog's worth of
    segments throughout. Per record size: median, p99, max (µs); "all": the 3n together;
    dev (the counting block device): "io", block reads and programs + erases per operation."""
    from array import array

    fsync = getattr(os, "fsync", None)
    dirsync = fsync is not None and hasattr(os, "O_RDONLY")

    def sync_dir():
        fd = os.open(d, os.O_RDONLY)
        try:
            fsync(fd)
        finally:
            os.close(fd)

    buf = bytearray(48 + payload)
    for i in range(len(buf)):
        buf[i] = (i * 7 + 1) & 0xFF
    mv = memoryview(buf)
    recs = (mv, mv[:48], mv[:48])
    name = d + "/segment-%020d.log"
    for k in range(keep):  # the standing backlog's files, full
        f = open(name % k, "wb")
        size = 0
        j = 0
        while size + len(recs[j]) <= seg_bytes:
            f.write(recs[j])
            size += len(recs[j])
            j = (j + 1) % 3
        f.close()
    if dirsync:
        sync_dir()
    first, k, size = 0, keep, 0
    f = open(name % k, "ab")
    ts = array("I", bytes(12 * n))  # µs of record j of message i at 3 * i + j
    io = array("I", bytes(12 * n if dev is not None else 0))
    d0 = 0
    t_run = now_us()
    for i in range(n):
        for j in range(3):
            r = recs[j]
            if dev is not None:
                d0 = _io(dev)
            t0 = now_us()
            if size + len(r) > seg_bytes:
                f.close()
                k += 1
                f = open(name % k, "ab")
                size = 0
                if dirsync:
                    sync_dir()
                if k - first > keep:
                    os.remove(name % first)
                    first += 1
                    if dirsync:
                        sync_dir()
            f.write(r)
            f.flush()
            if fsync is not None:
                fsync(f.fileno())
            size += len(r)
            ts[3 * i + j] = since_us(t0)
            if dev is not None:
                io[3 * i + j] = _io(dev) - d0
    run_us = since_us(t_run)
    f.close()
    out = {
        "data": _spread(ts, lambda i: i % 3 == 0),
        "claim": _spread(ts, lambda i: i % 3 == 1),
        "ack": _spread(ts, lambda i: i % 3 == 2),
        "all": _spread(ts),
        "run_us": run_us,
        "keep": keep,
        "files": k + 1 - first,
        "rotations": k - keep,
    }
    if dev is not None:
        out["io"] = _split(io)
    return out


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


# --- parts both interpreters run: lifecycle subjects, scaling, recovery, steady -------------


def _settle():
    # MicroPython's first-fit allocator slows down as garbage piles up between collections
    # (micropython-platform §10): each timed block starts on a collected heap there. CPython's
    # collector does not move the figure; it is left alone.
    if MICROPYTHON:
        gc.collect()


def subject(loop, close):
    """A lifecycle subject: a generator primed with next(); send(k) runs loop(k) and returns its
    microseconds; close() runs close. The setup stays outside the timings."""
    try:
        k = yield
        while True:
            t0 = now_us()
            loop(k)
            k = yield since_us(t0)
    finally:
        close()


def run_blocks(subjects, nblocks):
    """Subjects (name, records per lifecycle, k, generator) run in blocks of k, round-robin, so
    that a subject and its baseline see the same moment of a shared machine; returns {name: [µs
    per lifecycle of each block]}. The generators are closed on the way out."""
    blocks = {}
    try:
        for s in subjects:
            next(s[3])
            s[3].send(1)  # warm-up: files exist, caches are filled
        for _ in range(nblocks):
            for name, per, k, gen in subjects:
                _settle()
                if name not in blocks:
                    blocks[name] = []
                blocks[name].append(gen.send(k) / (per * k))
    finally:
        for s in subjects:
            s[3].close()
    return blocks


def measure_ops(q, m, payload):
    """Time m enqueues, then m (claim, ack) pairs; return per-op microseconds."""
    p = bytes(payload)
    _settle()
    t0 = now_us()
    for _ in range(m):
        q.enqueue(p)
    te = since_us(t0)
    tc = ta = 0
    _settle()
    for _ in range(m):
        t0 = now_us()
        c = q.claim(30000)
        t1 = now_us()
        q.ack(c.seq)
        ta += since_us(t1)
        tc += t1 - t0
    return te / m, tc / m, ta / m


def scaling_open(ddq, a, clock):
    """The small and the big queue of part `scaling`, filled (clock() gives each its clock);
    returns (sizes, queues, results so far)."""
    sizes = (a["small"], a["big"])
    qs = []
    out = {}
    p = bytes(a["payload"])
    for k in sizes:
        d = fresh("%s/s%d" % (a["dir"], k))
        q = ddq.Queue(d + "/q", sync="none", clock=clock(), max_items=1000000)
        _settle()
        t0 = now_us()
        for _ in range(k):
            q.enqueue(p)
        out[str(k)] = {
            "fill_us_per": since_us(t0) / k,
            "runs": {"enqueue": [], "claim": [], "ack": []},
        }
        qs.append(q)
    return sizes, qs, out


def scaling_rounds(sizes, qs, out, a):
    """Rounds alternate between the two queues, so that a pair of figures always sees the same
    moment of the machine (run.py: median of the pairs); then read() costs."""
    for _ in range(a["reps"]):
        for j in range(2):
            r = out[str(sizes[j])]
            te, tc, ta = measure_ops(qs[j], a["m"], a["payload"])
            r["runs"]["enqueue"].append(te)
            r["runs"]["claim"].append(tc)
            r["runs"]["ack"].append(ta)
    for j in range(2):  # read(): a claimed item, and pending items across the backlog
        out[str(sizes[j])]["read"] = read_costs(qs[j], a["m"], a["reps"])


def scaling_emit(sizes, qs, out, a):
    """Close both queues, keep the best of each op and print the RESULT."""
    for j in range(2):
        r = out[str(sizes[j])]
        for op in ("enqueue", "claim", "ack"):
            r[op] = best(r["runs"][op])
        qs[j].close()
        rmtree("%s/s%d" % (a["dir"], sizes[j]))
    emit({"small": a["small"], "big": a["big"], "m": a["m"], "per_op": out})


def raw_read_crc(d):
    """A raw sequential read + crc32 of the .log files in d: (µs, bytes)."""
    import binascii

    buf = bytearray(65536)
    mv = memoryview(buf)
    crc = 0
    n = 0
    t0 = now_us()
    for name in sorted(os.listdir(d)):
        if not name.endswith(".log"):
            continue
        f = open(d + "/" + name, "rb")
        while True:
            k = f.readinto(buf)
            if not k:
                break
            crc = binascii.crc32(mv[:k], crc)
            n += k
        f.close()
    return since_us(t0), n


def open_queue(ddq, d, index_bytes, clock):
    """Open (recover) and close the queue at d; return both times and what recovery did."""
    _settle()
    t0 = now_us()
    q = ddq.Queue(d, sync="none", clock=clock, max_items=1000000, index_bytes=index_bytes)
    dt = since_us(t0)
    items = q.stats().total_items
    used, replayed = q.index_used, q.replayed_records
    _settle()
    t0 = now_us()
    q.close()
    dc = since_us(t0)
    q = None
    _settle()
    return dt, dc, items, used, replayed


def recovery(ddq, d, a, clock, extra):
    """Part `recovery`: each rep the raw read + crc32; then the crash path (queue.index removed:
    open replays every record; its close writes a new index over the whole log: the close
    cost); then the clean-close path (open adopts that index [X5]: one crc32 pass, only later
    records replayed; its close finds the index current and writes nothing). clock() gives each
    open its clock; extra goes into the RESULT."""
    ixb = a["index_bytes"]
    runs = {"raw": [], "open_full": [], "close_index": [], "open_index": [], "close_noop": []}
    size = items = 0
    used = {"full": [], "index": []}
    replayed = {"full": 0, "index": 0}
    for _ in range(a["reps"]):
        dt, size = raw_read_crc(d)
        runs["raw"].append(dt)
        if kind(d + "/queue.index") == 1:
            os.remove(d + "/queue.index")
        for path, opened, closed in (
            ("full", "open_full", "close_index"),
            ("index", "open_index", "close_noop"),
        ):
            dt, dc, items, u, replayed[path] = open_queue(ddq, d, ixb, clock())
            runs[opened].append(dt)
            runs[closed].append(dc)
            used[path].append(u)
    if True in used["full"] or False in used["index"]:
        print("recovery: index_used", used, "want False for the full replay, True after close")
        raise SystemExit(1)
    out = {}
    for k in runs:
        out[k] = best(runs[k])
    result = {
        "bytes": size,
        "items": items,
        "raw_us": out["raw"],
        "open_us": out["open_index"],
        "open_full_us": out["open_full"],
        "close_index_us": out["close_index"],
        "close_noop_us": out["close_noop"],
        "index_bytes": ixb,
        "index_size": file_size(d + "/queue.index"),
        "replayed": replayed,
        "index_used": used,
        "runs": runs,
    }
    for k in extra:
        result[k] = extra[k]
    emit(result)


# Part `steady`'s arguments, the same on both interpreters (mp_bench adds its device's size).
STEADY_DEFAULTS = {
    "dir": "",
    "n": 20000,
    "payload": 32,
    "segment_bytes": 4096,
    "max_payload": 64,
    "max_segments": 100,
    "backlogs": "50,90",
    "syncs": "none,always",
    "steps": "0,16",
    "raw": 1,
    "keep": 0,
}


def steady_opts(a, max_items):
    """The queue options of parts `steady` and `board_steady`."""
    return {
        "segment_bytes": a["segment_bytes"],
        "max_payload_bytes": a["max_payload"],
        "max_items": max_items,
        "max_segments": a["max_segments"],
    }


def steady_cases(a):
    """(sync, reclaim_step) of each run of part `steady`."""
    return [(y, int(t)) for y in a["syncs"].split(",") for t in str(a["steps"]).split(",")]


def steady_emit(cap, opts, a, out, raw, extra):
    result = {
        "admitted": cap,
        "options": opts,
        "payload": a["payload"],
        "n": a["n"],
        "record_bytes": record_bytes(a["payload"]),
        "runs": out,
        "raw": raw,
    }
    for k in extra:
        result[k] = extra[k]
    emit(result)
