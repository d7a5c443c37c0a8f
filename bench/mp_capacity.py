# Rows 5c: pending items that fit in a board-sized heap with ddq's default options
# (max_items 1,000,000), run by bench/run.py as
#
#   micropython -X heapsize=128K bench/mp_capacity.py MPY_DIR QUEUE_DIR
#
# A process of its own that holds ddq alone, like bench/mp_fit.py (its board options: rows
# "5c (new)"; that script is left as it is, since its own bytecode decides those rows too):
# mp_bench.py's bytecode, compiled from source, took ~32 KiB of a 128 KiB heap.
# Prints "RESULT free_after_open items end", the free heap read after the open, collected.
import gc
import sys

sys.path[:] = [sys.argv[1]]
import ddq

items = 0
free = -1
how = "limit"
try:
    q = ddq.Queue(sys.argv[2], sync="none", clock=lambda: 1767225600000, max_items=1000000)
    gc.collect()
    free = gc.mem_free()
    b = bytes(16)
    while items < 1000000:
        q.enqueue(b)
        items += 1
except (MemoryError, ddq.NoMemory, ddq.Full) as e:  # NoMemory: SPEC O23
    how = type(e).__name__ if free >= 0 else "open"
q = None
print("RESULT %d %d %s" % (free, items, how))
