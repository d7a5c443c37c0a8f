"""ddq_extra: the less used methods of ddq.Queue, loaded on first use.

stats(), items(), oldest_available(), lapsed(), claim_seq(), claim_ordered(), reason(),
quarantine() and save_index(): what a sender loop that only enqueues, claims, reads and acks
never calls. ddq.py's one table (`_PARTS`) names them; Queue attaches each as its method the
first time it is called, so they cost a board's heap only once an application uses one of them
(DESIGN §4.1, §13).

Format: see docs/SPEC.md §7.3 [O13][O20], §12.1 [X1]; design: docs/DESIGN.md §13.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import (
    _INDEX,
    _U32,
    _U64,
    STATES,
    Claim,
    _bytes_arg,
    _err,
    _io_failure,
    _opt,
    _part,
    const,
)

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Iterator, Optional

    from ddq import Buf, Queue

# ============================================================================ extra
# ddq's values that these methods read, by group (ddq.py's format section names each): a
# MicroPython const folds in its own module only (tests/host/test_host_index.py holds them equal).
_T_QUAR = const(5)  # the record of a reason (SPEC §4 [F10])
_AVAILABLE = const(1)  # the states that stats and items count (SPEC §4.1 [F11])
_CLAIMED = const(2)
_QUARANTINED = const(4)
_MAX_LEASE_MS = const(604800000)  # the longest lease (SPEC §7.1)
_X_RESERVE = const(8)  # ddq.py's "admission reserve exhausted" (a Full)
_LV_I = const(0)  # a live entry's fields (ddq._Index.live)
_LV_ATT = const(1)
_LV_LEASE = const(2)
_LV_NB = const(3)


def reason(self: "Queue", seq: int) -> bytes:
    """Return the quarantine reason of a quarantined item [O13]."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        self._find(seq)
        r = self._ix.reasons.get(seq)
        if r is None:
            raise _err("BadState", "item %d is not quarantined", seq)
        return bytes(self._read_record(self._log, r[0], r[1], _T_QUAR, seq, r[2]))
    except MemoryError:
        raise self._oom()


def claim_ordered(self: "Queue", lease_ms: int) -> "Optional[Claim]":
    """Claim the earliest unfinished item if it is ready, else return None (strict FIFO) [O3]."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        _opt(lease_ms, 1, _MAX_LEASE_MS, "lease_ms")
        self._alive()
        now = self._now()
        ix = self._ix
        f, live = ix.skip(), ix.live  # the first item that may be fresh (as Queue.claim)
        # Only the earliest unfinished item is a candidate; only it is swept.
        head, hs = (f, ix.seq(f)) if f < ix.n else (-1, 0)
        for s, e in live.items():
            if head < 0 or s < hs:
                head, hs = e[_LV_I], s
        if head < 0:
            return None
        h = live.get(hs)
        if h is not None:
            self._sweep(h, now)
            if ix.state(head) != _AVAILABLE or not (h[_LV_NB] <= now or h[_LV_NB] - now > _U32):
                return None
        elif self._o.win and len(live) >= self._o.win and not self._adm.room(self):
            return None  # the hold rule: no room for one more item with history [H3]
        return self._take(hs, now + lease_ms, head)
    except MemoryError:
        raise self._oom()


def claim_seq(self: "Queue", seq: int, lease_ms: int) -> Claim:
    """Claim one available item by seq, due or not (to retire it, say) [O20]."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        _opt(lease_ms, 1, _MAX_LEASE_MS, "lease_ms")
        i = self._find(seq)
        now = self._now()
        e = self._ix.live.get(seq)
        if e is not None:
            self._sweep(e, now)
        s = self._ix.state(i)
        if s != _AVAILABLE:
            raise _err("BadState", "item %d is %s, not available", seq, STATES[s])
        if e is None and self._o.win and len(self._ix.live) >= self._o.win:
            if not self._adm.room(self):  # the hold rule: no room for one more history [H3]
                raise _err("Full", _X_RESERVE)
        return self._take(seq, now + lease_ms, i)
    except MemoryError:
        raise self._oom()


def items(self: "Queue") -> "Iterator[Item]":
    """Yield every retained item in seq order (RAM metadata; no payload reads)."""
    try:
        ix = self._ix
        for i in range(ix.n):
            s = ix.seq(i)
            a, lease, nb = ix.history(s)
            yield Item(s, STATES[ix.state(i)], a, lease, nb, ix.length(i))
    except MemoryError:
        # (the snapshot taken here: the caller's operations between two items may have
        # appended; this generator appends nothing, so NoMemory without a fail-stop [O23])
        self._log.mark()
        raise self._oom()


