"""The qemu board: the user's bare-metal MicroPython firmware (MPS2-AN385, Cortex-M3) under
qemu-system-arm.

A real board's firmware, not the unix port: 32-bit, the heap its build gave it, no socket, no
_thread. ddq ships no firmware: the user brings one (``--firmware`` or $DDQ_QEMU_FIRMWARE;
docs/HOST.md "qemu board" says what it must have). MicroPython's ports/qemu mounts no filesystem
of its own, so after every reset ddq runs BOOT over the raw REPL: where nothing is mounted at /,
it mounts a VfsLfs2 on a RAM block device written in Python over the board's PSRAM at
RAMDISK_ADDR (formatted where it holds no filesystem yet). Its UART is a pty (`-serial pty`),
which mpremote, and so every `ddq` command, speaks to like a USB serial port; unlike the virtual
board it soft-resets like a real board, so `ddq` resets it on connect.

Layout of a state directory (``--dir``, default ``$DDQ_QEMU_STATE_DIR`` or
``~/.local/state/ddq/qemu``), 0700, every file 0600:

    state.json   {"qemu_pid", "argv", "pty", "link", "firmware", "image", ...} while running
    tty          symlink to the pty of the board's UART
    qemu.log     qemu's output (the pty line)
    qmp.sock     qemu's control socket (QMP), used by stop to save the RAM disk
    disk.img     the RAM disk (14 MiB at 0x21000000) as saved by the last stop; loaded at start

One process: qemu itself (its own session), started without a shell; `stop` and `kill` signal the
recorded pid only after /proc/PID/cmdline equals the recorded argv exactly (no other process is
ever signalled). `stop` pauses the CPU, saves the RAM disk to disk.img (the board's flash as it is
at that instant: what the board's LittleFS had committed), then quits qemu; `kill` SIGKILLs it
without saving (the next start loads the image of the last stop). `--fresh` starts with a blank
RAM disk (ddq's boot code formats it). qemu spins one host core at 100 % while it runs: stop it
after use.
"""

import json
import os
import re
import shutil
import socket
from typing import Any

from . import vboard
from .errors import HostError

RAMDISK_ADDR = 0x21000000  # the MPS2-AN385's 16 MiB PSRAM, which the firmware's image leaves alone
RAMDISK_BLOCK = 4096
RAMDISK_BYTES = RAMDISK_BLOCK * 3584  # 14 MiB
PTY_LINE = re.compile(rb"char device redirected to (/dev/pts/\d+)")
FIRMWARE_HELP = (
    "MicroPython >= 1.25 ports/qemu built for MPS2_AN385 with VfsLfs2: docs/HOST.md, qemu board"
)

# ddq's boot code (MicroPython), run over the raw REPL after every reset of the qemu board:
# _ddq_boot(buf) mounts a VfsLfs2 at point on a block device over buf (the PSRAM, through
# uctypes.bytearray_at), formatting it where it holds no filesystem; nothing where the firmware
# mounted one there itself. Returns 0 (already mounted), 1 (mounted) or 2 (formatted, mounted).
# tests/host/test_host_qemu_boot.py runs it on the unix port.
BOOT = """
def _ddq_boot(buf, point="/", bs=4096):
    import vfs
    try:
        points = [m[1] for m in vfs.mount()]
    except TypeError:  # MicroPython < 1.25: no listing of the mounts
        points = []
    if point in points:
        return 0
    lfs = getattr(vfs, "VfsLfs2", None)
    if lfs is None:
        raise OSError("ddq boot: this firmware has no vfs.VfsLfs2 (docs/HOST.md, qemu board)")

    class RAMBlockDev:
        def __init__(self, buf, bs):
            self.m = memoryview(buf)
            self.bs = bs
            self.n = len(buf) // bs

        def readblocks(self, n, b, off=0):
            a = n * self.bs + off
            b[:] = self.m[a : a + len(b)]

        def writeblocks(self, n, b, off=0):
            a = n * self.bs + off
            self.m[a : a + len(b)] = b

        def ioctl(self, op, arg):
            if op == 4:
                return self.n
            if op == 5:
                return self.bs
            return 0

    bd = RAMBlockDev(buf, bs)
    try:
        vfs.mount(lfs(bd), point)
        return 1
    except OSError:
        lfs.mkfs(bd)
        vfs.mount(lfs(bd), point)
        return 2
"""


def boot_code() -> str:
    """What ddq runs on the qemu board after each reset: BOOT over the PSRAM, then its result
    printed as `ddq-boot N` (N as _ddq_boot returns it)."""
    return BOOT + (
        "import uctypes\n"
        "print('ddq-boot', _ddq_boot(uctypes.bytearray_at(0x%x, %d), '/', %d))\n"
        "del _ddq_boot\n" % (RAMDISK_ADDR, RAMDISK_BYTES, RAMDISK_BLOCK)
    )


def is_qemu_device(port: str) -> bool:
    """port is the UART of a running qemu board: STATE_DIR/tty of a state directory whose
    state.json names qemu, or the pty of the running board of the default state directory."""
    real = os.path.realpath(port)
    st = vboard.read_state(os.path.dirname(os.path.abspath(port))) or {}
    if "qemu_pid" in st and st.get("pty") == real:
        return True
    st = vboard.read_state(BOARD.default_state_dir()) or {}
    return "qemu_pid" in st and st.get("pty") == real


class QemuError(HostError):
    """A qemu-board operation failed; the message is one line for the user."""


