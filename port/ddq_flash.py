"""ddq_flash: a queue on raw flash, behind ddq's storage seam (docs/DESIGN.md "Raw flash").

    import ddq, ddq_flash, rp2
    st = ddq_flash.FlashStorage(rp2.Flash(), page=256)  # or esp32.Partition, pyb.Flash
    q = ddq.Queue("outbox", storage=st)

The device speaks MicroPython's extended block protocol: readblocks(n, buf, off),
writeblocks(n, buf, off) that programs without erasing, ioctl 4/5/6 (count, size, erase). One
FlashStorage per region: every queue in it goes through that object. NOR flash programmed by
the byte, (page=P) in whole aligned pages padded with 0xFF, or (unit=U) in write-once units.
Names are paths of at most 115 bytes; directories are implicit (mkdir is kept in RAM until a
file makes it real). Every file is a chain of erase blocks; a write is buffered until sync (or
close, a read, or a full buffer), which programs it as one frame whose 4-byte header tells a
torn program from a whole one: with sync="always" a DDQ record costs one program command.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import struct
from binascii import crc32

import ddq
from ddq import const

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Optional

# ============================================================================ raw flash
# Block header (SPEC §16 [Y1]): magic, erase count, file id, index in the file, crc of 0..16;
# then in a file's first block: four deleted bytes at 20, four commit bytes at 24 (a copy's) and
# _FL_K name slots of _FL_S bytes at 28 (sequence, the fid a copy replaces or 0xFFFFFFFF, name
# length, name, crc of those; 0xFF after it: only 13 + the name's bytes are programmed [Y2]).
# Frames follow [Y8]: a 4-byte header (u16 LE: the length k in bits 0-11, c's bits 0-3 in bits
# 12-15; u16 LE: c's bits 4-19), then k data bytes; c = 0xFFFFF - k - the sum of the data bytes.
_FL_MAGIC = 0x32465144  # "DQF2" (over 2**30: not a const on 32-bit boards)
_FL_HDR = const(20)  # (unit 1: the other blocks' data; else the units after the header)
_FL_K = const(2)
_FL_S = const(128)
_FL_DEL = const(20)
_FL_HEAD = const(284)  # a first block's data: the name slots at 28, then _FL_K * _FL_S
_FL_NM = const(115)  # the longest name: _FL_S - 13
_FL_FR = const(4)
_FL_MAX = const(4095)  # a frame's most data: k + 255 k < 0xFFFFF, c never wraps

# A file is one list (the least heap a file: a board's region holds hundreds): [fid, key (its
# name, or for a segment's name a tuple: _key; FlashStorage.name gives the name), the next free
# name slot, the next frame's position in its last block (the block size: that block
# takes no more frames), then for each block of its chain: the block, its logical bytes]. It
# grows by slice assignment, to its length exactly: `+=` appends, and MicroPython doubles a list
# that appends (a 4-block file's 12 slots take 16: 16 B more a file at 32-bit, 32 at 64-bit).
# The files are a list too, scanned by key, its room made at mount (FlashStorage's files=):
# 4 B a file at 32-bit, where a dict's table costs more and grows inside a compaction.


class FlashStorage:
    """ddq's storage seam (docs/API.md "Storage seam") over blocks start_block .. +block_count of
    dev. Mounting reads every block's header once; nothing is written but the deletion of a
    file that a cut rename or "wb" left superseded. files: the most files it will hold at once,
    whose table is made at mount (default: twice those found + 8); for a queue, 2 x its
    max_segments + 8 (both generations of a compaction, its manifest, index and their copies)."""

    can_truncate = False  # a torn tail is cut by copy + rename (ddq's own path), atomic here

    def __init__(
        self,
        dev: "Any",
        start_block: int = 0,
        block_count: "Any" = None,
        buf: int = 512,
        page: int = 1,
        unit: int = 1,
        files: int = 0,
    ):
        self.dev = dev
        self.s0 = start_block
        self.bs = bs = int(dev.ioctl(5, 0))
        tot = int(dev.ioctl(4, 0)) - start_block
        self.n = n = tot if block_count is None else block_count
        if bs < _FL_HEAD + 128 or bs > 65536 or n < 2 or n > tot or start_block < 0:
            raise ddq.InvalidArgument("flash region %d x %d" % (bs, n))
        if page < 1 or bs % page or unit not in (1, 8, 16, 32) or (unit > 1 and page > 1):
            raise ddq.InvalidArgument("page %d, unit %d" % (page, unit))
        if buf < 16 or buf > 65535:
            raise ddq.InvalidArgument("buf %d" % buf)
        if files < 0 or files > 65535:
            raise ddq.InvalidArgument("files %d" % files)
        # unit U > 1: write-once aligned units; every field its own units, frames padded [Y6]
        self.u = u = unit
        self.od = _FL_DEL if u == 1 else -(-20 // u) * u  # deleted bytes
        self.oc = self.od + max(u, 4)  # commit bytes
        self.on = self.oc + max(u, 4)  # name slots
        self.oh = self.on + _FL_K * _FL_S  # a first block's data
        self.ob = _FL_HDR if u == 1 else self.od  # the other blocks' data
        self.z = bytes(max(u, 4))  # what marks deleted or committed
        self.pad = bytearray(u)
        self.pg = page  # programs go in whole aligned pages, padded with 0xFF (a no-op on NOR)
        self.pb = bytearray(page) if page > 1 else None
        self.pe = b"\xff" * page
        self.buf = bytearray(_FL_FR + buf + u)
        self.cap = buf
        self.bo: "Any" = None  # the file whose bytes the buffer holds
        self.bn = 0
        self.hb = bytearray(self.oh)
        self.ec = [0] * n  # per block: its erase count x 2, + 1 while a file holds it
        self.files: "list[list[Any]]" = []  # (a list, not a dict: see above)
        self.pre: "list[str]" = []  # the directories of the files keyed by a tuple
        self.dirs: "list[str]" = []
        self.held: "list[str]" = []
        self.rot = self.dt = self.cb = self.clo = self.cpos = 0
        self.cf: "Any" = None  # the read cursor: file, its block's index in it, offset, position
        self._mount()
        # The file table's room, made once here (files, or twice the files found + 8: room for
        # a compaction's second generation) and never given back (_drop deletes a slice, which
        # MicroPython does not shrink): a table that grows inside an operation needs one run of
        # free heap twice its size, and late in a long drain a board's heap may have none.
        fl = self.files
        k = len(fl)
        fl.extend([[]] * ((files or 2 * k + 8) - k))
        del fl[k:]

    # ------------------------------------------------------------------ device
    def _rd(self, b: int, off: int, mv: "Any") -> None:
        self.dev.readblocks(self.s0 + b, mv, off)

    def _pg(self, b: int, off: int, mv: "Any") -> None:
        p, pb, n = self.pg, self.pb, len(mv)
        a = off - off % p
        while a < off + n:
            if pb is not None:  # the page with mv's bytes in it, 0xFF around them
                i, j = max(a, off), min(a + p, off + n)
                pb[:] = self.pe
                pb[i - a : j - a] = mv[i - off : j - off]
            r = self.dev.writeblocks(self.s0 + b, mv if pb is None else pb, a)
            if r:
                raise OSError(5, "program")
            a += p if pb is not None else n
        self.dt = 1

    def _dur(self) -> None:
        # a device that caches writes (pyb.Flash: the stm32 flash cache) writes them through at
        # ioctl 3 (SYNC); the others answer it at once. Only after a program [Y1]
        if self.dt:
            self.dt = 0
            if self.dev.ioctl(3, 0):
                raise OSError(5, "sync")

    def _slot(self, b: int, k: int) -> "Any":
        # (seq, name, replaced fid) of name slot k of head block b; None if torn; 0 if erased
        h = self.hb
        mv = memoryview(h)[0:_FL_S]
        self._rd(b, self.on + k * _FL_S, mv)
        if h[0:_FL_S] == b"\xff" * _FL_S:
            return 0
        seq, src, ln = struct.unpack_from("<IIB", h, 0)
        if ln > _FL_NM or crc32(mv[0 : 9 + ln]) != struct.unpack_from("<I", h, 9 + ln)[0]:
            return None
        try:
            return seq, bytes(h[9 : 9 + ln]).decode(), src
        except UnicodeError:  # a CRC that holds over a name ddq never wrote: forged [Y4]
            raise ddq.Corrupt("flash block %d: name slot %d is not UTF-8" % (b, k))

    def _mount(self) -> None:
        h, n = self.hb, self.n
        mv = memoryview(h)
        chains: "dict[int, dict[int, int]]" = {}
        known = -1
        fmax = self.nseq = 0
        for b in range(n):
            self._rd(b, 0, mv[0:_FL_HDR])
            m, ec, fid, ix, c = struct.unpack_from("<IIIII", h, 0)
            if m != _FL_MAGIC or crc32(mv[0:16]) != c:
                if m == 0x31465144 and crc32(mv[0:16]) == c:  # "DQF1": 6-byte frames [Y9]
                    raise ddq.Corrupt("flash block %d: format DQF1, not DQF2" % b)
                self.ec[b] = -1
                continue
            self.ec[b] = ec
            known = max(known, ec)
            fmax = max(fmax, fid + 1)
            chains.setdefault(fid, {})[ix] = b
        for b in range(n):  # (x 2: bit 0 says a file holds the block; one list, no second)
            e = self.ec[b]
            self.ec[b] = (e if e >= 0 else max(known, 0)) << 1
        self.nfid = fmax
        best: "dict[Any, Any]" = {}  # key -> [seq, file]: the highest sequence holds a name
        ff = b"\xff" * len(self.z)
        dead: "list[Any]" = []  # superseded by a rename or "wb" that a cut stopped short
        gone: "list[int]" = []  # the fids that committed copies replace
        for fid in chains:
            ch = chains[fid]
            hb = ch.get(0)
            if hb is None:
                continue
            z = len(ff)  # (a unit's every byte: a torn program may clear any of them)
            self._rd(hb, self.od, mv[0:z])
            if h[0:z] != ff:  # any cleared bit: deleted
                continue
            self._rd(hb, self.oc, mv[0:z])
            cmt = h[0:z] != ff
            cur = None
            ns = 0
            for k in range(_FL_K):
                s = self._slot(hb, k)
                if s != 0:
                    ns = k + 1
                if s and (cur is None or s[0] > cur[0]):
                    cur = s
                if s and k == 0 and s[2] != 0xFFFFFFFF:  # a copy: void until committed
                    if not cmt:
                        cur = None
                        break
                    gone.append(s[2])
            if cur is None:
                continue
            self.nseq = max(self.nseq, cur[0] + 1)
            f = [fid, self._key(cur[1]), ns, 0]
            i = 0
            while i in ch:
                f[len(f) :] = (ch[i], 0)  # (exactly: "A file is one list")
                i += 1
            o = best.get(f[1])
            if o is None or cur[0] > o[0]:
                best[f[1]] = [cur[0], f]
                if o is not None:
                    dead.append(o[1])
            else:
                dead.append(f)
        for o in best.values():
            f = o[1]
            if f[0] in gone:
                dead.append(f)
                continue
            self.files.append(f)
            for i in range(4, len(f), 2):
                self.ec[f[i]] |= 1
                f[i + 1] = self._walk(f, f[i], i == len(f) - 2)
        for f in dead:
            self._pg(f[4], self.od, self.z)

    def _walk(self, f: "list[Any]", b: int, last: bool) -> int:
        """Logical bytes of block b of f; for its last block, where the next frame goes."""
        h, bs = self.hb, self.bs
        mv = memoryview(h)
        pos = self.oh if f[4] == b else self.ob
        lo = 0
        shut = True
        while pos + _FL_FR < bs:
            self._rd(b, pos, mv[0:_FL_FR])
            w, c = struct.unpack_from("<HH", h, 0)
            if w == 0xFFFF and c == 0xFFFF:
                shut = False
                break
            k = w & _FL_MAX
            if k == 0 or pos + _FL_FR + k > bs:
                break
            nx = pos + self._len(k)
            more = False
            if nx + _FL_FR < bs:
                self._rd(b, nx, mv[_FL_FR : 2 * _FL_FR])
                more = h[_FL_FR : 2 * _FL_FR] != b"\xff" * _FL_FR
            if not more:  # the block's last frame: only it can be torn [Y8]
                x = k + (w >> 12) + (c << 4)
                p = pos + _FL_FR
                while p < pos + _FL_FR + k:
                    j = min(pos + _FL_FR + k - p, len(h))
                    self._rd(b, p, mv[0:j])
                    x += sum(mv[0:j])
                    p += j
                if x != 0xFFFFF:
                    break
            lo += k
            pos = nx
        if last:  # the rest must read erased to take frames
            f[3] = bs if shut or not self._ff(b, pos) else pos
        return lo

    def _ff(self, b: int, p: int) -> bool:
        """Whether block b reads erased from p on."""
        h, bs = self.hb, self.bs
        mv = memoryview(h)
        while p < bs:
            j = min(bs - p, len(h))
            self._rd(b, p, mv[0:j])
            if h[0:j] != b"\xff" * j:
                return False
            p += j
        return True

    def _alloc(self, f: "list[Any]", name: "Any", src: int = 0xFFFFFFFF) -> None:
        """Give f a fresh block: the least-erased free one, erased now (lazily), its header (and
        for a first block, the name) in one program."""
        n, ec = self.n, self.ec
        best = -1
        for i in range(n):
            b = (self.rot + i) % n
            if not ec[b] & 1 and (best < 0 or ec[b] < ec[best]):
                best = b
        if best < 0:
            raise OSError(28, "flash region full")
        b = best
        self.rot = (b + 1) % n
        ec[b] |= 1
        r = self.dev.ioctl(6, self.s0 + b)
        if not self._ff(b, 0):  # an erase that does nothing, writes that replace bytes: pyb.Flash
            r = self.dev.writeblocks(self.s0 + b, self.pe * (self.bs // self.pg), 0)  # (stm32's)
            if not self._ff(b, 0):
                r = 1
        if r:
            raise OSError(5, "erase")
        ec[b] += 2
        h = self.hb
        mv = memoryview(h)
        on = self.on
        end = on + _FL_S if name else self.ob
        for i in range(end):
            h[i] = 0xFF
        struct.pack_into("<IIII", h, 0, _FL_MAGIC, ec[b] >> 1, f[0], (len(f) - 4) // 2)
        struct.pack_into("<I", h, 16, crc32(mv[0:16]))
        if name:
            end = on + self._name(name, on, src)
        if self.u > 1 and name:  # the header's units, then the first name slot's
            self._pg(b, 0, mv[0 : self.od])
            self._pg(b, on, mv[on:end])
        else:
            self._pg(b, 0, mv[0:end])
        f[len(f) :] = (b, 0)  # (exactly: "A file is one list")
        f[3] = self.oh if name else self.ob

    def _name(self, name: str, at: int, src: int = 0xFFFFFFFF) -> int:
        """Put a name slot at hb[at:]; return the bytes to program: whole units [Y2]."""
        nb = name.encode()
        h = self.hb
        s = at
        n = 9 + len(nb)
        for i in range(_FL_S):
            h[s + i] = 0xFF
        struct.pack_into("<IIB", h, s, self.nseq, src, len(nb))
        h[s + 9 : s + n] = nb
        struct.pack_into("<I", h, s + n, crc32(memoryview(h)[s : s + n]))
        self.nseq += 1
        return -(-(n + 4) // self.u) * self.u

    def _create(self, path: str, src: int = 0xFFFFFFFF) -> "list[Any]":
        if len(path.encode()) > _FL_NM:
            raise OSError(36, "name too long: " + path)
        k = self._key(path)
        f = [self.nfid, k, 1, 0]
        self.nfid += 1
        self._alloc(f, path, src)
        if src != 0xFFFFFFFF:
            return f
        old = self._f(k)
        self.files.append(f)
        if old is not None:
            self._drop(old)
            self._kill(old)
        self._dur()
        return f

    def _kill(self, f: "list[Any]") -> None:
        if self.bo is f:
            self.bo, self.bn = None, 0
        if self.cf is f:  # (the read cursor would keep a removed file's list in the heap)
            self.cf = None
        self._pg(f[4], self.od, self.z)
        for i in range(4, len(f), 2):
            self.ec[f[i]] &= -2

    def _live(self, f: "list[Any]") -> None:
        # a handle of a removed or replaced file: its blocks may hold another file by now
        if self._f(f[1]) is not f:
            raise OSError(9, "file removed: " + self.name(f[1]))

    def _len(self, k: int) -> int:
        # the bytes a frame of k data bytes takes: whole units
        u = self.u
        return -(-(_FL_FR + k) // u) * u

    def _flush(self) -> None:
        f, e = self.bo, _FL_FR + self.bn
        if f is None or e == _FL_FR:
            return
        self.bn = 0
        self._live(f)
        b = self.buf
        mv = memoryview(b)
        i = _FL_FR
        while i < e:
            if self.bs - f[3] <= _FL_FR:
                self._alloc(f, None)
            k = min(e - i, self.bs - f[3] - _FL_FR, _FL_MAX)
            c = 0xFFFFF - k - sum(mv[i : i + k])  # [Y8]
            struct.pack_into("<HH", b, i - _FL_FR, k | (c & 15) << 12, c >> 4)
            p = f[3]
            x = self._len(k)
            f[3] = self.bs  # a failed program leaves the block shut: nothing after it
            pad = self.pad  # the data after this frame, kept while 0xFF pads its last unit
            t = x - _FL_FR - k
            pad[0:t] = b[i + k : i + k + t]
            for j in range(i + k, i + k + t):
                b[j] = 0xFF
            self._pg(f[-2], p, mv[i - _FL_FR : i - _FL_FR + x])
            b[i + k : i + k + t] = pad[0:t]
            f[3] = p + x
            f[-1] += k
            i += k

    def _key(self, path: str) -> "Any":
        # A segment's name keys its file as a tuple (16 B at 32-bit: its str takes 96): (the
        # generation; the index x 8 + its directory's in pre), where the name is exactly what
        # ddq.segment_name writes for them; any other name keys itself.
        j = path.rfind("/") + 1
        d, n, pre = path[:j], path[j:], self.pre
        try:
            g, i = (int(n[11:31]), int(n[40:60])) if len(n) == 64 else (0, int(n[8:28]))
            if ddq.segment_name(g, i) != n:
                return path
        except (ValueError, ddq.Error):  # (not digits; out of range)
            return path
        if d not in pre:
            if len(pre) > 7:
                return path
            pre.append(d)
        return (g, i * 8 + pre.index(d))

    def name(self, k: "Any") -> str:
        """The path a file's key (its list's second item) stands for."""
        if isinstance(k, str):
            return k
        d: str = self.pre[k[1] & 7]
        return d + ddq.segment_name(k[0], k[1] >> 3)

    def _f(self, k: "Any") -> "Optional[list[Any]]":
        # the file keyed k, or None (a region holds at most a few hundred: a scan is short)
        for f in self.files:
            if f[1] == k:
                return f
        return None

    def _drop(self, f: "list[Any]") -> None:
        fl = self.files
        for i in range(len(fl)):
            if fl[i] is f:
                del fl[i : i + 1]  # (a slice: `del fl[i]` shrinks the table, and then regrows)
                return

    def _get(self, path: str) -> "list[Any]":
        f = self._f(self._key(path))
        if f is None:
            raise OSError(2, path)
        return f

    # ------------------------------------------------------------------ the seam
    def open(self, path: str, mode: str) -> "list[Any]":
        if mode == "wb" or (mode == "ab" and self._f(self._key(path)) is None):
            return self._create(path)
        return self._get(path)

    def write(self, f: "list[Any]", data: "Any") -> None:
        n, i, cap = len(data), 0, self.cap
        if self.bo is not f:
            self._flush()
            self.bo = f
        while i < n:
            if self.bn == cap:
                self._flush()
            k = min(n - i, cap - self.bn)
            self.buf[_FL_FR + self.bn : _FL_FR + self.bn + k] = data if k == n else data[i : i + k]
            self.bn += k
            i += k

    def sync(self, f: "list[Any]") -> None:
        if self.bo is f:
            self._flush()
        self._dur()

    close = sync

    def read_into(self, f: "list[Any]", off: int, buf: "Any") -> int:
        if self.bo is f:
            self._flush()
        self._live(f)
        h = self.hb
        mv = memoryview(buf)
        n, got, bi, lo, nb = len(buf), 0, 4, 0, len(f)  # bi: the block's index in f
        while bi < nb and lo + f[bi + 1] <= off:
            lo += f[bi + 1]
            bi += 2
        pos, fl = self.oh if bi == 4 else self.ob, lo
        if self.cf is f and self.cb == bi and lo <= self.clo <= off:
            pos, fl = self.cpos, self.clo
        while got < n and bi < nb:
            if fl >= lo + f[bi + 1]:
                lo += f[bi + 1]
                bi += 2
                pos, fl = self.ob, lo
                continue
            self._rd(f[bi], pos, memoryview(h)[0:2])
            k = h[0] | (h[1] & 15) << 8
            a = off + got - fl
            j = min(k - a, n - got)
            if j > 0:
                self._rd(f[bi], pos + _FL_FR + a, mv[got : got + j])
                got += j
            if a + j >= k:  # (a frame before off: skipped)
                fl += k
                pos += self._len(k)
            self.cf, self.cb, self.clo, self.cpos = f, bi, fl, pos
        return got

    def size(self, path: str) -> int:
        f = self._get(path)
        n: int = sum(f[5::2])
        return n + (self.bn if self.bo is f else 0)

    def kind(self, path: str) -> int:
        if self._f(self._key(path)) is not None:
            return 1
        p = path.rstrip("/") + "/" if path else ""
        if path in self.dirs or p in ("", "/") or path == ".":
            return 2
        for f in self.files:
            k = f[1]
            if (k if isinstance(k, str) else self.pre[k[1] & 7]).startswith(p):
                return 2
        return 0

    def listdir(self, path: str) -> "list[str]":
        if self.kind(path) != 2:
            raise OSError(2, path)
        p = path.rstrip("/") + "/" if path else ""
        out: "list[str]" = []
        for k in [f[1] for f in self.files] + self.dirs:
            k = self.name(k)  # (one name at a time: a region holds hundreds)
            if k.startswith(p):
                e = k[len(p) :].split("/")[0]
                if e and e not in out:
                    out.append(e)
        return out

    def mkdir(self, path: str) -> None:
        if self.kind(path):
            raise OSError(17, path)
        self.dirs.append(path)

    def rename(self, src: str, dst: str) -> None:
        """Atomic: the new name slot's program is the commit (its sequence beats dst's). A file
        whose slots are used up is copied to a new file named dst that replaces src's id; the
        copy's commit bytes are the commit then."""
        f = self._get(src)
        if src == dst:
            return
        if len(dst.encode()) > _FL_NM:
            raise OSError(36, "name too long: " + dst)
        if self.bo is f:
            self._flush()
        if f[2] < _FL_K:
            n = self._name(dst, 0)
            k = f[2]
            f[2] = k + 1
            self._pg(f[4], self.on + k * _FL_S, memoryview(self.hb)[0:n])
            g = f
        else:
            g = [self.nfid, "\0", 1, 0]  # (a live file with no name until committed)
            self.nfid += 1
            self._alloc(g, dst, f[0])
            self.files.append(g)
            t = bytearray(128)
            off = 0
            try:
                while True:
                    n = self.read_into(f, off, t)
                    if not n:
                        break
                    self.write(g, memoryview(t)[0:n])
                    off += n
                self._flush()
                self._pg(g[4], self.oc, self.z)
            except BaseException:  # (void until committed: its blocks are free again)
                if self.bo is g:
                    self.bo, self.bn = None, 0
                for i in range(4, len(g), 2):
                    self.ec[g[i]] &= -2
                raise
            finally:
                self._drop(g)
            self._kill(f)
        self._drop(f)
        k = self._key(dst)
        old = self._f(k)
        g[1] = k
        self.files.append(g)
        if old is not None:
            self._drop(old)
            self._kill(old)
        self._dur()

    def remove(self, path: str) -> None:
        f = self._get(path)
        self._kill(f)
        self._drop(f)
        self._dur()

    def sync_dir(self, path: str) -> None:
        pass  # every create, rename and remove is durable when it returns

    def lock(self, path: str) -> str:
        if path in self.held:
            raise ddq.Locked("locked by this process: " + path)
        self.held.append(path)
        return path

    def unlock(self, token: str) -> None:
        if token in self.held:
            self.held.remove(token)