def oldest_available(self: "Queue") -> "Optional[int]":
    """The seq of the oldest unclaimed item, due or backing off; None if there is none."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        ix = self._ix
        i = 0
        while i < ix.n and ix.state(i) != _AVAILABLE:  # O(n): called when full
            i += 1
        return ix.seq(i) if i < ix.n else None
    except MemoryError:
        raise self._oom()


def lapsed(self: "Queue", now: int) -> "list[tuple[int, int]]":
    """(seq, attempts) of each claimed item whose lease ran out by now (O(in flight))."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        _opt(now, 0, _U64, "now")  # [O24]
        ix = self._ix
        return [
            (s, e[_LV_ATT])
            for s, e in ix.live.items()
            if ix.state(e[_LV_I]) == _CLAIMED
            and (e[_LV_LEASE] <= now or e[_LV_LEASE] - now > _MAX_LEASE_MS)
        ]
    except MemoryError:
        raise self._oom()


def save_index(self: "Queue") -> None:
    """Sync, then write queue.index so the next open replays only what follows [X1]."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        self.sync()
        m = _part("ddq_index")  # (a missing file: IOFailure naming it [O22])
        try:
            m.save(self)
        except OSError as e:
            raise _io_failure(e, "writing " + _INDEX)
    except MemoryError:
        raise self._oom()


class Stats:
    """Counts of a queue; the DDQ fields plus generation, failed and durable_seq."""

    __slots__ = (
        "total_items",
        "available_items",
        "claimed_items",
        "acknowledged_items",
        "quarantined_items",
        "stored_bytes",
        "segment_count",
        "next_seq",
        "recovered_tail_bytes",
        "generation",
        "failed",
        "durable_seq",
        "salvaged",
        "salvage_lost",
    )

    # stats() sets every field (no __init__: a function object costs a board's heap).
    total_items: int
    available_items: int
    claimed_items: int
    acknowledged_items: int
    quarantined_items: int
    stored_bytes: int
    segment_count: int
    next_seq: int
    recovered_tail_bytes: int
    generation: int
    failed: bool
    durable_seq: int
    salvaged: int  # [K12]
    salvage_lost: int

    def as_dict(self) -> "dict[str, Any]":
        d = {}
        for k in Stats.__slots__:
            d[k] = getattr(self, k)
        return d


def stats(self: "Queue") -> Stats:
    """Return counts; works while fail-stopped (`.failed`) [O9]."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        s, ix = Stats(), self._ix
        s.total_items = ix.n
        s.available_items = ix.avail
        s.claimed_items = ix.claimed
        s.acknowledged_items = ix.acked
        s.quarantined_items = ix.quar
        s.stored_bytes = sum(self._log.sizes)
        s.segment_count = len(self._log.sizes)
        s.next_seq = self._log.next
        s.recovered_tail_bytes = self._log.tail
        s.generation = self._log.gen
        s.failed = self._log.h is None
        s.durable_seq = self._log.durable
        s.salvaged, s.salvage_lost = self._salv or (0, 0)  # [K12]
        return s
    except MemoryError:
        raise self._oom()


class Item:
    """One retained item as items() reports it."""

    __slots__ = ("seq", "state", "attempts", "lease_until_ms", "not_before_ms", "payload_len")

    def __init__(self, seq: int, state: str, attempts: int, lease: int, nb: int, n: int) -> None:
        self.seq = seq
        self.state = state
        self.attempts = attempts
        self.lease_until_ms = lease
        self.not_before_ms = nb
        self.payload_len = n


def quarantine(self: "Queue", seq: int, reason: "Buf" = b"") -> bool:
    """Quarantine a claimed item with a reason; False if already (first reason kept) [O6]."""
    self._log.mark()  # (a MemoryError below: NoMemory, Queue._oom [O23])
    try:
        reason = _bytes_arg(reason, "reason")
        if self._claimed(seq, _QUARANTINED) < 0:
            return False
        if len(reason) > self.reason_budget:
            raise _err("TooLarge", "reason over %d bytes", self.reason_budget)
        if b"\0" in bytes(reason):
            raise _err("InvalidArgument", "reason must not contain NUL bytes")
        if self._o.win:  # the hold rule: the reason cut to the room left, or Full [H4]
            reason = self._adm.cut(self, seq, reason)
        off = self._write(_T_QUAR, seq, 0, reason, self._o.sync_ack)
        ix = self._ix
        e = ix.live[seq]
        self._move(e[_LV_I], _QUARANTINED, e[_LV_ATT], 0, e[_LV_NB])
        ix.reasons[seq] = [len(self._log.sizes) - 1, off, len(reason)]
        return True
    except MemoryError:
        raise self._oom()
