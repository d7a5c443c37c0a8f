"""ddq_hold: the hold admission rule (Queue option window > 0), loaded on demand.

libddq's admission (SPEC §10 A1-A8) reserves for every pending item a STATE, a CLAIM and a
terminal record sized for the longest reason: on a board about 85 % of the log goes to reserves
that are almost never written. The hold rule reserves what a drain really needs (DESIGN §5.1):
the items' own DATA records, a STATE for each item with history (at least `window` of them: the
claims in flight) and the quarantine evidence (at least `evidence_bytes`), against the room a
next-fit copy is sure to find in max_segments segments. ddq.Queue imports it by name where it
needs it (enqueue, claim; ddq_extra: claim_ordered, claim_seq, quarantine); a queue opened
without `window` never loads this module.

Format: unchanged (SPEC §10.1 [H1]-[H7]); design: docs/DESIGN.md §5.1.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import _err, const

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ddq import Buf, Queue

# ddq's values (SPEC §3.4, §4; ddq.py's _X_ table); a MicroPython const folds in its own module
# only, so they are repeated here (tests/test_hold.py holds the record sizes to SPEC's).
_MIN_REC = const(48)
_STATE_REC = const(72)
_ACKED = const(3)
_X_RESERVE = const(8)  # "Full:admission reserve exhausted"


def cap(self: "Queue") -> int:
    """The bytes a copy (plus the one record after it) is sure to fit in [H2]: next-fit of
    records of at most r bytes leaves under r bytes at the end of a segment, so any sequence of
    them totalling at most W·(S − r + 1) fits in W segments; one record of r is kept for the
    write that made the compaction run."""
    r = max(_STATE_REC, _MIN_REC + self._max_payload)
    return self._max_segs * (self._seg_bytes - r + 1) - r


def _data_bytes(self: "Queue") -> int:
    # The DATA records of every unacked item, counted over the index: O(items).
    ix, d = self._ix, 0
    for i in range(ix.n):
        if ix.state(i) != _ACKED:
            d += _MIN_REC + ix.length(i)
    return d


def slack(self: "Queue", dd: int, dh: int, dq: int) -> int:
    """cap − need after a change of dd DATA bytes, dh items with history, dq evidence bytes;
    negative: it does not fit [H2]. need = DATA + 72·max(H, window) + max(evidence, budget)."""
    ix = self._ix
    h = len(ix.live) + dh
    qc = dq
    for r in ix.reasons.values():  # a quarantined item's copy: its STATE and its reason record
        qc += _STATE_REC + _MIN_REC + r[2]
    w = self._win
    rest = cap(self) - _STATE_REC * (h if h > w else w) - (qc if qc > self._ev else self._ev)
    hd = self._hd
    if hd is None or rest - hd[0] - dd < 0:
        # The cached sum is an upper bound (acks and compactions only lower the true one);
        # recount it when it refuses, unless it is exact: nothing acked or compacted since.
        log = self._log
        if hd is None or hd[1] != ix.n or hd[2] != self._n_acked or hd[3] != log.gen:
            self._hd = hd = [_data_bytes(self), ix.n, self._n_acked, log.gen]
    return rest - hd[0] - dd


def hold(self: "Queue", n: int) -> None:
    """Admit an n-byte payload under the hold rule or raise Full; nothing is written [H2]."""
    if self._ix.n >= self._max_items:  # as A6: compact with one acked item required
        self._compact(_MIN_REC + n, 1)
    if slack(self, _MIN_REC + n, 0, 0) < 0:
        raise _err(_X_RESERVE)
    hd = self._hd
    if hd is not None:  # the new item's DATA; exact stays exact (enqueue adds the item next)
        hd[0] += _MIN_REC + n
        hd[1] += 1


def room(self: "Queue") -> bool:
    """Whether one more item may gain history (a first claim: its STATE in a copy) [H3]."""
    return slack(self, 0, 1, 0) >= 0


def cut(self: "Queue", seq: int, reason: "Buf") -> "Buf":
    """The reason a quarantine of seq may write under the hold rule: whole, or cut to the room
    left (the item's STATE moves from history to evidence); Full if not even an empty reason
    fits [H4]."""
    dh = -1 if seq in self._ix.live else 0
    n = len(reason)
    k = n + slack(self, 0, dh, _STATE_REC + _MIN_REC + n)
    if k >= n:
        return reason
    if k < 0 or slack(self, 0, dh, _STATE_REC + _MIN_REC + k) < 0:
        raise _err(_X_RESERVE)
    return reason[0:k]
