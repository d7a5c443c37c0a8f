"""The one module that talks to mpremote: a small Transport adapter for the ddq host tools.

mpremote's Python API is undocumented, so the version is pinned (PINNED_MPREMOTE) and every call used
here is exercised by tests/host. Device-side snippets stay tiny; device errno errors come back as
CPython OSError subclasses (FileNotFoundError, ...). Device paths may carry mpremote's ``:`` prefix.

Transfers: mpremote's own fs_readfile/fs_writefile move 256 bytes per round trip. Here a file is read
with one exec that prints base64 lines, and written in 2 KiB base64 chunks (one exec each), which is
several times faster over a pty or USB CDC and still only uses binascii/hashlib on the device.
"""

import ast
import binascii
import contextlib
import io
import os
import re
from collections.abc import Callable
from typing import Any

PINNED_MPREMOTE = "1.29.0"

from importlib.metadata import PackageNotFoundError, version as _pkg_version

from mpremote.mp_errno import MP_ERRNO_TABLE  # type: ignore[import-untyped]
from mpremote.transport import (  # type: ignore[import-untyped]
    TransportError,
    TransportExecError,
)
from mpremote.transport_serial import SerialTransport  # type: ignore[import-untyped]

READ_CHUNK = 1536  # bytes per base64 line when reading (2048 characters on the wire)
WRITE_CHUNK = 2048  # bytes per exec when writing
RUN_IDLE_TIMEOUT = 300  # seconds without output before a long run is declared hung


class DeviceError(Exception):
    """A device or transport failure; str() is one line for the user."""


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


_OSERR = re.compile(r"OSError: (?:\[Errno (\d+)\]|(-?\d+))")


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


