"""The emulator board of a test module (tests/host/test_host_pico.py, test_host_qemu.py): one
board per module, started through the project's CLI (`ddq board KIND start`), every pid it ran
kept, ended in the fixture's finally and checked gone (conftest.kill_board)."""

import json
import os

import pytest

from conftest import ddq, kill_board
from ddqhost import vboard


class Emulated:
    """A board of kind `kind` (pico, qemu) in state directory d: its tty, the pids it ran."""

    def __init__(self, kind, pid_key, d, timeout):
        self.kind, self.pid_key, self.timeout = kind, pid_key, timeout
        self.dir = d
        self.tty = os.path.join(d, "tty")
        self.pids = set()

    def start(self, *flags):
        r = ddq(
            "board", self.kind, "start", "--state-dir", self.dir, "--json", *flags,
            timeout=self.timeout,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        st = json.loads(r.stdout)
        self.pids.add(st[self.pid_key])
        return st

    def stop(self, image, size):
        """`ddq board KIND stop`: stopped with its image (a file of size bytes) saved, the process
        gone, and status says so (exit 3)."""
        r = ddq("board", self.kind, "stop", "--state-dir", self.dir, "--json", timeout=120)
        res = json.loads(r.stdout)
        assert r.returncode == 0 and res["stopped"] and res["saved"], r.stdout + r.stderr
        assert not vboard.pid_alive(res[self.pid_key])
        assert os.path.getsize(os.path.join(self.dir, image)) == size
        r = ddq("board", self.kind, "status", "--state-dir", self.dir)
        assert r.returncode == 3 and r.stdout.startswith("not running"), r.stdout
        return res


def fixture(kind, pid_key, timeout, kill, program):
    """A module-scoped fixture named kind: the board started --fresh, killed at the end (kill:
    the board module's kill) with every pid it ran gone, else the test fails naming program."""

    @pytest.fixture(scope="module", name=kind)
    def board(tmp_path_factory):
        b = Emulated(kind, pid_key, str(tmp_path_factory.mktemp(kind)), timeout)
        b.start("--fresh")
        try:
            yield b
        finally:
            assert kill_board(kill, b.dir, b.pids), "%s left running" % program

    return board
