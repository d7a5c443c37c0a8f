#!/usr/bin/env python3
"""What each board profile's queue really holds: derive max_segments and max_items, check them.

    .venv/bin/python tools/board_capacity.py            # derive and print; change nothing
    .venv/bin/python tools/board_capacity.py --write    # also update boards/*.json, the apps'
                                                        # OPTIONS and docs/BOARDS.md
    .venv/bin/python tools/board_capacity.py --check    # exit 1 if a profile's max_items is not
                                                        # reachable (tests/host runs this check)
    ... [--board NAME ...]                              # only these profiles

Per profile (boards/<BOARD>.json; keys fs_bytes, heap_bytes, app_heap_bytes besides the queue
options), with the message the example app enqueues (its `encode()` payload; wrapped in the
ddq_outbox envelope when the app imports ddq_outbox):

1. flash: the code first: what `ddq flash --app` installs (the app's port modules as .mpy,
   the app as main.py), each file rounded up to the filesystem's block (FAT 512 B, LittleFS
   4 KiB). Then max_segments is the largest m for which SPEC C9's worst case fits the board's
   filesystem with room to spare, measured on that filesystem itself (VfsLfs2/VfsFat of
   fs_bytes on a RAM block device, in the MicroPython unix port): the code, then 2m + 1
   segment files of segment_bytes (the current and the staged generation, and one
   `<segment>.reserve` of a tail cut, R12), both manifests, the marker and the lock, in the
   queue directory with names of the longest form; and then still FS_SPARE[filesystem]
   blocks free: a LittleFS appends copy-on-write (the last block of a file written again
   goes to a free block: the open segment, a staged segment and a cut's copy may each need
   one), so a filesystem the queue filled to the last block could not take a claim or an
   ack, and never drain. Never more than ((fs_bytes - code) // 2) // segment_bytes.
2. admitted: on CPython, enqueue that message with max_items = 1,000,000 until Full: what the
   options and DDQ's admission reserve (SPEC §10 A4/A5) let in.
3. heap: on the MicroPython unix port with `-X heapsize=heap_bytes`, ddq (and whatever else the
   app imports from port/: what it loads before it opens its queue, then the rest) loaded from
   .mpy, enqueue until the free heap (after gc.collect, checked every 16 items) would drop
   below app_heap_bytes, the heap the application keeps for itself. (The raw layout of a
   32-bit board: on the 32-bit port, model32.)
4. max_items = min(admitted, heap fit), rounded down to a multiple of 8; then held through a
   whole cycle (most_cycled): that many filled, all drained and the queue compacted, the app's
   share kept throughout, else the most that is (as the raw layout's, derive_raw_k).
5. reclamation: steps 1-4 run twice, inline and staged (reclaim_step = STEP: ddq_reclaim.mpy in
   the code on flash; in the heap fill ddq_reclaim and ddq_compact loaded and a second index of
   every item kept, as a build of the whole queue holds); the profile gets reclaim_step where
   staged keeps at least STAGED_SHARE of the inline max_items (DESIGN §5.1) and the inline
   queue is over STAGED_FROM bytes (segment_bytes x max_segments), else none.
6. check: with the profile's own options, on CPython and on MicroPython (same heap), the queue
   takes exactly max_items of those messages and the next enqueue raises Full, and that many
   drain and compact with the app's share kept; the heap left for the application after import
   and with the queue full is reported.

The unix port is 64-bit: its objects and bytecode are larger than on a 32-bit board, so the
heap figures are pessimistic for real boards (DESIGN §4.1 measured `import ddq` at 49 KB on a
32-bit Cortex-M3 against 64.6 KB here). The queue directory lives on the unix port's VfsPosix,
so a board's LittleFS/FAT buffers (a few KiB) are not counted.
"""

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PORT = os.path.join(REPO, "port")
for _p in (os.path.join(REPO, "host"), PORT):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from ddqhost import boards, layout, transfer  # noqa: E402

VENV_BIN = os.path.join(REPO, ".venv", "bin")
MP = os.path.join(VENV_BIN, "micropython")
MP32 = os.path.join(HERE, "mp32.mjs")  # the 32-bit port (Node.js; `make venv` installs it)
DOC = os.path.join(REPO, "docs", "BOARDS.md")
READING = b"n=12345 t=12345678 v=21.5"  # what the example apps' encode() makes of a reading
BIG = 1000000

# The unix port is 64-bit: the same ddq.mpy kept 49 KB on a 32-bit Cortex-M3 (qemu) where the unix
# port measured 64.6 KB (DESIGN §4.1). A board's heap (and the application's share of it) is
# modelled on the unix port scaled by that ratio, so 32-bit boards are not judged by 64-bit object
# sizes.
WORD_SCALE = 64.6 / 49

# Corrected for 32-bit boards (docs/HOST.md "qemu board"; bench/qemu_fill.json, measured on the
# qemu Cortex-M3 with a 140 KiB heap, bench row 9q): code and objects scale with the word size
# (`import ddq` 24,096 B on the unix port, 18,368 B there), the queue's items do not (16 B items
# fill the same 36,864 in 140 KiB on both: the index is arrays of fixed-size ints, and the fill
# ends at one contiguous block). WORD_SCALE applied to the whole heap gave the unix port 1.32 times
# the board's heap and so overrated what its items can take; unix_heap_32 scales the code's share
# only. The raw layout's state does scale (FlashStorage's lists and names, 1.6-1.8 x at 64-bit:
# issue 36), so a 32-bit board's raw layout is measured on the 32-bit port instead (model32).
CODE_SCALE_32 = 24096 / 18368


def unix_heap_32(board_heap, code_unix):
    """-X heapsize for the unix port (64-bit) that models a 32-bit board's board_heap bytes, given
    code_unix: the heap that what the app imports takes on the unix port. A unix profile is
    64-bit itself: its heap as it is."""
    return int(board_heap + code_unix * (1 - 1 / CODE_SCALE_32))


