"""What a long host command will take, said before it starts (docs/HOST.md "Progress"): `ddq
salvage` and `ddq replay` (one directory or a fleet). The progress shown as they go is the
helpers that exist: transfer.Progress (the bar of flash, pull and push) for salvage's reading,
replay.Progress for replay; `ddq test` says its own with testrun.plan_line and testrun.Progress.
All of it goes to stderr, so --json output is unchanged."""

import os
from collections.abc import Callable, Iterable
from typing import Any

from . import locate

# Measured on this project's 2-core x86 host, busy (docs/HOST.md "Progress"): salvage read 6.0
# MiB of segments (20,000 items of 200 bytes) and wrote the kept ones in 1.7 s; replay sent 15,000
# messages to a local mosquitto at 140 a second (window 16, each ack synced), after 2 s to open.
SALVAGE_BYTES_S = 3 * 1024 * 1024
OPEN_BYTES_S = 3 * 1024 * 1024
REPLAY_MSGS_S = 140


def on_disk(dirs: Iterable[str]) -> tuple[int, int]:
    """(segments, bytes of the queue's files) of queue directories; a raw-flash image counts as
    its size, a missing path as nothing (the command says why later)."""
    ddq = locate.load_ddq()
    segs = size = 0
    for d in dirs:
        if os.path.isfile(d):
            size += os.path.getsize(d)
            continue
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            if ddq.parse_segment_name(n):
                segs += 1
            try:
                size += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass
    return segs, size


def about(seconds: float) -> str:
    """'about 3 s', 'about 2 min 10 s', 'about 1 h 5 min'."""
    s = max(1, int(seconds + 0.5))
    if s < 60:
        return "about %d s" % s
    if s < 3600:
        return "about %d min %d s" % (s // 60, s % 60) if s % 60 else "about %d min" % (s // 60)
    return "about %d h %d min" % (s // 3600, s % 3600 // 60)


def size_text(n: int) -> str:
    return "%d bytes" % n if n < 10240 else "%.1f KiB" % (n / 1024) if n < 10 << 20 else (
        "%.1f MiB" % (n / 1048576)
    )  # fmt: skip


def salvage_plan(src: str, segs: int, size: int) -> str:
    return "ddq salvage: %s: %d segment(s), %s to read: %s at ~%d MiB/s (this host; a slower " \
        "disk or CPU takes longer); progress as the bytes read" % (
            src, segs, size_text(size), about(size / SALVAGE_BYTES_S), SALVAGE_BYTES_S >> 20
        )  # fmt: skip


def replay_plan(dirs: list[str], segs: int, size: int) -> str:
    return "ddq replay: %d director%s, %d segment(s), %s: opening them, %s; then each pending " \
        "message at ~%d a second to a local broker (this host; a remote one is slower)" % (
            len(dirs), "y" if len(dirs) == 1 else "ies", segs, size_text(size),
            about(size / OPEN_BYTES_S), REPLAY_MSGS_S,
        )  # fmt: skip


def replay_pending(pending: int, ndirs: int) -> str:
    return "ddq replay: %d message(s) pending in %d director%s: %s at ~%d a second" % (
        pending, ndirs, "y" if ndirs == 1 else "ies", about(pending / REPLAY_MSGS_S),
        REPLAY_MSGS_S,
    )  # fmt: skip


class CountReads:
    """A queue storage (the port's seam, CONVENTIONS "Storage seam") that passes every call to
    inner and reports the bytes of each file read so far (the highest offset reached, so a second
    read of the same bytes does not count twice) to progress(done)."""

    def __init__(self, inner: Any, progress: Callable[[int], None]) -> None:
        self.inner, self.progress = inner, progress
        self.path: dict[int, str] = {}  # id(handle) -> path, while it is open
        self.reached: dict[str, int] = {}

    def open(self, path: str, mode: str) -> Any:
        h = self.inner.open(path, mode)
        self.path[id(h)] = path
        return h

    def close(self, h: Any) -> None:
        self.path.pop(id(h), None)
        self.inner.close(h)

    def read_into(self, h: Any, offset: int, buf: Any) -> int:
        n: int = self.inner.read_into(h, offset, buf)
        p = self.path.get(id(h))
        if p is not None and offset + n > self.reached.get(p, 0):
            self.reached[p] = offset + n
            self.progress(sum(self.reached.values()))
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
