"""The one module that talks to mpremote: a small Transport adapter for the ddq host tools.

mpremote's Python API is undocumented, so the version is pinned (PINNED_MPREMOTE) and every call
used here is exercised by tests/host. Device-side snippets stay tiny; device errno errors come back
as CPython OSError subclasses (FileNotFoundError, ...). Device paths may carry mpremote's ``:``
prefix.

Filesystem: mpremote's Transport.fs_* where it is as fast and nothing comes back to parse (mkdir,
remove: one exec each, as before). Kept here, where ours wins (measured on the virtual board, the
unix port over a pty, best of 3; docs/HOST.md "device.py and mpremote"):
- read_file / write_file: mpremote's fs_readfile/fs_writefile move 256 bytes per round trip (an
  eval, or an exec of a bytes repr, each). Here a file is read with one exec that prints base64
  lines, and written in 2 KiB base64 chunks (one exec each): 64 KiB write 0.42 s vs 2.18 s (5.2x),
  read 0.73 s vs 3.64 s (5.0x); 256 KiB write 1.65 s vs 8.46 s (5.1x), read 3.21 s vs 9.90 s
  (3.1x).
- stat, listdir, sha256 (and hash_dir, which mpremote has not): mpremote parses with
  ast.literal_eval too, but reads a reply of any length (a device can fill the host's memory)
  and checks no shape (a wrong one is a TypeError traceback), and fs_stat/fs_hashfile take two
  round trips where ours take one; fs_readfile would also read for ever from a device that never
  ends the file. Issue 13's rules (bounded, literal_eval, shape-checked, one line) need ours.
- rename: mpremote has no fs_rename.
"""

import ast
import binascii
import contextlib
import errno
import io
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

PINNED_MPREMOTE = "1.29.0"

from importlib.metadata import PackageNotFoundError, version as _pkg_version

from mpremote.mp_errno import MP_ERRNO_TABLE  # type: ignore[import-untyped]
from mpremote.transport import (  # type: ignore[import-untyped]
    Transport,
    TransportError,
    TransportExecError,
)
from mpremote.transport_serial import (  # type: ignore[import-untyped]
    PyboardCommand,
    SerialTransport,
    fs_hook_code,
)

from .errors import HostError

READ_CHUNK = 1536  # bytes per base64 line when reading (2048 characters on the wire)
MAX_REPLY = 1 << 20  # bytes of a reply the host parses (a listing of thousands of files fits)
WRITE_CHUNK = 2048  # bytes per exec when writing
RUN_IDLE_TIMEOUT = 300  # seconds without output before a long run is declared hung
EXEC_IDLE_TIMEOUT = 10.0  # seconds a short exec may wait for a byte (mpremote's own exec bound)
WRITE_TIMEOUT = 10.0  # seconds a write may wait for room (a device that stopped reading)
_READ_SLICE = 0.2  # pyserial's own read timeout: a read returns at least this often


class DeviceError(HostError):
    """A device or transport failure; str() is one line for the user."""


class DeviceReplyError(DeviceError):
    """The device answered something the host does not accept (never evaluated, only parsed)."""


class DeviceTimeout(DeviceError):
    """The device did not answer within a bound (connect, exec or run idle timeout)."""


class DeviceExecError(DeviceError):
    """Code raised a non-OSError exception on the device; .exc_line is its last traceback line."""

    def __init__(self, exc_line: str, output: str = "") -> None:
        super().__init__(exc_line)
        self.exc_line = exc_line
        self.output = output


def check_mpremote_version() -> str | None:
    """Return the installed mpremote version; raise DeviceError if it is not the pinned one."""
    try:
        v = _pkg_version("mpremote")
    except PackageNotFoundError:
        raise DeviceError(
            "mpremote is not installed (pip install mpremote==%s)" % PINNED_MPREMOTE
        ) from None
    if v != PINNED_MPREMOTE and not os.environ.get("DDQ_MPREMOTE_UNPINNED"):
        raise DeviceError(
            "mpremote %s is installed but ddq is tested with %s (pip install mpremote==%s, "
            "or set DDQ_MPREMOTE_UNPINNED=1 to try anyway)" % (v, PINNED_MPREMOTE, PINNED_MPREMOTE)
        )
    return v


