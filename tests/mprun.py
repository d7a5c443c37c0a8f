# Runner for the shared suite on MicroPython (and on CPython, as a self-test).
#
#   micropython tests/mprun.py [--fs posix|lfs2|fat|flash|raw] [-k SUBSTR] [--root DIR]
#                              [--fixtures DIR] [--blocks N] [--installed DIR] [MODULE ...]
#
# Imports tests/test_*.py (sorted by name, or the MODULEs given: "test_x", "test_x.py" or a
# path) with tests/ and port/ on sys.path, runs each module-level test_* function in name order
# and prints one line per test:
#
#   PASS module.test_name
#   FAIL module.test_name: ExcType: message      (then the traceback)
#   SKIP module.test_name: reason                (the test raised support.Skip)
#   SKIP module: this port has no socket module  (its import needs a module a port may lack)
#
# and a closing line "<fs>: N passed, N failed, N skipped". Exit status: 0 all passed (or
# skipped), 1 a test failed, 2 bad usage or no filesystem, 5 no test ran (as pytest).
#
# --fs posix  the filesystem of the cwd (the host's on the unix port, the flash on a board);
#             tests run under a fresh directory in /tmp, or in the cwd where /tmp is missing.
# --fs lfs2   a VfsLfs2 on a RAM block device (4096 B x 512 blocks = 2 MiB) mounted at /lfs2
# --fs fat    a VfsFat on a RAM block device (512 B x 8192 blocks = 4 MiB) mounted at /fat
# --fs flash  ddq_flash.FlashStorage on a NOR model (4096 B x 512 blocks) mounted at /flash
#             through blockdev.FlashVfs (so PosixStorage and the suite's helpers reach it)
# --fs raw    the board's own raw region (`ddq flash --layout raw`: ddq_layout.region() and its
#             PAGE, ddq_layout imported from the board's directory first) mounted at /raw so:
#             the tests' files sit beside the app's queue (stop the app; `ddq test --fs raw`)
# The RAM disks live in the MicroPython heap: run them with `micropython -X heapsize=8M`, or
# make them smaller with --blocks N (a board has a few hundred KiB of heap).
# --installed DIR  the port modules in DIR (a board's, as `ddq flash` installed them) come before
#             the checkout's port/, which serves only what DIR lacks (`ddq test --installed`).
# The host filesystem stays mounted at "/" beside them, so the test sources and the fixtures
# remain reachable through absolute paths.
#
# Each test gets a fresh support.ROOT (<base>/<n>) on the filesystem under test, removed after
# the test; --root DIR sets <base> (for lfs2/fat only a DIR on the RAM disk). Everything here is
# feature-probed (no unix-only assumption), so a board can run it too: `import mprun;
# mprun.main(["--root", "/flash/ddqt"])` with the repository mounted.
import gc
import os
import sys

USAGE = (
    "usage: mprun.py [--fs posix|lfs2|fat|flash|raw] [-k SUBSTR] [--root DIR] [--fixtures DIR]"
    " [--blocks N] [--installed DIR] [MODULE ...]"
)


def _die(msg):
    print(msg)
    raise SystemExit(2)


def _tests_dir():
    # tests/ as an absolute path, from this file's own location (there is no os.path).
    # Without a file (`mpremote run`), assume the cwd is the repository.
    here = globals().get("__file__") or "tests/mprun.py"
    if not here.startswith("/"):
        cwd = os.getcwd()
        here = cwd + ("" if cwd.endswith("/") else "/") + here
    return here[: here.rfind("/")]


# --- filesystems -----------------------------------------------------------------------------


# fs -> (VFS class name, block size, block count, mount point)
FILESYSTEMS = {
    "lfs2": ("VfsLfs2", 4096, 512, "/lfs2"),
    "fat": ("VfsFat", 512, 8192, "/fat"),
}


def _vfs_module():
    try:
        import vfs  # MicroPython >= 1.23

        return vfs
    except ImportError:
        pass
    if hasattr(os, "mount"):  # older MicroPython: mount and the Vfs classes live in os
        return os
    return None


