# The MicroPython parts of the benchmarks (unix port); bench/run.py runs each as its own process.
#
#   micropython [-X heapsize=..] bench/mp_bench.py PART key=value ...
#
# Subset Python. Parts (each prints one "RESULT <json>" line; times in microseconds, best of reps):
#   lifecycle  raw append+flush loop (flush is the sync on MicroPython) vs ddq "always" / "ack"
#   heap       gc.mem_alloc per pending item: `n` pending payloads of `payload` bytes
#   scaling    enqueue / claim / ack cost at `small` and at `big` pending items
#   recovery   open (recover) of an existing log vs raw sequential read + crc32 of its files:
#              without queue.index (full replay, as after a crash), and after the clean close
#              that wrote it (the index path); plus that close
#   lfs        LittleFS block programs and erases per delivered message on a counting RAM block
#              device: ddq under each sync policy vs a JSON list rewritten per change and an
#              append-only text log
#   imports    heap used by `import ddq` from each directory in `paths` (","-separated)
#   allocs     bytes allocated per enqueue / claim / ack in steady state, and which ops run
#              under micropython.heap_lock()
#   allocprof  per-line allocation of an instrumented ddq (bench/allocprof.py makes it)
import gc
import os
import sys

import common  # bench/ is sys.path[0]: the script's own directory
from common import best, collect, emit, fresh

REPO = common.REPO

ddq = None


def load_ddq(path=""):
    global ddq
    sys.path.insert(0, path or REPO + "/port")
    import ddq as mod

    ddq = mod
    return mod


class Clock:
    def __init__(self):
        self.ms = 1767225600000

    def __call__(self):
        return self.ms


# --- lifecycle --------------------------------------------------------------------------------


# Subjects are generators (common.subject; see bench/cp_bench.py): send(k) runs k lifecycles,
# returns µs.


def raw_subject(d, payload):
    buf = memoryview(bytearray(48 + payload))
    recs = (buf, buf[:48], buf[:48])
    f = open(d + "/raw.log", "ab")

    def loop(k):
        for _ in range(k):
            for r in recs:
                f.write(r)
                f.flush()

    return common.subject(loop, f.close)


def ddq_subject(d, payload, sync):
    q = ddq.Queue(d + "/q", sync=sync, clock=Clock())
    p = bytes(payload)

    def loop(k):
        for _ in range(k):
            q.enqueue(p)
            q.ack(q.claim(30000).seq)

    return common.subject(loop, q.close)


def part_lifecycle(a):
    load_ddq()
    n, payload = a["n"], a["payload"]
    base = fresh(a["dir"])
    subjects = (
        ("raw_sync", 3, n, raw_subject(fresh(base + "/raw"), payload)),
        ("ddq_always", 1, n, ddq_subject(fresh(base + "/a"), payload, "always")),
        ("ddq_ack", 1, n, ddq_subject(fresh(base + "/k"), payload, "ack")),
    )
    try:
        blocks = common.run_blocks(subjects, a["blocks"])
    finally:
        common.rmtree(base)
    us = {}
    for k in blocks:
        us[k] = best(blocks[k])
    emit({"us_per": us, "blocks": blocks, "n": n, "payload": payload})


# --- heap per pending item --------------------------------------------------------------------


def part_heap(a):
    # fill=1: a fresh queue, n enqueues, heap per item; leaves the directory for fill=0, which
    # (in a fresh process: MicroPython's conservative collector may keep the first queue alive
    # through a stale stack word) reopens it and measures the index as recovery builds it (from
    # queue.index when the close wrote one).
    load_ddq()
    d = a["dir"] + "/q"
    n = a["n"]
    if a["fill"]:
        fresh(a["dir"])
    if a.get("noindex"):  # as after a power cut: the index is rebuilt by a full replay
        try:
            os.remove(d + "/queue.index")
        except OSError:
            pass
    m_start = collect()
    q = ddq.Queue(d, sync="none", clock=Clock(), max_items=max(100000, n))
    m_open = collect()
    if not a["fill"]:
        items = q.stats().total_items
        scratch = len(q._rbuf) if hasattr(q, "_rbuf") else 0  # the replay window it keeps
        q.close()
        if not a.get("keep"):
            common.rmtree(a["dir"])
        emit(
            {
                "n": items,
                "opened": m_open - m_start,
                "per_item": (m_open - m_start) / items,
                "kept_read_buffer": scratch,
                "index_used": bool(getattr(q, "index_used", False)),
            }
        )
        return
    p = bytes(a["payload"])
    for _ in range(n):
        q.enqueue(p)
    q.sync()
    m_full = collect()
    q.close()
    emit(
        {
            "n": n,
            "payload": a["payload"],
            "empty_queue": m_open - m_start,
            "per_item": (m_full - m_open) / n,
        }
    )


