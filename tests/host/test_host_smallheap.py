"""`ddq test` on a board with a small heap (issue 14, target 3): a virtual board started with a
140 KiB MicroPython heap (the qemu Cortex-M3 port's default) runs shared-suite modules one
session each (--each), the suite and port/ compiled to .mpy on the host (--mpy: compiling a large
test module from source needs more heap than running it).

Modules that do not fit yet (measured, 140 KiB, --mpy, each on a fresh board): test_heapalloc
(its steady-state test allocates one 62,720-byte block), test_index (10 of 14 fail: 4 KiB
allocations in a fragmented heap), test_outbox (import of ddq + ddq_outbox + the test module:
MemoryError), test_interop (the unix port dies printing a MemoryError in test_fixture_basic).
"""

import os
import re

import pytest

from conftest import ddq
from ddqhost import vboard

MODULES = ["test_capacity", "test_spec", "test_support"]


@pytest.fixture
def small_board(tmp_path):
    d = str(tmp_path / "vb140")
    st = vboard.start(d, heapsize="140K")
    pids = {st["bridge_pid"], st["micropython_pid"]}
    try:
        yield os.path.join(d, "tty")
    finally:
        vboard.kill(d)
        for pid in pids:
            if vboard.pid_alive(pid):
                os.kill(pid, 9)


def test_suite_modules_on_a_140k_heap_one_session_each(small_board):
    r = ddq("test", "--device", small_board, "--mpy", "--each", *MODULES, timeout=600)
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr
    heaps = [int(x) for x in re.findall(r"device heap free \d+ of (\d+)", out)]
    assert len(heaps) == len(MODULES) and all(h < 150 * 1024 for h in heaps), heaps
    last = out.strip().splitlines()[-1]
    assert re.match(r"ddq test --each: posix: \d+ passed, 0 failed", last), last


def test_ramdisk_sized_for_the_heap(small_board):
    # --ramdisk-kb sizes mprun's RAM disk (--blocks): 24 KiB of LittleFS fits beside ddq.
    r = ddq("test", "--device", small_board, "--mpy", "--fs", "lfs2", "--ramdisk-kb", "24",
            "-k", "test_raises", "test_support", timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "lfs2: 2 passed, 0 failed"


def test_ramdisk_needs_a_ram_filesystem(small_board):
    r = ddq("test", "--device", small_board, "--ramdisk-kb", "24", "test_support")
    assert r.returncode == 1 and "needs --fs lfs2" in r.stderr
