# The heap `import ddq` costs, measured in a fresh, small interpreter (DESIGN §4.1; BENCHMARKS rows
# 9, 9b, 9o-9e).
#
# On its own so that nothing but this script is interned before the import: an imported .mpy
# interns its names into the qstr pools, and a pool is allocated only when the last one is
# full; a big script (mp_bench.py) leaves room in its pools that ddq's names would then fill
# without allocating, which reads as a smaller import (20.5 KB where a board's main.py that
# imports ddq first pays 24.1 KB). Usage: micropython mp_import.py imports path=DIR|romfs=IMG
# [also=mod,mod]; prints RESULT {json}.
import gc
import sys

a = {"path": "", "romfs": "", "also": ""}
for kv in sys.argv[2:]:
    k, _, v = kv.partition("=")
    a[k] = v
path, n = a["path"], 0
if a["romfs"]:
    import os

    import vfs

    f = open(a["romfs"], "rb")
    img = f.read()
    f.close()
    n = len(img)
    vfs.mount(vfs.VfsRom(img), "/rom")
    os.chdir("/")
    path = "/rom"
sys.path.clear()
sys.path.append(path)
gc.collect()
gc.collect()
m0 = gc.mem_alloc()
import ddq  # noqa: E402,F401

gc.collect()
gc.collect()
m1 = gc.mem_alloc()
more = {}
for name in [x for x in a["also"].split(",") if x]:  # each one's increment after ddq
    gc.collect()
    m2 = gc.mem_alloc()
    __import__(name)
    gc.collect()
    more[name] = gc.mem_alloc() - m2
print(
    'RESULT {"path": "%s", "romfs": "%s", "romfs_bytes": %d, "heap": %d, "also": {%s}}'
    % (a["path"], a["romfs"], n, m1 - m0, ", ".join('"%s": %d' % (k, more[k]) for k in more))
)