# mpremote's device side of a mount waits 1 s for each reply from the host (`ipoll(1000)` in
# RemoteCommand.poll_in, transport_serial.fs_hook_code) and then gives up with "timeout waiting
# for remote": on a busy host, or a board under qemu, one reply can take longer (docs/HOST.md,
# "Testing on a board"). The host side keeps its own bound (EXEC_IDLE_TIMEOUT), so the device
# may wait as long: mount_local sends mpremote's code unchanged, then this, ddq's own, which
# gives its RemoteCommand a poll_in that waits MOUNT_REPLY_MS (a class that has none: mpremote's
# as it is). Nothing rewrites mpremote's source.
MOUNT_REPLY_MS = int(EXEC_IDLE_TIMEOUT * 1000)
PATIENT_POLL_CODE = (
    """\
def _ddq_poll_in(self):
 for _ in self.poller.ipoll(%d):
  return
 self.end()
 raise Exception('timeout waiting for remote')
if hasattr(RemoteCommand, 'poll_in'):
 RemoteCommand.poll_in = _ddq_poll_in
del _ddq_poll_in
"""
    % MOUNT_REPLY_MS
)


def dpath(path: str) -> str:
    """Device path without mpremote's ':' prefix; '' means the current directory."""
    if path.startswith(":"):
        path = path[1:]
    if len(path) > 1:
        path = path.rstrip("/")
    return path or "."


def djoin(a: str, b: str) -> str:
    a = dpath(a)
    if a == ".":
        return b
    return a + "/" + b if not a.endswith("/") else a + b


# ---------------------------------------------------------------- replies
#
# Everything a device prints is untrusted (any boot.py or firmware can replace repr): a reply is
# parsed with ast.literal_eval only (never eval/exec/pickle), bounded in size, and checked for the
# exact shape the caller expects before any of it is used. Each failure is one DeviceReplyError
# line.

_HEX64 = re.compile(r"[0-9a-f]{64}")


def parse_reply(out: bytes, what: str, check: Callable[[Any], bool] | None = None) -> Any:
    """The Python literal the device printed, checked by check(value); DeviceReplyError
    otherwise."""
    if len(out) > MAX_REPLY:
        raise DeviceReplyError(
            "reply to %s from the device is too long (%d bytes)" % (what, len(out))
        )
    try:
        val = ast.literal_eval(out.decode("utf-8").strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError):
        raise DeviceReplyError(
            "unexpected reply to %s from the device: %r" % (what, out[:80])
        ) from None
    if check is not None and not check(val):
        raise DeviceReplyError(
            "reply to %s from the device has the wrong shape: %r" % (what, out[:80])
        )
    return val


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_str(v: Any, limit: int = 4096) -> bool:
    return isinstance(v, str) and len(v) <= limit


def is_sha256(v: Any) -> bool:
    return isinstance(v, str) and _HEX64.fullmatch(v) is not None


def _is_probe(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and set(v) == {"name", "version", "build", "mpy", "machine", "platform", "cwd"}
        and all(is_str(v[k], 256) for k in ("name", "build", "machine", "platform", "cwd"))
        and isinstance(v["version"], tuple)
        and len(v["version"]) <= 3
        and all(is_int(x) for x in v["version"])
        and (v["mpy"] is None or is_int(v["mpy"]))
    )


def _is_stat(v: Any) -> bool:
    return isinstance(v, tuple) and 7 <= len(v) <= 16 and all(is_int(x) for x in v)


def _is_listing(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(e, tuple)
        and len(e) == 3
        and is_str(e[0], 255)
        and isinstance(e[1], bool)
        and is_int(e[2])
        and e[2] >= 0
        for e in v
    )


def _is_hash_listing(v: Any) -> bool:
    # [(name, type, size, sha256 hex)]: size and hash only for regular files (type S_IFREG).
    return isinstance(v, list) and all(
        isinstance(e, tuple)
        and len(e) == 4
        and is_str(e[0], 255)
        and is_int(e[1])
        and (
            (is_int(e[2]) and e[2] >= 0 and is_sha256(e[3]))
            if e[1] == S_IFREG
            else (e[2] is None and e[3] is None)
        )
        for e in v
    )


S_IFDIR = 0x4000
S_IFREG = 0x8000

_OSERR = re.compile(
    r"OSError: (?:\[Errno ([0-9]+)\]|(-?[0-9]+))"
)  # ASCII digits (\d: any script's)


def _map_exec_error(e: Any, path: str | None = None) -> Exception:
    """Turn a TransportExecError into OSError (errno mapped to the host) or DeviceExecError."""
    text = (
        e.error_output
        if isinstance(e.error_output, str)
        else e.error_output.decode("utf-8", "replace")
    )
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "unknown device error"
    m = _OSERR.search(last)
    if m:
        code = int(m.group(1) or m.group(2))
        host = MP_ERRNO_TABLE.get(abs(code), abs(code))
        try:
            msg = os.strerror(host)
        except ValueError:
            msg = "device errno %d" % code
        if path is not None:
            return OSError(host, msg, path)
        return OSError(host, msg)
    out = e.status_code if isinstance(e.status_code, (bytes, bytearray)) else b""
    return DeviceExecError(last, out.decode("utf-8", "replace"))


