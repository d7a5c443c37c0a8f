"""ddq_admit: libddq's admission rule (SPEC §10 [A1]-[A6]), loaded at open (window 0).

A Queue opened without `window` (libddq's rule, exactly) loads this module at open and keeps it
as its admission rule (`Queue._adm`: enqueue calls `q._adm.admit(q, n)`, no lookup in ddq.py's
table); one opened with `window` > 0 (the hold rule, port/ddq_hold.py, as every board profile
opens) never loads it and keeps no plan. A missing file fails the open (SPEC O22).

    admit(q, n)     whether an n-byte payload fits DDQ's worst case [A1]-[A6]
    plan_items(q)   the worst-case compacted layout of every unacked item [A4]
    plan_add(q, n)  that layout with one more item (a cached upper bound, DESIGN §5)

Format: unchanged; design: docs/DESIGN.md §5.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import const

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Optional

    from ddq import Queue

# ddq's values that the rule reads (ddq.py's format section names each): a MicroPython const
# folds in its own module only (tests/host/test_host_index.py holds them equal to ddq's).
_MIN_REC = const(48)  # what a compaction writes an item as (SPEC §3.4): DATA, STATE, reason
_STATE_REC = const(72)
_ACKED = const(3)  # the state a plan leaves out (SPEC §4.1 [F11])


# ============================================================================ admission
def plan_items(self: "Queue") -> "Optional[list[int]]":
    # Worst-case compacted layout of every unacked item [A4]. Next-fit is monotone: removing
    # an item (ack) or shrinking one (quarantine) never grows the plan, so a cached plan stays
    # an upper bound until it is recomputed (DESIGN §5).
    ix, plan = self._ix, [0, 0]
    term = _MIN_REC + self.reason_budget
    for i in range(ix.n):
        if ix.state(i) == _ACKED:
            continue
        r = ix.reasons.get(ix.seq(i)) if ix.reasons else None
        if not (
            self._place(plan, _MIN_REC + ix.length(i))
            and self._place(plan, _STATE_REC)
            and self._place(plan, _MIN_REC + r[2] if r is not None else term)
        ):
            return None
    return plan


def plan_add(self: "Queue", n: int) -> None:
    p = self._plan
    if p is not None:
        term = _MIN_REC + self.reason_budget
        if not (
            self._place(p, _MIN_REC + n) and self._place(p, _STATE_REC) and self._place(p, term)
        ):
            self._plan = None


def admit(self: "Queue", n: int, sh: "Optional[list[int]]" = None, lean: bool = False) -> bool:
    """DDQ's admission rule for a new payload of n bytes, exactly [A1]-[A6]; on the
    generation sh ([segments, last offset]) when given, else on g; lean: without A5's
    STATE share of the control reserve (DESIGN §12) [C14]. First on the cached plan (an
    upper bound), then, when that refuses, on the plan recomputed (exact)."""
    o, ix = self._o, self._ix
    seg = o.seg_bytes
    term = _MIN_REC + self.reason_budget
    phys, plan = o.pl
    place = self._place
    for k in range(2):
        if k:
            self._plan = plan_items(self)
        cached = self._plan
        if cached is None:
            continue
        if sh is None:
            phys[0], phys[1] = len(self._log.sizes), self._log.off
        else:
            phys[0], phys[1] = sh[0], sh[1]
        plan[0], plan[1] = cached[0], cached[1]
        if not (
            place(phys, _MIN_REC + n)
            and place(plan, _MIN_REC + n)
            and place(plan, _STATE_REC)
            and place(plan, term)
            and place(plan, _MIN_REC)
            and place(plan, term)
        ):
            continue
        p = 1 + ix.avail + ix.claimed
        c = p * (_STATE_REC + _MIN_REC) + ix.quar * _STATE_REC
        if term <= seg // 2:
            c += p * term
            m, reserved = max(_STATE_REC, term), 0
        else:
            m, reserved = _STATE_REC, 2 * p
        remaining = o.max_segs - phys[0] - reserved
        if remaining < 0:
            continue
        left = seg - phys[1]
        g = (left - (m - 1) if left >= m else 0) + remaining * (seg - (m - 1))
        if sh is None:
            self._slack = g - c
            if lean:
                c -= (p + ix.quar) * _STATE_REC
        if c <= g:
            return True
    return False