class Device:
    """A connected MicroPython board in raw REPL. Use as a context manager.

    soft_reset: True soft-resets on connect (stops a running app; what mpremote does by default),
    False resumes (required for the unix port, which exits on Ctrl-D).
    """

    def __init__(self, port: str, soft_reset: bool = True, timeout: float = 8.0) -> None:
        check_mpremote_version()
        self.port = port
        if "://" not in port and not os.path.exists(port):
            raise DeviceError("no device at %s" % port)
        sink = io.StringIO()  # SerialTransport prints diagnostics to stdout; keep --json clean
        try:
            with contextlib.redirect_stdout(sink):
                self.t = SerialTransport(port, baudrate=115200)
        except TransportError as e:
            raise DeviceError(
                "cannot open %s: %s (in use by another program?)" % (port, e)
            ) from None
        except (OSError, ValueError) as e:
            raise DeviceError("cannot open %s: %s" % (port, e)) from None
        try:
            with contextlib.redirect_stdout(sink):
                self.t.enter_raw_repl(soft_reset=soft_reset, timeout_overall=timeout)
        except (TransportError, OSError) as e:
            self._close_serial()
            raise DeviceError("%s: no MicroPython raw REPL answered (%s)" % (port, e)) from None

    def _close_serial(self) -> None:
        try:
            self.t.close()
        except Exception:
            pass

    def close(self) -> None:
        if getattr(self, "t", None) is None:
            return
        try:
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
            self.t.exec_raw_no_follow(code)
        except Exception as e:
            raise DeviceError("%s: could not start code (%s)" % (self.port, e)) from None
        finally:
            self._close_serial()
            self.t = None

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ exec primitives

    def exec(
        self, code: str, path: str | None = None, consumer: Callable[[bytes], None] | None = None
    ) -> bytes:
        """Run code on the device, return its stdout bytes; errors mapped (see _map_exec_error)."""
        try:
            return bytes(self.t.exec(code, data_consumer=consumer))
        except TransportExecError as e:
            raise _map_exec_error(e, path) from None
        except TransportError as e:
            raise DeviceError("%s: %s" % (self.port, e)) from None
        except OSError as e:
            raise DeviceError("%s: connection lost (%s)" % (self.port, e)) from None

    def eval(self, expr: str, path: str | None = None) -> Any:
        out = self._collect("print(repr(%s))" % expr, path)
        try:
            return ast.literal_eval(out.decode().strip())
        except (ValueError, SyntaxError):
            raise DeviceError("unexpected reply from device: %r" % out[:80]) from None

    def _collect(self, code: str, path: str | None = None) -> bytes:
        buf = bytearray()
        # A consumer avoids mpremote's quadratic accumulation for long outputs.
        self.exec(code, path, consumer=lambda b: buf.extend(b.replace(b"\x04", b"")))
        return bytes(buf)

    def run(
        self, code: str, out: Callable[[bytes], None], idle_timeout: float = RUN_IDLE_TIMEOUT
    ) -> str:
        """Run a (possibly long) program streaming its output to out(bytes); return stderr text."""
        try:
            self.t.exec_raw_no_follow(code)
            _, err = self.t.follow(
                idle_timeout, data_consumer=lambda b: out(b.replace(b"\x04", b""))
            )
        except TransportError as e:
            raise DeviceError("%s: %s" % (self.port, e)) from None
        except OSError as e:
            raise DeviceError("%s: connection lost (%s)" % (self.port, e)) from None
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
            "'platform':s.platform,'cwd':o.getcwd()})(__import__('sys'),__import__('os'))"
        )
        if not isinstance(res, dict):
            raise DeviceError("unexpected reply to the probe: %r" % (res,))
        return res

    # ------------------------------------------------------------ filesystem

    def stat(self, path: str) -> tuple[bool, int]:
        """(is_dir, size) of a device path; OSError(ENOENT) when missing."""
        p = dpath(path)
        st = self.eval("tuple(__import__('os').stat(%r))" % p, path=p)
        return (st[0] & 0x4000) != 0, st[6]

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def listdir(self, path: str) -> list[tuple[str, bool, int]]:
        """[(name, is_dir, size)] for the entries of a device directory, sorted by name."""
        p = dpath(path)
        rows = self.eval(
            "[(e[0],e[1]==0x4000,__import__('os').stat(%r+'/'+e[0])[6])"
            " for e in __import__('os').ilistdir(%r)]" % (p, p),
            path=p,
        )
        return sorted((n, bool(d), s) for n, d, s in rows)

    def hash_dir(self, path: str) -> dict[str, tuple[int, str] | None]:
        """{name: (size, sha256 hex)} for regular files in a device directory; dirs map to None.

        One exec for the whole directory: hashlib.sha256 runs on the device, 512 bytes at a time.
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
            "r=[]\n"
            "for e in os.ilistdir(%r):\n"
            " q=%r+'/'+e[0]\n"
            " if e[1]==0x4000:r.append((e[0],None))\n"
            " else:r.append((e[0],(os.stat(q)[6],_h(q))))\n"
            "print(repr(r))\n"
            "del _h,r\n" % (p, p)
        )
        out = self._collect(code, path=p)
        try:
            rows = ast.literal_eval(out.decode().strip())
        except (ValueError, SyntaxError):
            raise DeviceError("unexpected reply from device: %r" % out[:80]) from None
        return {n: (None if v is None else (v[0], v[1])) for n, v in rows}

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
        return self._collect(code, path=p).decode().strip()

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
                    if progress:
                        progress(len(data), size)
                elif c not in (4, 13):
                    line.append(c)

        try:
            self.exec(code, path=p, consumer=consume)
        except binascii.Error as e:
            raise DeviceError("garbled transfer of %s: %s" % (p, e)) from None
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

    def mkdir(self, path: str, exist_ok: bool = False) -> None:
        p = dpath(path)
        try:
            self.exec("import os\nos.mkdir(%r)" % p, path=p)
        except FileExistsError:
            if not exist_ok:
                raise

    def remove(self, path: str) -> None:
        p = dpath(path)
        self.exec("import os\nos.remove(%r)" % p, path=p)

    def rename(self, src: str, dst: str) -> None:
        s, d = dpath(src), dpath(dst)
        self.exec("import os\nos.rename(%r,%r)" % (s, d), path=s)

    # ------------------------------------------------------------ host directory mount

    def mount_local(self, path: str) -> None:
        """Expose a host directory at /remote on the device (mpremote mount); cwd becomes /remote."""
        try:
            self.t.mount_local(os.path.abspath(path))
        except TransportExecError as e:
            raise _map_exec_error(e, path) from None
        except TransportError as e:
            raise DeviceError("%s: mount failed: %s" % (self.port, e)) from None

    def umount_local(self) -> None:
        try:
            self.t.umount_local()
        except (TransportError, OSError):
            pass


__all__ = [
    "Device",
    "DeviceError",
    "DeviceExecError",
    "dpath",
    "djoin",
    "PINNED_MPREMOTE",
    "check_mpremote_version",
]
