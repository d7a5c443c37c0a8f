"""ddq test: run the shared suite (tests/mprun.py) on a device, with what it needs mounted by
mpremote.

The device sees only a private, read-only copy (stage()): a temporary directory (mode 0700) holding
tests/*.py, port/*.py and the C fixtures (tests/fixtures/ddq-c), files 0444 and directories 0555,
exposed at /remote (`mpremote mount`, which keeps every path inside its root). mpremote mount has
no read-only flag: Device.mount_local(read_only=True) refuses every change at mpremote's host side
(EROFS), and the file modes refuse them again for a non-root user. Nothing else of the host (the
checkout's parent, other checkouts, the user's files) is reachable. The copy is removed after the
run. Test files go to a directory on the device's own filesystem (default <device cwd>/ddq-test),
so the flash is what is tested. The output is streamed; its last line is mprun's `<fs>: N passed, N
failed[, N skipped]`.
"""

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import locate
from .device import RUN_IDLE_TIMEOUT, Device, DeviceError, DeviceTimeout, is_int
from .transfer import PORT_MODULES

SUMMARY = re.compile(rb"^\w+: (\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$", re.M)


def fixtures_dir() -> str:
    """The C fixtures the suite's interop tests read: $DDQ_FIXTURES, else the suite's own copy
    (tests/fixtures/ddq-c; in a wheel ddqhost/suite/fixtures/ddq-c)."""
    env = os.environ.get("DDQ_FIXTURES")
    if env:
        return os.path.abspath(env)
    return os.path.join(suite_dir(), "fixtures", "ddq-c")


def suite_dir() -> str:
    """The shared suite: tests/ of the checkout, else the copy an installed wheel carries
    (ddqhost/suite, built from tests/)."""
    packaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suite")
    for d in (packaged, os.path.join(locate.repo_root(), "tests")):
        if os.path.isfile(os.path.join(d, "mprun.py")):
            return d
    raise TestRunError(
        "the shared test suite (mprun.py, test_*.py) is neither in this ddq package nor in a "
        "checkout: reinstall ddq, or run ddq from a checkout"
    )


def _copy_py(src: str, dst: str, mpy: bool = False, prefix: str = "") -> None:
    # mpy: compiled on the host (mpy-cross), so the device compiles nothing (compiling a large test
    # module needs more heap than running it); a module mpy-cross refuses stays .py.
    # prefix: only files whose name starts with it (port modules beside others in site-packages).
    from . import transfer

    os.mkdir(dst, 0o700)
    for n in sorted(os.listdir(src)):
        p = os.path.join(src, n)
        if not (
            n.endswith(".py")
            and n.startswith(prefix)
            and os.path.isfile(p)
            and not os.path.islink(p)
        ):
            continue
        if mpy:
            try:
                transfer.mpy_cross(p, os.path.join(dst, n[:-3] + ".mpy"))
                continue
            except transfer.TransferError:
                pass
        shutil.copyfile(p, os.path.join(dst, n))


def _chmod_tree(path: str, file_mode: int, dir_mode: int) -> None:
    for root, dirs, files in os.walk(path, topdown=False):
        for n in files:
            os.chmod(os.path.join(root, n), file_mode)
        for n in dirs:
            os.chmod(os.path.join(root, n), dir_mode)
    os.chmod(path, dir_mode)


@contextlib.contextmanager
def stage(fixtures: str | None = None, mpy: bool = False) -> Iterator[str]:
    """A private read-only directory with what the suite reads: tests/, port/, fixtures/.
    port/ holds the ddq*.py modules the host imports ddq from (a checkout's port/, or where pip
    put them)."""
    tests = suite_dir()
    d = tempfile.mkdtemp(prefix="ddq-test-mount-")
    try:
        _copy_py(tests, os.path.join(d, "tests"), mpy)
        _copy_py(os.path.dirname(locate.ddq_source()), os.path.join(d, "port"), mpy, "ddq")
        if fixtures and os.path.isdir(fixtures):
            shutil.copytree(fixtures, os.path.join(d, "fixtures"), symlinks=False)
        for root, _dirs, files in os.walk(d):
            for n in files:
                if not stat.S_ISREG(os.lstat(os.path.join(root, n)).st_mode):
                    os.remove(os.path.join(root, n))
        _chmod_tree(d, 0o444, 0o555)
        yield d
    finally:
        if os.path.isdir(d):
            _chmod_tree(d, 0o600, 0o700)
        shutil.rmtree(d, ignore_errors=True)