class _TooLong(Exception):
    pass


class _BoundedSerial:
    """The serial port as mpremote sees it, with ddq's timeouts enforced on every read and write.

    mpremote (pinned) opens the port without a read timeout and, on a /dev/pts pty, blocks in
    read(1) (also in read(2) after a raw-paste request, and in its mount's reads on any port), so
    its own timeouts only fire when a read returns. Here pyserial gets a short read timeout and
    read(n) keeps reading until it has n bytes, raising DeviceTimeout once no byte came for
    `idle` seconds or `deadline` (time.monotonic()) passed; a write that finds no room for
    WRITE_TIMEOUT seconds raises it too. Everything else is the pyserial object's."""

    def __init__(self, ser: Any, port: str) -> None:
        self._ser = ser
        self._port = port
        self.idle = EXEC_IDLE_TIMEOUT
        self.deadline: float | None = None
        self.what = "an answer"
        ser.timeout = _READ_SLICE
        ser.write_timeout = WRITE_TIMEOUT

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ser, name)

    def read(self, n: int = 1) -> bytes:
        out = b""
        since = time.monotonic()
        while len(out) < n:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                # Also when bytes keep coming: a chatty device cannot extend the bound.
                raise DeviceTimeout("%s: no %s from the device in time" % (self._port, self.what))
            got = self._ser.read(n - len(out))
            now = time.monotonic()
            if got:
                out += got
                since = now
            if not got and now - since >= self.idle:
                raise DeviceTimeout(
                    "%s: no %s from the device for %g s" % (self._port, self.what, self.idle)
                )
        return out

    def write(self, data: bytes) -> Any:
        from serial import SerialTimeoutException  # type: ignore[import-untyped]

        try:
            return self._ser.write(data)
        except SerialTimeoutException:
            raise DeviceTimeout(
                "%s: the device took no input for %g s" % (self._port, WRITE_TIMEOUT)
            ) from None


class _ReadOnlyCommand(PyboardCommand):  # type: ignore[misc]
    """mpremote's host side of `mount`, refusing every change (mpremote mount has no read-only
    flag).

    mpremote (pinned) checks each device path with path_check() before it stats, lists, opens,
    removes, renames or makes a directory. Here that check also looks at which operation asks:
    stat, listing and opening for reading pass; everything else is EROFS. An operation this
    does not know (another mpremote) is refused too: it fails closed."""

    def path_check(self, path: str) -> None:
        caller = sys._getframe(1)
        op = caller.f_code.co_name
        mode = caller.f_locals.get("mode") if op == "do_open" else None
        reading = op in ("do_stat", "do_ilistdir_start") or (
            op == "do_open" and isinstance(mode, str) and not set(mode) & set("wax+")
        )
        if not reading:
            raise OSError(errno.EROFS, "read-only mount")
        super().path_check(path)


