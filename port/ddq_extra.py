"""ddq_extra: the less used methods of ddq.Queue, loaded on first use.

items(), oldest_available(), lapsed(), claim_seq(), reason() and save_index(): what a sender
loop that only enqueues, claims, reads and acks never calls. Queue attaches these functions as
its methods the first time one is called (ddq's `_lazy`), so they cost a board's heap only once
an application uses one of them (DESIGN §4, §13).

Format: see docs/SPEC.md §7.3 [O13][O20], §12.1 [X1]; design: docs/DESIGN.md §13.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import (
    _INDEX,
    STATES,
    BadState,
    Claim,
    InvalidArgument,
    TooLarge,
    _bytes_arg,
    _io_failure,
    _opt,
    const,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator, Optional

    from ddq import Buf, Queue

# ============================================================================ extra
# ddq's values (SPEC §4, §7); a MicroPython const folds in its own module only, so these are
# repeated here (tests/host/test_host_index.py holds them equal to ddq's).
_T_QUAR = const(5)
_AVAILABLE = const(1)
_CLAIMED = const(2)
_QUARANTINED = const(4)
_MAX_LEASE_MS = const(604800000)


def reason(self: "Queue", seq: int) -> bytes:
    """Return the quarantine reason of a quarantined item [O13]."""
    self._find(seq)
    r = self._ix.reasons.get(seq)
    if r is None:
        raise BadState("item %d is not quarantined" % seq)
    return bytes(self._read_record(self._log, r[0], r[1], _T_QUAR, seq, r[2]))


def claim_seq(self: "Queue", seq: int, lease_ms: int) -> Claim:
    """Claim one available item by seq, due or not (to retire it, say) [O20]."""
    _opt(lease_ms, 1, _MAX_LEASE_MS, "lease_ms")
    i = self._find(seq)
    now = self._now()
    e = self._ix.live.get(seq)
    if e is not None:
        self._sweep(e, now)
    s = self._ix.state(i)
    if s != _AVAILABLE:
        raise BadState("item %d is %s, not available" % (seq, STATES[s]))
    return self._take(seq, now + lease_ms, i)


def items(self: "Queue") -> "Iterator[Item]":
    """Yield every retained item in seq order (RAM metadata; no payload reads)."""
    ix = self._ix
    for i in range(ix.n):
        s = ix.seq(i)
        a, lease, nb = ix.history(s)
        yield Item(s, STATES[ix.state(i)], a, lease, nb, ix.length(i))


def oldest_available(self: "Queue") -> "Optional[int]":
    """The seq of the oldest unclaimed item, due or backing off; None if there is none."""
    ix = self._ix
    i = 0
    while i < ix.n and ix.state(i) != _AVAILABLE:  # O(n): called when full
        i += 1
    return ix.seq(i) if i < ix.n else None


def lapsed(self: "Queue", now: int) -> "list[tuple[int, int]]":
    """(seq, attempts) of each claimed item whose lease ran out by now (O(in flight))."""
    ix = self._ix
    return [(s, e[1]) for s, e in ix.live.items() if ix.state(e[0]) == _CLAIMED
            and (e[2] <= now or e[2] - now > _MAX_LEASE_MS)]


def save_index(self: "Queue") -> None:
    """Sync, then write queue.index so the next open replays only what follows [X1]."""
    self.sync()
    import ddq_index  # noqa: PLC0415 (the optional module, loaded on demand)

    try:
        ddq_index.save(self)
    except OSError as e:
        raise _io_failure(e, "writing " + _INDEX)


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
    reason = _bytes_arg(reason, "reason")
    if self._claimed(seq, _QUARANTINED) < 0:
        return False
    if len(reason) > self.reason_budget:
        raise TooLarge("reason over %d bytes" % self.reason_budget)
    if b"\0" in bytes(reason):
        raise InvalidArgument("reason must not contain NUL bytes")
    off = self._write(_T_QUAR, seq, 0, reason, self._sync_ack)
    ix = self._ix
    e = ix.live[seq]
    self._move(e[0], _QUARANTINED, e[1], 0, e[3])
    ix.reasons[seq] = [len(self._log.sizes) - 1, off, len(reason)]
    return True
