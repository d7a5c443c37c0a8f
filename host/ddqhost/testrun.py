"""ddq test: run the shared suite (tests/mprun.py) on a device, with the checkout mounted by mpremote.

The checkout is exposed at /remote (`mpremote mount`); when the C fixtures live outside it (the
default ../shared/fixtures/ddq-c), the common parent directory is mounted instead. Test files go to a
directory on the device's own filesystem (default <device cwd>/ddq-test), so the flash is what is
tested. The output is streamed; its last line is mprun's `<fs>: N passed, N failed[, N skipped]`.
"""

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence

from . import qdir
from .device import Device

SUMMARY = re.compile(rb"^\w+: (\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$", re.M)


def fixtures_dir() -> str:
    env = os.environ.get("DDQ_FIXTURES")
    if env:
        return os.path.abspath(env)
    return os.path.normpath(os.path.join(qdir.repo_root(), "..", "shared", "fixtures", "ddq-c"))


# Block sizes of mprun's RAM disks (tests/mprun.py FILESYSTEMS): --ramdisk-kb becomes --blocks.
RAMDISK_BLOCK = {"lfs2": 4096, "fat": 512}


def suite_modules() -> list[str]:
    """The shared suite's modules (tests/test_*.py), sorted, as mprun discovers them."""
    tests = os.path.join(qdir.repo_root(), "tests")
    return sorted(n[:-3] for n in os.listdir(tests) if n.startswith("test_") and n.endswith(".py"))


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
) -> tuple[int, str | None]:
    """Run mprun on dev; return (exit status, summary line or None).

    ramdisk_kb sizes the RAM disk of --fs lfs2/fat (it lives in the device's heap: a board with
    a small heap needs a small one). each=True runs every module in a session of its own (one
    mprun call per module, modules freed in between), for boards whose heap does not hold the
    suite's modules one after another in one session; the summary then adds up the sessions.
    mpy=True mounts the suite and port/ compiled to .mpy on the host (mpy-cross), so the device
    compiles nothing: compiling a large test module from source needs more heap than running it.
    """
    if ramdisk_kb is not None and fs not in RAMDISK_BLOCK:
        raise ValueError("ramdisk_kb needs fs lfs2 or fat")
    tree = tempfile.mkdtemp(prefix="ddq-test-mpy-") if mpy else None
    try:
        if tree is not None:
            _build_mpy_tree(tree)
            modules = list(modules) or suite_modules()
        return _run(dev, modules, k, fs, root, out, installed, ramdisk_kb, each, tree)
    finally:
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)


def _build_mpy_tree(tree: str) -> None:
    """tree/tests and tree/port as .mpy (a module mpy-cross refuses stays .py), tree/fixtures."""
    from . import transfer

    repo = qdir.repo_root()
    for sub in ("tests", "port"):
        os.makedirs(os.path.join(tree, sub))
        src_dir = os.path.join(repo, sub)
        for name in sorted(os.listdir(src_dir)):
            src = os.path.join(src_dir, name)
            if not name.endswith(".py") or not os.path.isfile(src):
                continue
            try:
                transfer.mpy_cross(src, os.path.join(tree, sub, name[:-3] + ".mpy"))
            except transfer.TransferError:
                shutil.copy(src, os.path.join(tree, sub, name))
    fix = fixtures_dir()
    if os.path.isdir(fix):
        shutil.copytree(fix, os.path.join(tree, "fixtures"))


def _run(
    dev: Device,
    modules: Sequence[str],
    k: str | None,
    fs: str,
    root: str | None,
    out: Callable[[bytes], object] | None,
    installed: bool,
    ramdisk_kb: int | None,
    each: bool,
    tree: str | None,
) -> tuple[int, str | None]:
    if not each:
        return _run_once(dev, list(modules), k, fs, root, out, installed, ramdisk_kb, tree)
    totals = [0, 0, 0]
    worst = 0
    bad = []
    for m in list(modules) or suite_modules():
        rc, summary = _run_once(dev, [m], k, fs, root, out, installed, ramdisk_kb, tree)
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
    tree: str | None = None,
) -> tuple[int, str | None]:
    repo = tree or qdir.repo_root()
    fix = os.path.join(tree, "fixtures") if tree else fixtures_dir()
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

    dev.mount_local(mount)
    err = ""
    try:
        # The unix port keeps one interpreter across connections (no soft reset): drop modules an
        # earlier session imported, so the run uses the checkout (or, with installed=True, ddq as
        # flashed on the device, imported first so that mprun's sys.path order cannot replace it;
        # from the device's own directory: the mount made /remote the cwd).
        code = (
            "import sys, gc\n"
            "for _m in list(sys.modules):\n"
            " _f = getattr(sys.modules[_m], '__file__', '') or ''\n"
            " if _m in ('ddq', 'ddq_outbox', 'ddq_mqtt', 'ddq_index') or _f.startswith('/remote'):\n"
            "  del sys.modules[_m]\n"
            "_rc = None\n"
            "gc.collect()\n"
            "print('ddq test: device heap free %d of %d' % (gc.mem_free(), gc.mem_free() + gc.mem_alloc()))\n"
            + (
                "sys.path.insert(0, %r)\ntry:\n import ddq\nfinally:\n sys.path.pop(0)\n" % cwd
                if installed
                else ""
            )
            + "sys.path.insert(0, '/remote/%s')\n"
            "import mprun\n"
            "try:\n"
            " _rc = mprun.main(%r)\n"
            "finally:\n"
            # The REPL's globals outlive the session: a module left bound here keeps everything
            # it imported (ddq and all) alive into the next one.
            " del mprun\n"
            " gc.collect()\n" % (rel_tests, argv)
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
        if out and not err:
            out(b"ddq test: the run ended without a status (see the output above)\n")
        return 1, summary
    return rc, summary
