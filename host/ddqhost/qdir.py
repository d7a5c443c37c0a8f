"""A queue directory on the host: the names ddq may open in it, is it one, and a private copy of
what ddq reads (inspect and the dry run work on one). Its options: qoptions.py."""

import os
from typing import Any

from . import fsck, locate
from .envelope import EncryptedError, check_decryptable  # noqa: F401  (tests/cpython use them)
from .errors import HostError
from .fsck.format import FileBytes, index_limit, not_regular, read_file

PULL_META = ".ddq-pull.json"
OPTIONS_FILE = "ddq-options.json"
QUEUE_NAMES = ("queue.manifest", "queue.format")
# Every name ddq may open in a queue directory besides the segments (SPEC §3, §12).
QUEUE_FILE_NAMES = QUEUE_NAMES + (
    "queue.manifest.tmp",
    "queue.index",
    "queue.index.tmp",
    "queue.lock",
)


class QueueDirError(HostError):
    """Not a queue directory, or options that cannot be used; one line for the user."""


def corrupt_message(path: str, e: BaseException, work: str | None = None) -> str:
    """ddq's Corrupt for the queue in path (opened as its copy work) as the line that names the
    fix: salvage (docs/HOST.md "salvage"); the command exits 2."""
    why = str(e) or type(e).__name__
    if work:
        why = why.replace(work, path)
    return "corrupt: %s; `ddq salvage %s OUT` copies every intact item into a new directory OUT " \
        "(%s is only read)" % (why, path, path)  # fmt: skip


def looks_like_queue(names: Any) -> bool:
    ddq = locate.load_ddq()
    return any(n in QUEUE_NAMES or ddq.parse_segment_name(n) for n in names)


def is_queue_file_name(name: str) -> bool:
    """True for a name ddq may open as a file: a segment (or its .cut/.reserve), the marker,
    manifest, index, their .tmp, the lock."""
    ddq = locate.load_ddq()
    for suffix in (".cut", ".reserve"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name in QUEUE_FILE_NAMES or bool(ddq.parse_segment_name(name))


def check_regular_files(path: str) -> None:
    """QueueDirError when an entry named like a queue file is not a regular file (a FIFO would
    block the open forever, a symlink points out of the directory). Uses lstat; opens nothing."""
    for n in sorted(os.listdir(path)):
        why = not_regular(os.path.join(path, n)) if is_queue_file_name(n) else None
        if why is not None:
            raise QueueDirError("%s: %s is %s; refusing to open the queue" % (path, n, why))


def check_queue_dir(path: str) -> None:
    if not os.path.exists(path):
        raise QueueDirError("%s: no such directory" % path)
    if not os.path.isdir(path):
        raise QueueDirError("%s is not a directory" % path)
    if not looks_like_queue(os.listdir(path)):
        raise QueueDirError(
            "%s is not a ddq queue directory (no segment, manifest or queue.format)" % path
        )
    check_regular_files(path)


def _copy_bound(name: str, opts: dict[str, int]) -> tuple[int, str] | None:
    """The most bytes ddq reads of a queue file name (and that bound in words), None for a name
    it ignores (SPEC N5)."""
    if name in ("queue.manifest", "queue.manifest.tmp"):
        return fsck.MAN_SIZE, "48 bytes (SPEC M2)"
    if name == "queue.format":
        return 0, "0 bytes (SPEC M5)"
    if name in ("queue.index", "queue.index.tmp"):
        return index_limit(opts), "what these options allow (SPEC X2)"
    if name != "queue.lock" and is_queue_file_name(name):
        return opts["segment_bytes"], "segment_bytes (%d)" % opts["segment_bytes"]
    return None


def copy_queue(src: str, dst: str, options: dict[str, int] | None = None) -> None:
    """Copy what ddq reads in a queue directory (flat: the segments and their staged cuts, the
    marker, manifest, index and their .tmp) into a new directory dst, private (0700) and its
    files 0600 whatever the source's modes: a pulled directory of 0444 files opens for
    appending in the copy. Each file is read through fsck's read_file within the bound the
    options allow (a sparse 8 GiB segment is refused in one line, never copied), and only its
    data: a hole is copied as a hole (the copy costs what the file holds); QueueDirError
    when one is larger or not a regular file. Names ddq ignores are not copied."""
    opts = fsck.check_options(options)
    os.mkdir(dst, 0o700)
    for n in sorted(os.listdir(src)):
        bound = _copy_bound(n, opts)
        data: FileBytes | None
        if n == "queue.lock":  # never read, only locked: an empty one (else inspect shows it made)
            data, why = FileBytes(0, []), not_regular(os.path.join(src, n))
        elif bound is None:
            continue
        else:
            data, why = read_file(os.path.join(src, n), bound[0], bound[1])
        if data is None or why is not None:
            raise QueueDirError(
                "%s: %s is %s: ddq refuses the directory (`ddq verify %s` says more)"
                % (src, n, why, src)
            )
        fd = os.open(os.path.join(dst, n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            # The data extents only, at their offsets: a hole stays a hole (a sparse 64 MiB
            # segment holding 4 KiB costs 4 KiB here, not 64 MiB written).
            for off, part in data.extents:
                f.seek(off)
                f.write(part)
            f.truncate(data.size)
