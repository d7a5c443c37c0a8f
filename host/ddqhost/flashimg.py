"""A raw-flash image on the host: the bytes of a board's ddq_flash region, block 0 first (what a
pull of the region copies), read through port/ddq_flash.py's own FlashStorage over a file-backed
MicroPython extended block device (docs/HOST.md "Raw-flash images", SPEC §16).

`Image(path, block_size, name)` checks the file (a small self-describing check, streamed block
by block: its size, where the ddq_flash block headers sit, the program unit its name slots were
written with) and holds the region's queue `name`; `export` copies the queue's files byte for
byte into a new directory (what `ddq export` writes and what inspect, verify, records, salvage
and the dry run read); `storage(writable=True)` is the FlashStorage a real replay writes
through. Read-only is the default: a program or erase (FlashStorage's mount deletes a file a cut
rename left superseded, SPEC Y2) lands in RAM, never in the file.
"""

import binascii
import fcntl
import json
import os
import stat
import struct
import sys
from math import gcd
from typing import Any

from . import locate
from .errors import HostError
from .fsck.report import printable

DEFAULT_BLOCK_SIZE = 4096
DEFAULT_NAME = "outbox"
MIN_BLOCK_SIZE = 512  # cli.ARG_RANGES; ddq_flash takes 412..65536
MAX_BLOCK_SIZE = 65536
# ddq_flash's block header (SPEC §16 Y1): magic "DQF2", erase count, file id, index in the file,
# crc32 of bytes 0..16. Independent of the program unit; what follows it is not.
MAGIC = b"DQF2"
OLD_MAGIC = b"DQF1"  # the format before SPEC Y8 (6-byte frames): ddq_flash refuses it (Y9)
HDR = 20
SLOT = 128  # a name slot: seq, replaced fid, name length n, name, crc32 of those, 0xFF (Y2)
UNITS = (1, 8, 16, 32)
_STRIDE = 256  # headers are searched at every multiple of this
_CHUNK = 1 << 16  # bytes read at a time: memory stays bounded whatever the image's size


class ImageError(HostError):
    """A raw-flash image that cannot be read as one: one line for the user (exit 1)."""