# --- scaling ----------------------------------------------------------------------------------


def part_scaling(a):
    # Both queues open at once, rounds alternate (see bench/cp_bench.py). No compaction between
    # rounds here (it would take seconds at 100,000 items): both indexes also keep the m acked
    # items of each earlier round.
    load_ddq()
    sizes, qs, out = common.scaling_open(ddq, a, Clock)
    common.scaling_rounds(sizes, qs, out, a)
    common.scaling_emit(sizes, qs, out, a)


# --- recovery ---------------------------------------------------------------------------------


def part_recovery(a):
    # As bench/cp_bench.py: each rep the raw read + crc32, the crash path (queue.index removed:
    # full replay; its close writes a new index), then the clean-close path (index adopted).
    load_ddq()
    common.recovery(ddq, a["dir"] + "/log", a, Clock, {})


# --- LittleFS wear ----------------------------------------------------------------------------


MOUNT = "/ddqbench"
_DEV = [None]  # the one RAM block device of this process, reused by every lfs_mount


def lfs_mount(blocks, progsize):
    """A fresh LittleFS at MOUNT on the process's one RAM block device (zeroed, counters reset).
    One device, not one per run: part steady mounts dozens of times, and an 8 MiB heap, once
    fragmented, found no free 1 MiB run for a new device after ~80 s (MemoryError)."""
    import vfs

    try:
        vfs.umount(MOUNT)
    except OSError:
        pass
    dev = _DEV[0]
    if dev is None or dev.num_blocks != blocks:
        _DEV[0] = dev = None
        gc.collect()
        sys.path.append(REPO + "/tests")
        from blockdev import RAMBlockDev  # tests/blockdev.py: counts programs, bytes and erases

        dev = _DEV[0] = RAMBlockDev(4096, blocks)
    else:  # as a new device reads: all zero bytes
        zero = bytes(4096)
        for b in range(blocks):
            dev.mv[b * 4096 : b * 4096 + 4096] = zero
        dev.zero()
    vfs.VfsLfs2.mkfs(dev, progsize=progsize)
    vfs.mount(vfs.VfsLfs2(dev, progsize=progsize), MOUNT)
    return dev


def lfs_umount():
    import vfs

    vfs.umount(MOUNT)


def wear_json(dev, n, backlog, payload):
    # The outbox written by hand: the whole pending list rewritten as JSON on every change.
    import json

    text = "x" * payload
    pending = []
    path = MOUNT + "/outbox.json"

    def save():
        f = open(path, "w")
        f.write(json.dumps(pending))
        f.close()

    seq = 0
    for _ in range(backlog):
        seq += 1
        pending.append([seq, text])
        save()
    dev.zero()
    for _ in range(n):
        seq += 1
        pending.append([seq, text])
        save()
        pending.pop(0)  # delivered
        save()


def wear_applog(dev, n, backlog, payload):
    # An append-only text log: one line per enqueue and one per delivery, flushed each time.
    text = "x" * payload
    f = open(MOUNT + "/outbox.log", "a")
    for i in range(backlog):
        f.write("E %d %s\n" % (i, text))
        f.flush()
    dev.zero()
    for i in range(n):
        f.write("E %d %s\n" % (backlog + i, text))
        f.flush()
        f.write("A %d\n" % i)
        f.flush()
    f.close()


def wear_outbox(dev, n, backlog, payload, every, prof):
    # The message layer's group commit: Outbox(sync_every=3 records a message) put / get / ack.
    q = ddq.Queue(
        MOUNT + "/q",
        sync="none",
        clock=Clock(),
        segment_bytes=prof["segment_bytes"],
        max_items=prof["max_items"],
        max_payload_bytes=prof["max_payload_bytes"],
        max_segments=prof["max_segments"],
    )
    import ddq_outbox

    ob = ddq_outbox.Outbox(q, clock=Clock(), sync_every=3 * every)
    p = b"x" * payload
    for _ in range(backlog):
        ob.put("t", p)
    ob.sync()
    dev.zero()
    for _ in range(n):
        ob.put("t", p)
        m = ob.get()
        ob.ack(m)
    ob.sync()
    q.close()


