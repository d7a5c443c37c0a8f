# A tiny fault-injecting storage for the shared suite (subset Python): it wraps ddq.PosixStorage
# and raises OSError(errno) on the n-th call of a chosen method (a subclass may override _hit:
# tests/test_nomem.py raises MemoryError from it).
import ddq


class FaultStorage(ddq.PosixStorage):
    def __init__(self):
        super().__init__()
        self.fail = {}  # method name -> [calls left before failing, errno, persistent]
        self.calls = {}

    def arm(self, method, after=0, errno=5, persistent=False):
        self.fail[method] = [after, errno, persistent]

    def _hit(self, method):
        self.calls[method] = self.calls.get(method, 0) + 1
        f = self.fail.get(method)
        if f is None:
            return
        if f[0] > 0:
            f[0] -= 1
            return
        if not f[2]:
            del self.fail[method]
        raise OSError(f[1], "injected " + method)

    def write(self, f, buf):
        self._hit("write")
        super().write(f, buf)

    def sync(self, f):
        self._hit("sync")
        super().sync(f)

    def open(self, path, mode):
        self._hit("open")
        return super().open(path, mode)

    def rename(self, src, dst):
        self._hit("rename")
        super().rename(src, dst)

    def read_into(self, f, offset, buf):
        self._hit("read_into")
        return super().read_into(f, offset, buf)

    def sync_dir(self, path):
        self._hit("sync_dir")
        super().sync_dir(path)

    def remove(self, path):
        self._hit("remove")
        super().remove(path)

    def kind(self, path):
        self._hit("kind")
        return super().kind(path)
