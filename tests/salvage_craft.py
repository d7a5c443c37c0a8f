# Crafted segments for salvage's resynchronisation (SPEC §15, DESIGN §14), shared by
# tests/test_salvage.py and bench/salvage_bench.py (subset Python: both interpreters), and a
# storage seam counting the bytes read through it (the work a scan does, counted instead of timed).
import struct

import ddq
import ddq_salvage


class Counting(ddq.PosixStorage):
    """ddq.PosixStorage counting the bytes read through it (n)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def read_into(self, f, off, buf):
        k = super().read_into(f, off, buf)
        self.n += k
        return k


def segment(kind, size):
    """A segment of at most `size` bytes. plain: valid DATA records of 8 B payloads (56 B each).
    headers: one valid record (53 B), then a plausible header every 40 B, each claiming a record
    that runs to the end of the segment (no footer). frames: the same headers, each with a footer
    of its own (nested records, all with bad CRCs)."""
    b = bytearray(size)
    if kind == "plain":
        p = 0
        s = 1
        while p + 56 <= size:
            b[p : p + 56] = ddq_salvage.encode_record(1, s, 0, b"%08d" % (s % 100000000))
            p += 56
            s += 1
        return bytes(b[0:p])
    first = ddq_salvage.encode_record(1, 1, 0, b"first")
    b[0 : len(first)] = first
    start = len(first)
    n = (size - start) // 48
    foot = start + 40 * n
    for i in range(n):
        q = start + 40 * i
        r = size - q if kind == "headers" else foot + 8 * i + 8 - q
        struct.pack_into("<IHHQQIIII", b, q, 0x31475144, 1, 1, 2 + i, 0, r - 48, r, 0, 0)
        if kind == "frames":
            struct.pack_into("<II", b, foot + 8 * i, 0x54494D43, r)
    return bytes(b)