def wear_ddq(dev, n, backlog, payload, policy, every, prof):
    sync = policy
    if policy in ("group", "enqueue"):
        sync = "none"
    q = ddq.Queue(
        MOUNT + "/q",
        sync=sync,
        clock=Clock(),
        segment_bytes=prof["segment_bytes"],
        max_items=prof["max_items"],
        max_payload_bytes=prof["max_payload_bytes"],
        max_segments=prof["max_segments"],
    )
    p = b"x" * payload
    for _ in range(backlog):
        q.enqueue(p)
    q.sync()
    dev.zero()
    for i in range(n):
        q.enqueue(p)
        if policy == "enqueue":
            q.sync()  # only the enqueue is made durable; claim and ack ride on the next sync
        c = q.claim(30000)
        q.ack(c.seq)
        if policy == "group" and i % every == every - 1:
            q.sync()
    q.sync()
    q.close()


# The board profiles in boards/*.json (RPI_PICO: 4 KiB segments; ESP32_GENERIC: 8 KiB).
PROFILES = {
    "rp2": {
        "progsize": 256,
        "segment_bytes": 4096,
        "max_items": 256,
        "max_payload_bytes": 256,
        "max_segments": 16,
    },
    "esp32": {
        "progsize": 32,
        "segment_bytes": 8192,
        "max_items": 512,
        "max_payload_bytes": 512,
        "max_segments": 16,
    },
}


# The subjects of part `lfs`, in the order bench/run.py reports them.
WEAR_CASES = ("json", "applog", "ddq_always", "ddq_ack", "ddq_enqueue", "ddq_group", "ddq_outbox")


def part_lfs(a):
    load_ddq()
    n, backlog, payload, every = a["n"], a["backlog"], a["payload"], a["every"]
    out = {}
    for pname in a["profiles"].split(","):
        prof = PROFILES[pname]
        res = {}
        for case in WEAR_CASES:
            dev = lfs_mount(a["blocks"], prof["progsize"])
            if case == "json":
                wear_json(dev, n, backlog, payload)
            elif case == "applog":
                wear_applog(dev, n, backlog, payload)
            elif case == "ddq_outbox":
                wear_outbox(dev, n, backlog, payload, every, prof)
            else:
                wear_ddq(dev, n, backlog, payload, case[4:], every, prof)
            res[case] = {
                "progs": dev.progs / n,
                "erases": dev.erases / n,
                "prog_bytes": dev.prog_bytes / n,
            }
            lfs_umount()
            dev = None
            gc.collect()
        out[pname] = res
    emit(
        {
            "n": n,
            "backlog": backlog,
            "payload": payload,
            "every": every,
            "per_msg": out,
            "profiles": PROFILES,
        }
    )


# --- import heap ------------------------------------------------------------------------------


def part_imports(a):
    # Each path imports in a fresh process (run.py), so only the first path is measured here.
    path = a["path"]
    if a["romfs"]:
        import vfs

        f = open(a["romfs"], "rb")
        img = f.read()
        f.close()
        vfs.mount(vfs.VfsRom(img), "/rom")
        os.chdir("/")
        path = "/rom"
        img_len = len(img)
    else:
        img_len = 0
    sys.path.clear()
    sys.path.append(path)
    m0 = collect()
    import ddq as mod  # noqa: F401

    m1 = collect()
    more = {}
    for name in [x for x in a["also"].split(",") if x]:  # each one's increment after ddq
        m2 = collect()
        __import__(name)
        more[name] = collect() - m2
    emit(
        {
            "path": a["path"],
            "romfs": a["romfs"],
            "romfs_bytes": img_len,
            "heap": m1 - m0,
            "also": more,
        }
    )


# --- allocation -------------------------------------------------------------------------------


def lifecycle_allocs(q, rounds, p, lease):
    # Bytes allocated per op, averaged over `rounds` lifecycles, with the collector off
    # (tests/shared.py: the same count as tests/test_heapalloc.py's).
    return [t / rounds for t in shared().alloc_totals(q, p, rounds, lease)]


def locked(fn, arg):
    return shared().heap_locked(fn, arg)