class TestRunError(DeviceError):
    """The suite could not start on the device (e.g. --installed without ddq); one line."""


# Block sizes of mprun's RAM disks (tests/mprun.py FILESYSTEMS): --ramdisk-kb becomes --blocks.
RAMDISK_BLOCK = {"lfs2": 4096, "fat": 512}


def suite_modules() -> list[str]:
    """The shared suite's modules (tests/test_*.py), sorted, as mprun discovers them."""
    tests = suite_dir()
    return sorted(n[:-3] for n in os.listdir(tests) if n.startswith("test_") and n.endswith(".py"))


# The whole suite's time on the default virtual board (docs/HOST.md "test", measured by hand:
# `ddq test --installed`, before and after `ddq flash --example-app`: 14.5 min on a quiet 2-core
# machine, 23-26 on one a torture run and other jobs kept busy), said before a run starts.
SUITE_MINUTES_VIRTUAL = 15
# The unix port (the virtual board) shares this host's cores: a test that prints nothing until it
# ends runs as slowly as the host is busy. test_model (one test, thousands of steps) was silent
# for 380 s at load 11 on 2 cores (issue 39), past RUN_IDLE_TIMEOUT's 300.
VIRTUAL_IDLE_TIMEOUT = 900
SUITE_MINUTES_VIRTUAL_BUSY = 26

RESULT = re.compile(rb"^(?:PASS|FAIL|SKIP) (test_\w+)")


