# The largest single allocation a reopen needs (DESIGN §4.1, BENCHMARKS row 5h): run by
# bench/run.py as
#
#   micropython -X heapsize=16M bench/mp_hole.py MPY_DIR QUEUE_DIR K [compact]
#
# Imports ddq from MPY_DIR, then chops the free heap into holes of about K bytes (live 16-byte
# blocks between them; any longer free run filled), then opens the queue in QUEUE_DIR (made by
# mp_bench.py part `reopen` fill=1). A reopen that needs one allocation larger than K fails with
# MemoryError. With `compact`: the queue is opened in the whole heap, its older half acked, then
# the heap chopped and compact() run (QUEUE_DIR is modified: pass a copy). Kept apart from
# mp_bench.py: in that process the same open exhausted the heap.
# Prints "RESULT ok|fail holes items-or-error".
import gc
import sys

mods, qdir, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, mods)
import ddq  # noqa: E402


def chop_heap(k):
    # Leave the free heap as holes of about k bytes each, separated by live 16-byte blocks: an
    # allocation larger than a hole cannot be served (first fit needs one contiguous run).
    gc.collect()
    cap = 1 << 16
    holes = [None] * cap
    pins = [None] * cap
    i = 0
    try:
        while i < cap:
            holes[i] = bytearray(k - 64)  # with its object header: about k bytes
            pins[i] = bytearray(16)
            i += 1
    except MemoryError:
        pass
    for j in range(i):
        holes[j] = None
    gc.collect()
    # Any run of free heap longer than a hole (left by startup, merged neighbours) is filled
    # with live blocks, largest first, so that no free run exceeds about k bytes.
    fill = [None] * 4096
    j = 0
    size = 1 << 20
    while size > k:
        try:
            while j < 4096:
                fill[j] = bytearray(size)
                j += 1
        except MemoryError:
            pass
        size = size // 2 if size // 2 > k else (k + 64 if size > k + 64 else 0)
    gc.collect()
    return (pins, fill, holes), i  # all kept: a freed list would be one big free run


OPTS = {"segment_bytes": 4096, "max_payload_bytes": 64, "max_items": 1000000, "max_segments": 4096}
if len(sys.argv) > 4 and sys.argv[4] == "compact":
    # compact(): open in the whole heap, ack the older half, then chop and compact.
    q = ddq.Queue(qdir, sync="none", clock=lambda: 1767225600000, index_bytes=1 << 40, **OPTS)
    for _ in range(q.stats().total_items // 2):
        q.ack(q.claim(30000).seq)
    gc.collect()
    keep, holes = chop_heap(k)
    try:
        q.compact()
        n = q.stats().total_items
        print("RESULT ok %d %d" % (holes, n))
    except (MemoryError, ddq.NoMemory) as e:  # (NoMemory: SPEC O23)
        print("RESULT fail %d %s" % (holes, e))
    raise SystemExit
keep, holes = chop_heap(k)
try:
    q = ddq.Queue(qdir, sync="none", clock=lambda: 1767225600000, index_bytes=1 << 40, **OPTS)
    n = q.stats().total_items
    q.close()
    print("RESULT ok %d %d" % (holes, n))
except (MemoryError, ddq.NoMemory) as e:
    print("RESULT fail %d %s" % (holes, e))
