# memfs: an in-memory file system behind ddq's storage seam (docs/CONVENTIONS.md "Storage seam").
# Subset Python: runs on CPython and MicroPython.
#
# Files are bytearrays reached through directory entries (name -> inode number), so rename moves an
# inode and a crash model can keep durable and volatile views apart. With record=True every
# mutating call is appended to self.log as a tuple; tests/torture/crash.py replays that log to
# build every legal crash state. self.calls counts every seam call (fault injection indexes it);
# self.budget bounds them (bad images: a corrupt length must never make recovery loop without end).

_ENOENT = 2
_EIO = 5
_EBADF = 9
_EEXIST = 17
_ENOTDIR = 20
_EISDIR = 21
_EINVAL = 22


class BudgetExceeded(Exception):
    """Raised when a workload makes more storage calls than its budget allows."""


def failing(name, check):
    """A MemFS method `name` for a fault-injecting subclass: when self.<check>(name) says this
    call is the one, it counts the fault (self._tick) and raises self._err() instead."""

    def f(self, *a):
        if getattr(self, check)(name):
            self._tick(name)
            raise self._err()
        return getattr(MemFS, name)(self, *a)

    return f


def with_failing(cls, check, names):
    """Give the MemFS subclass cls failing(name, check) for each of the space-separated names."""
    for name in names.split():
        setattr(cls, name, failing(name, check))
    return cls


def _parent(path):
    i = path.rfind("/")
    return path[:i] if i > 0 else ("/" if i == 0 else "")


