# Pending items that fit in a board-sized heap (DESIGN §4.1, BENCHMARKS row 5c): run by
# bench/run.py as
#
#   micropython -X heapsize=64K bench/mp_fit.py MPY_DIR QUEUE_DIR [PAYLOAD [LIMIT]]
#
# Kept tiny and apart from mp_bench.py (whose own bytecode would take a board heap's worth):
# imports ddq from MPY_DIR alone, opens a queue in QUEUE_DIR (an existing, empty directory) with
# board-like options and enqueues PAYLOAD-byte items until the first MemoryError, Full or LIMIT.
# Prints "RESULT import_ok import_heap free_after_import items end".
import gc
import sys

mods, qdir = sys.argv[1], sys.argv[2]
payload = int(sys.argv[3]) if len(sys.argv) > 3 else 16
limit = int(sys.argv[4]) if len(sys.argv) > 4 else 1000000
sys.path.clear()
sys.path.append(mods)
gc.collect()
m0 = gc.mem_alloc()
try:
    import ddq
except MemoryError:
    print("RESULT 0 0 0 0 import")
    raise SystemExit from None
gc.collect()
m1 = gc.mem_alloc()
free1 = gc.mem_free()
n = 0
end = "limit"
q = None
try:
    q = ddq.Queue(
        qdir,
        sync="none",
        clock=lambda: 1767225600000,
        segment_bytes=4096,
        max_payload_bytes=64,
        max_items=1000000,
        max_segments=4096,
    )
    p = bytes(payload)
    while n < limit:
        q.enqueue(p)
        n += 1
except (MemoryError, ddq.NoMemory) as e:  # ddq's own ops raise NoMemory (SPEC O23)
    end = type(e).__name__ if q is not None else "open"
except ddq.Full:
    end = "Full"
q = None
gc.collect()
print("RESULT 1 %d %d %d %s" % (m1 - m0, free1, n, end))