def is_image(path: str) -> bool:
    """True when path is a regular file (or a link to one): a raw-flash image, not a DIR."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def slot_offset(unit: int) -> int:
    """Where the first name slot of a file's first block starts for a program unit (ddq_flash:
    deleted bytes, commit bytes, then the slots, each field whole units of its own)."""
    od = HDR if unit == 1 else -(-HDR // unit) * unit
    return od + 2 * max(unit, 4)


def _header_ok(b: bytes | memoryview, at: int) -> bool:
    return (
        bytes(b[at : at + 4]) == MAGIC
        and binascii.crc32(b[at : at + 16]) == struct.unpack_from("<I", b, at + 16)[0]
    )


def _slot_ok(b: bytes | memoryview, at: int) -> bool:
    s = bytes(b[at : at + SLOT])
    return (
        len(s) == SLOT
        and s[8] <= SLOT - 13
        and binascii.crc32(s[: 9 + s[8]]) == struct.unpack_from("<I", s, 9 + s[8])[0]
    )


def _open_ro(path: str) -> int:
    """A read-only descriptor of a regular file, opened without blocking (a FIFO is refused
    before anything is read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ImageError("%s is not a regular file (a raw-flash image is one)" % path)
    return fd


def check(path: str, bs: int) -> dict[str, Any]:
    """Check that path holds a ddq_flash region of bs-byte blocks; return its figures
    (blocks, headers, unit). Streams the file a chunk at a time. ImageError when it is a
    directory, truncated, of another block size, blank, or holds no ddq_flash block."""
    if os.path.isdir(path):
        raise ImageError(
            "%s is a directory, not a raw-flash image (a queue directory is given as DIR to "
            "inspect, verify, records, replay and salvage)" % path
        )
    fd = _open_ro(path)
    try:
        size = os.fstat(fd).st_size
        if size % bs:
            raise ImageError(
                "%s is %d bytes, not a whole number of %d-byte blocks: a truncated image, or "
                "another block size (--block-size N)" % (path, size, bs)
            )
        if size < 2 * bs:
            raise ImageError(
                "%s is %d bytes: a ddq_flash region has at least 2 blocks of %d bytes"
                % (path, size, bs)
            )
        step = max(bs, _CHUNK // bs * bs)
        erased = b"\xff" * bs
        g = 0  # gcd of the header offsets
        headers = off_grid = 0
        junk_at: list[int] = []
        votes = dict.fromkeys(UNITS, 0)
        blank = True
        old = False
        pos = 0
        while pos < size:
            chunk = os.pread(fd, min(step, size - pos), pos)
            if len(chunk) != min(step, size - pos):
                raise ImageError("%s: short read at byte %d (the file shrank?)" % (path, pos))
            mv = memoryview(chunk)
            old = old or chunk.find(OLD_MAGIC) >= 0
            i = chunk.find(MAGIC)
            while i >= 0:
                if (pos + i) % _STRIDE == 0 and i + HDR <= len(chunk) and _header_ok(mv, i):
                    headers += 1
                    g = gcd(g, pos + i)
                    if (pos + i) % bs:
                        off_grid += 1
                    elif struct.unpack_from("<I", chunk, i + 12)[0] == 0:  # a file's first block
                        for u in UNITS:
                            if _slot_ok(mv, i + slot_offset(u)):
                                votes[u] += 1
                i = chunk.find(MAGIC, i + 1)
            if blank and chunk.count(255) != len(chunk):
                blank = False
            # the first few blocks that are neither erased nor headed (a cut erase leaves one;
            # a block size too small, many): kept to test against the headers' grid
            j = 0
            while j < len(chunk) and len(junk_at) < 4:
                if not chunk.startswith(erased, j) and not _header_ok(mv, j):
                    junk_at.append(pos + j)
                j += bs
            pos += len(chunk)
    finally:
        os.close(fd)
    if headers == 0:
        if blank:
            raise ImageError(
                "%s is blank: every byte reads 0xFF (erased flash: no queue was written to it)"
                % path
            )
        raise ImageError(
            "%s holds no ddq_flash block (no DQF2 block header): not a raw region ddq_flash "
            "wrote, or not its bytes from block 0%s"
            % (path, old and " (it holds DQF1 headers: an older ddq_flash's format)" or "")
        )
    if off_grid or (g > bs and any(a % g for a in junk_at)):
        raise ImageError(
            "%s: its ddq_flash blocks are not %d bytes (their headers sit at multiples of %d "
            "bytes): give the region's block size, --block-size %d" % (path, bs, g, g)
        )
    unit = max(UNITS, key=lambda u: (votes[u], -u))
    return {"size": size, "blocks": size // bs, "block_size": bs, "headers": headers,
            "unit": unit}  # fmt: skip


class ImageDev:
    """MicroPython's extended block protocol over an image file: readblocks(n, buf, off),
    writeblocks(n, buf, off) (a NOR program: it only clears bits), ioctl 4/5/6 (count, size,
    erase). Read-only (writable=False): the file is opened O_RDONLY and shared-locked; a program
    or erase copies the block into RAM first, so only the blocks a mount deletes from are held.
    Writable: exclusively locked, each program and erase written to the file and fsynced before
    it returns (ddq_flash counts a record durable when its program returns, SPEC Y1)."""

    def __init__(self, path: str, block_size: int, writable: bool = False) -> None:
        self.path = path
        self.bs = block_size
        self.writable = writable
        self.fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(self.fd).st_mode):
                raise ImageError("%s is not a regular file (a raw-flash image is one)" % path)
            try:
                fcntl.flock(
                    self.fd, (fcntl.LOCK_EX if writable else fcntl.LOCK_SH) | fcntl.LOCK_NB
                )
            except BlockingIOError:
                raise ImageError(
                    "%s is in use by another ddq (a replay writes to it): try again when it is "
                    "done" % path
                ) from None
            self.n = os.fstat(self.fd).st_size // block_size
        except BaseException:
            os.close(self.fd)
            raise
        self.ram: dict[int, bytearray] = {}  # read-only: the blocks programmed or erased

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # (the lock goes with it)
            self.fd = -1

    def _range(self, n: int, off: int, ln: int) -> int:
        if not (0 <= n < self.n and 0 <= off and off + ln <= self.bs):
            raise OSError(22, "block %d offset %d length %d outside the image" % (n, off, ln))
        return n * self.bs + off

    def readblocks(self, n: int, buf: Any, off: int = 0) -> None:
        a = self._range(n, off, len(buf))
        blk = self.ram.get(n)
        if blk is not None:
            buf[:] = blk[off : off + len(buf)]
            return
        got = os.pread(self.fd, len(buf), a)
        if len(got) != len(buf):
            raise OSError(5, "%s: short read at byte %d" % (self.path, a))
        buf[:] = got

    def _block(self, n: int) -> bytearray:
        blk = self.ram.get(n)
        if blk is None:
            blk = self.ram[n] = bytearray(self.bs)
            self.readblocks(n, blk, 0)
        return blk

    def writeblocks(self, n: int, buf: Any, off: int | None = None) -> int:
        off = off or 0
        a = self._range(n, off, len(buf))
        ln = len(buf)
        old = bytearray(ln)
        self.readblocks(n, old, off)
        new = (int.from_bytes(old, "little") & int.from_bytes(bytes(buf), "little")).to_bytes(
            ln, "little"
        )  # NOR: a program only clears bits
        if self.writable:
            os.pwrite(self.fd, new, a)
            os.fsync(self.fd)
        else:
            self._block(n)[off : off + ln] = new
        return 0

    def ioctl(self, op: int, arg: int) -> int:
        if op == 4:
            return self.n
        if op == 5:
            return self.bs
        if op == 6:
            self._range(arg, 0, self.bs)
            if self.writable:
                os.pwrite(self.fd, b"\xff" * self.bs, arg * self.bs)
                os.fsync(self.fd)
            else:
                self.ram[arg] = bytearray(b"\xff" * self.bs)
            return 0
        return 0


def _plain(name: str) -> bool:
    return name not in ("", ".", "..") and all(c.isprintable() for c in name) and "\\" not in name


def load_flash() -> Any:
    """port/ddq_flash.py, beside ddq (installed, or this checkout's port/)."""
    locate.load_ddq()
    if locate.port_dir() not in sys.path and os.path.isdir(locate.port_dir()):
        sys.path.insert(0, locate.port_dir())
    import ddq_flash

    return ddq_flash


def pull_meta(path: str) -> dict[str, Any]:
    """What `ddq pull --raw` wrote beside the image, IMG.json (the queue's name, the block size,
    the board's raw-layout options): {} when there is none or it is not an object."""
    from . import qoptions

    try:
        meta = qoptions.read_json(path + ".json")
    except HostError as e:
        raise ImageError(str(e)) from None
    return meta if isinstance(meta, dict) else {}


class Image:
    """A checked raw-flash image and the queue `name` in it (block_size, name: None for what
    IMG.json, the pull's record beside it, says, else the defaults). Nothing is opened for
    writing but by storage(writable=True)."""

    def __init__(self, path: str, block_size: int | None = None, name: str | None = None):
        self.path = path
        self.meta = pull_meta(path)
        v = self.meta.get("block_size")
        if block_size is None and type(v) is int and MIN_BLOCK_SIZE <= v <= MAX_BLOCK_SIZE:
            block_size = v
        if name is None and isinstance(self.meta.get("queue"), str):
            name = self.meta["queue"]
        self.bs = DEFAULT_BLOCK_SIZE if block_size is None else block_size
        self.name = (DEFAULT_NAME if name is None else name).strip("/")
        if not self.name or not all(_plain(p) for p in self.name.split("/")):
            raise ImageError(
                "--name %s is not a queue name (outbox, data/q, ...)" % printable(repr(name))
            )
        self.info = check(path, self.bs)
        self.unit = int(self.info["unit"])
        self.dev: ImageDev | None = None

    def storage(self, writable: bool = False) -> Any:
        """ddq_flash.FlashStorage over the image (closing the one opened before)."""
        self.close()
        ddq_flash = load_flash()
        ddq = locate.load_ddq()
        self.dev = ImageDev(self.path, self.bs, writable)
        try:
            return ddq_flash.FlashStorage(self.dev, unit=self.unit)
        except (ddq.Error, ValueError) as e:  # (a name slot whose CRC holds, not UTF-8: crafted)
            self.close()
            raise ImageError(
                "%s: not a readable ddq_flash region: %s" % (self.path, printable(str(e)))
            ) from None

    def close(self) -> None:
        if self.dev is not None:
            self.dev.close()
            self.dev = None

    def queues(self, st: Any) -> list[str]:
        """The queue names the region holds: each path prefix of a queue file."""
        from . import qdir

        out = set()
        for f in st.files:
            d, _, n = st.name(f[1]).rpartition("/")
            if d and qdir.is_queue_file_name(n):
                out.add(d)
        return sorted(out)

    def files(self, st: Any) -> list[tuple[str, int]]:
        """(name, size) of the files of the queue, after checking it is one."""
        from . import qdir

        if st.kind(self.name) != 2:
            have = self.queues(st)
            raise ImageError(
                "%s holds no queue named %s (%s)"
                % (
                    self.path,
                    printable(repr(self.name)),
                    "queues in it: " + ", ".join(map(printable, have))
                    if have
                    else "it holds no queue",
                )
            )
        out = []
        for n in sorted(st.listdir(self.name)):
            p = self.name + "/" + n
            if st.kind(p) != 1:
                continue  # a deeper path: not a file of this queue
            if not _plain(n):
                raise ImageError(
                    "%s: the queue %s holds a file named %s, not a plain file name (nothing "
                    "was written)" % (self.path, printable(repr(self.name)), printable(repr(n)))
                )
            out.append((n, st.size(p)))
        if not qdir.looks_like_queue([n for n, _ in out]):
            raise ImageError(
                "%s: %s holds no queue file (no segment, manifest or queue.format)"
                % (self.path, printable(repr(self.name)))
            )
        return out

    def export(self, dst: str) -> list[dict[str, Any]]:
        """Write the queue's files into the new directory dst (0700, files 0600), byte for
        byte as ddq_flash holds them, each streamed and fsynced, and an empty queue.lock; the
        image is only read. Returns [{name, bytes}] of the queue's files."""
        st = self.storage(writable=False)
        try:
            files = self.files(st)
            os.mkdir(dst, 0o700)
            buf = bytearray(_CHUNK)
            out = []
            for n, size in files:
                h = st.open(self.name + "/" + n, "rb")
                fd = os.open(
                    os.path.join(dst, n),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                    0o600,
                )
                try:
                    off = 0
                    while off < size:
                        k = st.read_into(h, off, memoryview(buf)[: min(_CHUNK, size - off)])
                        if k <= 0:
                            raise ImageError(
                                "%s: %s/%s ends at byte %d of %d"
                                % (self.path, self.name, n, off, size)
                            )
                        os.write(fd, memoryview(buf)[:k])
                        off += k
                    os.fsync(fd)
                finally:
                    os.close(fd)
                out.append({"name": n, "bytes": size})
            opts = self.meta.get("options")
            if isinstance(opts, dict):  # the board's options, as `ddq pull` records a dir's
                from . import qdir

                fd = os.open(
                    os.path.join(dst, qdir.PULL_META),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                    0o600,
                )
                with os.fdopen(fd, "w") as f:
                    json.dump({"options": opts, "image": self.path}, f)
            if "queue.lock" not in dict(files):
                # ddq_flash keeps the lock in RAM (SPEC §16); a directory has the file, empty
                # (without it inspect would list it as made by recovery)
                os.close(
                    os.open(
                        os.path.join(dst, "queue.lock"),
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                        0o600,
                    )
                )
            dfd = os.open(dst, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return out
        finally:
            self.close()
