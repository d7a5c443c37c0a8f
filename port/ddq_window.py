"""ddq_window: the Outbox's windowed delivery loop [E25].

Loaded by ddq_outbox (port/ddq_outbox.py) when pump() or run() is given a windowed sender (one
with publish and poll, such as port/ddq_mqtt.py's): up to the sender's inflight_max messages are
published before their acknowledgements come back. A board without a network never imports it.

Behaviour: see docs/OUTBOX.md [E25] [E26].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import _opt, const

TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any

_IO_LOOPS = const(1048576)  # ddq's bound on retry loops
_MAX_WAIT = const(0x1FFFFFFF)  # ddq_outbox's: the longest wait, inside ticks_diff's window


# ============================================================================ windowed delivery
class Window:
    # One windowed delivery loop [E25]: up to the sender's inflight_max claimed messages are
    # published before their PUBACKs come back. In flight = a Message without its payload (the
    # payload is re-read from the queue when it must be resent): RAM is O(W) small objects.
    def __init__(self, ob: "Any", sender: "Any", stop: "Any" = None) -> None:
        self.ob, self.s, self.stop = ob, sender, stop
        self.w = _opt(int(getattr(sender, "inflight_max", 1)), 1, 65535, "inflight_max")
        self.fl: "dict[int, Any]" = {}  # seq -> its Message (ddq_outbox)
        self.redo: "list[int]" = []  # seqs of fl to republish one at a time after a loss [E30]
        self.solo = 0  # the seq republished alone, until it is settled
        self.acked = 0
        self.loss = 0  # since the last PUBACK: 0 no loss, 1 one with several on the wire, 2 alone
        self.failed = False  # the round ended: a second loss without progress, or "not now"
        # The loop stops waiting for a message margin ms before its lease ends and nacks it:
        # it is never in flight past its lease, so never claimed and sent again meanwhile.
        self.margin = min(ob.lease_ms // 4, 2000)

    def fill(self, n: int) -> int:
        # Claim and publish up to n more (within the window); return how many were claimed.
        k = 0
        while (
            k < n
            and len(self.fl) < self.w
            and not self.failed
            and not self.redo
            and self.solo not in self.fl
            and (self.stop is None or not self.stop())
        ):
            m = self.ob.get()
            if m is None:
                break
            k += 1
            self.fl[m.seq] = m
            try:
                self.s.publish(m, m.attempts > 0)
            except OSError as e:
                self.lost(e)
                continue
            except Exception as e:  # Rejected: dead letter; anything else: not now [E17]
                self.fl.pop(m.seq)
                if self.ob.settle(m, False, e) < 0:
                    self.end(repr(e))
                continue
            m.payload = b""  # not held: re-read if it must be resent
        return k

    def lost(self, e: BaseException) -> None:
        # The connection dropped with messages in flight: nothing of them is acked [E30]. One
        # alone on the connection failed an attempt: nacked (E8 backoff, E10 max_attempts).
        # Several: which one the broker refused is unknown, so none is charged and they are
        # republished (DUP, re-read) one at a time. The round ends (the rest nacked) at a loss
        # of one before any PUBACK (the broker is down: one attempt, not a busy loop), or a
        # second loss without a PUBACK since the last, unless it pins one after several.
        fl = self.fl
        w = [q for q in fl if q not in self.redo]  # on the wire (redo's wait their turn)
        s = w[0] if len(w) == 1 else 0
        if s:
            self.ob.nack(fl.pop(s), repr(e))
        else:
            self.redo = sorted(fl)
        self.solo = 0  # (the one alone before, if claimed again since, is one of the many)
        if (
            self.loss == 2
            or (self.loss == 1 and not s)
            or (s and not self.loss and not self.acked)
        ):
            for m in list(self.fl.values()):
                self.ob.nack(m, repr(e))
            self.fl, self.redo = {}, []
            self.failed, self.loss = True, 0  # (run's next round starts afresh)
            return
        self.loss = 2 if s else 1

    def again(self) -> None:
        # Republish the next message of redo once nothing else is on the connection [E30].
        while self.redo and not self.failed and self.solo not in self.fl:
            m = self.fl.get(self.redo.pop(0))
            if m is None:
                continue  # settled meanwhile: nacked at its lease's end
            r = self.ob.reread(m)
            if r is None:  # a batch's reading whose item was retried meanwhile [B5]
                self.fl.pop(m.seq)
                continue
            self.solo = m.seq
            try:
                self.s.publish(r, True)
                self.ob.counters["resent"] += 1
            except OSError as e:
                self.lost(e)

    def end(self, why: str) -> None:
        # A failed send ended the round (E17; the host's replay also releases what is in
        # flight [E26]).
        self.failed = True

    def done(self, seqs: "list[int]") -> None:
        for seq in seqs:
            m = self.fl.pop(seq, None)
            if m is not None:  # else acked before, or nacked at its lease's end: ignored
                self.loss = 0
                self.acked += 1 if self.ob.ack(m) else 0

    def due(self) -> int:
        # Nack every message whose lease ends within the margin; return ms to wait at most.
        now, wait = self.ob.clock(), _MAX_WAIT
        for m in list(self.fl.values()):
            left = m.lease_until_ms - now - self.margin
            if left <= 0:
                self.fl.pop(m.seq)
                self.ob.counters["lease_nacks"] += 1
                self.ob.nack(m, "lease would run out in flight")
                if hasattr(self.s, "forget"):  # optional: the sender frees its packet id
                    self.s.forget(m.seq)
            else:
                wait = min(wait, left)
        return wait

    def step(self, timeout_ms: int) -> None:
        wait = self.due()
        self.again()
        if not self.fl:
            return  # every message was given up at its lease: nothing left to wait for
        try:
            self.done(self.s.poll(min(timeout_ms, wait)))
        except OSError as e:
            self.lost(e)

    def pump(self, budget: int, budget_ms: int) -> int:
        ob, t0, n = self.ob, self.ob.ticks(), 0
        budget = _opt(budget, 1, _MAX_WAIT, "budget")
        ob.tick()
        for _ in range(_IO_LOOPS):
            if not self.failed and n < budget and ob.within(t0, budget_ms):
                n += self.fill(budget - n)
            if not self.fl:
                break
            self.step(int(getattr(self.s, "timeout_ms", 5000)))
            ob.tick()
        return self.acked

    async def run(self, idle_ms: int, stop: "Any") -> int:
        import asyncio

        sleep_ms = getattr(asyncio, "sleep_ms", None)
        _opt(idle_ms, 1, _MAX_WAIT, "idle_ms")
        ob = self.ob
        while stop is None or not stop():
            ob.tick()
            self.failed = False
            k = self.fill(self.w)
            if self.fl:
                self.step(0)  # never blocks the event loop: poll, then yield a few ms
                await (sleep_ms(2) if sleep_ms is not None else asyncio.sleep(0.002))
                continue
            if k and not self.failed:
                await asyncio.sleep(0)
                continue
            d = ob.next_ready_ms()
            d = idle_ms if d is None else min(d, idle_ms)
            await (sleep_ms(d) if sleep_ms is not None else asyncio.sleep(d / 1000))
        while self.fl:  # stopping: settle what is in flight (bounded by the sender's timeout)
            self.step(int(getattr(self.s, "timeout_ms", 5000)))
        return self.acked