class Device:
    """A connected MicroPython board in raw REPL. Use as a context manager.

    soft_reset: True soft-resets on connect (stops a running app; what mpremote does by default),
    False resumes (required for the unix port, which exits on Ctrl-D).
    """

    hung = False  # a bound passed: the device is not talked to until recover()
    io: "_BoundedSerial | None" = None  # None: a transport set up elsewhere, without bounds

    def __init__(self, port: str, soft_reset: bool = True, timeout: float = 8.0) -> None:
        check_mpremote_version()
        self.port = port
        self.resets = soft_reset  # a board that soft-resets (not the unix port): reset() works
        from . import qboard

        # The qemu board's firmware mounts no filesystem: ddq's boot code runs after each reset.
        self.boot = qboard.boot_code() if qboard.is_qemu_device(port) else None
        if "://" not in port and not os.path.exists(port):
            raise DeviceError("no device at %s" % port)
        sink = io.StringIO()  # SerialTransport prints diagnostics to stdout; keep --json clean
        try:
            with contextlib.redirect_stdout(sink):
                self.t = SerialTransport(port, baudrate=115200)
            self.io = _BoundedSerial(self.t.serial, port)
        except TransportError as e:
            raise DeviceError(
                "cannot open %s: %s (in use by another program?)" % (port, e)
            ) from None
        except (OSError, ValueError) as e:
            raise DeviceError("cannot open %s: %s" % (port, e)) from None
        self.t.serial = self.io
        try:
            with contextlib.redirect_stdout(sink), self._bounded(timeout, "answer", timeout):
                self.t.enter_raw_repl(soft_reset=soft_reset, timeout_overall=timeout)
        except DeviceTimeout:
            self._close_serial()
            raise DeviceTimeout(
                "%s: no MicroPython raw REPL answered within %g s (is MicroPython running there, "
                "and no other program using the port? a hung board needs a reset)"
                % (port, timeout)
            ) from None
        except (TransportError, OSError) as e:
            self._close_serial()
            raise DeviceError("%s: no MicroPython raw REPL answered (%s)" % (port, e)) from None
        if self.boot is not None:
            try:
                self._run_boot()
            except DeviceError:
                self._close_serial()
                raise

    def _run_boot(self) -> None:
        """ddq's boot code (qboard.BOOT): a filesystem at / where the firmware mounted none."""
        try:
            out = self.exec(self.boot or "")
        except DeviceError as e:
            raise DeviceError("%s: ddq's boot code failed: %s" % (self.port, e)) from None
        if b"ddq-boot" not in out:
            raise DeviceError("%s: ddq's boot code gave no answer: %r" % (self.port, out[:80]))

    @contextlib.contextmanager
    def _bounded(self, idle: float, what: str, overall: float | None = None) -> Iterator[None]:
        """Reads inside wait at most idle seconds for a byte (and end by overall seconds from now);
        past that DeviceTimeout, the device is marked hung and what runs there is interrupted."""
        if self.hung:
            raise DeviceTimeout(
                "%s: the device stopped answering earlier in this session" % self.port
            )
        b = self.io
        if b is None:
            yield
            return
        saved = (b.idle, b.deadline, b.what)
        b.idle, b.what = idle, what
        b.deadline = None if overall is None else time.monotonic() + overall
        try:
            yield
        except DeviceTimeout:
            self.hung = True
            self._interrupt()
            raise
        except TransportError as e:
            if not str(e).startswith("timeout"):
                raise
            # mpremote's own bound fired (it polls a port that is not a /dev/pts pty).
            self.hung = True
            self._interrupt()
            raise DeviceTimeout(
                "%s: no %s from the device for %g s" % (self.port, what, idle)
            ) from None
        finally:
            b.idle, b.deadline, b.what = saved

    @contextlib.contextmanager
    def _link(self, path: str | None = None) -> Iterator[None]:
        """mpremote's failures as ddq's: an error raised by code on the device mapped by
        _map_exec_error (path: the device path it concerns), the link's own (TransportError,
        OSError) a DeviceError naming the port."""
        try:
            yield
        except TransportExecError as e:
            raise _map_exec_error(e, path) from None
        except TransportError as e:
            raise DeviceError("%s: %s" % (self.port, e)) from None
        except OSError as e:
            raise DeviceError("%s: connection lost (%s)" % (self.port, e)) from None

    def _interrupt(self) -> None:
        """Ctrl-C to whatever runs on the device (best effort: a hung device may not read it)."""
        try:
            if self.io is not None:
                self.io._ser.write(b"\r\x03")
        except Exception:
            pass

    def recover(self, timeout: float = 3.0) -> bool:
        """After a timeout: interrupt the device, enter the raw REPL again and drop a mount.
        True when the device answers again (the session can go on), else it stays hung."""
        if getattr(self, "t", None) is None:
            return False
        self.hung = False
        try:
            # Through mpremote's intercept while mounted: what the interrupted code still asks of
            # /remote is served until the mount is gone.
            with (
                contextlib.redirect_stdout(io.StringIO()),
                self._bounded(timeout, "answer", timeout),
            ):
                self.t.enter_raw_repl(soft_reset=False, timeout_overall=timeout)
                self.t.umount_local()
        except (DeviceError, TransportError, OSError):
            self.hung = True
            if self.t.mounted and self.io is not None:
                self.t.serial = self.io
                self.t.mounted = False
            return False
        return True

    def reset(self, timeout: float = 8.0) -> None:
        """Soft-reset the board (back in the raw REPL): its heap, modules and qstrs are given back.
        Only for a board opened with soft_reset=True (the unix port would exit)."""
        if not self.resets:
            raise DeviceError("%s: this device is not soft-reset (the unix port)" % self.port)
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                self._bounded(timeout, "answer", timeout),
            ):
                self.t.enter_raw_repl(soft_reset=True, timeout_overall=timeout)
        except (TransportError, OSError) as e:
            raise DeviceError("%s: no raw REPL after a soft reset (%s)" % (self.port, e)) from None
        if self.boot is not None:
            self._run_boot()

    def _close_serial(self) -> None:
        try:
            self.t.close()
        except Exception:
            pass

    def close(self) -> None:
        if getattr(self, "t", None) is None:
            return
        if self.hung:
            self.recover()
        try:
            if not self.hung:
                if self.t.mounted:
                    self.t.umount_local()
                self.t.exit_raw_repl()
        except Exception:
            pass
        self._close_serial()
        self.t = None

    def start(self, code: str) -> None:
        """Start code on the device and let go of the port at once (the code keeps running).

        The raw REPL is not exited: the device stays busy with the code until it returns."""
        try:
            with self._bounded(EXEC_IDLE_TIMEOUT, "answer"):
                self.t.exec_raw_no_follow(code)
        except DeviceTimeout:
            raise
        except Exception as e:
            raise DeviceError("%s: could not start code (%s)" % (self.port, e)) from None
        finally:
            self._close_serial()
            self.t = None

    def reset_to_main(
        self, seconds: float | None = 2.0, out: Callable[[bytes], object] | None = None
    ) -> bytes:
        """Soft-reset from the friendly REPL, as a board's reset does: boot.py, then main.py run
        (the virtual board's supervisor does the same). Then let go of the port without a byte
        more (main.py keeps running), after `seconds` of the board's output (passed to out as it
        comes, and returned); seconds=None: until Ctrl-C."""
        ser = self.io._ser if self.io is not None else self.t.serial
        try:
            with self._link():
                if self.boot is not None:
                    # A firmware that runs no boot.py/main.py (the qemu board): a soft reset in the
                    # raw REPL, ddq's boot code, then main.py started as the firmware would.
                    self.reset()
                    with self._bounded(EXEC_IDLE_TIMEOUT, "answer", EXEC_IDLE_TIMEOUT):
                        self.t.exec_raw_no_follow(
                            "exec(open('main.py').read(), {'__name__': '__main__'})"
                        )
                else:
                    with self._bounded(
                        EXEC_IDLE_TIMEOUT, "friendly REPL prompt", EXEC_IDLE_TIMEOUT
                    ):
                        self.t.exit_raw_repl()
                        self.t.read_until(1, b">>> ", timeout=None)
                        self.t.serial.write(b"\x04")  # Ctrl-D at the friendly REPL: soft reset
                        self.t.read_until(1, b"soft reboot\r\n", timeout=None)
                buf = bytearray()
                end = None if seconds is None else time.monotonic() + seconds
                try:
                    while (end is None or time.monotonic() < end) and len(buf) < MAX_REPLY:
                        got = ser.read(max(1, ser.in_waiting))  # returns within _READ_SLICE
                        if got:
                            buf += got
                            if out is not None:
                                out(got)
                except KeyboardInterrupt:
                    pass  # following the output: Ctrl-C leaves the app running
                return bytes(buf)
        finally:
            self._close_serial()
            self.t = None

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ exec primitives

    def exec(
        self,
        code: str,
        path: str | None = None,
        consumer: Callable[[bytes], None] | None = None,
        idle: float | None = None,
    ) -> bytes:
        """Run code on the device, return its stdout bytes; errors mapped (see _map_exec_error).
        DeviceTimeout when the device sends nothing for idle seconds (default EXEC_IDLE_TIMEOUT;
        more for work that is silent while it runs: opening a big queue at emulation speed)."""
        idle_s = EXEC_IDLE_TIMEOUT if idle is None else idle
        with self._link(path), self._bounded(idle_s, "answer"):
            if idle is None:
                return bytes(self.t.exec(code, data_consumer=consumer))
            ret, err = self.t.exec_raw(code, timeout=idle, data_consumer=consumer)
            if err:
                raise TransportExecError(ret, err.decode("utf-8", "replace"))
            return bytes(ret)

    def eval(
        self,
        expr: str,
        path: str | None = None,
        check: Callable[[Any], bool] | None = None,
        what: str | None = None,
    ) -> Any:
        """repr(expr) on the device, parsed as a literal (parse_reply) and checked by check."""
        out = self._collect("print(repr(%s))" % expr, path)
        return parse_reply(out, what or "a query", check)

    def _collect(
        self,
        code: str,
        path: str | None = None,
        limit: int = MAX_REPLY,
        idle: float | None = None,
    ) -> bytes:
        """stdout of code; DeviceReplyError past limit bytes (a device cannot flood the host)."""
        buf = bytearray()

        def consume(b: bytes) -> None:
            buf.extend(b.replace(b"\x04", b""))
            if len(buf) > limit:
                raise _TooLong()

        # A consumer avoids mpremote's quadratic accumulation for long outputs.
        try:
            self.exec(code, path, consumer=consume, idle=idle)
        except _TooLong:
            raise DeviceReplyError(
                "%s: the device sent more than %d bytes where a short reply was expected"
                % (self.port, limit)
            ) from None
        return bytes(buf)

    def run(
        self, code: str, out: Callable[[bytes], None], idle_timeout: float = RUN_IDLE_TIMEOUT
    ) -> str:
        """Run a (possibly long) program streaming its output to out(bytes); return stderr text.
        DeviceTimeout (and the program interrupted) after idle_timeout seconds without output."""
        with self._link():
            with self._bounded(EXEC_IDLE_TIMEOUT, "answer"):
                self.t.exec_raw_no_follow(code)
            with self._bounded(idle_timeout, "output"):
                _, err = self.t.follow(
                    idle_timeout, data_consumer=lambda b: out(b.replace(b"\x04", b""))
                )
        return bytes(err).decode("utf-8", "replace")

    # ------------------------------------------------------------ probes

    def probe(self) -> dict[str, Any]:
        """Facts for board selection and .mpy compatibility (getattr defaults, rule 23)."""
        res = self.eval(
            "(lambda s,o:{'name':s.implementation.name,"
            "'version':tuple(s.implementation.version[:3]),"
            "'build':getattr(s.implementation,'_build',''),"
            "'mpy':getattr(s.implementation,'_mpy',None),"
            "'machine':getattr(s.implementation,'_machine',''),"
            "'platform':s.platform,'cwd':o.getcwd()})(__import__('sys'),__import__('os'))",
            check=_is_probe,
            what="the probe",
        )
        assert isinstance(res, dict)
        return res

    # ------------------------------------------------------------ filesystem

    def stat(self, path: str) -> tuple[bool, int]:
        """(is_dir, size) of a device path; OSError(ENOENT) when missing."""
        p = dpath(path)
        st = self.eval(
            "tuple(__import__('os').stat(%r))" % p, path=p, check=_is_stat, what="stat " + p
        )
        return (st[0] & S_IFDIR) != 0, st[6]

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def listdir(self, path: str) -> list[tuple[str, bool, int]]:
        """[(name, is_dir, size)] for the entries of a device directory, sorted by name."""
        p = dpath(path)
        out = self._collect(  # streamed, an entry a line (see hash_dir)
            "import os\nprint('[')\nfor e in os.ilistdir(%r):\n"
            " print(repr((e[0],e[1]==0x4000,os.stat(%r+'/'+e[0])[6]))+',')\nprint(']')" % (p, p),
            path=p,
        )
        rows = parse_reply(out, "the listing of " + p, _is_listing)
        return sorted((n, bool(d), s) for n, d, s in rows)

    def hash_dir(self, path: str) -> list[tuple[str, int, int | None, str | None]]:
        """[(name, type, size, sha256 hex)] for the entries of a device directory, as the device
        reports them: type is the S_IFMT part of the mode (S_IFREG, S_IFDIR, a symlink, a FIFO,
        ...); size and hash are given for regular files only (nothing else is opened on the
        device).

        One exec for the whole directory: hashlib.sha256 runs on the device, 512 bytes at a time.
        The reply is checked for its shape, not for the names (see transfer.check_entry_name).
        """
        p = dpath(path)
        code = (
            "import os,hashlib,binascii\n"
            "def _h(p):\n"
            " h=hashlib.sha256();b=bytearray(512);m=memoryview(b)\n"
            " with open(p,'rb') as f:\n"
            "  while 1:\n"
            "   n=f.readinto(b)\n"
            "   if not n:break\n"
            "   h.update(m[:n])\n"
            " return binascii.hexlify(h.digest()).decode()\n"
            # streamed, an entry a line (a list literal all the same): the device holds one entry
            # at a time, not the listing (a full board's 600 segments ran out of heap: docs/HOST.md
            # "qemu board")
            "print('[')\n"
            "for e in os.ilistdir(%r):\n"
            " q=%r+'/'+e[0];t=e[1]&0xf000\n"
            " if not t:t=os.stat(q)[0]&0xf000\n"
            " if t==0x8000:print(repr((e[0],t,os.stat(q)[6],_h(q)))+',')\n"
            " else:print(repr((e[0],t,None,None))+',')\n"
            "print(']')\n"
            "del _h\n" % (p, p)
        )
        out = self._collect(code, path=p)
        rows = parse_reply(out, "the listing of " + p, _is_hash_listing)
        return [(n, t, sz, h) for n, t, sz, h in rows]

    def sha256(self, path: str) -> str:
        p = dpath(path)
        code = (
            "import hashlib,binascii\n"
            "h=hashlib.sha256();b=bytearray(512);m=memoryview(b)\n"
            "with open(%r,'rb') as f:\n"
            " while 1:\n"
            "  n=f.readinto(b)\n"
            "  if not n:break\n"
            "  h.update(m[:n])\n"
            "print(binascii.hexlify(h.digest()).decode())\n" % p
        )
        out = self._collect(code, path=p, limit=256)
        h = out.decode("utf-8", "replace").strip()
        if not is_sha256(h):
            raise DeviceReplyError(
                "reply to sha256 of %s from the device is not a sha256: %r" % (p, out[:80])
            )
        return h

    def read_file(
        self,
        path: str,
        progress: Callable[[int, int | None], None] | None = None,
        size: int | None = None,
    ) -> bytes:
        """Whole file contents; progress(done, total) after each line when given."""
        p = dpath(path)
        code = (
            "import binascii\n"
            "b=bytearray(%d);m=memoryview(b)\n"
            "with open(%r,'rb') as f:\n"
            " while 1:\n"
            "  n=f.readinto(b)\n"
            "  if not n:break\n"
            "  print(binascii.b2a_base64(m[:n]).decode(),end='')\n"
            "del b,m\n" % (READ_CHUNK, p)
        )
        data = bytearray()
        line = bytearray()

        def consume(b: bytes) -> None:
            for c in b:
                if c == 10:
                    data.extend(binascii.a2b_base64(bytes(line)))
                    line.clear()
                    if size is not None and len(data) > size:
                        raise _TooLong()
                    if progress:
                        progress(len(data), size)
                elif c not in (4, 13):
                    line.append(c)
                    if len(line) > 4 * READ_CHUNK:
                        raise binascii.Error("line too long")

        try:
            self.exec(code, path=p, consumer=consume)
        except binascii.Error as e:
            raise DeviceError("garbled transfer of %s: %s" % (p, e)) from None
        except _TooLong:
            raise DeviceReplyError(
                "the device sent more than the %d bytes it listed for %s" % (size or 0, p)
            ) from None
        if line:
            raise DeviceError("truncated transfer of %s" % p)
        return bytes(data)

    def write_file(
        self,
        path: str,
        data: bytes,
        progress: Callable[[int, int], None] | None = None,
        append: bool = False,
    ) -> None:
        p = dpath(path)
        self.exec("import binascii\n_f=open(%r,%r)" % (p, "ab" if append else "wb"), path=p)
        try:
            done = 0
            for i in range(0, len(data), WRITE_CHUNK):
                chunk = data[i : i + WRITE_CHUNK]
                b64 = binascii.b2a_base64(chunk, newline=False).decode()
                self.exec("_f.write(binascii.a2b_base64(%r))" % b64, path=p)
                done += len(chunk)
                if progress:
                    progress(done, len(data))
        finally:
            self.exec("_f.close()\ndel _f", path=p)

    def _fs(self, op: Callable[[Any, str], Any], path: str) -> None:
        """mpremote's Transport.fs_<op>(path), one exec with no reply to parse, under ddq's
        bounds: a device errno comes back as its OSError subclass, anything else DeviceError."""
        try:
            with self._bounded(EXEC_IDLE_TIMEOUT, "answer"):
                op(self.t, path)
        except TransportExecError as e:  # fs_* re-raises what is not an OSError on the device
            raise _map_exec_error(e, path) from None
        except TransportError as e:
            raise DeviceError("%s: %s" % (self.port, e)) from None
        except OSError as e:
            if e.args[1:] == (path,) and e.errno is not None and e.errno in errno.errorcode:
                raise OSError(e.errno, os.strerror(e.errno), path) from None
            raise DeviceError("%s: connection lost (%s)" % (self.port, e)) from None

    def mkdir(self, path: str, exist_ok: bool = False) -> None:
        try:
            self._fs(Transport.fs_mkdir, dpath(path))
        except FileExistsError:
            if not exist_ok:
                raise

    def remove(self, path: str) -> None:
        self._fs(Transport.fs_rmfile, dpath(path))

    def rename(self, src: str, dst: str) -> None:
        s, d = dpath(src), dpath(dst)
        self.exec("import os\nos.rename(%r,%r)" % (s, d), path=s)

    # ------------------------------------------------------------ host directory mount

    def mount_local(self, path: str, read_only: bool = False) -> None:
        """Expose a host directory at /remote on the device (mpremote mount); cwd becomes /remote.

        read_only: the device can stat, list and read, nothing else (see _ReadOnlyCommand)."""
        try:
            with self._bounded(EXEC_IDLE_TIMEOUT, "answer"):
                # mpremote's mount, its device code sent first (mount_local sends it only when
                # RemoteFS is missing) and given ddq's patient poll_in (PATIENT_POLL_CODE)
                # (a reply is data: only the exact True skips the hook code)
                if self.t.exec('print("RemoteFS" in globals())').strip() != b"True":
                    self.t.exec(fs_hook_code)
                self.t.exec(PATIENT_POLL_CODE)
                self.t.mount_local(os.path.abspath(path))
        except TransportExecError as e:
            raise _map_exec_error(e, path) from None
        except TransportError as e:
            raise DeviceError("%s: mount failed: %s" % (self.port, e)) from None
        if read_only:
            cmd = self.t.cmd
            ro = _ReadOnlyCommand.__new__(_ReadOnlyCommand)
            ro.__dict__.update(cmd.__dict__)
            self.t.cmd = ro
            self.t.serial.cmd = ro  # mpremote's SerialIntercept dispatches to this object

    def umount_local(self) -> None:
        """Undo mount_local (after a timeout: recover() first, which drops the mount)."""
        if self.hung:
            self.recover()
            return
        try:
            with self._bounded(EXEC_IDLE_TIMEOUT, "answer"):
                self.t.umount_local()
        except (TransportError, OSError, DeviceTimeout):
            pass