def shared():
    if REPO + "/tests" not in sys.path:
        sys.path.append(REPO + "/tests")
    import shared as mod

    return mod


def part_allocs(a):
    load_ddq(a["mod"])
    out = {}
    for pending in (10, a["pending"]):
        d = fresh("%s/p%d" % (a["dir"], pending)) + "/q"
        q = ddq.Queue(d, sync=a["sync"], clock=Clock(), max_items=1000000)
        p = bytes(a["payload"])
        for _ in range(pending):
            q.enqueue(p)
        for _ in range(a["warm"]):
            q.enqueue(p)
            c = q.claim(30000)
            q.ack(c.seq)
        per = lifecycle_allocs(q, a["rounds"], p, 30000)
        ok_e, _s = locked(q.enqueue, p)
        ok_c, c = locked(q.claim, 30000)
        if c is None:
            c = q.claim(30000)
        ok_a, _r = locked(q.ack, c.seq)
        out[str(pending)] = {
            "enqueue": per[0],
            "claim": per[1],
            "ack": per[2],
            "heap_lock_ok": {"enqueue": ok_e, "claim": ok_c, "ack": ok_a},
        }
        q.close()
        q = None
        common.rmtree(d)
    emit({"sync": a["sync"], "payload": a["payload"], "rounds": a["rounds"], "per_op": out})


def part_allocprof(a):
    # ddq here is the instrumented copy: _ap_on/_ap_acc/_ap_select are its probe state.
    mod = load_ddq(a["mod"])
    d = fresh(a["dir"]) + "/q"
    q = mod.Queue(d, sync=a["sync"], clock=Clock(), max_items=1000000)
    p = bytes(a["payload"])
    for _ in range(a["pending"]):
        q.enqueue(p)
    for _ in range(a["warm"]):
        q.enqueue(p)
        c = q.claim(30000)
        q.ack(c.seq)
    accs = mod._ap_accs
    rounds = a["rounds"]
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        mod._ap_select(0)
        q.enqueue(p)
        mod._ap_select(1)
        c = q.claim(30000)
        mod._ap_select(2)
        q.ack(c.seq)
        mod._ap_select(-1)
        gc.enable()
    out = {}
    ops = ("enqueue", "claim", "ack")
    for k in range(3):
        rows = {}
        acc = accs[k]
        for line in range(len(acc)):
            if acc[line]:
                rows[str(line)] = acc[line] / rounds
        out[ops[k]] = rows
    q.close()
    common.rmtree(a["dir"])
    emit({"rounds": rounds, "sync": a["sync"], "per_line": out})


# --- heap per item by state, capacity in a board heap, reopen (DESIGN §4.1) ----------------------

BOARD_OPTS = {
    "segment_bytes": 4096,
    "max_payload_bytes": 64,
    "max_items": 1000000,
    "max_segments": 4096,
}


def part_heapstate(a):
    # Heap per item in the default state (enqueued, never claimed, in log order), amortised over
    # n, then per item of each exceptional state, k items each, measured from the state before:
    # claimed; acked in order (back to default); waiting for a retry; acked out of order.
    load_ddq(a["mod"])
    d = fresh(a["dir"]) + "/q"
    q = ddq.Queue(d, sync="none", clock=Clock(), **BOARD_OPTS)
    p = bytes(a["payload"])
    n, k = a["n"], a["k"]
    m0 = collect()
    for _ in range(n):
        q.enqueue(p)
    m1 = collect()
    cl = [q.claim(30000).seq for _ in range(k)]
    m2 = collect()
    for s_ in cl:
        q.ack(s_)
    cl = None
    m3 = collect()
    for _ in range(k):
        q.retry(q.claim(30000).seq, 60000)
    m4 = collect()
    base = q.oldest_available()
    for j in range(k):  # every other item further on: acked while the ones between wait
        q.ack(q.claim_seq(base + 2 + 2 * j, 30000).seq)
    m5 = collect()
    q.close()
    q = None
    common.rmtree(a["dir"])
    emit(
        {
            "n": n,
            "k": k,
            "payload": a["payload"],
            "default": (m1 - m0) / n,
            "claimed": (m2 - m1) / k,
            "acked_in_order": (m3 - m1) / k,
            "retry": (m4 - m3) / k,
            "acked_out_of_order": (m5 - m4) / k,
        }
    )


