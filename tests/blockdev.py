# blockdev: the one RAM block device of the shared suite's runner (tests/mprun.py), the torture
# (tests/torture/mp_powercut.py) and the benchmarks (bench/mp_bench.py). Subset Python.
#
# MicroPython's extended block protocol (readblocks/writeblocks with an offset, ioctl 1-6), as
# VfsLfs2 and VfsFat call it. An erased block reads 0xFF, like NOR flash. It counts reads,
# programs, bytes programmed and erases (zero() resets them); a subclass that must see every
# program or erase (a power cut) overrides program() and erase().
# The virtual board (host/ddqhost/vboard.py) keeps its own FileBlockDev: it is file-backed, and
# it runs from an installed wheel, where tests/ does not exist.


class RAMBlockDev:
    """A bytearray of num_blocks blocks of block_size bytes (data: an image to start from)."""

    def __init__(self, block_size, num_blocks, data=None):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.data = data if data is not None else bytearray(block_size * num_blocks)
        self.mv = memoryview(self.data)
        self.erased = b"\xff" * block_size
        self.zero()

    def zero(self):
        self.reads = self.progs = self.prog_bytes = self.erases = 0

    def readblocks(self, n, buf, offset=0):
        a = n * self.block_size + offset
        self.reads += 1
        buf[:] = self.mv[a : a + len(buf)]

    def writeblocks(self, n, buf, offset=None):
        return self.program(n * self.block_size + (offset or 0), buf)

    def ioctl(self, op, arg):
        if op == 4:  # BLOCK_COUNT
            return self.num_blocks
        if op == 5:  # BLOCK_SIZE
            return self.block_size
        if op == 6:  # BLOCK_ERASE
            return self.erase(arg * self.block_size)
        return 0  # 1 INIT, 2 DEINIT, 3 SYNC

    def program(self, a, buf):
        """Write buf at byte address a now (buf may point into C memory valid only during the
        call)."""
        self.mv[a : a + len(buf)] = buf
        self.progs += 1
        self.prog_bytes += len(buf)
        return 0

    def erase(self, a):
        """Erase the block at byte address a."""
        self.mv[a : a + self.block_size] = self.erased
        self.erases += 1
        return 0


