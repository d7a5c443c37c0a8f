"""The pico board: an emulated Raspberry Pi Pico (RP2040) running the user's official MicroPython
RPI_PICO firmware under rp2040py (PyPI, MIT; `pip install 'ddq[pico]'`).

A real board's firmware, unchanged: 32-bit Cortex-M0+, its own heap, its own LittleFS on the
emulated flash (writes and erases included), boot.py and main.py run at a reset. ddq ships no
firmware: the user brings the .uf2 micropython.org publishes for the Pico (``--firmware`` or
$DDQ_PICO_FIRMWARE; docs/HOST.md "pico board"). rp2040py serves the board's USB console on a
pty, which mpremote, and so every `ddq` command, speaks to like a Pico's USB serial port. Power-on
runs main.py, as on a Pico; a `ddq` command that connects stops it (Ctrl-C). It runs at
emulation speed: code about 100 x slower than the chip (docs/HOST.md "pico board" has timings).

Layout of a state directory (``--state-dir``, default ``$DDQ_PICO_STATE_DIR`` or
``~/.local/state/ddq/pico``), 0700, every file 0600:

    state.json   {"pid", "argv", "pty", "link", "firmware", "image", ...} while running
    tty          symlink to the pty of the board's USB console
    rp2040py.log rp2040py's own output (the pty line)
    flash.img    the firmware's LittleFS region of the flash (1,441,792 bytes) as the last stop
                 left it; loaded at start (none: the firmware formats its filesystem at boot)

One process: rp2040py (this interpreter, `-m rp2040py`, a session of its own), started without a
shell; `stop` and `kill` signal the recorded pid only after /proc/PID/cmdline equals the recorded
argv exactly. `stop` is the emulated power-off: SIGTERM, on which rp2040py writes the flash's
filesystem region to flash.img as it is at that instant (what the board's LittleFS had
committed), then exits; the next start boots the firmware on that image. `kill` SIGKILLs it
without writing: the next start boots on the image of the last stop. `--fresh` drops flash.img.
The emulator spins one host core at 100 % while it runs: stop it after use.
"""

import importlib.util
import os
import re
import select
import sys
import time
from typing import Any

from . import vboard
from .errors import HostError

# rp2040py's layout of the RPI_PICO firmware's filesystem (rp2040py/utils/firmware_specs.json,
# "pico": fs_start 0xa0000, 352 blocks of 4096): what --dump-fs writes and --littlefs loads.
FS_BYTES = 352 * 4096
PTY_LINE = re.compile(rb"PTY REPL listening on (/dev/\S+)")
FIRMWARE_HELP = (
    "the official MicroPython .uf2 for the Raspberry Pi Pico (RPI_PICO, micropython.org/download/"
    "RPI_PICO): docs/HOST.md, pico board"
)
PTY_TIMEOUT = 60.0  # seconds for rp2040py's pty line (about 1 s)
BOOT_TIMEOUT = 60.0  # seconds for the firmware's first output (2-4 s here, under load)


class PicoError(HostError):
    """A pico-board operation failed; the message is one line for the user."""


BOARD = vboard.Emulator(
    "pico",
    "rp2040py",
    "pid",
    {"log": "rp2040py.log", "image": "flash.img"},
    extra=("console_answered",),
)
running_device = BOARD.running_device  # the cli: the device of a running board, or None


def kill(state_dir: str) -> dict[str, Any]:
    """SIGKILL rp2040py without saving the flash: the next start boots on the last stop's image."""
    return BOARD.kill(state_dir)


def check_firmware(firmware: str | None) -> str:
    """The absolute path of the firmware to boot (firmware, else $DDQ_PICO_FIRMWARE): an existing
    .uf2 file. Never a version tag: rp2040py would download one."""
    fw = BOARD.firmware(firmware, "UF2", FIRMWARE_HELP, PicoError)
    if not fw.endswith(".uf2"):
        raise PicoError("%s is not a .uf2 file (%s)" % (fw, FIRMWARE_HELP), code=2)
    return fw