class MemFS:
    Locked = OSError  # the harness sets this to ddq.Locked

    def __init__(self, files=None, dirs=None, record=False, budget=0, can_truncate=False):
        # files: {path: bytes}; dirs: iterable of directory paths.
        self.names = {}  # path -> inode number
        self.data = {}  # inode number -> bytearray
        self.dirs = {"": 1, "/": 1}
        self.next_ino = 1
        self.handles = {}  # handle id -> [ino, mode, path]
        self.next_h = 1
        self.locks = {}
        self.log = [] if record else None
        self.calls = 0
        self.budget = budget
        self.max_open = 0
        # ddq uses truncate(path, size) when the storage says it can (PosixStorage on CPython);
        # without it (MicroPython) a torn tail is cut by copy + rename.
        self.can_truncate = can_truncate
        self.trace = None  # a list: the method name of every seam call, in order
        if dirs:
            for d in dirs:
                self.dirs[d] = 1
        if files:
            for p in files:
                ino = self.next_ino
                self.next_ino += 1
                self.names[p] = ino
                self.data[ino] = bytearray(files[p])
                d = _parent(p)
                while d and d not in self.dirs:
                    self.dirs[d] = 1
                    d = _parent(d)

    # -- helpers for tests --
    def open_count(self):
        return len(self.handles)

    def snapshot(self):
        """The current (volatile) content: ({path: bytes}, sorted dirs)."""
        out = {}
        for p in self.names:
            out[p] = bytes(self.data[self.names[p]])
        return out, sorted(d for d in self.dirs if d not in ("", "/"))

    def _tick(self, name):
        self.calls += 1
        if self.trace is not None:
            self.trace.append(name)
        if self.budget and self.calls > self.budget:
            raise BudgetExceeded("storage call budget %d exceeded" % self.budget)

    def _rec(self, entry):
        if self.log is not None:
            self.log.append(entry)

    def _h(self, handle):
        h = self.handles.get(handle)
        if h is None:
            raise OSError(_EBADF)
        return h

    # -- the seam --
    def open(self, path, mode):
        self._tick("open")
        if path in self.dirs:
            raise OSError(_EISDIR)
        ino = self.names.get(path)
        if mode == "rb":
            if ino is None:
                raise OSError(_ENOENT)
        elif mode == "ab" or mode == "wb":
            if _parent(path) not in self.dirs:
                raise OSError(_ENOENT)
            if ino is None:
                ino = self.next_ino
                self.next_ino += 1
                self.names[path] = ino
                self.data[ino] = bytearray()
                self._rec(("create", path, ino))
            elif mode == "wb":
                self.data[ino] = bytearray()
                self._rec(("trunc", ino))
        else:
            raise OSError(_EINVAL)
        hid = self.next_h
        self.next_h += 1
        self.handles[hid] = [ino, mode, path]
        if len(self.handles) > self.max_open:
            self.max_open = len(self.handles)
        return hid

    def write(self, handle, buf):
        self._tick("write")
        h = self._h(handle)
        if h[1] == "rb":
            raise OSError(_EBADF)
        d = self.data[h[0]]
        off = len(d)
        b = bytes(buf)
        d.extend(b)
        self._rec(("write", h[0], off, b))

    def read_into(self, handle, offset, buf):
        self._tick("read_into")
        h = self._h(handle)
        d = self.data[h[0]]
        n = len(d) - offset
        if n <= 0:
            return 0
        if n > len(buf):
            n = len(buf)
        buf[0:n] = d[offset : offset + n]
        return n

    def sync(self, handle):
        self._tick("sync")
        h = self._h(handle)
        self._rec(("sync", h[0]))

    def close(self, handle):
        self._tick("close")
        h = self.handles.pop(handle, None)
        if h is None:
            raise OSError(_EBADF)
        if h[1] != "rb":
            self._rec(("close", h[0]))

    def size(self, path):
        self._tick("size")
        ino = self.names.get(path)
        if ino is None:
            if path in self.dirs:
                return 0
            raise OSError(_ENOENT)
        return len(self.data[ino])

    def kind(self, path):
        self._tick("kind")
        if path in self.names:
            return 1
        if path in self.dirs:
            return 2
        return 0

    def listdir(self, path):
        self._tick("listdir")
        if path not in self.dirs:
            raise OSError(_ENOENT if path not in self.names else _ENOTDIR)
        pre = path + "/" if path not in ("", "/") else path
        out = []
        for p in self.names:
            if p.startswith(pre) and "/" not in p[len(pre) :]:
                out.append(p[len(pre) :])
        for p in self.dirs:
            if p not in ("", "/") and p.startswith(pre) and p != path and "/" not in p[len(pre) :]:
                out.append(p[len(pre) :])
        out.sort()
        return out

    def mkdir(self, path):
        self._tick("mkdir")
        if path in self.dirs or path in self.names:
            raise OSError(_EEXIST)
        if _parent(path) not in self.dirs:
            raise OSError(_ENOENT)
        self.dirs[path] = 1
        self._rec(("mkdir", path))

    def rename(self, src, dst):
        self._tick("rename")
        ino = self.names.get(src)
        if ino is None:
            raise OSError(_ENOENT)
        if dst in self.dirs or _parent(dst) not in self.dirs:
            raise OSError(_EISDIR if dst in self.dirs else _ENOENT)
        if src == dst:
            return
        old = self.names.get(dst)
        del self.names[src]
        self.names[dst] = ino
        self._rec(("rename", src, dst, ino, old))

    def remove(self, path):
        self._tick("remove")
        ino = self.names.get(path)
        if ino is None:
            raise OSError(_EISDIR if path in self.dirs else _ENOENT)
        del self.names[path]
        self._rec(("remove", path, ino))

    def sync_dir(self, path):
        self._tick("sync_dir")
        if path not in self.dirs:
            raise OSError(_ENOENT)
        self._rec(("sync_dir", path))

    def truncate(self, path, size):
        # PosixStorage.truncate: os.truncate then fsync of the file.
        self._tick("truncate")
        ino = self.names.get(path)
        if ino is None:
            raise OSError(_ENOENT)
        del self.data[ino][size:]
        self._rec(("truncate", ino, size))
        self._rec(("sync", ino))

    def lock(self, path):
        # flock semantics: one holder per file per process; a fresh MemFS (after a crash) has none.
        self._tick("lock")
        f = path if path.endswith("queue.lock") else path + "/queue.lock"
        if f in self.locks:
            raise self.Locked("locked: " + f)
        if f not in self.names:
            self.close(self.open(f, "ab"))
        self.locks[f] = 1
        return f

    def unlock(self, token):
        self._tick("unlock")
        self.locks.pop(token, None)