class Progress:
    """out() with a line `ddq test: [i/N] test_x (m:ss)` before a module's first result line,
    so a long run says how far it is. Device output passes through whole lines at a time."""

    def __init__(self, out: Callable[[bytes], object], total: int, clock: Callable[[], float]):
        self.out = out
        self.total = total
        self.clock = clock
        self.t0 = clock()
        self.seen: set[bytes] = set()
        self.tail = b""

    def __call__(self, b: bytes) -> None:
        lines = (self.tail + b).split(b"\n")
        self.tail = lines.pop()
        for ln in lines:
            m = RESULT.match(ln)
            if m and m.group(1) not in self.seen:
                self.seen.add(m.group(1))
                t = int(self.clock() - self.t0)
                self.out(
                    b"ddq test: [%d/%d] %s (%d:%02d)\n"
                    % (len(self.seen), self.total, m.group(1), t // 60, t % 60)
                )
            self.out(ln + b"\n")

    def flush(self) -> None:
        if self.tail:
            self.out(self.tail)
            self.tail = b""


def idle_default(probe: dict[str, Any]) -> int:
    """`ddq test`'s --idle-timeout when none is given: longer on the unix port (the virtual
    board), which runs as slowly as this host is busy."""
    return VIRTUAL_IDLE_TIMEOUT if probe.get("platform") == "linux" else RUN_IDLE_TIMEOUT


def plan_line(dev_name: str, modules: Sequence[str], k: str | None = None) -> str:
    """What a run will take, said before it starts."""
    n = len(modules) if modules else len(suite_modules())
    if k:
        return "ddq test: the tests matching %r in %d modules on %s; progress as [module/%d]\n" % (
            k,
            n,
            dev_name,
            n,
        )
    if modules:
        return "ddq test: %d of the suite's %d modules on %s; progress as [module/%d]\n" % (
            n,
            len(suite_modules()),
            dev_name,
            n,
        )
    return (
        "ddq test: the shared suite, %d modules, on %s: about %d min on the virtual board of a "
        'quiet 2-core machine, %d on a busy one (docs/HOST.md "test"), longer on a real board; '
        "progress as [module/%d]\n"
        % (n, dev_name, SUITE_MINUTES_VIRTUAL, SUITE_MINUTES_VIRTUAL_BUSY, n)
    )


def _remove_dir(dev: Device, path: str) -> None:
    # The run's own directory (the default <cwd>/ddq-test): mprun removed each test's; this
    # takes what is left, so no ddq-test/ stays on the board's flash.
    dev.exec(
        "import os\n"
        "def _rm(p):\n"
        " for e in list(os.ilistdir(p)):\n"
        "  q = p + '/' + e[0]\n"
        "  if e[1] == 0x4000:\n"
        "   _rm(q)\n"
        "  else:\n"
        "   os.remove(q)\n"
        " os.rmdir(p)\n"
        "try:\n"
        " _rm(%r)\n"
        "except OSError:\n"
        " pass\n"
        "del _rm\n" % path
    )


def default_root(dev: Device) -> str:
    cwd = dev.probe().get("cwd") or "/"
    return (cwd.rstrip("/") or "") + "/ddq-test"


def run(
    dev: Device,
    modules: Sequence[str] = (),
    k: str | None = None,
    fs: str = "posix",
    root: str | None = None,
    out: Callable[[bytes], object] | None = None,
    installed: bool = False,
    ramdisk_kb: int | None = None,
    each: bool = False,
    mpy: bool = False,
    idle_timeout: float | None = None,
) -> tuple[int, str | None]:
    """Run mprun on dev; return (exit status, summary line or None).

    ramdisk_kb sizes the RAM disk of --fs lfs2/fat (it lives in the device's heap: a board with
    a small heap needs a small one). each=True runs every module in a session of its own (one
    mprun call per module, modules freed in between), for boards whose heap does not hold the
    suite's modules one after another in one session; the summary then adds up the sessions.
    On a board that soft-resets (not the unix port) --each soft-resets it before each module
    but the first, so that every module starts with the heap a fresh boot has.
    mpy=True mounts the suite and port/ compiled to .mpy on the host (mpy-cross), so the device
    compiles nothing. idle_timeout: seconds without output before the run is declared hung
    (TestRunError; the device is interrupted with Ctrl-C); None: RUN_IDLE_TIMEOUT, and
    VIRTUAL_IDLE_TIMEOUT on the unix port.
    """
    if ramdisk_kb is not None and fs not in RAMDISK_BLOCK:
        raise ValueError("ramdisk_kb needs fs lfs2 or fat")
    if idle_timeout is None:
        idle_timeout = idle_default(dev.probe())
    fix = fixtures_dir()
    owned = None
    if root is None:
        root = owned = default_root(dev)
    prog = None
    if out:
        out(plan_line(dev.port, modules, k).encode())
        prog = Progress(out, len(modules) if modules else len(suite_modules()), time.monotonic)
        out = prog
    try:
        res = _run(
            dev, modules, k, fs, root, out, installed, ramdisk_kb, each, mpy, idle_timeout, fix
        )
    finally:
        if prog:
            prog.flush()
    if owned:  # (after a run that ended: a hung or interrupted one is not talked to again)
        try:
            _remove_dir(dev, owned)
        except DeviceError:
            pass
    return res


def _run(
    dev: Device,
    modules: Sequence[str],
    k: str | None,
    fs: str,
    root: str,
    out: Callable[[bytes], object] | None,
    installed: bool,
    ramdisk_kb: int | None,
    each: bool,
    mpy: bool,
    idle_timeout: float,
    fix: str,
) -> tuple[int, str | None]:
    with stage(fix if os.path.isdir(fix) else None, mpy) as mount:
        if not each:
            return _run_once(
                dev, list(modules), k, fs, root, out, installed, ramdisk_kb, mount, idle_timeout
            )
        totals = [0, 0, 0]
        worst = 0
        bad = []
        for n, m in enumerate(list(modules) or suite_modules()):
            if n and dev.resets:
                dev.reset()  # a real board gives its whole heap back between modules
            rc, summary = _run_once(
                dev, [m], k, fs, root, out, installed, ramdisk_kb, mount, idle_timeout
            )
            got = SUMMARY.findall(("x: " + summary).encode()) if summary else []
            if not got:
                bad.append(m)
                worst = worst or rc or 1
                continue
            p, f, sk = got[-1]
            totals[0] += int(p)
            totals[1] += int(f)
            totals[2] += int(sk or 0)
            if rc not in (0, 5):
                worst = worst or rc
    line = "%s: %d passed, %d failed" % (fs, totals[0], totals[1]) + (
        ", %d skipped" % totals[2] if totals[2] else ""
    )
    if bad:
        line += " (no summary from: %s)" % ", ".join(bad)
    if out:
        out(("ddq test --each: " + line + "\n").encode())
    return (worst if worst else (0 if totals[0] + totals[2] else 5)), line


def _run_once(
    dev: Device,
    modules: list[str],
    k: str | None,
    fs: str,
    root: str | None,
    out: Callable[[bytes], object] | None,
    installed: bool,
    ramdisk_kb: int | None,
    mount: str,
    idle_timeout: float = RUN_IDLE_TIMEOUT,
) -> tuple[int, str | None]:
    fix = os.path.join(mount, "fixtures")
    cwd = dev.probe().get("cwd") or "/"
    if root is None:
        root = (cwd.rstrip("/") or "") + "/ddq-test"
    root = root[1:] if root.startswith(":") else root
    argv = ["--root", root] + (["--installed", cwd] if installed else [])
    if os.path.isdir(fix):
        argv += ["--fixtures", "/remote/fixtures"]
    if fs != "posix":
        argv += ["--fs", fs]
    if ramdisk_kb is not None:
        argv += ["--blocks", str(max(1, ramdisk_kb * 1024 // RAMDISK_BLOCK[fs]))]
    if k:
        argv += ["-k", k]
    argv += list(modules)
    buf = bytearray()

    def sink(b: bytes) -> None:
        buf.extend(b)
        if out:
            out(b)

    dev.mount_local(mount, read_only=True)
    try:
        # The unix port keeps one interpreter across connections (no soft reset): drop modules an
        # earlier session imported, so the run uses the checkout (or, with installed=True, ddq as
        # flashed on the device, imported first from the device's own directory — the mount made
        # /remote the cwd — so that mprun's sys.path order cannot replace it).
        # _rc is set first: whatever fails after it, the host reads None and the error text.
        code = (
            "_rc = None\n"
            "import sys, gc\n"
            "for _m in list(sys.modules):\n"
            " _f = getattr(sys.modules[_m], '__file__', '') or ''\n"
            " if _m in %r or _f.startswith('/remote'):\n"
            % (PORT_MODULES,)
            + "  del sys.modules[_m]\n"
            "sys.path[:] = [_p for _p in sys.path if not _p.startswith('/remote')]\n"
            "gc.collect()\n"
            "print('ddq test: device heap free %d of %d'"
            " % (gc.mem_free(), gc.mem_free() + gc.mem_alloc()))\n"
            + (
                "sys.path.insert(0, %r)\ntry:\n import ddq\nfinally:\n sys.path.pop(0)\n"
                # (sys.modules holds it for mprun; a REPL global would outlive the session)
                "del ddq\n" % cwd
                if installed
                else ""
            )
            # --fs raw: the board's ddq_layout (its region), from its own directory
            + (
                "sys.path.insert(0, %r)\ntry:\n import ddq_layout\nexcept ImportError:\n pass\n"
                "finally:\n sys.path.pop(0)\n" % cwd
                if fs == "raw"
                else ""
            )
            + "sys.path.insert(0, '/remote/tests')\n"
            "import mprun\n"
            "try:\n"
            " _rc = mprun.main(%r)\n"
            "finally:\n"
            # The REPL's globals outlive the session: a module left bound here keeps everything
            # it imported (ddq and all) alive into the next one.
            " del mprun\n"
            " gc.collect()\n" % (argv,)
        )
        try:
            err = dev.run(code, sink, idle_timeout)
        except DeviceTimeout as e:
            raise TestRunError(
                "%s; the run was interrupted (a test that is silent longer needs "
                "--idle-timeout S)" % e
            ) from None
        rc = dev.eval("_rc", check=lambda v: v is None or is_int(v), what="the exit status")
    finally:
        dev.umount_local()
        try:
            dev.exec("import os\nos.chdir(%r)" % cwd)
        except Exception:
            pass
    if rc is None and err.strip():
        last = [ln.strip() for ln in err.strip().splitlines() if ln.strip()][-1]
        hint = ""
        if installed and last.startswith("ImportError") and "ddq" in last:
            hint = " (ddq is not installed on the device: run `ddq flash`, or drop --installed)"
        raise TestRunError("the test run failed on the device: %s%s" % (last, hint))
    if err and out:
        out(err.encode())
    sums = SUMMARY.findall(bytes(buf))
    summary = None
    if sums:
        p, f, s = sums[-1]
        summary = "%s passed, %s failed" % (int(p), int(f)) + (
            ", %d skipped" % int(s) if s else ""
        )
    if not isinstance(rc, int):
        if out and not err:
            out(b"ddq test: the run ended without a status (see the output above)\n")
        return 1, summary
    return rc, summary
