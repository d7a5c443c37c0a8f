# Helpers for the shared suite. Subset Python: runs unchanged on CPython (pytest) and on
# MicroPython (tests/mprun.py). No typing, no os.path, no f-strings; features are probed.
#
#   ROOT            directory under which tmpdir() makes fresh directories; the runner sets it
#                   (conftest.py: a pytest tmp dir per test; mprun.py: a directory on the
#                   filesystem under test, e.g. /lfs2/t/3). Default: a tempfile.mkdtemp() on
#                   CPython, a directory under /tmp or the cwd on MicroPython.
#   FIXTURES        absolute path of tests/fixtures/ddq-c (env DDQ_FIXTURES overrides).
#   tmpdir() rmtree(p) copytree(src, dst) copyfile(src, dst) FakeClock(start_ms)
#   raises(exc, fn, *a, **kw) Skip
#   read_file(p) write_file(p, data) listdir_sorted(p) file_size(p) needs_heap(nbytes, why)
import os

try:
    # CPython: pytest reports unittest.SkipTest (and subclasses) as skipped.
    from unittest import SkipTest as _SkipBase
except ImportError:
    _SkipBase = Exception


class Skip(_SkipBase):
    """Raise to skip the running test (a capability is missing); the message is the reason."""


_S_IFMT = 0o170000
_S_IFDIR = 0o040000
_EEXIST = 17
_ENOENT = 2


def _join(a, b):
    if a.endswith("/"):
        return a + b
    return a + "/" + b


def _normpath(path):
    # Resolve "." and ".." in an absolute or relative "/"-path (no os.path on MicroPython).
    absolute = path.startswith("/")
    out = []
    for part in path.split("/"):
        if part == "" or part == ".":
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not absolute:
                out.append(part)
            continue
        out.append(part)
    s = "/".join(out)
    if absolute:
        return "/" + s
    return s or "."


def _abspath(path):
    if path.startswith("/"):
        return _normpath(path)
    return _normpath(_join(os.getcwd(), path))


def _dirname(path):
    i = path.rfind("/")
    if i < 0:
        return "."
    if i == 0:
        return "/"
    return path[:i]


# lstat where it exists, so that rmtree never follows a symlink out of the tree.
_lstat = getattr(os, "lstat", os.stat)


def _kind(path):
    # 0 missing, 1 file (or anything not a directory), 2 directory.
    try:
        mode = _lstat(path)[0]
    except OSError:
        return 0
    if mode & _S_IFMT == _S_IFDIR:
        return 2
    return 1


def _makedirs(path):
    """Create path and its missing parents (no error if it exists)."""
    if _kind(path) == 2:
        return
    parent = _dirname(path)
    if parent not in (".", "/", path):
        _makedirs(parent)
    try:
        os.mkdir(path)
    except OSError as e:
        if e.errno != _EEXIST or _kind(path) != 2:
            raise


def rmtree(path):
    """Remove path and everything under it; a missing path is not an error."""
    k = _kind(path)
    if k == 0:
        return
    if k == 1:
        os.remove(path)
        return
    for name in os.listdir(path):
        rmtree(_join(path, name))
    os.rmdir(path)


_CHUNK = 1024  # a small board may have no free 4 KiB block


def copyfile(src, dst):
    """Copy file src to dst (created or replaced) in 1 KiB pieces."""
    buf = bytearray(_CHUNK)
    mv = memoryview(buf)
    with open(src, "rb") as fi:
        with open(dst, "wb") as fo:
            while True:
                n = fi.readinto(buf)
                if not n:
                    break
                fo.write(mv[:n])


def copytree(src, dst):
    """Copy directory src into dst (created, parents too), across filesystems.

    Copies bytes only: modes are not kept, so copies of the read-only fixtures are writable.
    """
    _makedirs(dst)
    for name in sorted(os.listdir(src)):
        s = _join(src, name)
        d = _join(dst, name)
        if _kind(s) == 2:
            copytree(s, d)
        else:
            copyfile(s, d)
    return dst


def read_file(path):
    """Return the whole content of path as bytes."""
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data):
    """Create or replace path with data (bytes); closed (hence committed) on return."""
    with open(path, "wb") as f:
        f.write(data)


def listdir_sorted(path):
    """Names in directory path, sorted (MicroPython's listdir order is the filesystem's)."""
    return sorted(os.listdir(path))


def file_size(path):
    """Size of path in bytes (os.stat()[6]: MicroPython has no st_size)."""
    return os.stat(path)[6]


# --- temporary directories -------------------------------------------------------------------

ROOT = None  # set by the runner; see the header
_tmp_count = [0]


