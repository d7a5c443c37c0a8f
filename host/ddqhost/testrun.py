"""ddq test: run the shared suite (tests/mprun.py) on a device, with the checkout mounted by mpremote.

The checkout is exposed at /remote (`mpremote mount`); when the C fixtures live outside it (the
default ../shared/fixtures/ddq-c), the common parent directory is mounted instead. Test files go to a
directory on the device's own filesystem (default <device cwd>/ddq-test), so the flash is what is
tested. The output is streamed; its last line is mprun's `<fs>: N passed, N failed[, N skipped]`.
"""

import os
import re
from collections.abc import Callable, Sequence

from . import qdir
from .device import Device

SUMMARY = re.compile(rb"^\w+: (\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$", re.M)


def fixtures_dir() -> str:
    env = os.environ.get("DDQ_FIXTURES")
    if env:
        return os.path.abspath(env)
    return os.path.normpath(os.path.join(qdir.repo_root(), "..", "shared", "fixtures", "ddq-c"))


def run(
    dev: Device,
    modules: Sequence[str] = (),
    k: str | None = None,
    fs: str = "posix",
    root: str | None = None,
    out: Callable[[bytes], object] | None = None,
    installed: bool = False,
) -> tuple[int, str | None]:
    """Run mprun on dev; return (exit status, summary line or None)."""
    repo = qdir.repo_root()
    fix = fixtures_dir()
    mount = os.path.commonpath([repo, fix]) if os.path.isdir(fix) else repo
    rel_tests = os.path.relpath(os.path.join(repo, "tests"), mount).replace(os.sep, "/")
    cwd = dev.probe().get("cwd") or "/"
    if root is None:
        root = (cwd.rstrip("/") or "") + "/ddq-test"
    root = root[1:] if root.startswith(":") else root
    argv = ["--root", root]
    if os.path.isdir(fix):
        argv += ["--fixtures", "/remote/" + os.path.relpath(fix, mount).replace(os.sep, "/")]
    if fs != "posix":
        argv += ["--fs", fs]
    if k:
        argv += ["-k", k]
    argv += list(modules)
    buf = bytearray()

    def sink(b: bytes) -> None:
        buf.extend(b)
        if out:
            out(b)

    dev.mount_local(mount)
    try:
        # The unix port keeps one interpreter across connections (no soft reset): drop modules an
        # earlier session imported, so the run uses the checkout (or, with installed=True, ddq as
        # flashed on the device, imported first so that mprun's sys.path order cannot replace it).
        code = (
            "import sys\n"
            "for _m in list(sys.modules):\n"
            " _f = getattr(sys.modules[_m], '__file__', '') or ''\n"
            " if _m in ('ddq', 'ddq_index', 'ddq_reclaim', 'ddq_outbox', 'ddq_mqtt') or _f.startswith('/remote'):\n"
            "  del sys.modules[_m]\n"
            + ("import ddq\n" if installed else "")
            + "sys.path.insert(0, '/remote/%s')\n"
            "import mprun\n"
            "_rc = None\n"
            "_rc = mprun.main(%r)\n" % (rel_tests, argv)
        )
        err = dev.run(code, sink)
        rc = dev.eval("_rc")
    finally:
        dev.umount_local()
        try:
            dev.exec("import os\nos.chdir(%r)" % cwd)
        except Exception:
            pass
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
        return 1, summary
    return rc, summary
