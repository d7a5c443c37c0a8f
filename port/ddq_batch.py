"""ddq_batch: many small readings in one DDQ item, delivered as separate messages.

    from ddq_batch import BatchOutbox
    ob = BatchOutbox("outbox", batch_ms=60000, **board_options)  # batches up to max_payload
    ob.put("sensors/t", b"21.5")       # into the open batch (RAM) ...
    ob.pump(send)                      # ... each reading reaches send() as its own Message

An Outbox (port/ddq_outbox.py) whose put() gathers readings of one topic, QoS, retain and TTL in
an open batch and writes the batch as one DDQ item, an ordinary envelope (key b"\\0C") whose
payload holds the readings with their own enqueue times (a reading as regular as the one before
costs its bytes and no more: docs/OUTBOX.md B2). get()/pump()/run() hand out each
reading as its own Message; the item is acked once every reading of it is confirmed. The
directory is an ordinary DDQ directory (libddq reads it; a plain Outbox delivers a batch as one
message of its raw entries). Durability: docs/OUTBOX.md §13.4 [B1]-[B6].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq import Full, InvalidArgument, _bytes_arg, _opt, const
from ddq_outbox import BadEnvelope, Message, Outbox as Base, _seq, _tdiff, publishable

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Optional

KEY = b"\0C"  # the envelope key of a batch this module writes: runs of regular readings [B2]
KEY_B = b"\0B"  # a batch of the first release, read as ever: a gap and a length each [B2]
_ID = 1 << 64  # a reading's Message.seq: _ID + (item seq << 12) + index, above every DDQ seq
_READINGS = 4095  # readings in one batch at most (the index field of that id)
_MAX_WAIT = 0x1FFFFFFF
_MAX_AGE = 0x7FFFFFFFF  # the first reading's age at the write, at most (5 varint bytes) [B2]
_RUN = 63  # readings in one run at most (its header stays one byte)


def _varint(out: bytearray, v: int) -> None:
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | 0x80 if v else b)
        if not v:
            return


def _vlen(v: int) -> int:
    # The bytes of _varint(v).
    n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


def _unvarint(b: "Any", i: int) -> "tuple[int, int]":
    v = s = 0
    for _ in range(10):
        if i >= len(b):
            break
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        if not c & 0x80:
            return v, i
        s += 7
    raise BadEnvelope("batch: an entry runs past the end")


def entries(m: Message) -> "list[Message]":
    """The readings of batch envelope m (decoded): one Message each, with its own enqueue time
    (topic, QoS, retain, TTL: the batch's) [B2]."""
    _seq(m)  # a Message, else InvalidArgument [O24]
    b, i = m.payload, 0
    out: "list[Message]" = []
    runs = m.key != KEY_B
    t, g, n = m.enqueued_ms, 0, 0  # the time, gap and length of the reading before
    while i < len(b):
        if not out:  # the first: its age at the write, its length
            d, i = _unvarint(b, i)
            n, i = _unvarint(b, i)
            t, r = t - d, 1
        elif not runs:  # b"\0B": the gap since the reading before, the length
            d, i = _unvarint(b, i)
            n, i = _unvarint(b, i)
            t, r = t + d, 1
        else:
            h, i = _unvarint(b, i)
            r = 1
            if h & 1:  # one reading: its gap's change (zigzag), its length if it changed
                if h & 2:
                    n, i = _unvarint(b, i)
                z = h >> 2
                g += -(z + 1 >> 1) if z & 1 else z >> 1
                if g < 0:
                    raise BadEnvelope("batch: a gap below 0")
            else:  # r readings as long as the one before, each the same gap after it
                r = h >> 1
                if not r:
                    raise BadEnvelope("batch: an empty run")
        for _ in range(r):
            if len(out) == _READINGS:
                raise BadEnvelope("batch: over %d readings" % _READINGS)
            if i + n > len(b):
                raise BadEnvelope("batch: an entry runs past the end")
            if out and runs:
                t += g
            e = Message()
            e.topic, e.qos, e.retain, e.ttl_ms, e.enqueued_ms = (
                m.topic,
                m.qos,
                m.retain,
                m.ttl_ms,
                t,
            )
            e.payload = bytes(b[i : i + n])
            i += n
            out.append(e)
    return out


def _head(o: "list[Any]", now: int, n: int, w: bool = False) -> int:
    # The header bytes an n-byte reading put at now adds to open batch o; w: write them [B2].
    g, e = max(0, now - o[5]), o[6]
    if n == o[10] and g == o[9]:  # as regular as the one before: into a run
        r = o[11]
        if r >= 0 and e[r] < 2 * _RUN:
            if w:
                e[r] += 2
            return 0
        if w:
            o[11] = len(e)
            e.append(2)
        return 1
    z = g - o[9]  # else its gap's change (zigzag) and, if it changed, its length
    z = 2 * z if z >= 0 else -2 * z - 1
    k = n != o[10]
    h = z << 2 | (2 if k else 0) | 1
    if w:
        _varint(e, h)
        if k:
            _varint(e, n)
        o[9], o[10], o[11] = g, n, -1
    return _vlen(h) + (_vlen(n) if k else 0)


class BatchOutbox(Base):
    """An Outbox whose readings share DDQ items: batch_bytes (the item's envelope at most; 0:
    max_payload_bytes, up to 4 KiB) and batch_ms (the oldest reading's wait, checked at put()
    and tick(): pump calls it) [B1]."""

    def __init__(
        self, queue: "Any", batch_bytes: int = 0, batch_ms: int = 60000, **kw: "Any"
    ) -> None:
        # checked before the queue opens (a refused option leaves it closed) [O24]
        self._bms = _opt(batch_ms, 0, _MAX_WAIT, "batch_ms")
        bb = _opt(batch_bytes, 0, 0xFFFFFFFF, "batch_bytes")
        super().__init__(queue, **kw)
        # 0: the longest payload the queue takes (up to 4 KiB: its reason budget, O6)
        self._bb = bb or self.queue.reason_budget
        # The open batch: [topic, qos, retain, ttl, first ms, last ms, entries, ticks, count,
        # the last gap, the last length, where the open run's header is (-1: none)]
        self._open: "Optional[list[Any]]" = None
        self._parts: "dict[int, list[Any]]" = {}  # item seq -> [item Message, readings, out]
        self._done: "dict[int, int]" = {}  # item seq -> readings confirmed (bit k), this run
        self.counters["readings"] = 0

    # ------------------------------------------------------------------ writing
    def put(
        self,
        topic: "Any",
        payload: "Any",
        qos: int = 1,
        retain: bool = False,
        ttl_ms: "Optional[int]" = None,
        key: "Any" = b"",
    ) -> int:
        """Add a reading to the open batch; return the seq of the batch this call wrote, else 0
        (the reading waits in RAM: durable once its batch is written) [B1] [B3]. A message with
        a key is put on its own, as Outbox.put."""
        if _bytes_arg(key, "key"):  # (a bad key: InvalidArgument before the flush) [O24]
            self.flush()  # keep the order of what is put
            return Base.put(self, topic, payload, qos, retain, ttl_ms, key)
        t = bytes(_bytes_arg(topic, "topic"))
        p = bytes(_bytes_arg(payload, "payload"))
        why = publishable(t, self._max_topic)
        if why or qos not in (0, 1) or retain not in (0, 1):
            raise InvalidArgument(
                (why + " (MQTT cannot publish it)") if why else "qos 0|1, retain bool"
            )
        ttl = self._ttl if ttl_ms is None else _opt(ttl_ms, 0, 0xFFFFFFFF, "ttl_ms")
        now, seq = self.clock(), 0
        o = self._open
        if o is not None and (
            o[0] != t
            or o[1] != qos
            or o[2] != bool(retain)
            or o[3] != ttl
            or self._size(o, _head(o, now, len(p)) + len(p)) > self._bb
            or o[8] >= _READINGS
        ):
            seq = self.flush()
            o = None
        n = len(p)
        if o is None:
            o = [t, qos, bool(retain), ttl, now, now, bytearray(), self.ticks(), 0, 0, n, -1]
            self._open = o
            o[6].append(0)  # the first reading's age at the write: patched then (flush)
            _varint(o[6], n)
        else:
            _head(o, now, n, True)
        o[5] = now
        o[6].extend(p)
        o[8] += 1
        self.counters["readings"] += 1
        # full for one more as regular as this one
        if self._size(o, _head(o, now + o[9], n) + n) > self._bb or self._late(o):
            try:
                seq = self.flush()
            except Full:  # the reading is taken (in the open batch): the next put retries
                pass
        return seq

    def _size(self, o: "list[Any]", more: int) -> int:
        # The batch's envelope: header, tag, nonce, key, topic, entries (+ more bytes) [E1]
        return (
            19
            + (32 if self._sha or self._hkey is not None else 0)
            + (12 if self._enc else 0)
            + len(KEY)
            + len(o[0])
            + len(o[6])
            + 4  # the first reading's age: 1 placeholder byte, up to 5 at the write
            + more
        )

    def _late(self, o: "list[Any]") -> bool:
        d = _tdiff(self.ticks(), o[7])
        return bool(self._bms) and (d >= self._bms or d < 0)

    def flush(self) -> int:
        """Write the open batch now (one DDQ item); return its seq, 0 if none was open [B3]."""
        o = self._open
        if o is None:
            return 0
        now = max(self.clock(), o[5])
        e = o[6]
        head = bytearray()
        # the first reading's age at the write (0 when the clock went back since it) [B2]
        _varint(head, min(max(0, now - o[4]), _MAX_AGE))
        body = head + e[1:]  # (e[0] is the placeholder byte put() wrote)
        m = self._env  # (the Outbox's one envelope)
        m.topic, m.payload, m.key = o[0], body, KEY
        m.qos, m.retain, m.ttl_ms = o[1], o[2], o[3]
        m.orig_seq, m.enqueued_ms = 0, now
        seq = self._put(m)
        self._open = None  # (on Full the batch stays open: put() raises, nothing is lost)
        return seq

    def tick(self) -> None:
        """Write the open batch once batch_ms passed; group commit as Outbox.tick [B3]."""
        if self._open is not None and self._late(self._open):
            try:
                self.flush()
            except Full:  # the batch stays open: the next put or tick tries again [B3]
                pass
        Base.tick(self)

    def close(self) -> None:
        try:
            if self.queue.stats().failed == 0:
                try:
                    self.flush()
                except Full:  # no room: the open batch's readings are dropped, counted [B3]
                    o, self._open = self._open, None
                    self.counters["dropped"] += o[8] if o else 0
        finally:
            Base.close(self)

    # ------------------------------------------------------------------ delivery
    def get(self, lease_ms: "Optional[int]" = None) -> "Optional[Message]":
        """The next reading to send: of a batch claimed before, or of the next item [B4]."""
        for _ in range(64):
            m = self._next()
            if m is not None:
                return m
            it = Base.get(self, lease_ms)
            if it is None or it.key not in (KEY, KEY_B):
                return it  # nothing ready, or a message put on its own
            try:
                rs = entries(it)
            except BadEnvelope as e:
                self._quar(it.seq, "corrupt", e.args[0])
                continue
            self._parts[it.seq] = [it, rs, self._done.get(it.seq, 0)]
            self._finish(it.seq)  # every reading confirmed in an earlier round: acked now
        return None

    def _next(self) -> "Optional[Message]":
        now = self.clock()
        for s in sorted(self._parts):
            it, rs, out = self._parts[s]
            for k in range(len(rs)):
                if out >> k & 1:
                    continue
                self._parts[s][2] = out = out | 1 << k
                r = rs[k]
                if r.expired(now) and not self._send_expired:  # one reading's TTL [E7]
                    self._count("expired", s)
                    self._done[s] = self._done.get(s, 0) | 1 << k
                    continue
                m = Message()
                m.topic, m.qos, m.retain, m.ttl_ms = r.topic, r.qos, r.retain, r.ttl_ms
                m.payload, m.enqueued_ms, m.age_ms = r.payload, r.enqueued_ms, r.age_ms
                m.seq, m.attempts, m.lease_until_ms = (
                    _ID + (s << 12) + k,
                    it.attempts,
                    it.lease_until_ms,
                )
                return m
            self._finish(s)
        return None

    def _finish(self, s: int) -> None:
        # Ack item s once every reading of it is confirmed (or expired, or dropped) [B4].
        p = self._parts.get(s)
        if p is None or self._done.get(s, 0) != (1 << len(p[1])) - 1:
            return
        del self._parts[s]
        self._done.pop(s, None)
        if self.queue.ack(s):
            self._wrote(1)

    def _split(self, m: Message) -> "tuple[int, int]":
        return (m.seq - _ID) >> 12, (m.seq - _ID) & 4095

    def ack(self, m: Message) -> bool:
        """One reading confirmed; its item is acked when all its readings are [B4]."""
        if _seq(m) < _ID:
            return Base.ack(self, m)
        s, k = self._split(m)
        d = self._done.get(s, 0)
        if d >> k & 1:
            return False
        self._done[s] = d | 1 << k
        self._count("sent", s)
        self._finish(s)
        return True

    def nack(self, m: Message, why: "Any" = "") -> "Optional[int]":
        """A reading failed: its whole item is retried (backoff) with the readings not yet
        confirmed; confirmed ones are not sent again in this run [B5]."""
        if _seq(m) < _ID:
            return Base.nack(self, m, why)
        s = self._split(m)[0]
        p = self._parts.pop(s, None)
        if p is None:
            return None  # the item was retried already (another reading of it failed)
        return Base.nack(self, p[0], why)

    def _quar(self, seq: int, cls: str, why: "Any" = "", counter: str = "") -> None:
        # A reading is refused for good (rejected, unpublishable): dropped and counted; its
        # item is acked when the rest are confirmed (one reading cannot be dead-lettered) [B5].
        if seq < _ID:
            Base._quar(self, seq, cls, why, counter)
            return
        s, k = self._split(_m(seq))
        self._done[s] = self._done.get(s, 0) | 1 << k
        self._count(counter or cls, s, cls + (": %s" % why if why else ""))
        self._finish(s)

    def _many(self, seq: int, m: "Optional[Message]" = None) -> int:
        # The readings item seq holds (counted as dropped, expired, ... when it goes) [B4]
        try:
            m = m or self._peek(seq, 0)
            return len(entries(m)) if m.key in (KEY, KEY_B) else 1
        except Exception:  # unreadable: one item
            return 1

    def reread(self, m: Message) -> "Optional[Message]":
        # A reading to resend (windowed delivery): from the item's readings in RAM; None when
        # its item was retried or ended meanwhile (another reading of it failed) [E25] [B5].
        if m.seq < _ID:
            return Base.reread(self, m)
        s, k = self._split(m)
        p = self._parts.get(s)
        if p is None:
            return None
        m.payload = p[1][k].payload
        return m

    def _lapsed(self, now: int) -> None:
        for s, _a in self.queue.lapsed(now):
            self._parts.pop(s, None)  # retried below: handed out again from the start
        Base._lapsed(self, now)


Outbox = BatchOutbox  # (what ddq_app opens for a board's OUTBOX = "ddq_batch")


def _m(seq: int) -> Message:
    m = Message()
    m.seq = seq
    return m