def mount_ram_fs(fs, num_blocks=None):
    """Format a RAM disk with filesystem fs ("lfs2" or "fat"), mount it; return the mount point."""
    cls_name, block_size, default_blocks, point = FILESYSTEMS[fs]
    num_blocks = num_blocks or default_blocks
    vfs = _vfs_module()
    cls = getattr(vfs, cls_name, None) if vfs is not None else None
    if cls is None:
        _die("mprun: --fs %s needs MicroPython's vfs.%s" % (fs, cls_name))
    try:
        from blockdev import RAMBlockDev  # tests/blockdev.py (tests/ is on sys.path)

        bdev = RAMBlockDev(block_size, num_blocks)
    except MemoryError:
        _die(
            "mprun: no heap for a %d KiB RAM disk: run micropython -X heapsize=8M"
            % (block_size * num_blocks // 1024)
        )
    cls.mkfs(bdev)
    try:
        vfs.umount(point)  # left from an earlier run in the same interpreter
    except OSError:
        pass
    vfs.mount(cls(bdev), point)
    return point


def mount_flash(num_blocks=None, region=False):
    """A ddq_flash.FlashStorage over a NOR model (4096 B x 512 blocks = 2 MiB, the rp2's erase
    block) mounted at /flash, or with region the board's raw region (ddq_layout) at /raw (a
    board's own filesystem may be at /flash), through blockdev.FlashVfs; return the mount point."""
    vfs = _vfs_module()
    if vfs is None:
        _die("mprun: --fs flash needs MicroPython's vfs.mount")
    import blockdev
    import ddq_flash

    page = 1
    if region:
        try:
            import ddq_layout
        except ImportError:
            _die("mprun: --fs raw needs the raw layout (no ddq_layout: ddq flash --layout raw)")
        dev, page = ddq_layout.region(), ddq_layout.PAGE
    else:
        try:
            dev = blockdev.NORBlockDev(4096, num_blocks or 512)
        except MemoryError:
            _die("mprun: no heap for the flash: run micropython -X heapsize=8M")
    point = "/raw" if region else "/flash"
    try:
        vfs.umount(point)
    except OSError:
        pass
    vfs.mount(blockdev.FlashVfs(ddq_flash.FlashStorage(dev, page=page)), point)
    return point


def _fresh_dir(base):
    # A new directory under base whose name no earlier or concurrent run holds (mkdir is the lock).
    for i in range(1000):
        path = "%s/ddq-mprun-%d" % (base, i)
        try:
            os.mkdir(path)
            return path
        except OSError as e:
            if e.errno != 17:  # EEXIST
                raise
    _die("mprun: no free directory name under " + base)


# --- running ---------------------------------------------------------------------------------


def _print_traceback(e):
    if hasattr(sys, "print_exception"):  # MicroPython
        sys.print_exception(e)
    else:
        import traceback

        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stdout)


def _exc_line(e):
    return "%s: %s" % (type(e).__name__, e)


# Modules a port may lack (no networking, no threads, no asyncio): a test module whose import
# fails for want of one of them is skipped with that reason, as its tests would be.
OPTIONAL_MODULES = ("socket", "ssl", "network", "select", "asyncio", "_thread")


def _missing_optional(e):
    """The optional module an ImportError says is missing ("no module named 'x'"), or None."""
    text = str(e)
    if "named" not in text or text.count("'") != 2:
        return None
    name = text[text.find("'") + 1 : text.rfind("'")].split(".")[0]
    return name if name in OPTIONAL_MODULES else None


def _module_name(arg):
    name = arg[arg.rfind("/") + 1 :]
    if name.endswith(".py"):
        name = name[:-3]
    return name


def discover(tests_dir):
    """Names of the shared-suite modules tests_dir/test_*.py, sorted."""
    return sorted(
        [n[:-3] for n in os.listdir(tests_dir) if n.startswith("test_") and n.endswith(".py")]
    )


def parse_args(argv):
    opts = {
        "fs": "posix",
        "k": None,
        "root": None,
        "fixtures": None,
        "blocks": None,
        "installed": None,
        "modules": [],
    }
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--fs", "-k", "--root", "--fixtures", "--blocks", "--installed"):
            if i + 1 >= len(argv):
                _die(USAGE)
            opts[a.lstrip("-")] = argv[i + 1]
            i += 2
            continue
        if a in ("-h", "--help") or a.startswith("-"):
            _die(USAGE)
        opts["modules"].append(_module_name(a))
        i += 1
    if opts["fs"] not in ("posix", "lfs2", "fat", "flash", "raw"):
        _die(USAGE)
    if opts["blocks"] is not None:
        try:
            opts["blocks"] = int(opts["blocks"])
        except ValueError:
            _die(USAGE)
    return opts


