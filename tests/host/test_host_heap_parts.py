"""Which of ddq's parts stay loaded in a board's small heap (docs/DESIGN.md §4.1): ddq.py drops
its open-time code (ddq_recover) after the open, and ddq_compact after a compaction that the
queue's writes ran (ddq._compact) (a board compacts once a region fills; the heap it frees
is the app's between compactions), unless a method of it is attached to Queue (q.compact(),
q.purge()). In a large heap both stay. Run on the unix port with port/ compiled to .mpy, as a
board holds it (compiling ddq.py from source needs more heap than running it)."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "host"))
from ddqhost import transfer, vboard  # noqa: E402

SCRIPT = """
import os, sys
sys.path[:] = [sys.argv[1]]
import ddq
d = sys.argv[2]
q = ddq.Queue(d, segment_bytes=1024, max_segments=3, max_items=64, max_payload_bytes=128,
              sync="none", clock=lambda: 1767225600000)
for i in range(40):  # acks fill the segments: the writes compact (generation 1, 2, ...)
    q.enqueue(b"x" * 100)
    q.ack(q.claim(1000).seq)
gens = [n for n in os.listdir(d) if n.startswith("generation-")]
print(len(gens) > 0, "ddq_compact" in sys.modules, "ddq_recover" in sys.modules)
q.compact()  # attached to Queue now: it stays
print("ddq_compact" in sys.modules)
q.close()
"""


@pytest.mark.parametrize("heap,small", [("128K", True), ("1M", False)])
def test_compaction_code_is_dropped_after_a_compaction_in_a_small_heap(tmp_path, heap, small):
    mods = tmp_path / "mpy"
    mods.mkdir()
    for m in ("ddq", "ddq_recover", "ddq_compact", "ddq_admit", "ddq_extra", "ddq_cut"):
        transfer.mpy_cross(os.path.join(REPO, "port", m + ".py"), str(mods / (m + ".mpy")))
    (tmp_path / "s.py").write_text(SCRIPT)
    r = subprocess.run(
        [vboard.default_micropython(), "-X", "heapsize=" + heap, str(tmp_path / "s.py")]
        + [str(mods), str(tmp_path / "q")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr + r.stdout
    first, after = r.stdout.split("\n")[0:2]
    # compacted; ddq_compact and ddq_recover gone in the small heap, both kept in the large one
    assert first == ("True False False" if small else "True True True"), r.stdout
    assert after == "True", r.stdout
