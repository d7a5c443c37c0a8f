"""ddq's connect and idle timeouts hold on a device that stops answering (docs/HOST.md "Timeouts").

mpremote (pinned) opens the port without a read timeout and, on a /dev/pts pty (QEMU's UART),
blocks in read(1), so its own bounds never fire there; device.Device enforces them itself. The
"devices" here are os.openpty() pairs whose master end this test holds: one never answers, one
answers the raw REPL handshake and nothing else. The last test hangs a virtual board's run.
"""

import os
import threading
import time

import pytest

from conftest import Board, ddq, one_line_error
from ddqhost import device, vboard
from ddqhost.device import Device, DeviceTimeout


class FakePty:
    """The master end of a pty: a "device" that reads what it is sent and says nothing, or
    (handshake=True) answers Ctrl-A with the raw REPL banner and nothing else."""

    def __init__(self, handshake=False, link_dir=None):
        self.m, self.s = os.openpty()
        self.path = os.ttyname(self.s)
        if link_dir is not None:  # not under /dev/pts: mpremote polls instead of blocking
            link = os.path.join(str(link_dir), "tty")
            os.symlink(self.path, link)
            self.path = link
        self.received = bytearray()
        self.stop = False
        self.thread = threading.Thread(target=self._serve, args=(handshake,), daemon=True)
        self.thread.start()

    def _serve(self, handshake):
        import select

        while not self.stop:
            r, _, _ = select.select([self.m], [], [], 0.05)
            if not r:
                continue
            try:
                b = os.read(self.m, 4096)
            except OSError:
                return
            self.received += b
            if handshake and b"\x01" in b:
                os.write(self.m, b"raw REPL; CTRL-B to exit\r\n>")

    def close(self):
        self.stop = True
        self.thread.join(5)
        os.close(self.m)
        os.close(self.s)


@pytest.fixture
def silent():
    p = FakePty()
    try:
        yield p
    finally:
        p.close()


def test_board_probe_on_a_silent_pty_times_out(silent):
    # (the bound fired: without it the probe would wait for ever; no timed assert, which a
    # busy machine would fail)
    line = one_line_error(ddq("board", "probe", "--device", silent.path, timeout=600), 1)
    assert "no MicroPython raw REPL answered within 8 s" in line, line
    assert b"\x01" in silent.received  # mpremote did ask for the raw REPL


def test_connect_bound_holds_on_a_chatty_device(tmp_path):
    # A device that prints forever but never the banner: the bound is overall, not idle.
    m, s = os.openpty()
    stop = []

    def chatter():
        while not stop:
            try:
                os.write(m, b"noise ")
            except OSError:
                return
            time.sleep(0.01)

    t = threading.Thread(target=chatter, daemon=True)
    t.start()
    try:
        with pytest.raises(DeviceTimeout, match="within 1 s"):
            Device(os.ttyname(s), soft_reset=False, timeout=1)
    finally:
        stop.append(1)
        t.join(5)
        os.close(m)
        os.close(s)


@pytest.mark.parametrize("where", ["pts", "symlink"])
def test_exec_on_a_device_that_stops_answering_times_out(where, tmp_path, monkeypatch):
    # The handshake is answered, then nothing: the probe's exec waits in mpremote's read(2) of
    # the raw-paste reply (any port) or read(1) (a /dev/pts pty) -- bounded by EXEC_IDLE_TIMEOUT.
    monkeypatch.setattr(device, "EXEC_IDLE_TIMEOUT", 1.0)
    fake = FakePty(handshake=True, link_dir=tmp_path if where == "symlink" else None)
    try:
        # The handshake's bound is long: the fake answers it when its thread runs, which a
        # busy machine may delay past a short one.
        dev = Device(fake.path, soft_reset=False, timeout=120)
        with pytest.raises(DeviceTimeout, match="no answer from the device for 1 s"):
            dev.probe()
        assert dev.hung
        with pytest.raises(DeviceTimeout, match="stopped answering earlier"):
            dev.exec("print(1)")  # no second wait
        dev.close()  # one recovery try (Ctrl-C, raw REPL again), bounded too: it returns
        assert b"\r\x03" in fake.received  # the device was asked to interrupt what it ran
    finally:
        fake.close()


HANG = (
    b"import time\ndef test_hang():\n    print('hanging')\n"
    b"    while True:\n        time.sleep(1)\n"
)


def test_ddq_test_on_a_hung_run_times_out(tmp_path):
    # A test that hangs silently on a virtual board reached through its /dev/pts pty (where
    # mpremote blocks in read(1)): --idle-timeout bounds the run, the error says so.
    b = Board(str(tmp_path / "vb"))
    st = b.start()
    try:
        with Device(st["pty"], soft_reset=False) as dev:
            dev.mkdir(":/flash/lib", exist_ok=True)
            dev.write_file(":/flash/lib/test_zz_hang.py", HANG)
        r = ddq(
            "test",
            "--device",
            st["pty"],
            "--resume",
            "--idle-timeout",
            "20",
            "test_zz_hang",
            timeout=600,
        )
        # 20 s, not less: the bound counts any silence, and a busy machine may keep the
        # board quiet for seconds before the test prints "hanging". No timed assert.
        line = one_line_error(r, 1)
        assert "no output from the device for 20 s" in line and "--idle-timeout" in line, line
        assert "hanging" in r.stdout
    finally:
        vboard.kill(b.dir)
        for pid in b.pids:
            if vboard.pid_alive(pid):
                os.kill(pid, 9)
        assert b.all_gone()