# Runs inside MicroPython (subset Python). Prints one RESULT line.
MP_SCRIPT = """
import gc, os, sys, json
f = open(sys.argv[1])  # a file: the unix port dies on an argument of 256 characters or more
a = json.loads(f.read())
f.close()
sys.path[:] = [a["mods"]]
gc.collect()
# On the 32-bit port (tools/mp32.mjs) mem_free counts the 128 MiB it could grow its heap by (X),
# and it collects garbage only between the steps it runs (each yield of STEPS): inside a step it
# grows the heap where a board would collect. So there a step's allocations, none collected,
# must fit the board's heap (over(); conservative: its garbage counted as live), and after it
# what stays must leave the app its share. The mount and the open are steps of loops whose
# garbage would not fit so: their peak is checked on the unix port (fill_mp). The unix port
# (X 0) collects when it needs to: there MemoryError is the board's.
T = gc.mem_free() + gc.mem_alloc()
X = 134217728 if T > 134217728 else 0
U = globals().get("MP32", T) - X  # the heap (before the 32-bit port compiled this script)
R = {"n": 0, "ok": 0, "end": "limit", "import": 0, "peak": 0, "nor": 0, "heap": U}


def free():
    # the heap left: the NOR model is the harness's (a board's region is a C object: rp2.Flash,
    # esp32.Partition, pyb.Flash), so its class and instance are not counted
    return U + R["nor"] - gc.mem_alloc()


def over():
    m = gc.mem_alloc()
    R["peak"] = max(R["peak"], m)
    return X and m > U


def fill():
    m0 = gc.mem_alloc()
    for name in a["imports"]:
        __import__(name)
        yield
    import ddq
    if X:  # (ddq's probe of a small heap sees the 128 MiB the 32-bit port could grow by)
        ddq._HEAP = U < 135168
    gc.collect()
    R["import"] = gc.mem_alloc() - m0
    o = a["options"]
    if a.get("raw"):  # the raw layout: FlashStorage over a file-backed NOR region (no heap)
        import ddq_flash
        gc.collect()
        m3 = gc.mem_alloc()
        class NOR:  # (its buffers made once: a board's region allocates nothing a program)
            def __init__(s, path, bs, nb):
                s.f, s.bs, s.nb = open(path, "r+b"), bs, nb
                s.e, s.t = b"\\xff" * bs, bytearray(bs)
            def readblocks(s, n, b, off=0):
                s.f.seek(n * s.bs + off)
                s.f.readinto(b)
            def writeblocks(s, n, b, off=0):
                t = memoryview(s.t)[0 : len(b)]
                s.f.seek(n * s.bs + off)
                s.f.readinto(t)
                for i in range(len(b)):
                    t[i] &= b[i]
                s.f.seek(n * s.bs + off)
                s.f.write(t)
            def ioctl(s, op, arg):
                if op == 6:
                    s.f.seek(arg * s.bs)
                    s.f.write(s.e)
                return s.nb if op == 4 else s.bs if op == 5 else 0
        r = a["raw"]
        f = open(r["path"], "wb")  # erased, each run
        for _ in range(r["nb"]):
            f.write(b"\\xff" * r["bs"])
            yield
        f.close()
        dev = NOR(r["path"], r["bs"], r["nb"])
        yield
        gc.collect()
        R["nor"] = gc.mem_alloc() - m3
        R["open_room"] = free()
        R["open_at"] = m4 = gc.mem_alloc()
        o["storage"] = ddq_flash.FlashStorage(dev, page=r["page"], files=r["files"])
        del dev
    else:
        gc.collect()
        R["open_room"] = free()
        R["open_at"] = m4 = gc.mem_alloc()
    q = ddq.Queue(a["dir"], sync="none", clock=lambda: 1767225600000, **o)
    R["open_alloc"] = gc.mem_alloc() - m4  # (the 32-bit port: none of it collected)
    if X and U < 135168:  # ddq drops its open-time code in such a heap (ddq._HEAP)
        sys.modules.pop("ddq_recover", None)
    yield
    gc.collect()
    m2 = gc.mem_alloc()
    for name in a["late"]:  # what the app loads once its queue is open (its link, ...)
        __import__(name)
        if over():
            R["end"] = "MemoryError (import %s)" % name
            return
        yield
    gc.collect()
    R["import"] += gc.mem_alloc() - m2
    p = bytes.fromhex(a["payload"])
    tw = None
    if o.get("reclaim_step"):
        # A staged build holds a second index beside g's (at most every item: its copy and tail)
        # and runs ddq_compact's copy: both counted as if a build of the whole queue ran now.
        __import__("ddq_compact")
        tw = ddq._Index(q._o.tc)
    n = 0
    try:
        while n < a["limit"]:
            q.enqueue(p)
            n += 1
            R["n"] = n
            if tw is not None:
                tw.add(n, 0, len(p))
            if over():
                R["end"] = "MemoryError (an enqueue)"
                return
            yield  # (a step an item on the 32-bit port)
            if n % 16 == 0 or n == a["limit"]:
                gc.collect()
                if free() < a["app_heap"]:
                    R["end"] = "app heap reached"
                    return
                R["ok"] = n
        if a["one_more"]:
            try:
                q.enqueue(p)
                R["end"] = "no Full after the limit"
            except ddq.Full:
                R["end"] = "Full"
    except ddq.Full:
        R["end"] = "Full"
    if a.get("cycle"):  # then drain it all and compact, the app's share kept throughout
        yield
        gc.collect()
        R["drain_room"] = free()
        R["drain_at"] = gc.mem_alloc()
        R["cycle"] = "drain"
        k = 0
        while True:  # (an ack may compact: that step's uncollected garbage is not checked)
            c = q.claim(30000)
            if c is not None:
                q.ack(c.seq)
                k += 1
            yield
            gc.collect()
            R["cycle_free"] = min(R.get("cycle_free", U), free())
            if free() < a["app_heap"]:
                R["cycle"] = "drain: %d of %d" % (k, n)
                return
            if c is None:
                break
        R["cycle"] = "compact"
        gc.collect()
        R["compact_room"] = free()
        R["compact_at"] = m4 = gc.mem_alloc()
        q.compact()  # (its peak: on the unix port, as the open's)
        R["compact_alloc"] = gc.mem_alloc() - m4
        yield
        gc.collect()
        R["cycle_free"] = min(R["cycle_free"], free())
        if free() < a["app_heap"]:
            return
        R["cycle"] = "ok: drained %d, compacted" % k


def run():
    try:
        yield from fill()
    except Exception as e:  # MemoryError, or ddq's own ops' NoMemory (SPEC O23)
        if not isinstance(e, MemoryError) and type(e).__name__ != "NoMemory":
            raise
        R["end"] = "MemoryError"
    yield
    gc.collect()
    R["free"] = free()
    R["used"] = gc.mem_alloc()
    print("RESULT " + json.dumps(R))


STEPS = run()
if "MP32" not in globals():  # the unix port: no steps (its GC collects when it needs to)
    for _ in STEPS:
        pass
"""


ON_DEMAND = (
    "ddq_recover",
    "ddq_compact",
    "ddq_extra",
    "ddq_cut",
    "ddq_fat",
    "ddq_index",
    "ddq_reclaim",
    "ddq_salvage",
    "ddq_hold",
    "ddq_admit",
    "ddq_batch",
)  # loaded by name (O21; ddq_batch: BATCH_BYTES)


def app_imports(prof):
    """The port modules the app loads: what flash installs with it (imports followed)."""
    app = boards.app_path(prof)
    if not (app and os.path.isfile(app)):
        return ["ddq"]
    mods = transfer.modules_to_install(prof, app, prof.get("_layout", "fs"))
    return sorted(os.path.basename(m)[:-3] for m in mods)