def _default_root():
    try:
        import tempfile
    except ImportError:
        tempfile = None
    if tempfile is not None:
        return tempfile.mkdtemp(prefix="ddq-test-")
    base = "/tmp" if _kind("/tmp") == 2 else os.getcwd()
    for i in range(1000):
        path = _join(base, "ddq-test-%d" % i)
        try:
            os.mkdir(path)
            return path
        except OSError as e:
            if e.errno != _EEXIST:
                raise
    raise OSError(_EEXIST)


def tmpdir():
    """Return a fresh, empty directory under ROOT (on the filesystem under test)."""
    global ROOT
    if ROOT is None:
        ROOT = _default_root()
    _tmp_count[0] += 1
    path = _join(ROOT, "d%d" % _tmp_count[0])
    rmtree(path)
    _makedirs(path)
    return path


# --- clock and assertions --------------------------------------------------------------------


class FakeClock:
    """Wall clock for tests: call it for Unix-epoch ms (int); move it with advance() / set()."""

    def __init__(self, start_ms=1767225600000):
        self.now_ms = int(start_ms)

    def __call__(self):
        return self.now_ms

    def advance(self, ms):
        self.now_ms += int(ms)
        return self.now_ms

    def set(self, ms):
        self.now_ms = int(ms)
        return self.now_ms


def _name(t):
    if isinstance(t, tuple):
        return "(" + ", ".join([_name(x) for x in t]) + ")"
    return getattr(t, "__name__", repr(t))


def raises(exc_type, fn, *args, **kw):
    """Call fn(*args, **kw); return the exc_type it raises, or fail (AssertionError)."""
    try:
        fn(*args, **kw)
    except exc_type as e:
        return e
    except Exception as e:
        raise AssertionError("expected %s, got %s: %s" % (_name(exc_type), _name(type(e)), e))
    raise AssertionError("expected %s, nothing was raised" % _name(exc_type))


def heap_size():
    """The interpreter's whole heap in bytes (MicroPython), or None where it has no fixed heap."""
    try:
        import gc

        return gc.mem_free() + gc.mem_alloc()
    except AttributeError:  # CPython: no gc.mem_free
        return None


def word_bytes():
    """8 on a 64-bit interpreter, 4 on a 32-bit one (sys.maxsize: 2**63 - 1 or 2**31 - 1)."""
    import sys

    return 8 if getattr(sys, "maxsize", 0) > 0xFFFFFFFF else 4


def needs_heap(nbytes, why, nbytes32=None):
    """Skip the running test (or module) where the whole heap is below nbytes: the test's own
    data needs more than a small board has, which its user cannot change. Never skips on
    CPython, nor on the unix port's default or 8 MiB heaps. nbytes is measured on the unix
    port (64-bit); nbytes32, where given, on the 32-bit qemu board (tests/host/test_host_qemu.py:
    objects there are about two thirds of the size), and counts on a 32-bit port."""
    total = heap_size()
    if nbytes32 is not None and word_bytes() == 4:
        nbytes = nbytes32
    if total is not None and total < nbytes:
        raise Skip(
            "needs a %d KiB heap, this board has %d KiB: %s" % (nbytes // 1024, total // 1024, why)
        )


# What the message layer's test modules need beside the test runner: on the unix port (64-bit)
# ddq, ddq_outbox and ddq_mqtt import 67 KB and an open Outbox keeps 25 KB more (46 KB of a
# 140 KiB heap stay free for an application); `ddq test` adds its runner (mpremote's mount,
# mprun, support: 32 KB) and the module's own code, which leaves its tests too little.
OUTBOX_HEAP = (
    "the message layer (ddq, ddq_outbox, ddq_mqtt: 67 KB imported; an open Outbox "
    "25 KB) beside the test runner (32 KB) and this module"
)


# The tests that ran within a few hundred bytes of the unix port's 140 KiB model (64-bit) and
# met MemoryError there once the queue took NoMemory's handling and libddq's admission its own
# module (issue 29): a queue's attribute table (944 B) or an index block no longer found a free
# run after the module's earlier queues (fragmentation, not the bytes free: DESIGN §4.1). The
# 32-bit 140 KiB board (objects about two thirds the size) runs them.
MARGIN_HEAP = (
    "several queues opened and closed in one session: on the 64-bit 140 KiB model the heap "
    "is too fragmented for the next one's blocks (the 32-bit 140 KiB board runs it)"
)


# --- where the repository and the fixtures are -----------------------------------------------


def _repo_root():
    # This file is <repo>/tests/support.py.
    here = globals().get("__file__")
    if here:
        return _dirname(_dirname(_abspath(here)))
    return _abspath(".")


_REPO = _repo_root()


def _fixtures():
    getenv = getattr(os, "getenv", None)
    if getenv is not None:
        env = getenv("DDQ_FIXTURES")
        if env:
            return _abspath(env)
    return _normpath(_join(_REPO, "tests/fixtures/ddq-c"))


FIXTURES = _fixtures()
