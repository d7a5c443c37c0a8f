"""A real MicroPython heap running out (SPEC O23): the unix port with a small `-X heapsize`, ddq
from .mpy as a board runs it, fills a queue until the heap ends it. The fill must end with a ddq
error (NoMemory, or Full), never a raw MemoryError; close() must work or raise a ddq error; and
the directory must hold exactly what the fill was told was enqueued (a fail-stopped enqueue's
item may be there too, R20). tests/test_nomem.py injects the MemoryError at every point of a
script on both interpreters; this one is the heap itself."""

# EVIDENCE-OF: O23
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = os.path.join(ROOT, "port")
BIN = os.path.join(ROOT, ".venv", "bin")

FILL = """
import sys
sys.path[:] = [%r]
import ddq
out = []
try:
    q = ddq.Queue(%r, sync="none", clock=lambda: 1767225600000, segment_bytes=4096,
                  max_payload_bytes=64, max_items=1000000, max_segments=4096%s)
except Exception as e:
    print("RESULT open %%s 0 0" %% type(e).__name__)
    raise SystemExit
n = 0
end = "limit"
p = bytes(16)
try:
    while n < 1000000:
        q.enqueue(p)
        n += 1
except Exception as e:
    end = type(e).__name__
failed = q.stats().failed if end != "MemoryError" else -1
try:
    q.close()
    closed = "ok"
except Exception as e:
    closed = type(e).__name__
print("RESULT %%s %%s %%d %%d" %% (end, closed, n, 1 if failed else 0))
"""


def _mpy(tmp):
    d = os.path.join(tmp, "mpy")
    os.mkdir(d)
    for f in os.listdir(PORT):
        if f.endswith(".py"):
            subprocess.run(
                [os.path.join(BIN, "mpy-cross"), "-s", f, "-o", os.path.join(d, f[:-3] + ".mpy")]
                + [os.path.join(PORT, f)],
                check=True,
            )
    return d


@pytest.mark.parametrize("heap,extra", [("64K", ""), ("96K", ", window=16, evidence_bytes=1024")])
def test_a_fill_the_heap_ends_is_a_ddq_error_and_loses_nothing(tmp_path, heap, extra):
    sys.path.insert(0, PORT)
    import ddq

    mods = _mpy(str(tmp_path))
    q = str(tmp_path / "q")
    r = subprocess.run(
        [
            os.path.join(BIN, "micropython"),
            "-X",
            "heapsize=" + heap,
            "-c",
            FILL % (mods, q, extra),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, r.stdout[-2000:] + r.stderr[-2000:]
    end, closed, n, failed = line[0].split()[1:]
    n = int(n)
    assert end == "NoMemory", (end, closed, r.stderr[-2000:])  # the heap, not admission, ended it
    assert closed in ("ok", "NoMemory"), closed
    assert n > 1000, n
    # What is on disk: every enqueue that returned, in order, and at most the one that raised
    # (when it had appended its record: fail-stopped, R20).
    got = ddq.Queue(q, segment_bytes=4096, max_payload_bytes=64, max_items=1000000)
    seqs = [i.seq for i in got.items()]
    got.close()
    assert seqs[:n] == list(range(1, n + 1)), (seqs[:3], n)
    assert len(seqs) == n + (1 if failed == "1" and len(seqs) > n else 0), (len(seqs), n, failed)