def _top_imports(path):
    """The modules path imports as it loads (not inside a function or a class)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    out, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def open_imports(prof):
    """The port modules loaded when the app opens its queue: the app's imports at load time,
    followed through the modules' own (ddq_app.run opens the outbox, then makes its link:
    ddq_mqtt, and the Outbox loads ddq_window when it delivers), and in the raw layout
    ddq_flash (ddq_layout.use, called by ddq_app.bind). Without an app: ddq."""
    app = boards.app_path(prof)
    seen = {"ddq"}
    if prof.get("_layout") == "raw":
        seen.add("ddq_flash")
    if not (app and os.path.isfile(app)):
        return seen
    todo = [app]
    while todo:
        for m in sorted(_top_imports(todo.pop()) - seen):
            src = os.path.join(PORT, m + ".py")
            if os.path.isfile(src):
                seen.add(m)
                todo.append(src)
    return seen


def message(prof):
    """The payload bytes the app enqueues for one reading."""
    if "ddq_outbox" in app_imports(prof):
        import ddq_outbox

        topic = "sensors/%s/t" % prof["board"].lower()
        return bytes(ddq_outbox.encode_envelope(topic, READING))
    return READING


def build_mpy(prof, tmp):
    """What `ddq flash --app` installs for prof, compiled as it compiles it (transfer.mpy_cross:
    the profile's mpy_opt, the source named by its base name; no -march: the unix port loads
    them for the heap fill, and bytecode is the same size for every arch)."""
    d = os.path.join(tmp, "mpy")
    os.makedirs(d, exist_ok=True)
    for m in app_imports(prof):
        dst = os.path.join(d, m + ".mpy")
        if not os.path.exists(dst):
            src = os.path.join(PORT, m + ".py")
            transfer.mpy_cross(src, dst, None, prof.get("mpy_opt"))
    return d


def fill_cpython(opts, payload, path, one_more=False):
    import ddq

    q = ddq.Queue(path, sync="none", clock=lambda: 1767225600000, **opts)
    n = 0
    end = "limit"
    try:
        while n < opts["max_items"]:
            q.enqueue(payload)
            n += 1
        if one_more:
            try:
                q.enqueue(payload)
                end = "no Full after max_items"
            except ddq.Full:
                end = "Full"
    except ddq.Full as e:
        end = "Full (%s)" % e
    stored = q.stats().stored_bytes
    q.close()
    shutil.rmtree(path, ignore_errors=True)
    return n, end, stored


def fill_mp(prof, opts, payload, tmp, limit, app_heap, one_more=False, raw=None, cycle=False):
    """Fill a queue with the profile's heap in MicroPython (MP_SCRIPT): app_heap, what the app
    keeps of the board's heap. cycle: then drain it and compact. On the unix port, the app's
    share x WORD_SCALE and a 32-bit board's heap raised by what its imports cost more there
    (unix_heap_32); a 32-bit board's raw layout (raw: its NOR region) on the 32-bit port as
    the board has it, the peaks it cannot see on the unix port (model32)."""
    d = os.path.join(tmp, "mpq")
    shutil.rmtree(d, ignore_errors=True)
    # What the app imports itself: the modules ddq loads by name when it needs them (opening,
    # compaction, ...) are installed with it, but loaded by the queue, not at the app's import
    # (ddq_recover is even dropped after the open in a heap of at most 128 KiB). Those loaded
    # when the app opens its queue come first; the rest after the open (open_imports).
    own = [m for m in app_imports(prof) if m not in ON_DEMAND]
    early = open_imports(prof)
    arg = {
        "mods": build_mpy(prof, tmp),
        "imports": [m for m in own if m in early],
        "late": [m for m in own if m not in early],
        "options": opts,
        "dir": prof.get("queue_dir", "outbox") if raw else d,  # (raw: names of the region's)
        "payload": payload.hex(),
        "limit": limit,
        "app_heap": app_heap,
        "one_more": one_more,
        "raw": raw,
        "cycle": cycle,
    }
    script = os.path.join(tmp, "fill.py")
    with open(script, "w") as f:
        f.write(MP_SCRIPT)
    heap = prof["heap_bytes"]
    if raw is not None and prof.get("port") != "unix":
        return model32(heap, arg, script, d)
    arg["app_heap"] = int(app_heap * WORD_SCALE)
    if prof.get("port") != "unix":  # a 32-bit board: what its imports cost here, then the heap
        probe = dict(arg, limit=0, one_more=False, app_heap=0, cycle=False)
        got = run_mp(MP, 2 * heap, probe, script, d)
        heap = unix_heap_32(heap, got.get("import") or 0)
    return run_mp(MP, heap, arg, script, d)


def run_mp(interp, heap, arg, script, d):
    """MP_SCRIPT's RESULT on interp (MP: the unix port; MP32: the 32-bit port) with heap."""
    with open(script + ".json", "w") as f:
        json.dump(arg, f)
    if interp == MP32:
        cmd = ["node", MP32, "--heap", str(heap), "--copy", os.path.dirname(script)]
        cmd += ["--run", script, script + ".json"]
    else:
        cmd = [MP, "-X", "heapsize=%d" % heap, script, script + ".json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    shutil.rmtree(d, ignore_errors=True)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {
        "n": 0,
        "ok": 0,
        "end": "crashed: " + (r.stderr or r.stdout).strip()[-300:],
        "import": None,
        "free": None,
        "used": None,
    }


def model32(heap, arg, script, d):
    """A 32-bit board's heap of heap bytes (fill_mp): MP_SCRIPT on the 32-bit port with that
    heap, where each step's allocations fit and what stays leaves the app its share (code,
    objects and FlashStorage's lists at their 32-bit sizes: the unix port's 64-bit ones are
    1.3-1.8 x, DESIGN §15). The mount with the open and a compaction are steps whose loops'
    garbage the 32-bit port cannot collect inside them: their peak is checked on the unix port
    (which collects), in a heap that leaves as much room when the open and the last compaction
    start as the board had there x WORD_SCALE (what they allocate is larger at 64-bit: 1.6-1.8
    x, DESIGN §15). An ack that compacts during the drain is such a step too: only what stays
    after it is checked (the compaction's own peak, at the end of the drain)."""
    r32 = run_mp(MP32, heap, arg, script, d)
    if "open_room" not in r32:
        return r32
    big = 4 * heap + (8 << 20)
    full = dict(arg, app_heap=0, limit=r32["n"], one_more=False)
    p64 = run_mp(MP, big, full, script, d)
    per = big / float(p64.get("heap") or big)  # the unix port's heapsize per usable byte
    for phase, a in (("open", dict(full, limit=0, cycle=False)), ("compact", full)):
        if phase + "_room" not in r32 or phase + "_at" not in p64:
            continue
        h = int((p64[phase + "_at"] + r32[phase + "_room"] * WORD_SCALE) * per) + 1
        chk = run_mp(MP, h, a, script, d)
        r32[phase + "_unix_heap"] = h
        if chk["end"].startswith(("MemoryError", "crashed")):
            return dict(
                r32, ok=0, end="%s: %s on the unix port (heap %d)" % (phase, chk["end"], h)
            )
        if a["cycle"] and chk.get("cycle") != r32.get("cycle"):
            r32["cycle"] = "%s on the unix port (heap %d)" % (chk.get("cycle"), h)
    return r32


# Staged reclamation (SPEC C13, DESIGN §12): the profiles' reclaim_step where it fits, i.e. where
# with its second index counted the queue keeps at least STAGED_SHARE (a fraction) of its items.
STEP = 16
STAGED_SHARE = (3, 4)
# ... and only where a whole copy is long: a queue of at most STAGED_FROM bytes is copied inline
# in one short call (PYBV11's 6 x 2 KiB), so there the items staged would cost are kept.
STAGED_FROM = 16384

FS_BLOCK = {"fat": 512, "littlefs2": 4096}  # allocation unit a small file takes on flash
# Blocks left free beyond C9's worst case (see step 1): LittleFS copy-on-write needs a free block
# for each file being appended (the open segment, a staged one, a cut's copy), and a directory's
# metadata pair that fills splits into a new pair (two blocks) as files are written: one such
# pair per 32 names is kept free too (where a split falls depends on the order names arrive, so
# the edge of a measurement is no guarantee). FAT writes in place.
FS_SPARE = {"fat": 1, "littlefs2": 3}
FS_SPARE_PAIR = {"fat": 0, "littlefs2": 2}