def part_reopen(a):
    # fill=1: make the queue (n pending 16-byte items; no queue.index) and leave it. Then, in a
    # fresh process: open it and report micropython.mem_total() (bytes requested from the
    # allocator; a realloc counts its growth only) and mem_peak() over what the open keeps.
    # (The largest allocation: bench/mp_hole.py, a small script of its own.)
    import micropython

    load_ddq(a["mod"])
    d = a["dir"] + "/q"
    if a["fill"]:
        fresh(a["dir"])
        q = ddq.Queue(d, sync="none", clock=Clock(), index_bytes=1 << 40, **BOARD_OPTS)
        p = bytes(a["payload"])
        for _ in range(a["n"]):
            q.enqueue(p)
        q.close()
        emit({"n": a["n"]})
        return
    k0 = collect()
    t0 = micropython.mem_total()
    q = ddq.Queue(d, sync="none", clock=Clock(), index_bytes=1 << 40, **BOARD_OPTS)
    t1 = micropython.mem_total()
    peak = micropython.mem_peak()
    k1 = collect()
    n = q.stats().total_items
    q.close()
    emit(
        {
            "items": n,
            "allocated": t1 - t0,
            "kept": k1 - k0,
            "peak_over_start": peak - k0,
            "index_used": q.index_used,
        }
    )


# --- standing backlog (DESIGN §12) ---------------------------------------------------------------


def counting_storage():
    class CountingStorage(ddq.PosixStorage):
        """ddq.PosixStorage counting the bytes ddq writes (ddq's own figure, before LittleFS)."""

        def __init__(self):
            super().__init__()
            self.bytes = 0

        def write(self, f, buf):
            self.bytes += len(buf)
            super().write(f, buf)

    return CountingStorage()


def blocks_used():
    st = os.statvfs(MOUNT)
    return st[2] - st[3]


def floor_run(a, out, frac):
    """The floor (no ddq): the same appends and syncs on the same device and mount, holding as
    many files as the durable runs' generations held (common.raw_floor_run)."""
    dev = lfs_mount(a["blocks"], a["progsize"])
    gc.collect()
    dev.zero()
    r = common.raw_floor_run(
        fresh(MOUNT + "/raw"),
        a["n"],
        a["payload"],
        a["segment_bytes"],
        common.held(out, frac, a),
        dev,
    )
    r["blocks_used"] = blocks_used()
    r["progs"] = dev.progs / a["n"]
    r["erases"] = dev.erases / a["n"]
    lfs_umount()
    dev = None
    gc.collect()
    return r


def part_steady(a):
    # Fill until Full to find what the options admit; then, for each standing backlog (a
    # percentage of that) and each sync policy, a FIFO run of n messages on a fresh LittleFS
    # (counting RAM block device): every enqueue/claim/ack timed alone, compactions, bytes ddq
    # wrote, LittleFS programs and erases, per delivered message. Then (raw=1) the floor at that
    # backlog: the same file-system operations with no ddq (common.raw_floor_run).
    load_ddq()
    opts = common.steady_opts(a, 1000000)
    p = bytes(a["payload"])
    lfs_mount(a["blocks"], a["progsize"])
    q = ddq.Queue(MOUNT + "/cap", sync="none", clock=Clock(), **opts)
    cap = common.fill_until_full(ddq, q, p, 1000000)
    q.close()
    lfs_umount()
    out = {}
    raw = {}
    for frac in a["backlogs"].split(","):
        b = cap * int(frac) // 100
        for sync, step in common.steady_cases(a):
            dev = lfs_mount(a["blocks"], a["progsize"])
            q = ddq.Queue(MOUNT + "/q", sync="none", clock=Clock(), **opts)
            for _ in range(b):
                q.enqueue(p)
            q.close()
            cs = counting_storage()
            q = ddq.Queue(
                MOUNT + "/q", sync=sync, clock=Clock(), storage=cs, reclaim_step=step, **opts
            )
            gc.collect()
            dev.zero()
            cs.bytes = 0
            r = common.steady_run(q, a["n"], p, counter=cs, dev=dev)
            r["blocks_used"] = blocks_used()
            q.close()  # the close's own writes are left out: counted before it
            n = a["n"]
            r["ddq_bytes"] = cs.bytes / n
            r["progs"] = dev.progs / n
            r["erases"] = dev.erases / n
            r["prog_bytes"] = dev.prog_bytes / n
            r["backlog"] = b
            r["floor"] = common.floor(opts, a["payload"], b)
            out["%s-%s-%d" % (frac, sync, step)] = r
            lfs_umount()
            dev = q = None
            gc.collect()
        if a["raw"]:
            raw[frac] = floor_run(a, out, frac)
    extra = {"progsize": a["progsize"], "block_size": 4096, "blocks": a["blocks"]}
    common.steady_emit(cap, opts, a, out, raw, extra)