BOARD = vboard.Emulator(
    "qemu",
    "qemu",
    "qemu_pid",
    {"log": "qemu.log", "qmp": "qmp.sock", "image": "disk.img"},
    transient=("qmp",),
)
running_device = BOARD.running_device  # the cli: the device of a running board, or None


def find_qemu(exe: str | None = None) -> str:
    exe = exe or os.environ.get("DDQ_QEMU") or "qemu-system-arm"
    found = shutil.which(exe)
    if not found:
        raise QemuError(
            "%s not found: apt-get install qemu-system-arm (Debian/Ubuntu), or pass --qemu EXE"
            % exe
        )
    return found


def start(
    state_dir: str,
    firmware: str | None = None,
    qemu: str | None = None,
    fresh: bool = False,
    timeout: float = 15.0,
) -> dict[str, Any]:
    p = BOARD.begin(state_dir, QemuError)
    fw = BOARD.firmware(firmware, "ELF", FIRMWARE_HELP, QemuError)
    exe = find_qemu(qemu)
    if len(p["qmp"].encode()) > 100:
        raise QemuError("state directory path too long for qemu's control socket: %s" % p["dir"])
    if fresh and os.path.exists(p["image"]):
        os.remove(p["image"])
    argv = [
        exe,
        "-machine",
        "mps2-an385",
        "-display",
        "none",
        "-monitor",
        "none",
        "-semihosting",
        "-kernel",
        fw,
        "-serial",
        "pty",
        "-qmp",
        "unix:%s,server=on,wait=off" % p["qmp"],
    ]
    if os.path.isfile(p["image"]):
        if os.path.getsize(p["image"]) != RAMDISK_BYTES:
            raise QemuError(
                "%s is %d bytes, not a %d-byte RAM disk: remove it or start with --fresh"
                % (p["image"], os.path.getsize(p["image"]), RAMDISK_BYTES)
            )
        argv += ["-device", "loader,file=%s,addr=0x%x,force-raw=on" % (p["image"], RAMDISK_ADDR)]
    proc = BOARD.spawn(argv, p)
    try:
        pty_path = BOARD.wait_pty(proc, p, PTY_LINE, timeout, QemuError)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    BOARD.record(
        p,
        proc,
        pty_path,
        firmware=fw,
        image_loaded="-device" in argv,
        boot="ddq",  # Device runs boot_code() after each reset
    )
    return BOARD.status(state_dir)


def _qmp(path: str, commands: list[dict[str, Any]], timeout: float = 10.0) -> None:
    """Send QMP commands in order, each answered by {"return": ...} before the next."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        f = s.makefile("rwb")
        greeting = f.readline(65536)
        if b'"QMP"' not in greeting:
            raise QemuError("qemu's control socket gave no QMP greeting")
        for cmd in [{"execute": "qmp_capabilities"}] + commands:
            f.write(json.dumps(cmd).encode() + b"\n")
            f.flush()
            for _ in range(100):  # events ({"event": ...}) may come first
                line = f.readline(65536)
                if not line:
                    if cmd["execute"] == "quit":
                        return
                    raise QemuError("qemu closed its control socket at %s" % cmd["execute"])
                try:
                    r = json.loads(line)
                except ValueError:
                    raise QemuError("qemu's control socket sent a line that is not JSON") from None
                if not isinstance(r, dict) or "event" in r:
                    continue
                if "error" in r:
                    raise QemuError("qemu refused %s: %.200s" % (cmd["execute"], r["error"]))
                break
    except OSError as e:
        raise QemuError("qemu's control socket: %s" % e) from None
    finally:
        s.close()


def stop(state_dir: str, save: bool = True, timeout: float = 10.0) -> dict[str, Any]:
    """Pause the CPU, save the RAM disk to STATE_DIR/disk.img (save=True), quit qemu."""
    p, st, cur = BOARD.recorded(state_dir)
    if not cur["running"]:
        return dict(cur, stopped=False, saved=False)
    saved = False
    if save:
        tmp = p["image"] + ".tmp"
        try:
            _qmp(
                p["qmp"],
                [
                    {"execute": "stop"},
                    {
                        "execute": "pmemsave",
                        "arguments": {"val": RAMDISK_ADDR, "size": RAMDISK_BYTES, "filename": tmp},
                    },
                ],
                timeout,
            )
            if os.path.getsize(tmp) == RAMDISK_BYTES:
                os.replace(tmp, p["image"])
                saved = True
        except (QemuError, OSError):
            pass
    BOARD.terminate(st, timeout)
    vboard.forget(p, BOARD.transient)
    if save and not saved:
        raise QemuError(
            "qemu board stopped, but its RAM disk could not be saved to %s" % p["image"]
        )
    return dict(cur, stopped=True, saved=saved)


def kill(state_dir: str) -> dict[str, Any]:
    """SIGKILL qemu without saving the RAM disk: what was written since the last stop is lost."""
    return BOARD.kill(state_dir)


def command(
    action: str,
    state_dir: str | None,
    firmware: str | None = None,
    qemu: str | None = None,
    fresh: bool = False,
) -> tuple[dict[str, Any], str, int]:
    """`ddq board qemu ACTION`: (result, message, exit status)."""
    d = state_dir or BOARD.default_state_dir()
    if action == "start":
        res = start(d, firmware=firmware, qemu=qemu, fresh=fresh)
        return (
            res,
            "qemu board running: device %s (pid %d, firmware %s)"
            % (res["device"], res["qemu_pid"], res["firmware"]),
            0,
        )
    return BOARD.answer(
        action, d, stop, "stopped, RAM disk saved to %s", "killed (RAM disk not saved)"
    )