def _wait_console(pty_path: str, proc: Any, log: str, timeout: float) -> bool:
    """Wait for the firmware to write to its USB console (a return every 2 s: the REPL answers
    with its banner and prompt, and an app that main.py runs at power-on prints what it prints;
    bytes typed before the console is up are lost, as on a Pico). False: nothing in timeout
    seconds (a main.py that prints nothing; it keeps running until a `ddq` command connects)."""
    fd = os.open(pty_path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        end = time.monotonic() + timeout
        nudge = 0.0
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise PicoError("rp2040py exited at boot: %s" % BOARD.tail(log))
            now = time.monotonic()
            if now >= nudge:
                try:
                    os.write(fd, b"\r")
                except BlockingIOError:
                    pass
                nudge = now + 2.0
            r, _w, _x = select.select([fd], [], [], 0.2)
            if r:
                try:
                    if os.read(fd, 4096):
                        return True
                except BlockingIOError:
                    continue
        return False
    finally:
        os.close(fd)


def start(
    state_dir: str,
    firmware: str | None = None,
    fresh: bool = False,
    timeout: float = PTY_TIMEOUT,
    boot_timeout: float = BOOT_TIMEOUT,
) -> dict[str, Any]:
    fw = check_firmware(firmware)
    if importlib.util.find_spec("rp2040py") is None:
        raise PicoError(
            "rp2040py is not installed here: pip install 'ddq[pico]' (rp2040py==0.3.6)"
        )
    p = BOARD.begin(state_dir, PicoError)
    if fresh and os.path.exists(p["image"]):
        os.remove(p["image"])
    if os.path.isfile(p["image"]) and os.path.getsize(p["image"]) != FS_BYTES:
        raise PicoError(
            "%s is %d bytes, not the %d-byte filesystem of a Pico: remove it or start with --fresh"
            % (p["image"], os.path.getsize(p["image"]), FS_BYTES)
        )
    # --image: a path that exists (checked above); a missing one would be taken for a version tag
    # and downloaded. --littlefs: loaded where it exists, else the firmware formats its flash.
    # --dump-fs: written on SIGTERM (stop). rp2040py's default log level: its progress lines
    # (the pty's among them), the emulator's own messages only at level error.
    argv = [
        sys.executable,
        "-m",
        "rp2040py",
        "micropython",
        "--board",
        "pico",
        "--image",
        fw,
        "--pty",
        "--littlefs",
        p["image"],
        "--dump-fs",
        p["image"],
    ]
    loaded = os.path.isfile(p["image"])
    proc = BOARD.spawn(argv, p)
    try:
        pty_path = BOARD.wait_pty(proc, p, PTY_LINE, timeout, PicoError)
        answered = _wait_console(pty_path, proc, p["log"], boot_timeout)
    except BaseException:
        proc.kill()  # nothing was written to the image yet: a failed start changes nothing
        proc.wait()
        raise
    BOARD.record(
        p, proc, pty_path, kind="pico", firmware=fw, image_loaded=loaded, console_answered=answered
    )
    return BOARD.status(state_dir)


def stop(state_dir: str, timeout: float = 60.0) -> dict[str, Any]:
    """The emulated power-off: SIGTERM; rp2040py writes the filesystem region to flash.img as
    it is at that instant and exits."""
    p, st, cur = BOARD.recorded(state_dir)
    if not cur["running"]:
        return dict(cur, stopped=False, saved=False)
    before = os.stat(p["image"]).st_mtime_ns if os.path.isfile(p["image"]) else None
    gone = BOARD.terminate(st, timeout)
    vboard.forget(p, BOARD.transient)
    saved = (
        gone
        and os.path.isfile(p["image"])
        and os.path.getsize(p["image"]) == FS_BYTES
        and os.stat(p["image"]).st_mtime_ns != before
    )
    if not saved:
        raise PicoError(
            "pico board stopped, but its flash could not be saved to %s: %s"
            % (p["image"], BOARD.tail(p["log"]))
        )
    return dict(cur, stopped=True, saved=True, image_bytes=FS_BYTES)


def command(
    action: str, state_dir: str | None, firmware: str | None = None, fresh: bool = False
) -> tuple[dict[str, Any], str, int]:
    """`ddq board pico ACTION`: (result, message, exit status)."""
    d = state_dir or BOARD.default_state_dir()
    if action == "start":
        res = start(d, firmware=firmware, fresh=fresh)
        return (
            res,
            "pico board running: device %s (pid %d, firmware %s)%s"
            % (
                res["device"],
                res["pid"],
                res["firmware"],
                ""
                if res["console_answered"]
                else "; its console said nothing in %.0f s (a silent main.py?)" % BOOT_TIMEOUT,
            ),
            0,
        )
    return BOARD.answer(
        action, d, stop, "powered off, flash saved to %s", "killed (flash not saved)"
    )
