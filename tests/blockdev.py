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
    EINVAL). Counts: progs (program commands), prog_bytes, erases, wear[block] (erases of each).

    Power cuts: cut_at = k cuts the k-th program or erase from now (1-based, counted in events):
    a cut program leaves any subset of its bits cleared, a cut erase leaves the block in any
    state (both drawn from seed), and from then on every call raises OSError(EIO) until the
    device is reopened from its bytes: NORBlockDev(bs, n, bytearray(dev.data), unit)."""

    def __init__(self, block_size, num_blocks, data=None, unit=1, seed=1):
        if data is None:  # a new chip reads erased
            data = bytearray(b"\xff" * (block_size * num_blocks))
        super().__init__(block_size, num_blocks, data)
        self.unit = unit
        self.wear = [0] * num_blocks
        self.done = bytearray(block_size * num_blocks // unit) if unit > 1 else None
        self.events = 0
        self.cut_at = 0
        self.off = False
        self.rng = seed & 0xFFFFFFFF or 1

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
        if u > 1:
            if a % u or n % u:
                raise OSError(22, "program not in whole units")
            for i in range(a // u, (a + n) // u):
                if self.done[i]:
                    raise OSError(22, "unit programmed twice")
        cut = self._event()
        mv = self.mv
        for i in range(n):
            d = buf[i]
            if cut:  # any subset of the bits this program clears
                d = (~((~d & 0xFF) & self.rand())) & 0xFF
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