def part_board_steady(a):
    # Issue 26 §4: a board profile's queue on its own LittleFS (a RAM block device of the
    # profile's flash), with its options (the hold rule; reclaim_step as the profile sets it, and
    # each step in `steps`), a FIFO run of n messages at sync="always" over a standing backlog of
    # `backlog` % of max_items: every call timed alone (common.steady_run). Then the floor in the
    # same process, device and mount: the same appends and syncs with no ddq, holding as many
    # files as the ddq runs' generations held (common.raw_floor_run).
    load_ddq()
    opts = common.steady_opts(a, a["max_items"])
    if a["window"]:
        opts["window"] = a["window"]
        opts["evidence_bytes"] = a["evidence"]
    p = bytes(a["payload"])
    b = a["max_items"] * a["backlog"] // 100
    frac = str(a["backlog"])
    out = {}
    for step in [int(t) for t in str(a["steps"]).split(",")]:
        dev = lfs_mount(a["blocks"], a["progsize"])
        q = ddq.Queue(MOUNT + "/q", sync="none", clock=Clock(), **opts)
        for _ in range(b):
            q.enqueue(p)
        q.close()
        q = ddq.Queue(MOUNT + "/q", sync="always", clock=Clock(), reclaim_step=step, **opts)
        gc.collect()
        dev.zero()
        r = common.steady_run(q, a["n"], p, dev=dev)
        r["blocks_used"] = blocks_used()
        r["backlog"] = b
        q.close()
        out["%s-always-%d" % (frac, step)] = r
        lfs_umount()
        dev = q = None
        gc.collect()
    raw = floor_run(a, out, frac)
    emit(
        {
            "options": opts,
            "payload": a["payload"],
            "n": a["n"],
            "runs": out,
            "raw": raw,
            "blocks": a["blocks"],
            "profile_step": a["profile_step"],
        }
    )


def part_flash(a):
    # Issue 36: the same workload as part lfs's ddq_always (enqueue, claim, ack each durable, a
    # standing backlog) on LittleFS and on raw NOR flash through ddq_flash.FlashStorage, both on
    # 4 KiB erase blocks (the rp2 profile): per delivered message, program commands, erases,
    # bytes programmed (for page=256: the pages, and the bytes a program changes, not its 0xFF
    # padding); the bytes and records ddq wrote (compaction's copies included), so erases
    # against the floor (ddq's bytes / 4096) and programs against records. Cases: "flash" the
    # profile's options on byte-programmed NOR, "fit" segment_bytes = seg (a segment's data fits
    # one block), "page" that on whole `page`-byte pages (rp2.Flash: 256; esp32.Partition
    # programs any bytes: 1, as "fit"). Then wear: a long run (wn messages on wblocks blocks) and
    # its most-erased block against the mean. geo: the PROFILES entry (rp2, esp32).
    load_ddq()
    sys.path.append(REPO + "/tests")
    import blockdev
    import ddq_flash

    class Counting(ddq_flash.FlashStorage):
        def write(self, f, data):
            self.bytes += len(data)
            ddq_flash.FlashStorage.write(self, f, data)

    class Dev(blockdev.NORBlockDev):
        def program(self, a, buf):
            for x in buf:
                if x != 0xFF:
                    self.set_bytes += 1
            return blockdev.NORBlockDev.program(self, a, buf)

    prof = PROFILES[a["geo"]]
    payload, p = a["payload"], b"x" * a["payload"]
    opts = {
        k: prof[k] for k in ("segment_bytes", "max_items", "max_payload_bytes", "max_segments")
    }
    out = {}
    for kind in ("lfs", "flash", "fit", "page", "wear"):
        o = dict(opts)
        if kind in ("fit", "page", "wear"):
            o["segment_bytes"] = a["seg"]
        n, blocks = (a["wn"], a["wblocks"]) if kind == "wear" else (a["n"], a["blocks"])
        if kind == "lfs":
            dev = lfs_mount(blocks, prof["progsize"])
            st, path = None, MOUNT + "/q"
        else:
            pg = a["page"] if kind == "page" and a["page"] > 1 else 0
            dev = Dev(4096, blocks, page=pg)
            dev.set_bytes = 0
            st, path = Counting(dev, page=pg or 1), "q"
            st.bytes = 0
        q = ddq.Queue(path, sync="always", clock=Clock(), storage=st, **o)
        for _ in range(a["backlog"]):
            q.enqueue(p)
        dev.zero()
        w0, r0 = st.bytes if st else 0, q._log.nap
        if st:
            dev.set_bytes = 0
            dev.wear = [0] * blocks
        for _ in range(n):
            q.enqueue(p)
            c = q.claim(30000)
            q.ack(c.seq)
        r = {
            "progs": dev.progs / n,
            "erases": dev.erases / n,
            "prog_bytes": dev.prog_bytes / n,
            "records": (q._log.nap - r0) / n,
        }
        if st:
            r["ddq_bytes"] = (st.bytes - w0) / n
            r["set_bytes"] = dev.set_bytes / n
            r["wear_max"] = max(dev.wear)
            r["wear_mean"] = sum(dev.wear) / blocks
            r["region_writes"] = (st.bytes - w0) / (4096.0 * blocks)
        q.close()
        if kind == "lfs":
            lfs_umount()
        out[kind] = r
        dev = q = st = None
        gc.collect()
    emit(
        {
            "n": a["n"],
            "backlog": a["backlog"],
            "payload": payload,
            "blocks": a["blocks"],
            "seg": a["seg"],
            "geo": a["geo"],
            "page": a["page"],
            "profile": opts,
            "per_msg": out,
        }
    )


