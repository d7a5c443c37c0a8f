"""ddq_hold: the hold admission rule (Queue option window > 0), loaded at open.

libddq's admission (SPEC §10 A1-A8) reserves for every pending item a STATE, a CLAIM and a
terminal record sized for the longest reason: on a board about 85 % of the log goes to reserves
that are almost never written. The hold rule reserves what a drain really needs (DESIGN §5.1):
the items' own DATA records, a STATE for each item with history (at least `window` of them: the
claims in flight) and the quarantine evidence (at least `evidence_bytes`), against the room a
next-fit copy is sure to find in max_segments segments (counted in bytes or in records: SPEC H2).
Its entry points are functions over the queue: `hold` (enqueue), `room` (claim; ddq_extra's
claim_ordered, claim_seq) and `cut` (ddq_extra's quarantine). A queue opened with `window` loads
this module at open and keeps it as its admission rule (`Queue._adm`: a call is
`q._adm.hold(q, n)`, no lookup in ddq.py's table); a missing file fails the open (SPEC O22). A
queue opened without `window` never loads it.

Format: unchanged (SPEC §10.1 [H1]-[H7]); design: docs/DESIGN.md §5.1.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import _err, const

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from ddq import Buf, Queue

# ddq's values that the rule reads (ddq.py's format section and _X_ table name each): a
# MicroPython const folds in its own module only (tests/test_hold.py holds the record sizes to
# SPEC's, tests/host/test_host_index.py each to ddq's).
_MIN_REC = const(48)  # the bytes of a record and of a STATE record (SPEC §3.4)
_STATE_REC = const(72)
_ACKED = const(3)  # the state whose DATA no longer counts (SPEC §4.1 [F11])
_X_RESERVE = const(8)  # "admission reserve exhausted" (a Full)


def _recount(self: "Queue") -> "list[int]":
    # [DATA bytes of the unacked items, stamp: items, acked, generation; the longest payload of
    # any item in the index, acked ones too: their records are still in the log]: O(items).
    ix = self._ix
    d = m = 0
    for i in range(ix.n):
        ln = ix.length(i)
        if ln > m:
            m = ln
        if ix.state(i) != _ACKED:
            d += _MIN_REC + ln
    return [d, ix.n, ix.acked, self._log.gen, m]


def fits(self: "Queue", dd: int, dn: int, dh: int, dq: int, dqn: int, r: int) -> bool:
    """Whether a change of dd DATA bytes in dn items, dh items with history, dq evidence bytes
    in dqn quarantines, with r the largest new record, fits: either bound (bytes, records)
    leaves >= 0 [H2]. R is the largest record a copy or the log can hold
    (a STATE, the longest payload or reason of the index, r). Bytes: next-fit of records of at
    most R leaves under R at the end of a segment, so records totalling W·(S − R + 1) fit in W
    segments; need = DATA + 72·max(H, window) + max(evidence, budget), one record of R kept for
    the write that made the compaction run. Records: a closed segment holds at least S // R of
    them, so W·(S // R) records fit; need = items + max(H, window) STATEs + 2 a quarantine
    (at least budget ÷ 120 of them) + 1 + max(H, window) ÷ 2 (a STATE in a copy may replace a
    48-byte CLAIM: that many more records make the log larger than the copy, C8)."""
    ix, o = self._ix, self._o
    hw = max(len(ix.live) + dh, o.win)
    for v in ix.reasons.values():  # a quarantined item's copy: its STATE and its reason record
        dq += _STATE_REC + _MIN_REC + v[2]
        dqn += 1
        if _MIN_REC + v[2] > r:
            r = _MIN_REC + v[2]
    ev = o.ev
    en = ev // (_STATE_REC + _MIN_REC)
    seg, segs = o.seg_bytes, o.max_segs
    hd = self._hd
    for _ in range(2):  # the second pass is on a fresh count, which is exact
        if hd is None:
            self._hd = hd = _recount(self)
        big = max(_STATE_REC, _MIN_REC + hd[4], r)
        b = segs * (seg - big + 1) - big - hd[0] - dd - _STATE_REC * hw - (dq if dq > ev else ev)
        c = (
            segs * (seg // big)
            - (ix.n - ix.acked + dn)
            - hw
            - 2 * (dqn if dqn > en else en)
            - 1
            - (hw + 1) // 2
        )
        if b >= 0 or c >= 0:
            return True
        # The cached DATA sum and longest payload are upper bounds (acks and compactions only
        # lower them): recount when they refuse, unless exact (nothing acked since the count).
        if hd[1] == ix.n and hd[2] == ix.acked and hd[3] == self._log.gen:
            break
        hd = None
    return False


def hold(self: "Queue", n: int) -> None:
    """Admit an n-byte payload under the hold rule or raise Full; nothing is written [H2]."""
    r, o = _MIN_REC + n, self._o  # its DATA record (enqueue compacted at max_items, as A6)
    if not fits(self, r, 1, 0, 0, 0, r):
        raise _err("Full", _X_RESERVE)
    if self._rm is not None:  # staged reclamation's start rule reads the room left before W4 [H8]
        log = self._log
        p = (o.max_segs + 1 - len(log.sizes)) * o.seg_bytes - log.off
        m = (o.max_items - self._ix.n) * r
        self._slack = p if p < m else m
    hd = self._hd
    if hd is not None:  # the new item's DATA; exact stays exact (enqueue adds the item next)
        hd[0] += r
        hd[1] += 1
        if n > hd[4]:
            hd[4] = n


def room(self: "Queue") -> bool:
    """Whether one more item may gain history (a first claim: its STATE in a copy) [H3]."""
    return fits(self, 0, 0, 1, 0, 0, 0)


def _fits(self: "Queue", dh: int, k: int) -> bool:
    return fits(self, 0, 0, dh, _STATE_REC + _MIN_REC + k, 1, _MIN_REC + k)


def cut(self: "Queue", seq: int, reason: "Buf") -> "Buf":
    """The reason a quarantine of seq may write under the hold rule: whole, or its longest
    prefix that fits (the item's STATE moves from history to evidence; both bounds only shrink
    as the reason grows); Full if not even an empty reason fits [H4]."""
    dh = -(seq in self._ix.live)  # -1: the item's STATE moves from history to evidence
    n = len(reason)
    if _fits(self, dh, n):
        return reason
    if not _fits(self, dh, 0):
        raise _err("Full", _X_RESERVE)
    lo, hi = 0, n  # lo fits, hi does not
    while hi - lo > 1:  # halves: log2(len(reason)) rounds
        m = (lo + hi) // 2
        if _fits(self, dh, m):
            lo = m
        else:
            hi = m
    return reason[0:lo]