__all__ = [
    "Device",
    "DeviceError",
    "DeviceExecError",
    "DeviceReplyError",
    "DeviceTimeout",
    "S_IFDIR",
    "S_IFREG",
    "parse_reply",
    "dpath",
    "djoin",
    "PINNED_MPREMOTE",
    "check_mpremote_version",
]


def _raw_serial(port: str) -> "Any":
    """The board's console opened by pyserial, outside mpremote (before any REPL handshake)."""
    check_mpremote_version()
    import serial

    if "://" not in port and not os.path.exists(port):
        raise DeviceError("no device at %s" % port)
    try:
        return serial.Serial(port, 115200, timeout=_READ_SLICE, write_timeout=WRITE_TIMEOUT)
    except (OSError, ValueError, serial.SerialException) as e:
        raise DeviceError("cannot open %s: %s (in use by another program?)" % (port, e)) from None


def _console_reply(port: str, send: bytes, done: Callable[[bytes], bool], seconds: float) -> bytes:
    """Write send to the board's console (pyserial, outside mpremote) and read what it prints in
    reply until done(reply), `seconds` or MAX_REPLY bytes; the reply."""
    import serial

    ser = _raw_serial(port)
    buf = b""
    try:
        ser.write(send)
        end = time.monotonic() + seconds
        while time.monotonic() < end and len(buf) < MAX_REPLY and not done(buf):
            buf += ser.read(max(1, ser.in_waiting))
    except (OSError, serial.SerialException) as e:
        raise DeviceError("%s: connection lost (%s)" % (port, e)) from None
    finally:
        ser.close()
    return buf


def _prompt_after_interrupt(buf: bytes) -> bool:
    return b"KeyboardInterrupt" in buf and (buf.endswith(b">>> ") or buf.endswith(b">"))


def interrupt_app(port: str, seconds: float = 2.0) -> bytes:
    """Ctrl-C to whatever runs on the board (its main.py), before any REPL handshake, and what it
    printed in reply within `seconds` (a KeyboardInterrupt traceback when something ran; it ends
    early once a REPL prompt is back)."""
    return _console_reply(port, b"\r\x03", _prompt_after_interrupt, seconds)


def repl_answers(port: str, seconds: float = 2.0) -> bool:
    """Whether the board's REPL answers (nothing runs) without stopping what runs: Ctrl-B (leave
    the raw REPL; at the friendly REPL it prints the banner and a prompt) and a prompt back
    within `seconds`. A running main.py does not read it (a byte in its stdin, which the REPL
    reads after the app ends: one more banner)."""
    prompt = b">>> "
    return _console_reply(port, b"\x02", lambda buf: buf.endswith(prompt), seconds).endswith(
        prompt
    )