PARTS = {
    "flash": (
        part_flash,
        {
            "dir": "",
            "n": 1000,
            "backlog": 10,
            "payload": 100,
            "blocks": 256,
            "seg": 3500,
            "wn": 80000,
            "wblocks": 48,
            "geo": "rp2",
            "page": 256,
        },
    ),
    "board_steady": (
        part_board_steady,
        {
            "dir": "",
            "n": 4000,
            "payload": 62,
            "segment_bytes": 4096,
            "max_payload": 976,
            "max_items": 5360,
            "max_segments": 146,
            "window": 16,
            "evidence": 1024,
            "steps": "16",
            "profile_step": 16,
            "backlog": 50,
            "blocks": 352,
            "progsize": 256,
            "keep": 0,
        },
    ),
    "heapstate": (part_heapstate, {"dir": "", "mod": "", "n": 10000, "k": 500, "payload": 16}),
    "reopen": (part_reopen, {"dir": "", "mod": "", "n": 3000, "payload": 16, "fill": 0}),
    "steady": (part_steady, dict(common.STEADY_DEFAULTS, blocks=256, progsize=256)),
    "lifecycle": (part_lifecycle, {"dir": "", "n": 25, "payload": 100, "blocks": 12}),
    "heap": (
        part_heap,
        {"dir": "", "n": 10000, "payload": 1024, "fill": 1, "noindex": 0, "keep": 0},
    ),
    "scaling": (
        part_scaling,
        {"dir": "", "small": 100, "big": 100000, "m": 2000, "payload": 100, "reps": 3},
    ),
    "recovery": (part_recovery, {"dir": "", "reps": 3, "index_bytes": 1048576}),
    "lfs": (
        part_lfs,
        {
            "dir": "",
            "n": 1000,
            "backlog": 10,
            "payload": 100,
            "every": 10,
            "blocks": 256,
            "profiles": "rp2,esp32",
        },
    ),
    "imports": (part_imports, {"dir": "", "path": "", "romfs": "", "also": ""}),
    "allocs": (
        part_allocs,
        {
            "dir": "",
            "mod": "",
            "sync": "always",
            "payload": 100,
            "pending": 1000,
            "warm": 50,
            "rounds": 100,
        },
    ),
    "allocprof": (
        part_allocprof,
        {
            "dir": "",
            "mod": "",
            "sync": "always",
            "payload": 100,
            "pending": 10,
            "warm": 50,
            "rounds": 100,
        },
    ),
}


def main():
    common.dispatch(PARTS, "mp_bench.py PART key=value ...")


main()