class NORBlockDev(RAMBlockDev):
    """NOR flash: a program only clears bits (new = old & data) and never erases; ioctl 6 erases a
    block to 0xFF. unit 1 is byte-programmable NOR; unit 8/16/32 is a write-once aligned unit (a
    program must cover whole aligned units, each programmed at most once per erase: else OSError
    EINVAL). page 256: a program is one whole aligned page (the rp2's flash_range_program; a page
    may be programmed again). Counts: progs (program commands), prog_bytes, erases, wear[block]
    (erases of each).

    Power cuts: cut_at = k cuts the k-th program or erase from now (1-based, counted in events):
    a cut program leaves any subset of its bits cleared, a cut erase leaves the block in any
    state (both drawn from seed), and from then on every call raises OSError(EIO) until the
    device is reopened from its bytes: NORBlockDev(bs, n, bytearray(dev.data), unit).

    cache=1 (unit 1): a write-back cache, as pyb.Flash on the stm32's internal flash: programs
    and erases read back at once but are durable only at the next ioctl 3 (SYNC); a power cut
    (cut_at, or cut()) loses every one since, the cut one included. syncs counts the ioctl 3s.
    cache=2 is pyb.Flash on the stm32's internal flash itself: that cache, and a program replaces
    bytes while an erase (ioctl 6) does nothing (the firmware erases whole sectors itself)."""

    def __init__(self, block_size, num_blocks, data=None, unit=1, seed=1, page=0, cache=0):
        if data is None:  # a new chip reads erased
            data = bytearray(block_size * num_blocks)
            e = b"\xff" * block_size
            for i in range(num_blocks):
                data[i * block_size : (i + 1) * block_size] = e
        super().__init__(block_size, num_blocks, data)
        self.unit = unit
        self.page = page
        self.wear = [0] * num_blocks
        self.done = bytearray(block_size * num_blocks // unit) if unit > 1 else None
        if unit > 1:  # reopened: a unit with any programmed bit is programmed
            ff = b"\xff" * unit
            for b in range(num_blocks):  # (up to each block's last programmed byte)
                a = b * block_size
                e = a + len(self.data[a : a + block_size].rstrip(b"\xff"))
                for i in range(a // unit, (e + unit - 1) // unit):
                    if self.data[i * unit : (i + 1) * unit] != ff:
                        self.done[i] = 1
        self.events = self.syncs = 0
        self.cut_at = 0
        self.off = False
        self.rng = seed & 0xFFFFFFFF or 1
        self.cache = cache
        self.undo = []  # (address, the bytes before) of each write since the last SYNC

    def ioctl(self, op, arg):
        if op == 3:
            if self.off:
                raise OSError(5, "power is off")
            self.syncs += 1
            self.undo = []
            return 0
        return RAMBlockDev.ioctl(self, op, arg)

    def cut(self):
        """The power goes now: a write-back cache loses what it holds."""
        for a, old in reversed(self.undo):
            self.mv[a : a + len(old)] = old
        self.undo = []
        self.off = True

    def rand(self):
        x = self.rng  # xorshift32: the same draws on both interpreters
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.rng = x
        return x

    def _event(self):
        if self.off:
            raise OSError(5, "power is off")
        self.events += 1
        return self.cut_at and self.events == self.cut_at

    def readblocks(self, n, buf, offset=0):
        if self.off:
            raise OSError(5, "power is off")
        RAMBlockDev.readblocks(self, n, buf, offset)

    def program(self, a, buf):
        u = self.unit
        n = len(buf)
        if a < 0 or a + n > len(self.data):
            raise OSError(22, "program out of range")
        if self.page and (a % self.page or n != self.page):
            raise OSError(22, "not one whole page")
        if u > 1:
            if a % u or n % u:
                raise OSError(22, "program not in whole units")
            for i in range(a // u, (a + n) // u):
                if self.done[i]:
                    raise OSError(22, "unit programmed twice")
        cut = self._event()
        mv, cache = self.mv, self.cache
        if cache:
            if cut:
                self.cut()
                raise OSError(5, "power cut in program")
            self.undo.append((a, bytes(mv[a : a + n])))
            if cache == 2:
                mv[a : a + n] = buf
                self.progs += 1
                self.prog_bytes += n
                return 0
        for i in range(n):
            d = buf[i]
            if cut:  # any subset of the bits this program clears: a byte untouched, done, or part
                r = self.rand()
                d = 0xFF if r & 3 == 0 else d if r & 3 == 1 else (~((~d & 0xFF) & (r >> 2))) & 0xFF
            mv[a + i] &= d
        if cut:
            self.off = True
            raise OSError(5, "power cut in program")
        if u > 1:
            for i in range(a // u, (a + n) // u):
                self.done[i] = 1
        self.progs += 1
        self.prog_bytes += n
        return 0

    def erase(self, a):
        bs = self.block_size
        cut = self._event()
        b = a // bs
        if self.cache:
            if cut:
                self.cut()
                raise OSError(5, "power cut in erase")
            if self.cache == 2:
                return 0
            self.undo.append((a, bytes(self.mv[a : a + bs])))
        if cut:  # any state: each byte erased, left as it was, or any value
            for i in range(a, a + bs):
                r = self.rand()
                k = r & 3
                if k == 0:
                    self.mv[i] = 0xFF
                elif k == 1:
                    self.mv[i] = (r >> 8) & 0xFF
            self.off = True
            raise OSError(5, "power cut in erase")
        RAMBlockDev.erase(self, a)
        self.wear[b] += 1
        if self.done is not None:
            u = self.unit
            for i in range(a // u, (a + bs) // u):
                self.done[i] = 0
        return 0


class FlashVfs:
    """A MicroPython VFS (vfs.mount) over a ddq_flash.FlashStorage: `mprun.py --fs flash` runs
    the shared suite through it, so PosixStorage's open/flush/rename/remove, and the suite's own
    file helpers, reach raw flash. Test plumbing: a directory rename moves its files one by
    one; a file opened for writing appends (the suite never rewrites in place)."""

    def __init__(self, st):
        self.st = st
        self.cwd = ""

    def mount(self, readonly, mkfs):
        pass

    def umount(self):
        pass

    def _k(self, path):
        if not path.startswith("/"):
            path = self.cwd + "/" + path
        out = []
        for part in path.split("/"):
            if part == "..":
                if out:
                    out.pop()
            elif part and part != ".":
                out.append(part)
        return "/".join(out)

    def chdir(self, path):
        k = self._k(path)
        if self.st.kind(k) != 2:
            raise OSError(2, path)
        self.cwd = "/" + k

    def getcwd(self):
        return self.cwd or "/"

    def ilistdir(self, path):
        k = self._k(path)
        for n in self.st.listdir(k):
            c = k + "/" + n if k else n
            d = self.st.kind(c) == 2
            yield (n, 0x4000 if d else 0x8000, 0, 0 if d else self.st.size(c))

    def stat(self, path):
        k = self._k(path)
        t = self.st.kind(k)
        if t == 0:
            raise OSError(2, path)
        if t == 2:
            return (0x41ED, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return (0x81A4, 0, 0, 0, 0, 0, self.st.size(k), 0, 0, 0)

    def statvfs(self, path):
        st = self.st
        free = st.n - sum(e & 1 for e in st.ec)
        return (st.bs, st.bs, st.n, free, free, 0, 0, 0, 0, 255)

    def mkdir(self, path):
        self.st.mkdir(self._k(path))

    def rmdir(self, path):
        k = self._k(path)
        if self.st.kind(k) != 2:
            raise OSError(2, path)
        if self.st.listdir(k):
            raise OSError(39, path)
        if k in self.st.dirs:
            self.st.dirs.remove(k)

    def remove(self, path):
        k = self._k(path)
        if self.st.kind(k) == 2:
            raise OSError(21, path)
        self.st.remove(k)

    def rename(self, a, b):
        st, a, b = self.st, self._k(a), self._k(b)
        if st.kind(a) != 2:
            st.rename(a, b)
            return
        if st.kind(b):
            raise OSError(17, b)
        for n in [st.name(f[1]) for f in st.files] + st.dirs:
            if n.startswith(a + "/"):
                if n in st.dirs:
                    st.dirs.append(b + n[len(a) :])
                else:
                    st.rename(n, b + n[len(a) :])
        st.dirs[:] = [n for n in st.dirs if n != a and not n.startswith(a + "/")] + [b]

    def open(self, path, mode):
        k = self._k(path)
        if self.st.kind(k) == 2:
            raise OSError(21, path)
        m = "rb" if "r" in mode and "+" not in mode else "wb" if "w" in mode else "ab"
        return FlashFile(self.st, self.st.open(k, m), "b" not in mode, k)


try:  # MicroPython: a stream to C too (import, json.load), through readinto/write/ioctl
    from io import IOBase as _Stream
except ImportError:
    _Stream = object


class FlashFile(_Stream):
    """A file of FlashVfs: read/readinto/seek/tell anywhere, write at the end."""

    def __init__(self, st, h, text, k):
        self.st, self.h, self.text, self.k = st, h, text, k
        self.pos = 0

    def readinto(self, buf):
        n = self.st.read_into(self.h, self.pos, buf)
        self.pos += n
        return n

    def read(self, n=-1):
        if n is None or n < 0:
            n = max(self.st.size(self.k) - self.pos, 0)
        b = bytearray(n)
        b = bytes(b[0 : self.readinto(b)])
        return b.decode() if self.text else b

    def readline(self):
        out = b""
        while True:
            c = self.read(1)
            c = c.encode() if self.text else c
            out += c
            if not c or c == b"\n":
                return out.decode() if self.text else out

    def write(self, b):
        if isinstance(b, str):
            b = b.encode()
        self.st.write(self.h, b)
        self.pos = self.st.size(self.k)
        return len(b)

    def seek(self, off, whence=0):
        self.pos = (
            off if whence == 0 else self.pos + off if whence == 1 else self.st.size(self.k) + off
        )
        return self.pos

    def tell(self):
        return self.pos

    def flush(self):
        self.st.sync(self.h)

    def close(self):
        self.st.close(self.h)

    def ioctl(self, op, arg):
        if op == 3:  # MP_STREAM_FLUSH
            self.flush()
        elif op == 4:  # MP_STREAM_CLOSE
            self.close()
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