class Runner:
    def __init__(self, support, base, label, k=None):
        self.support = support
        self.base = base  # each test's ROOT is base/<n>
        self.label = label
        self.k = k
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.n = 0

    def run_module(self, name):
        k = self.k
        try:
            mod = __import__(name)
        except self.support.Skip as e:
            if k is None or k in name:
                print("SKIP %s: %s" % (name, e))
                self.skipped += 1
            return
        except ImportError as e:
            missing = _missing_optional(e)
            if missing is None:
                print("FAIL %s: %s" % (name, _exc_line(e)))
                _print_traceback(e)
                self.failed += 1
            elif k is None or k in name:
                print("SKIP %s: this port has no %s module" % (name, missing))
                self.skipped += 1
            return
        except Exception as e:
            print("FAIL %s: %s" % (name, _exc_line(e)))
            _print_traceback(e)
            self.failed += 1
            return
        for tname in sorted([n for n in dir(mod) if n.startswith("test_")]):
            full = name + "." + tname
            fn = getattr(mod, tname)
            if callable(fn) and (k is None or k in full):
                self.run_test(full, fn)
        # Free the module before the next one (boards have little RAM).
        del sys.modules[name]
        gc.collect()

    def run_test(self, full, fn):
        support = self.support
        self.n += 1
        root = "%s/%d" % (self.base, self.n)
        support.rmtree(root)
        support._makedirs(root)
        support.ROOT = root
        try:
            fn()
            print("PASS " + full)
            self.passed += 1
        except support.Skip as e:
            print("SKIP %s: %s" % (full, e))
            self.skipped += 1
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit from a test is a failure, not an exit
            print("FAIL %s: %s" % (full, _exc_line(e)))
            _print_traceback(e)
            self.failed += 1
        finally:
            support.ROOT = None
            try:
                support.rmtree(root)
            except Exception as e:
                print("mprun: could not remove %s: %s" % (root, _exc_line(e)))
            gc.collect()

    def summary(self):
        line = "%d passed, %d failed" % (self.passed, self.failed)
        if self.skipped:
            line += ", %d skipped" % self.skipped
        return "%s: %s" % (self.label, line)


def main(argv=None):
    """Run the suite; return the exit status (see the header)."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    tests = _tests_dir()
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import support

    tests = support._normpath(tests)
    port = support._normpath(tests + "/../port")
    for p in (port, tests):
        if p not in sys.path:
            sys.path.insert(0, p)
    if opts["installed"]:  # after tests/, before port/: what the board has, as it has it
        sys.path.insert(sys.path.index(tests) + 1, opts["installed"])

    if opts["fixtures"]:
        support.FIXTURES = support._abspath(opts["fixtures"])
    fs = opts["fs"]
    owned = None  # a directory this run made and removes at the end
    root = support._abspath(opts["root"]) if opts["root"] else None
    if fs != "posix":
        # On a RAM disk: --root counts only when it lies on that disk.
        if fs in ("flash", "raw"):
            point = mount_flash(opts["blocks"], fs == "raw")
        else:
            point = mount_ram_fs(fs, opts["blocks"])
        base = root if root and root.startswith(point + "/") else point + "/t"
    elif root:
        base = root
    else:
        tmp = "/tmp" if support._kind("/tmp") == 2 else os.getcwd()
        base = owned = _fresh_dir(tmp)
    support._makedirs(base)
    impl = sys.implementation
    print(
        "mprun: %s %s, fs=%s, root=%s, fixtures=%s"
        % (impl.name, ".".join([str(x) for x in impl.version[:3]]), fs, base, support.FIXTURES)
    )
    runner = Runner(support, base, fs, opts["k"])
    try:
        for name in opts["modules"] or discover(tests):
            runner.run_module(name)
    finally:
        if owned is not None:
            try:
                support.rmtree(owned)
            except Exception as e:
                print("mprun: could not remove %s: %s" % (owned, _exc_line(e)))
    if runner.passed + runner.failed + runner.skipped == 0:
        print("mprun: no test ran")
    print(runner.summary())
    if runner.failed:
        return 1
    if runner.passed + runner.skipped == 0:
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
