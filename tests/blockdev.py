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