def fs_spare(fs, max_segments):
    """Blocks to keep free beyond C9's worst case of max_segments (see FS_SPARE)."""
    names = 2 * max_segments + 5  # segments of two generations, a cut's copy, queue.*
    return FS_SPARE.get(fs, 3) + FS_SPARE_PAIR.get(fs, 2) * (names // 32 + 1)


# Runs inside MicroPython: does C9's worst case for max_segments m fit? Prints one RESULT line.
MP_FIT = """
import os, sys, json, vfs
f = open(sys.argv[1])
a = json.loads(f.read())
f.close()
sys.path.insert(0, a["tests"])
from blockdev import RAMBlockDev
V = vfs.VfsFat if a["fs"] == "fat" else vfs.VfsLfs2
blk = a["block"]
buf = bytes(512)


def put(path, n):
    f = open(path, "wb")
    try:
        while n > 0:
            k = min(n, 512)
            f.write(buf[:k])
            n -= k
    finally:
        f.close()


def fits1(m, last):
    # last: the cut's copy beside the last staged segment, not the first. Where LittleFS puts
    # its metadata depends on the names and their order, so the same m can fit one layout and
    # not the other (UNIX: 102 segments did, as tests/host/test_host_fs_room.py's did not).
    bd = RAMBlockDev(blk, a["fs_bytes"] // blk)
    V.mkfs(bd)
    fs = V(bd)
    vfs.mount(fs, "/f")
    try:
        put("/f/code.bin", a["code"])
        os.mkdir("/f/outbox")
        seg = a["segment_bytes"]
        for g in (1, 2):
            for i in range(m):
                put("/f/outbox/generation-%020d-segment-%020d.log" % (10 ** 19 + g, i), seg)
        r = (m - 1) if last and m else 0
        put("/f/outbox/generation-%020d-segment-%020d.log.reserve" % (10 ** 19 + 2, r), seg)
        for n, k in (("queue.manifest", 48), ("queue.manifest.tmp", 48), ("queue.format", 0),
                     ("queue.lock", 0)):
            put("/f/outbox/" + n, k)
        return os.statvfs("/f")[3] >= a["spare"] + a["spare_pair"] * ((2 * m + 5) // 32 + 1)
    except OSError:
        return False
    finally:
        vfs.umount("/f")


def fits(m):
    return fits1(m, False) and fits1(m, True)


lo, hi = 0, a["upper"]
while lo < hi:
    mid = (lo + hi + 1) // 2
    if fits(mid):
        lo = mid
    else:
        hi = mid - 1
print("RESULT " + json.dumps({"max_segments": lo, "upper_fits": fits(a["upper"])}))
"""


def fit_segments(prof, code, tmp):
    """The largest max_segments whose SPEC C9 worst case fits the profile's filesystem with
    FS_SPARE blocks to spare (step 1 of the module docstring), measured on that filesystem."""
    seg = prof["segment_bytes"]
    upper = min(4096, max(0, (prof["fs_bytes"] - code) // 2) // seg)
    fs = prof["filesystem"]
    arg = {
        "fs": fs,
        "block": FS_BLOCK.get(fs, 4096),
        "fs_bytes": prof["fs_bytes"],
        "code": code,
        "segment_bytes": seg,
        "spare": FS_SPARE.get(fs, 3),
        "spare_pair": FS_SPARE_PAIR.get(fs, 2),
        "upper": upper,
        "tests": os.path.join(REPO, "tests"),
    }
    path = os.path.join(tmp, "fit.json")
    with open(path, "w") as f:
        json.dump(arg, f)
    script = os.path.join(tmp, "fit.py")
    with open(script, "w") as f:
        f.write(MP_FIT)
    r = subprocess.run(
        [MP, "-X", "heapsize=%d" % (prof["fs_bytes"] + (8 << 20)), script, path],
        capture_output=True,
        text=True,
        timeout=600,
    )
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return int(json.loads(line[7:])["max_segments"])
    raise RuntimeError("fit measurement failed: %s" % (r.stderr or r.stdout)[-2000:])


def code_bytes(prof, tmp):
    """Flash the installed code takes: the app's port modules as .mpy and the app itself."""
    blk = FS_BLOCK.get(prof["filesystem"], 4096)
    d = build_mpy(prof, tmp)
    files = [os.path.join(d, m + ".mpy") for m in app_imports(prof)]
    app = boards.app_path(prof)
    if app and os.path.isfile(app):
        files.append(app)
    return sum(-(-os.path.getsize(f) // blk) * blk for f in files)


def derive(prof, tmp):
    """Derived options and the evidence, for one profile (nothing written): max_segments, then
    max_items with inline reclamation and with staged (reclaim_step = STEP: ddq_reclaim's flash
    and its build's RAM counted, MP_SCRIPT's second index); staged where it fits (staged_fits)."""
    payload = message(prof)
    out = {}
    for step in (0, STEP):
        ps = dict(prof)  # the profile as it would be: staged installs ddq_reclaim (flash)
        ps.pop("reclaim_step", None)
        if step:
            ps["reclaim_step"] = step
        sub = os.path.join(tmp, "s%d" % step)
        os.makedirs(sub, exist_ok=True)
        code = code_bytes(ps, sub)
        max_segments = max(1, fit_segments(ps, code, sub))
        opts = dict(boards.queue_options(ps), max_segments=max_segments, max_items=BIG)
        admitted, end, stored = fill_cpython(opts, payload, os.path.join(sub, "cpq"))
        heap = fill_mp(ps, opts, payload, sub, admitted, prof["app_heap_bytes"])
        fit = heap["ok"] if heap["end"] != "limit" else admitted
        items = min(admitted, fit) // 8 * 8
        # held through the whole cycle, as the raw layout is: filled, drained and compacted
        held, cycle = most_cycled(ps, opts, payload, sub, items, prof["app_heap_bytes"])
        if held < items:
            fit = items = held
        max_items = max(1, items)
        out[step] = {
            "max_segments": max_segments,
            "max_items": max_items,
            "admitted": admitted,
            "code_bytes": code,
            "admitted_end": end,
            "admitted_stored": stored,
            "heap_fit": fit,
            "heap_end": heap["end"],
            "cycle": cycle,
            "payload_bytes": len(payload),
            "reclaim_step": step,
            "bound": "heap" if fit < admitted else "flash (admission)",
        }
    big = out[0]["max_segments"] * int(prof["segment_bytes"]) > STAGED_FROM
    d = out[STEP] if big and staged_fits(out[0], out[STEP]) else out[0]
    d["inline_items"] = out[0]["max_items"]
    d["staged_items"] = out[STEP]["max_items"]
    return d


def staged_fits(inline, staged):
    """Staged reclamation fits the budget when, its module's flash and its build's RAM counted,
    the queue still holds at least STAGED_SHARE of what it holds inline (DESIGN §5.1)."""
    return staged["max_items"] * STAGED_SHARE[1] >= inline["max_items"] * STAGED_SHARE[0]


def check(prof, tmp):
    """Fill with the profile's own options: (reachable?, evidence)."""
    payload = message(prof)
    opts = boards.queue_options(prof)
    n, end, stored = fill_cpython(opts, payload, os.path.join(tmp, "cpc"), one_more=True)
    mp = fill_mp(prof, opts, payload, tmp, opts["max_items"], 0, one_more=True)
    ok = n == opts["max_items"] and end == "Full" and mp["n"] == n and mp["end"] == "Full"
    # and the whole cycle with the app's share kept: filled, drained, compacted (most_cycled)
    app = prof["app_heap_bytes"]
    cyc = fill_mp(prof, opts, payload, tmp, opts["max_items"], app, cycle=True)
    ok = ok and cycled(cyc, n)
    plain = {k: v for k, v in opts.items() if k not in boards.HOLD_KEYS}  # libddq's rule [A1]
    libddq = (
        fill_cpython(dict(plain, max_items=BIG), payload, os.path.join(tmp, "cpl"))[0]
        if plain != opts
        else n
    )
    return ok, {
        "libddq_items": libddq,
        "period_ms": period_ms(prof),
        "cpython_items": n,
        "cpython_end": end,
        "stored_bytes": stored,
        "mp_items": mp["n"],
        "mp_end": mp["end"],
        "cycle": cyc.get("cycle") or cyc["end"],
        "import_heap": mp["import"],
        "heap_used_full": mp["used"],
        "heap_left": mp["free"],
        "payload_bytes": len(payload),
    }


def period_ms(prof):
    """The app's reading period: its PERIOD_MS, else ddq_app.DEFAULTS'."""
    app = boards.app_path(prof)
    if app and os.path.isfile(app):
        with open(app) as f:
            for node in ast.parse(f.read()).body:
                if (
                    isinstance(node, ast.Assign)
                    and getattr(node.targets[0], "id", "") == "PERIOD_MS"
                ):
                    return int(ast.literal_eval(node.value))
    import ddq_app

    return int(ddq_app.DEFAULTS["PERIOD_MS"])


def write_profile(prof, derived):
    path = prof["_path"]
    with open(path) as f:
        data = json.load(f)
    data["max_segments"] = derived["max_segments"]
    data["max_items"] = derived["max_items"]
    data.pop("reclaim_step", None)
    if derived["reclaim_step"]:
        data["reclaim_step"] = derived["reclaim_step"]
    with open(path, "w") as f:
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    app = boards.app_path(prof)
    if app and os.path.isfile(app):
        with open(app) as f:
            src = f.read()
        for key in ("max_segments", "max_items"):
            src = re.sub(r'("%s": )\d+' % key, r"\g<1>%d" % derived[key], src, count=1)
        # reclaim_step: the OPTIONS dict's last entry when chosen (with its comment), else none
        src = re.sub(
            r'\n    # staged reclamation[^\n]*\n    "reclaim_step": \d+,', "", src, count=1
        )
        if derived["reclaim_step"]:
            src = re.sub(
                r"(\nOPTIONS = \{\n(?:    [^\n]*\n)*?)\}",
                r"\g<1>    # staged reclamation (SPEC C13): no call copies the whole queue\n"
                r'    "reclaim_step": %d,\n}' % derived["reclaim_step"],
                src,
                count=1,
            )
        with open(app, "w") as f:
            f.write(src)
        tree = ast.parse(src)  # the app still parses
        assert tree is not None
    return boards.load(prof["board"])


# ---------------------------------------------------------------- the raw layout
# `ddq flash --layout raw` (host/ddqhost/layout.py, DESIGN §15): the queue on a raw flash region of
# raw_bytes in blocks of raw_block_bytes through ddq_flash.FlashStorage, the code on a filesystem
# of raw_fs_bytes beside it. Every file takes whole erase blocks: a first block holds RAW_HEAD
# bytes of header, marks and name slots before its data, the others RAW_HDR; each sync is a frame
# of RAW_FRAME bytes more, so a segment of the smallest records (RAW_REC, CLAIM and ACK) is its
# worst case. --raw derives raw_segment_bytes (the largest that fits whole blocks so, holding at
# least two DATA records of max_payload_bytes), raw_max_segments (C9's worst case measured on
# FlashStorage over a NOR model of the region, RAW_SPARE blocks still free) and raw_max_items (as
# max_items: admission on CPython, the heap on the unix port with ddq_flash and the region's
# FlashStorage in it), and writes them with the BOARDS.md section "Raw layout"; the LittleFS
# figures are left as they are.
RAW_HEAD = 284
RAW_HDR = 20
RAW_FRAME = 4
RAW_REC = 48
RAW_SPARE = 2  # a block taken is erased first, and a third rename of a file copies it


def raw_seg_bytes(bs, k):
    """The largest segment_bytes whose worst case fits k blocks of bs bytes."""
    cap = bs - RAW_HEAD + (k - 1) * (bs - RAW_HDR)
    return cap * RAW_REC // (RAW_REC + RAW_FRAME) // 8 * 8


def raw_blocks(prof, seg):
    """Blocks a segment of seg bytes takes at worst."""
    return next(k for k in range(1, 1025) if raw_seg_bytes(prof["raw_block_bytes"], k) >= seg)


def raw_segment(prof):
    """(the smallest raw_segment_bytes to try, blocks it takes): it holds at least two DATA
    records of max_payload_bytes."""
    need = 2 * (RAW_REC + prof["max_payload_bytes"])
    k = raw_blocks(prof, need)
    return raw_seg_bytes(prof["raw_block_bytes"], k), k


def raw_region(prof):
    import ddq_flash
    from blockdev import NORBlockDev

    bs = prof["raw_block_bytes"]
    dev = NORBlockDev(bs, prof["raw_bytes"] // bs)
    return ddq_flash.FlashStorage(dev, page=prof["raw_page"])


def raw_fits(prof, m, seg):
    """C9's worst case for m segments on the region: two generations and a cut's copy, each
    written as frames of the smallest record, both manifests and the marker; then RAW_SPARE
    more files (a block each) still fit."""
    st = raw_region(prof)
    rec = b"r" * RAW_REC
    try:
        st.mkdir("q")
        for i in range(2 * m + 1):
            h = st.open("q/segment-%016x.log" % i, "ab")
            for _ in range(seg // RAW_REC):
                st.write(h, rec)
                st.sync(h)
            st.close(h)
        for name in ["queue.manifest", "queue.manifest.tmp", "queue.marker"] + [
            "spare%d" % i for i in range(RAW_SPARE)
        ]:
            h = st.open("q/" + name, "wb")
            st.write(h, rec)
            st.sync(h)
            st.close(h)
    except OSError:
        return False
    return True


def derive_raw(prof, tmp):
    """The raw layout's options and the evidence for one profile (nothing written): segments of
    1, 2, 3 and 4 times the smallest block count tried (FlashStorage keeps a few hundred bytes of
    heap a file, so fewer, larger segments can leave the index more), the one holding the most
    items kept (where none opens, the largest: the fewest files)."""
    ds = []
    for mult in (1, 2, 3, 4):
        k = raw_segment(prof)[1] * mult
        sub = os.path.join(tmp, "k%d" % k)
        os.makedirs(sub, exist_ok=True)
        ds.append(derive_raw_k(prof, sub, raw_seg_bytes(prof["raw_block_bytes"], k), k))
    fits = [d for d in ds if d["heap_fit"]]
    best = max(fits, key=lambda d: d["raw_max_items"]) if fits else ds[-1]
    return best


def raw_image(prof, tmp, m):
    """fill_mp's raw region: an erased image file in tmp, made as :ddq_layout.py makes the
    board's storage (its page, and the file table for m segments)."""
    bs = prof["raw_block_bytes"]
    return {
        "path": os.path.join(tmp, "raw.img"),
        "bs": bs,
        "nb": prof["raw_bytes"] // bs,
        "page": prof["raw_page"],
        "files": layout.table_files(m),
    }


def cycled(c, n):
    """Whether fill_mp's cycle result c held all n readings: filled, drained and compacted."""
    return c["end"] == "limit" and c["ok"] == n and c.get("cycle", "").startswith("ok")


def most_cycled(ps, opts, payload, tmp, items, app, raw=None):
    """(n, what happened): the most readings, at most items and a multiple of 8, that the heap
    model holds filled, then all drained and compacted, the app's share kept throughout
    (fill_mp's cycle), and what the cycle said (with where it failed, if it did at items)."""
    if not items:
        return 0, "—"

    def cycles(n):
        c = fill_mp(ps, opts, payload, tmp, n, app, raw=raw, cycle=True)
        return cycled(c, n), c

    ok, c = cycles(items)
    cycle = c.get("cycle") or c["end"]
    if ok:
        return items, cycle
    lo, hi = 0, items // 8 - 1  # the most that does (fewer items, fewer segment files)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cycles(mid * 8)[0]:
            lo = mid
        else:
            hi = mid - 1
    return lo * 8, "%s at %d items; all of it at %d" % (cycle, c["n"], lo * 8)


def derive_raw_k(prof, tmp, seg, k):
    """The raw layout with segments of seg bytes (k blocks): max_segments, what the region
    admits, and what the heap model holds: filled, then drained and compacted (fill_mp)."""
    os.makedirs(tmp, exist_ok=True)
    lo, hi = 0, prof["raw_bytes"] // prof["raw_block_bytes"] // k
    while lo < hi:  # the largest m that fits (raw_fits is monotonic in m)
        mid = (lo + hi + 1) // 2
        if raw_fits(prof, mid, seg):
            lo = mid
        else:
            hi = mid - 1
    m = max(1, lo)
    payload = message(prof)
    ps = dict(prof, _layout="raw")
    opts = dict(boards.queue_options(prof), segment_bytes=seg, max_segments=m, max_items=BIG)
    admitted, end, _ = fill_cpython(dict(opts, storage=raw_region(prof)), payload, "outbox")
    raw = raw_image(prof, tmp, m)
    bs = prof["raw_block_bytes"]
    app = prof["app_heap_bytes"]
    heap = fill_mp(ps, opts, payload, tmp, admitted, app, raw=raw)
    fit = heap["ok"] if heap["end"] != "limit" else admitted
    items = min(admitted, fit) // 8 * 8
    held, cycle = most_cycled(ps, opts, payload, tmp, items, app, raw)
    if held < items:
        fit = items = held
    items = max(1, items)
    # the code on the LittleFS beside the region, in its blocks (pyb.Flash's are 512 B)
    fs = "fat" if bs < 4096 else "littlefs2"
    code = code_bytes(dict(ps, filesystem=fs), tmp)
    return {
        "raw_segment_bytes": seg,
        "segment_blocks": k,
        "raw_max_segments": m,
        "raw_max_items": items,
        "cycle": cycle,
        "admitted": admitted,
        "admitted_end": end,
        "heap_fit": fit,
        "heap_end": heap["end"],
        "import_heap": heap["import"],
        "code_bytes": code,
        "bound": "heap" if fit < admitted else "region (admission)",
    }


def write_raw(prof, d):
    """The derived raw_* keys, and raw_heap_fit (what the heap model held; 0: the queue did not
    open in it, and raw_max_items stays as it was, at most what the region admits)."""
    with open(prof["_path"]) as f:
        data = json.load(f)
    keys = ("raw_segment_bytes", "raw_max_segments") + (
        ("raw_max_items",) if d["heap_fit"] else ()
    )
    for key in keys:
        data[key] = d[key]
    if not d["heap_fit"]:  # never more than the region admits
        data["raw_max_items"] = min(data["raw_max_items"], max(1, d["admitted"] // 8 * 8))
    data["raw_heap_fit"] = d["heap_fit"]
    data.pop("raw_heap_needed", None)  # (until issue 36: the 64-bit model's heap for it all)
    with open(prof["_path"], "w") as f:
        f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return boards.load(prof["board"])


def render_raw(profs):
    """docs/BOARDS.md's section on the raw layout, from the profiles' raw_* keys."""
    out = [
        "## Raw layout",
        "",
        '`ddq flash --layout raw` (docs/HOST.md "flash") puts the queue on a raw flash region '
        "through ddq_flash.FlashStorage (SPEC §16, DESIGN §15) and the code on a smaller "
        "LittleFS beside it: each record is durable when its program returns, about one erase "
        "per block filled instead of about three a message (DESIGN §12). Written by "
        "`tools/board_capacity.py --raw --write` from the profiles' `raw_*` keys: "
        "**segment** is the largest raw_segment_bytes whose worst case (frames of %d-byte "
        "records, %d bytes each more) fits its blocks; **max_segments** the largest count "
        "whose SPEC C9 worst case fits the region on FlashStorage with %d blocks free; "
        "**items** the queue's max_items there, measured as for the filesystem layout (with "
        "ddq_flash and the region's FlashStorage in the heap; FlashStorage keeps about 140 "
        "bytes a file at 32-bit, so segments of several blocks can hold more), **heap fit** "
        "how many the heap model holds through a fill, a drain of them all and a compaction "
        "with the app keeping app_heap_bytes throughout (the steady state on the 32-bit port "
        "with the board's heap; the peaks of the mount with the open and of the compaction on "
        "the unix port with the board's room there × %.2f; 0: the queue does not open in it, "
        "and max_items is kept as set, at most what the region admits); **per MiB**: items "
        "per MiB of "
        "the region against the filesystem layout's per MiB of `fs bytes`. A stock firmware "
        "keeps the layout on stm32 (its boot sizes the filesystem from the LittleFS "
        "superblock); rp2 needs a `_boot.py` that mounts `rp2.Flash(start=0, len=raw_fs_bytes)`, "
        'esp32 a partition table with a `ddq` data partition (docs/HOST.md "flash"). '
        "Durability per device (SPEC Y7, DESIGN §15): rp2.Flash and esp32.Partition program "
        "the chip when writeblocks returns; PYBV11's internal-flash pyb.Flash caches a sector "
        "in RAM until ioctl 3, which FlashStorage calls before each sync, create, rename and "
        "remove returns (each sync there costs a sector write-back, 16-128 KiB erased, and a "
        "power cut inside one can take what that sector held; its erase does nothing, so a "
        "block taken is written with 0xFF): boards with external SPI flash (PYBD) program it "
        "directly." % (RAW_REC, RAW_FRAME, RAW_SPARE, WORD_SCALE),
        "",
        "| board | region | block | page | filesystem beside it | options (segment × "
        "max_segments) | blocks a segment | items (max_items) | heap fit | per MiB: raw / "
        "filesystem layout |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for prof in profs:
        if "raw_bytes" not in prof:
            continue
        k = raw_blocks(prof, prof["raw_segment_bytes"])
        fit = prof.get("raw_heap_fit")
        out.append(
            "| %s | %s | %d B | %d B | %s | %d × %d | %d | **%s** | %s | %s / %s |"
            % (
                prof["board"],
                kb(prof["raw_bytes"]),
                prof["raw_block_bytes"],
                prof["raw_page"],
                kb(prof["raw_fs_bytes"]),
                prof["raw_segment_bytes"],
                prof["raw_max_segments"],
                k,
                "{:,}".format(prof["raw_max_items"]),
                "—" if fit is None else "does not open" if not fit else "{:,}".format(fit),
                "{:,}".format(int(prof["raw_max_items"] * 1048576 / prof["raw_bytes"])),
                "{:,}".format(int(prof["max_items"] * 1048576 / prof["fs_bytes"])),
            )
        )
    return "\n".join(out)


def write_raw_doc(section):
    """Replace (or add, before "## Sharing the filesystem") the "## Raw layout" section."""
    with open(DOC) as f:
        doc = f.read()
    m = re.search(r"## Raw layout\n.*?(?=\n+## |\n*\Z)", doc, re.S)
    if m:
        doc = doc[: m.start()] + section + doc[m.end() :]
    else:
        doc = doc.replace("## Sharing the filesystem", section + "\n\n## Sharing the filesystem")
    with open(DOC, "w") as f:
        f.write(doc)


def render(rows):
    out = [
        "# Board profiles: what each one holds",
        "",
        "Written by `tools/board_capacity.py --write`; do not edit by hand. One row per "
        "`boards/*.json`. **items** is the profile's `max_items`: the tool fills a queue with "
        "the profile's options and the message its example app enqueues (the app's "
        "`encode()` reading, %d B; in the ddq_outbox envelope when the app imports "
        "ddq_outbox) and checks that exactly that many fit and the next enqueue raises Full, "
        "on CPython and on the MicroPython unix port with `-X heapsize` = the board's heap plus "
        "what its imports cost more at 64-bit (issue 29: on the qemu Cortex-M3 `import ddq` "
        "took 0.76 of the unix port's heap, its 16 B items filled the same 36,864 in 140 KiB), "
        "the application's share × %.2f. "
        "It is the smaller of what the options admit and what fits in the heap while the "
        "application keeps `app_heap_bytes`, and that many must also drain and the queue "
        "compact in that heap, the application's share kept throughout (as the raw layout's "
        "below). `max_segments` is the largest count whose SPEC C9 "
        "worst case fits the board's filesystem after the code `ddq flash --app` installs (each "
        "file rounded up to a FAT 512 B or LittleFS 4 KiB block), measured on a VfsLfs2/VfsFat "
        "of `fs bytes`: two generations of max_segments segments (a compaction stages the next "
        "beside the current one) and one tail cut's copy, both manifests, the marker and the "
        "lock, and then still %d LittleFS blocks and %d more per 32 file names (%d FAT "
        "cluster) free: the copy-on-write room a claim or an ack needs on a full LittleFS, and "
        'a directory\'s metadata split. See "Sharing the filesystem" below for a filesystem '
        "that also holds other files. **admission**: the profile's rule. libddq's (SPEC §10) "
        "reserves for each pending item its worst-case control records, 168 B + "
        "max_payload_bytes; the hold rule (SPEC §10.1, `window` > 0, DESIGN §5.1) reserves a "
        "STATE for each of `window` claims in flight and an evidence budget for dead-letter "
        "reasons, so an item costs little more than its DATA record; in brackets the reserve "
        'of the app\'s `BATCH_OPTIONS` with `OUTBOX = "ddq_batch"` (readings share items, '
        "OUTBOX §13.4: an item holds tens of readings, so a few claimed at once carry the app's "
        "whole publish window; bench rows h4c/h4d). **readings held**: what "
        "the profile's queue takes before Full (libddq's rule on the same options in "
        "brackets); **hours**: that many readings at the app's PERIOD_MS. **reclamation**: "
        "staged (`reclaim_step` %d, SPEC C13/H8: the next generation is built a few records a "
        "call, so no call copies the whole queue) where it fits the budget: the tool derives "
        "the profile again with ddq_reclaim.mpy in the code on flash (so in max_segments) and, "
        "in the heap fill, ddq_reclaim and ddq_compact loaded and a second index of as many "
        "items (a build's copy) kept beside the queue, and chooses staged when that still "
        "holds at least %d/%d of the inline items while the app keeps `app_heap_bytes` and "
        "the inline queue is over %d bytes (a smaller one is copied whole in one short call: "
        "there the items are kept); else inline. In brackets: what the other mode would hold. "
        "**code on flash**: at the "
        "profile's `mpy_opt` (mpy-cross -O3 on the four boards: no line numbers in a device's "
        "tracebacks, function names stay; about 8 %% less bytecode, a LittleFS block less for "
        "ddq, ddq_compact and ddq_recover each, and less import heap; `ddq flash -O 0` keeps "
        "the line numbers). A board profile's queue opens with `window`, so its install leaves "
        "ddq_admit (libddq's admission) out."
        % (
            len(READING),
            WORD_SCALE,
            FS_SPARE["littlefs2"],
            FS_SPARE_PAIR["littlefs2"],
            FS_SPARE["fat"],
            STEP,
            STAGED_SHARE[0],
            STAGED_SHARE[1],
            STAGED_FROM,
        ),
        "",
        "The unix port (the virtual board: CI's board for heap fit, LittleFS and FAT) is 64-bit: "
        "objects and bytecode are larger than on a 32-bit board (issue 14: `import ddq` took "
        "49 KB on a 32-bit Cortex-M3 where the unix port measured 64.6 KB), "
        "so the heap columns are pessimistic; the queue directory is on VfsPosix, so LittleFS/FAT "
        "buffers are not counted. The 32-bit figures beside them come from `make test-mp32` "
        "(MicroPython 1.27's WebAssembly port, 32-bit, tools/mp32.mjs), measured by hand: `import "
        "ddq` from the -O3 .mpy keeps 20,384 B there against 23,392 B on the unix port (0.87); "
        "tests/test_heapalloc.py's steady-state bytes an op, enqueue / claim / ack, are 228 / 232 "
        "/ 24 there against 96 / 288 / 0 here: enqueue and ack cost more at 32-bit (ints past "
        "2**30, wall-clock milliseconds among them, are heap objects there).",
        "",
        "| board | filesystem | fs bytes | code on flash | heap | app keeps | options (segment × "
        "max_segments, max_payload) | admission | reclamation | message B | items (max_items) | "
        "bound by | readings held (libddq's rule) | hours at the app's period | queue bytes on "
        "flash when full | import heap | heap used, queue full | heap left for the app |",
        "|" + "---|" * 18,
    ]
    for prof, d, c in rows:
        hold = (
            "hold, window %d, evidence %d B" % (prof["window"], prof.get("evidence_bytes", 1024))
            if prof.get("window")
            else "libddq's"
        )
        bo = boards.batch_options(prof)
        if bo:  # the app's BATCH_OPTIONS, with OUTBOX = "ddq_batch"
            hold += " (ddq_batch: window %d, evidence %d B)" % (bo["window"], bo["evidence_bytes"])
        staged = bool(prof.get("reclaim_step"))
        rec = "staged, reclaim_step %d" % prof["reclaim_step"] if staged else "inline"
        if d is not None:  # what the other mode would hold (--write derives both)
            k = d["inline_items"] if staged else d["staged_items"]
            rec += " (%s: %s)" % (
                "inline" if staged else "staged",
                "%s items" % "{:,}".format(k) if k >= 8 else "does not fit the heap",
            )
        out.append(
            "| %s | %s | %s | %s | %s | %s | %d × %d, %d | %s | %s | %d | **%s** | %s | %s (%s) | "
            "%.1f h (1 per %d s) | %s | %s | "
            "%s | %s |"
            % (
                prof["board"],
                prof["filesystem"],
                kb(prof["fs_bytes"]),
                kb(d["code_bytes"]),
                kb(prof["heap_bytes"]),
                kb(prof["app_heap_bytes"]),
                prof["segment_bytes"],
                prof["max_segments"],
                prof["max_payload_bytes"],
                hold,
                rec,
                c["payload_bytes"],
                "{:,}".format(prof["max_items"]),
                "%s (admits %s; heap fit %s)"
                % (d["bound"], "{:,}".format(d["admitted"]), "{:,}".format(d["heap_fit"])),
                "{:,}".format(c["cpython_items"]),
                "{:,}".format(c["libddq_items"]),
                c["cpython_items"] * c["period_ms"] / 3600000.0,
                c["period_ms"] // 1000,
                kb(c["stored_bytes"]),
                kb(c["import_heap"]),
                kb(c["heap_used_full"]),
                kb(c["heap_left"]),
            )
        )
    out += ["", render_raw([prof for prof, _d, _c in rows])]
    out += ["", SHARING, "", "Per board: `description` of the profile.", ""]
    for prof, _d, _c in rows:
        out.append(
            "- **%s** (%s, mpy-cross `%s`, network %s): %s"
            % (
                prof["board"],
                prof["port"],
                prof["mpy_arch"],
                "yes" if prof.get("network") else "no",
                prof["description"],
            )
        )
    return "\n".join(out) + "\n"


SHARING = """## Sharing the filesystem

ddq never asks the filesystem how much room is left: its bound is its options (SPEC C9). On a
filesystem that also holds other files (logs, settings, data an application writes), size the
queue for the room that stays free when those files are at their largest, not for what is free
today:

- The queue's files take at most 2 x max_segments x segment_bytes (the current generation and
  the one a compaction stages beside it), plus one segment_bytes (a tail cut's copy,
  `<segment>.reserve`, SPEC R12), plus a few hundred bytes (manifests, marker, lock; and
  `queue.index` once the segments hold index_bytes). On LittleFS count whole blocks: a segment
  takes ceil(segment_bytes / block) blocks or one more (the file's skip-list pointers), and the
  directory's metadata two blocks per twenty-odd segment names.
- Leave 3 LittleFS blocks and 2 more per 32 file names in the queue directory (1 FAT cluster)
  free beyond that. LittleFS writes copy-on-write: an append to a file needs a free block, and a
  full directory metadata pair splits into two new blocks, so a filesystem filled to the last
  block cannot take a claim or an ack, and the queue could never drain. When another writer fills
  the filesystem anyway, ddq's appends raise IOFailure (ENOSPC) and the queue fail-stops until room
  is freed; reopen it then (nothing durable is lost).
- So, roughly: max_segments <= (room for the queue - the spare - segment_bytes) //
  (2 x segment_bytes), each segment counted in whole blocks.
  `tools/board_capacity.py` measures exactly this on the profile's filesystem (fs_bytes less the
  code); for a shared filesystem, give the profile an fs_bytes less what the other files may take
  and run `tools/board_capacity.py --write --board NAME`."""


def kb(v):
    if v is None:
        return "—"
    return "%.1f KiB" % (v / 1024)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update profiles, apps, docs/BOARDS.md")
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if unreachable")
    ap.add_argument("--board", action="append", help="only this profile (repeatable)")
    ap.add_argument(
        "--raw",
        action="store_true",
        help="only the raw layout (raw_* keys, BOARDS.md's Raw layout): derive; --write them",
    )
    args = ap.parse_args(argv)
    if args.raw:
        return main_raw(args)
    names = args.board or boards.names()
    tmp = tempfile.mkdtemp(prefix="ddq-boardcap-")
    rows = []
    bad = []
    try:
        for name in names:
            prof = boards.load(name)
            sub = os.path.join(tmp, name)
            os.makedirs(sub)
            d = None
            if not args.check:
                d = derive(prof, sub)
                print(
                    "%s: max_segments %d, max_items %d (admitted %d: %s; heap fit %d: %s; "
                    "message %d B); reclaim_step %d (items inline %d, staged %d)"
                    % (
                        name,
                        d["max_segments"],
                        d["max_items"],
                        d["admitted"],
                        d["admitted_end"],
                        d["heap_fit"],
                        d["heap_end"],
                        d["payload_bytes"],
                        d["reclaim_step"],
                        d["inline_items"],
                        d["staged_items"],
                    )
                )
                if args.write:
                    prof = write_profile(prof, d)
            ok, c = check(prof, sub)
            print(
                "%s: max_items %d %s: CPython %d then %s; MicroPython %d then %s, and with the "
                "app's share kept drained and compacted: %s; import %s, heap left with the queue "
                "full %s"
                % (
                    name,
                    prof["max_items"],
                    "reachable" if ok else "NOT REACHABLE",
                    c["cpython_items"],
                    c["cpython_end"],
                    c["mp_items"],
                    c["mp_end"],
                    c["cycle"],
                    kb(c["import_heap"]),
                    kb(c["heap_left"]),
                )
            )
            if not ok:
                bad.append(name)
            rows.append((prof, d, c))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.write and not args.board:
        with open(DOC, "w") as f:
            f.write(render(rows))
        print("wrote %s" % DOC)
    return 1 if bad else 0


def main_raw(args):
    sys.path.insert(0, os.path.join(REPO, "tests"))  # tests/blockdev.py: the NOR model
    names = [n for n in (args.board or boards.names()) if "raw_bytes" in boards.load(n)]
    tmp = tempfile.mkdtemp(prefix="ddq-boardcap-")
    derived = {}
    try:
        for name in names:
            prof = boards.load(name)
            sub = os.path.join(tmp, name)
            os.makedirs(sub)
            d = derive_raw(prof, sub)
            derived[name] = d
            print(
                "%s raw: segment %d (%d blocks), max_segments %d, max_items %d (admitted %d: "
                "%s; heap fit %d: %s; import %s; then drained and compacted: %s); code %s on a "
                "%s filesystem"
                % (
                    name,
                    d["raw_segment_bytes"],
                    d["segment_blocks"],
                    d["raw_max_segments"],
                    d["raw_max_items"],
                    d["admitted"],
                    d["admitted_end"],
                    d["heap_fit"],
                    d["heap_end"],
                    kb(d["import_heap"]),
                    d["cycle"],
                    kb(d["code_bytes"]),
                    kb(prof["raw_fs_bytes"]),
                )
            )
            if d["code_bytes"] > prof["raw_fs_bytes"]:
                print("%s raw: THE CODE DOES NOT FIT raw_fs_bytes" % name)
            if not d["heap_fit"]:
                print("%s raw: the queue does not open in the heap model" % name)
            if args.write:
                write_raw(prof, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.write:
        write_raw_doc(render_raw([boards.load(n) for n in boards.names()]))
        print("wrote %s (Raw layout)" % DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
