"""ddq_outbox: the message layer over ddq.Queue: topic, QoS, retain, TTL, backoff, dead letters.

An envelope inside DDQ's opaque DATA payload carries topic, QoS, retain, times, an optional key and
digest; C DDQ still reads the directory. Outbox adds leases, full-jitter backoff, TTL, capacity
policy, dead letters, group commit, a lock and delivery loops on top of ddq.Queue, through its
public API only. Import it only where messages are needed: `import ddq` alone never loads it.
Its add-ons beside it are imported at their first use (add-ons, below): ddq_seal.py for a key's
HMAC tags and AES-CTR, ddq_window.py for a windowed sender's delivery loop.

    from ddq_outbox import Outbox
    with Outbox("outbox") as ob:
        ob.put("sensors/t", b"21.5")
        ob.pump(send)          # send(m) returns True once the far end confirmed

Format: see docs/SPEC.md "Envelope" [E1]-[E6] [E21] [E23]; behaviour: "Message layer" [E7]-[E22].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import os
import struct
import time

# ============================================================================ compat
from ddq import (  # the feature probe and the const shim, once (ddq compat)
    _MP,
    Corrupt,
    Error,
    Full,
    InvalidArgument,
    IOFailure,
    Locked,
    Queue,
    _bytes_arg,
    _crc,
    _import,
    _opt,
    const,
)

TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, TypeVar, Union

    Buf = Union[bytes, bytearray, memoryview]
    F = TypeVar("F", bound=Callable[..., Any])  # _locked keeps the signature

# ddq's values (its const names do not exist as module globals on MicroPython: STYLE 4)
_U32 = const(0xFFFFFFFF)  # a const: each use loads the one int, no global
_U64 = const(0xFFFFFFFFFFFFFFFF)
_MAX_LEASE_MS = const(604800000)  # ddq's lease bound [O3]
_IO_LOOPS = const(1048576)  # ddq's bound on retry loops


# ============================================================================ add-ons
# Beside ddq_outbox.py, each imported at its first use, so that a board that never uses one
# never holds it (DESIGN §4.1): ddq_seal, HMAC tags and AES-CTR (hmac_key, encrypt: E21-E23);
# ddq_window, the windowed delivery loop (a sender with publish and poll: E25).
def _addon(name: str) -> "Any":
    try:
        return __import__(name)
    except ImportError:
        why = "hmac_key" if name == "ddq_seal" else "a windowed sender"
        raise IOFailure("ddq_outbox: port file %s.py missing (needed by %s)" % (name, why))


def __getattr__(name: str) -> "Any":  # PEP 562: the first release's ddq_outbox.hmac_sha256
    if name in ("hmac_sha256", "aes_ctr"):
        return getattr(_addon("ddq_seal"), name)
    raise AttributeError(name)


# ============================================================================ envelope
_ENV_FMT = "<HBBBHIQ"  # magic version flags key_len topic_len ttl_ms enqueued_ms [E1]
_ENV_MAGIC = const(0x4544)  # b"DE"
_ENV_SIZE = const(19)
_EF_QOS1 = const(0x01)
_EF_RETAIN = const(0x02)
_EF_SHA = const(0x04)  # a 32-byte SHA-256 follows the header (and orig_seq) [E5]
_EF_ORIG = const(0x08)  # a u64 original seq follows the header: a requeued dead letter [E14]
_EF_HMAC = const(0x10)  # a 32-byte HMAC-SHA256 tag where the SHA-256 would be (never both) [E21]
_EF_ENC = const(0x20)  # a 12-byte nonce follows the tag; the payload is AES-CTR ciphertext [E23]
_EF_RESERVED = const(0xC0)  # _EF_ 0x40 0x80: reserved, must be zero; a reader rejects them [E3]
_MIN_KEY = const(16)  # the shortest HMAC key an Outbox accepts [E22]
_NONCE = const(12)  # the per-message random nonce; a counter block is nonce | u32 BE [E23]
_TICKS_MASK = const(0x3FFFFFFF)  # ticks modulo 2**30 on every interpreter (32-bit boards' period)
_MAX_WAIT = const(0x1FFFFFFF)  # the longest wait next_ready_ms returns: inside ticks_diff's window
_GET_SCAN = const(64)  # expired/undecodable messages one get() retires before it returns None
_WAITS = const(16)  # dead letters that wait (claimed, in RAM) for room to return [E32]


class BadEnvelope(Corrupt):
    """Raised for bytes that are not a valid envelope (get() quarantines such an item)."""


class Unauthenticated(BadEnvelope):
    """Raised when an HMAC key is given and the envelope has no valid tag [E21]."""


class Rejected(Error):
    """Raise it from a send callable: the message is undeliverable for good (dead-lettered)."""


class Unpublishable(Rejected):
    """Raise it from a send callable: the transport cannot publish this message, ever (its topic,
    say); dead-lettered with reason "unpublishable: <why>" [E4] [E26]."""


def _ticks() -> int:
    # Milliseconds for intervals, modulo 2**30 on both interpreters (STYLE 13).
    if _MP:
        t: int = time.ticks_ms()  # type: ignore[assignment]  # stubs: an opaque _TicksMs
        return t & _TICKS_MASK
    return (time.monotonic_ns() // 1000000) & _TICKS_MASK


def _tdiff(a: int, b: int) -> int:
    # ticks_diff for the 2**30 period: signed, right while |a - b| < 2**29 ms (6.2 days).
    return ((a - b + 0x20000000) & _TICKS_MASK) - 0x20000000


def _device_seed() -> int:
    # Per-device entropy, never a fleet-wide constant (DESIGN §10 T18): os.urandom where it exists,
    # else the board's unique id mixed with the ticks and, where `random` exists, 30 of its bits
    # (two Backoffs made in one millisecond differ; a small int on a 32-bit port too).
    urandom = getattr(os, "urandom", None)
    if urandom is not None:
        return int(struct.unpack("<I", urandom(4))[0])
    machine = _import("machine")
    uid = machine.unique_id() if hasattr(machine, "unique_id") else b""
    rnd = _import("random")
    t = _ticks() ^ (rnd.getrandbits(30) if rnd is not None else 0)
    return _crc(uid, _crc(struct.pack("<I", t)))


class Backoff:
    """Full-jitter backoff, uniform in [0, min(min_ms * 2**attempts, max_ms)] [E8] [E9]."""

    def __init__(
        self, min_ms: int = 1000, max_ms: int = 60000, seed: "Optional[int]" = None
    ) -> None:
        self.min_ms = _opt(min_ms, 1, _U32, "min_retry_ms")
        self.max_ms = _opt(max_ms, min_ms, _U32, "max_retry_ms")
        s = _device_seed() if seed is None else _opt(seed, 0, _U32, "seed")
        # An odd multiply (a bijection) spreads small seeds; xorshift's state must not be 0.
        self.state = ((s ^ 0x5DEECE66) * 0x9E3779B1) & _U32 or 0x9E3779B9

    def next32(self) -> int:
        x = self.state
        x ^= (x << 13) & _U32
        x ^= x >> 17
        x ^= (x << 5) & _U32
        self.state = x
        return x

    def cap(self, attempts: int) -> int:
        return min(self.max_ms, self.min_ms << min(_opt(attempts, 0, _U32, "attempts"), 32))

    def delay(self, attempts: int) -> int:
        # multiply-shift maps 32 random bits onto [0, cap]: bias below cap / 2**32
        return (self.next32() * (self.cap(attempts) + 1)) >> 32


class Message:
    """A message: its envelope's fields, plus seq/attempts/lease (get) or reason (dead letter);
    encrypted: the payload is stored encrypted (decrypted here only when a key verified it)."""

    # CPython only: MicroPython ignores __slots__, and mpy-cross -O3 (ddq flash) compiles no byte
    # of an `if __debug__:` block (the tuple took 155 B of flash and a board's heap).
    if __debug__:
        __slots__ = (
            "seq",
            "topic",
            "payload",
            "qos",
            "retain",
            "attempts",
            "enqueued_ms",
            "ttl_ms",
            "key",
            "orig_seq",
            "lease_until_ms",
            "reason",
            "age_ms",
            "encrypted",
        )

    def __init__(self) -> None:
        self.seq = self.qos = self.attempts = self.enqueued_ms = self.ttl_ms = self.orig_seq = 0
        self.lease_until_ms = self.age_ms = 0
        self.topic = ""
        self.retain = self.encrypted = False
        self.payload = self.key = self.reason = b""

    def expired(self, now_ms: int) -> bool:
        """Set age_ms at now_ms and return whether the TTL ran out (the one TTL rule) [E7]; no
        enqueue time (enqueued_ms 0: a writer without a clock) is no age: never expired [E27]."""
        _opt(now_ms, 0, _U64, "now_ms")  # [O24]
        if not self.enqueued_ms:
            self.age_ms = 0
            return False
        self.age_ms = max(0, now_ms - self.enqueued_ms)  # a clock behind the enqueue time: age 0
        return bool(self.ttl_ms) and self.age_ms >= self.ttl_ms


def _sha(mv: memoryview, a: int, n: int) -> "Optional[bytes]":
    # SHA-256 of the envelope mv[0:n] minus its digest field at [a, a+32); None without hashlib.
    hl = _import("hashlib")
    if not hasattr(hl, "sha256"):
        return None
    h = hl.sha256(mv[0:a])
    h.update(mv[a + 32 : n])
    return bytes(h.digest())


def publishable(topic: "Any", max_topic: int = 65535) -> str:
    """Return "" if MQTT can publish topic (str or bytes), else why not [E4]: empty, over
    max_topic bytes of UTF-8, not well-formed UTF-8, a wildcard "+" / "#", or a character
    brokers drop the connection for (MQTT 3.1.1 1.5.3): U+0000-U+001F, U+007F-U+009F, and the
    non-characters U+FDD0-U+FDEF and U+xFFFE/U+xFFFF."""
    _opt(max_topic, 0, 65535, "max_topic")  # [O24]
    try:
        t = bytes(_bytes_arg(topic, "topic"))  # (a str with a lone surrogate: CPython raises)
        s = t.decode()
    except UnicodeError:
        return "topic is not UTF-8"
    if not 0 < len(t) <= max_topic:
        return "topic is %d bytes, not 1..%d" % (len(t), max_topic)
    if b"+" in t or b"#" in t:
        return "topic contains an MQTT wildcard (+ or #)"
    if 31 < min(t) and max(t) < 127:  # printable ASCII, the usual topic: checked in C
        return ""
    n = 0  # UTF-8 bytes
    bad = -1
    for c in s:  # MicroPython decodes surrogates and overlong forms: counted as not UTF-8
        o = ord(c)
        if 0xD7FF < o < 0xE000 or o > 0x10FFFF:
            break
        n += 1 + (o > 0x7F) + (o > 0x7FF) + (o > 0xFFFF)  # its UTF-8 length
        if bad < 0 and (o < 32 or 126 < o < 160 or 0xFDCF < o < 0xFDF0 or o & 0xFFFE == 0xFFFE):
            bad = o
    if n != len(t):
        return "topic is not UTF-8"
    return "" if bad < 0 else "topic contains U+%04X (a control or non-character)" % bad


def _pack_env(
    buf: "Optional[bytearray]",
    m: Message,
    sha: bool,
    max_topic: int,
    hkey: "Any" = None,
    pads: "Any" = None,
    ctr: "Any" = None,
    nonce: "Any" = None,
) -> memoryview:
    # [E1] header | orig_seq u64? | sha256 or hmac? | nonce? | key | topic | payload, in buf (or
    # new), from the envelope m (a Message: its topic, payload, qos, retain, ttl_ms, key,
    # orig_seq and enqueued_ms). With ctr (ddq_seal._Ctr) and nonce the payload is stored
    # encrypted, then tagged [E23].
    topic, qos = m.topic, m.qos
    ttl, orig = m.ttl_ms, m.orig_seq
    why = publishable(topic, max_topic)
    if why:
        raise InvalidArgument(why + " (MQTT cannot publish it)")
    t, k = bytes(_bytes_arg(topic, "topic")), bytes(_bytes_arg(m.key, "key"))
    p = _bytes_arg(m.payload, "payload")
    if len(k) > 255:
        raise InvalidArgument("key: at most 255 bytes")
    _pick(qos, (0, 1), "qos")
    _pick(m.retain, (0, 1), "retain")
    _opt(ttl, 0, _U32, "ttl_ms")
    if hkey is not None and sha:
        raise InvalidArgument("sha256 or hmac_key, not both")
    if ctr is not None and (hkey is None or nonce is None or len(nonce) != _NONCE):
        raise InvalidArgument("encrypt needs hmac_key and 12-byte nonces")
    flags = (
        (_EF_QOS1 if qos else 0)
        | (_EF_RETAIN if m.retain else 0)
        | (_EF_SHA if sha else 0)
        | (_EF_ORIG if _opt(orig, 0, _U64, "orig_seq") else 0)
        | (_EF_HMAC if hkey else 0)
        | (_EF_ENC if ctr is not None else 0)
    )
    a = _ENV_SIZE + (8 if orig else 0)
    i = a + (32 if sha or hkey is not None else 0)
    c = i  # the nonce's offset
    i += _NONCE if ctr is not None else 0
    n = i + len(k) + len(t) + len(p)
    if buf is None or len(buf) < n:
        buf = bytearray(n)
    struct.pack_into(
        _ENV_FMT,
        buf,
        0,
        _ENV_MAGIC,
        1,
        flags,
        len(k),
        len(t),
        ttl,
        _opt(m.enqueued_ms, 0, _U64, "enqueued_ms"),
    )
    struct.pack_into("<Q", buf, _ENV_SIZE, orig) if orig else None
    if ctr is not None:
        buf[c : c + _NONCE] = nonce
    for part in (k, t, p):
        buf[i : i + len(part)] = part
        i += len(part)
    if ctr is not None:  # encrypt, then MAC: the tag below covers the nonce and the ciphertext
        ctr.xor(nonce, 0, buf, n - len(p), n)
    mv = memoryview(buf)
    if sha:
        d = _sha(mv, a, n)
        if d is None:
            raise InvalidArgument("sha256 needs hashlib.sha256")
        buf[a : a + 32] = d
    elif hkey is not None:
        buf[a : a + 32] = _addon("ddq_seal")._tag(mv, a, n, hkey, pads)
    return mv[0:n]


def encode_envelope(
    topic: "Any",
    payload: "Any",
    qos: int = 1,
    retain: bool = False,
    enqueued_ms: int = 0,
    ttl_ms: int = 0,
    key: "Any" = b"",
    sha256: bool = False,
    orig_seq: int = 0,
    hmac_key: "Any" = None,
    encrypt: bool = False,
    nonce: "Any" = None,
) -> bytes:
    """Return a message's envelope (signed with hmac_key if given; with encrypt=True also its
    payload encrypted, under nonce (12 bytes; default os.urandom)); InvalidArgument for a bad
    field [E1]-[E5] [E21] [E23]."""
    ctr = None
    if encrypt:
        if hmac_key is None:
            raise InvalidArgument("encrypt needs hmac_key and 12-byte nonces")
        se = _addon("ddq_seal")
        nonce = se._nonce_ok(se._nonce_fn(None)() if nonce is None else nonce, None)
        ctr = se._enc_ctr(hmac_key, None)
    m = Message()
    m.topic, m.payload = topic, payload
    m.qos, m.retain, m.ttl_ms = qos, retain, ttl_ms
    m.key, m.orig_seq, m.enqueued_ms = key, orig_seq, enqueued_ms
    return bytes(_pack_env(None, m, sha256, 65535, hmac_key, None, ctr, nonce))


def decode_envelope(data: "Buf", verify: bool = True, hmac_key: "Any" = None) -> Message:
    """Decode an envelope into a Message; BadEnvelope (a Corrupt) says what is wrong [E2]-[E6].
    With hmac_key, an envelope without a valid HMAC tag raises Unauthenticated [E21], and an
    encrypted payload is decrypted after the tag is verified. Without hmac_key an encrypted
    envelope's payload is the ciphertext: check m.encrypted [E23]."""
    return _decode(data, verify, hmac_key, None)


def _decode(
    data: "Buf", verify: bool, hkey: "Any", pads: "Any", ctrs: "Any" = None, need: bool = False
) -> Message:
    # ctrs: [] or [ddq_seal._Ctr] (the Outbox's cache of its AES context); need: the caller
    # delivers the payload, so an encrypted envelope without a key is Unauthenticated instead of
    # ciphertext.
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgument("envelope must be bytes")
    n = len(data)
    if n < _ENV_SIZE:
        raise BadEnvelope("envelope: %d bytes, under the 19-byte header" % n)
    magic, ver, flags, kl, tl, ttl, enq = struct.unpack_from(_ENV_FMT, data, 0)
    if (
        magic != _ENV_MAGIC
        or ver != 1
        or flags & _EF_RESERVED
        or (flags & _EF_SHA and flags & _EF_HMAC)
        or (flags & _EF_ENC and not flags & _EF_HMAC)
    ):
        raise BadEnvelope("envelope: bad magic, version %d or flags 0x%02x" % (ver, flags))
    enc = flags & _EF_ENC
    a = _ENV_SIZE + (8 if flags & _EF_ORIG else 0)
    p = a + (32 if flags & (_EF_SHA | _EF_HMAC) else 0) + (_NONCE if enc else 0)
    d = p + kl + tl  # the payload's offset
    if tl == 0 or d > n:
        raise BadEnvelope("envelope: topic/key lengths run past the end")
    m, mv = Message(), memoryview(data)
    if hkey is not None:  # before anything else is read: a forger controls every field
        if not flags & _EF_HMAC:
            raise Unauthenticated("envelope: no HMAC tag")
        se = _addon("ddq_seal")
        if not se._same(se._tag(mv, a, n, hkey, pads), mv[a : a + 32]):
            raise Unauthenticated("envelope: HMAC tag mismatch")
    elif enc and need:
        raise Unauthenticated("envelope: encrypted, no key")
    if flags & _EF_ORIG:
        m.orig_seq = struct.unpack_from("<Q", data, _ENV_SIZE)[0]
    if verify and flags & _EF_SHA and _sha(mv, a, n) not in (None, bytes(mv[a : a + 32])):
        raise BadEnvelope("envelope: sha256 mismatch")
    m.key, t = bytes(mv[p : p + kl]), bytes(mv[p + kl : d])
    try:
        m.topic = t.decode()
    except UnicodeError:
        t = b"\0"
    if b"\0" in t:
        raise BadEnvelope("envelope: topic is not UTF-8 without NUL")
    b: "Buf" = mv[d:n]
    if enc and hkey is not None:  # verified above: decrypt (MAC before decrypt) [E23]
        if not ctrs:
            ctrs = [] if ctrs is None else ctrs
            try:
                ctrs.append(_addon("ddq_seal")._enc_ctr(hkey, pads))
            except InvalidArgument as e:  # no AES on this interpreter: cannot be read here
                raise BadEnvelope("envelope: encrypted; " + e.args[0])
        b = bytearray(b)
        ctrs[0].xor(mv[p - _NONCE : p], 0, b, 0, len(b))
    m.payload = bytes(b)
    m.encrypted = bool(enc)
    m.qos, m.retain = flags & _EF_QOS1, bool(flags & _EF_RETAIN)
    m.ttl_ms, m.enqueued_ms = ttl, enq  # (two pairs: four would build a tuple)
    return m


def _seq(m: "Any") -> int:
    # The seq of a Message argument; InvalidArgument for anything else [O24].
    if not isinstance(m, Message):
        raise InvalidArgument("not a Message: %r" % (m,))
    return int(m.seq)


def _pick(v: "Any", ok: "tuple[Any, ...]", name: str) -> "Any":
    # v if it is one of ok, else InvalidArgument naming the choices [O24].
    if v not in ok:
        raise InvalidArgument("%s: one of %r" % (name, ok))
    return v


def _sender(send: "Any", stop: "Any") -> bool:
    # True for a windowed sender [E25]; InvalidArgument unless send is one or a callable and
    # stop is None or a callable [O24].
    w = hasattr(send, "poll") and hasattr(send, "publish")
    if not (w or callable(send)) or not callable(stop or len):
        raise InvalidArgument("send: callable or windowed sender; stop: callable")
    return w


def _locked(fn: "F") -> "F":
    # The optional lock around every public call [E16]: acquire() returning False refuses the
    # call (Locked, nothing done). Not re-entrant: public methods never call each other inside.
    def call(self: "Outbox", *a: "Any", **k: "Any") -> "Any":
        lk = self._lk
        if lk is None:
            return fn(self, *a, **k)
        if self._cm is not None:  # a _thread lock: `with` leaves no window where an exception
            with self._cm:  # (asynchronous, or KeyboardInterrupt) keeps it held [E16]
                return fn(self, *a, **k)
        if lk[0]() is False:
            raise Locked("outbox lock refused")
        try:
            return fn(self, *a, **k)
        finally:
            lk[1]()

    return call  # type: ignore[return-value]


class Outbox:
    """Messages with topic, QoS, retain and TTL over a Queue (or a path; **options go to Queue),
    delivered at least once: get() one with a lease, send it, then ack(), nack() (full-jitter
    retry) or reject() (dead letter) it [E7]-[E18]."""

    def __init__(
        self,
        queue: "Any",
        clock: "Optional[Callable[[], int]]" = None,
        ticks: "Optional[Callable[[], int]]" = None,
        seed: "Optional[int]" = None,
        lease_ms: int = 60000,
        min_retry_ms: int = 1000,
        max_retry_ms: int = 60000,
        max_attempts: int = 0,
        ttl_ms: int = 0,
        expired: str = "quarantine",
        capacity: str = "reject",
        ordered: bool = False,
        sha256: bool = False,
        max_topic_bytes: int = 256,
        sync_every: int = 0,
        sync_interval_ms: int = 0,
        lock: "Any" = None,
        hmac_key: "Any" = None,
        encrypt: bool = False,
        nonce: "Optional[Callable[[], Any]]" = None,
        **options: "Any",
    ) -> None:
        self.lease_ms = _opt(lease_ms, 1, _MAX_LEASE_MS, "lease_ms")
        self._bo = Backoff(min_retry_ms, max_retry_ms, seed)
        self._max_att = _opt(max_attempts, 0, _U32, "max_attempts")
        self._ttl = _opt(ttl_ms, 0, _U32, "ttl_ms")
        self._max_topic = _opt(max_topic_bytes, 1, 65535, "max_topic_bytes")
        self._every = _opt(sync_every, 0, _MAX_WAIT, "sync_every")
        self._interval = _opt(sync_interval_ms, 0, _MAX_WAIT, "sync_interval_ms")
        expired = _pick(expired, ("quarantine", "drop", "send"), "expired")
        self._drop_expired, self._send_expired = expired == "drop", expired == "send"
        self._drop_oldest = _pick(capacity, ("reject", "drop_oldest"), "capacity") != "reject"
        if not callable(clock or len) or not callable(ticks or len):
            raise InvalidArgument("clock, ticks: callables")
        self._ordered, self.ticks = bool(ordered), ticks or _ticks
        # With an HMAC key [E22] put signs and get verifies; the tag replaces the SHA-256 (it
        # detects accidents too). The key lives in RAM only, never in the queue directory.
        self._hkey: "Optional[bytes]" = None
        self._pads: "Any" = None
        if hmac_key is not None:
            self._hkey = bytes(_bytes_arg(hmac_key, "hmac_key"))
            if len(self._hkey) < _MIN_KEY:
                raise InvalidArgument("hmac_key: at least 16 bytes")
            self._pads = _addon("ddq_seal")._pads(self._hkey)
        self._sha = bool(sha256) and self._hkey is None
        # encrypt [E23]: AES-256-CTR under a key derived from hmac_key, a fresh nonce per put from
        # the nonce source (os.urandom unless given). Refused here, never weakened, without an
        # AES implementation or a nonce source. The AES context is made on first use otherwise
        # (a key-only Outbox decrypts what it reads).
        self._enc, self._nonce_arg = bool(encrypt), nonce
        self._last: "Optional[bytes]" = None  # the previous nonce (a constant source is refused)
        self._nonce: "Any" = None
        self._ctrs: "list[Any]" = []
        if self._enc:
            if self._hkey is None:
                raise InvalidArgument("encrypt needs hmac_key and 12-byte nonces")
            self._nonce = _addon("ddq_seal")._nonce_fn(nonce)
            self._ctrs.append(_addon("ddq_seal")._enc_ctr(self._hkey, self._pads))
        elif nonce is not None:
            _addon("ddq_seal")._nonce_fn(nonce)  # a bad nonce fails now, not at a requeue
        th = _import("_thread")  # missing on most boards: pass (acquire, release) there
        if lock is True and th is not None:  # without _thread, True is refused below
            lock = th.allocate_lock()
        self._cm: "Any" = (
            lock if th is not None and type(lock) is type(th.allocate_lock()) else None
        )
        if hasattr(lock, "acquire") and hasattr(lock, "release"):
            lock = (lock.acquire, lock.release)
        if lock is not None and not (
            isinstance(lock, tuple) and len(lock) == 2 and callable(lock[0]) and callable(lock[1])
        ):
            raise InvalidArgument(
                "lock: True (with _thread), (acquire, release) or an object with both"
            )
        self._lk: "Any" = lock
        if isinstance(queue, Queue):
            if options:
                raise InvalidArgument("queue options need a path, not a Queue")
            self.queue, self._own = queue, False
        else:
            if self._every or self._interval:
                options["sync"] = "none"  # group commit: the Outbox decides when to sync [E15]
            self.queue, self._own = Queue(queue, clock=clock, **options), True
        self.clock: "Any" = clock or self.queue.clock
        self._buf = bytearray(256)  # envelopes up to 256 bytes are packed without allocation
        self._env = Message()  # the envelope put fills (one object, reused)
        self._unsynced = self._synced_at = 0
        self._qcls: "dict[int, str]" = {}  # seq -> reason class of a quarantined item (cache)
        self._hidden: "Optional[list[int]]" = None  # dead letters already requeued
        self._full = False
        self.counters: "dict[str, Any]" = dict(
            put=0,
            sent=0,
            retried=0,
            expired=0,
            dropped=0,
            rejected=0,
            exhausted=0,
            corrupt=0,
            lapsed=0,
            unauthenticated=0,
            unpublishable=0,
            resent=0,
            lease_nacks=0,
            failed=0,
            dead_dropped=0,
        )
        # Dead letters the queue had no room for (SPEC H4): seq -> [reason, counter], claimed and
        # waiting for room; and the dropped ones' reason classes [E32]
        self._dead: "dict[int, list[str]]" = {}
        self._lost: "dict[str, int]" = {}
        # this run only [E18] [E25] [E26]

    def __enter__(self) -> "Outbox":
        return self

    def __exit__(self, *a: "Any") -> None:
        self.close()

    # ------------------------------------------------------------------ internals (no lock)
    def _wrote(self, n: int) -> None:
        # Group commit [E15]: sync after sync_every records, or sync_interval_ms of ticks after
        # the first unsynced one; a negative difference means ticks_diff's window was left.
        e, i, u = self._every, self._interval, self._unsynced
        if not (e or i) or not (n or u):
            return
        now = self.ticks()
        if not u:
            self._synced_at = now
        u = self._unsynced = u + n
        d = _tdiff(now, self._synced_at)
        if (e and u >= e) or (i and (d >= i or d < 0)):
            self._sync()

    def _sync(self) -> int:
        self._unsynced = 0
        return self.queue.sync()

    def _put(self, m: Message) -> int:
        # Pack the envelope m (put's one reused Message, or a dead letter requeued) and enqueue it.
        ctr = nb = None
        if m.encrypted or self._enc:  # [E23]; a requeued encrypted dead letter stays encrypted
            se = _addon("ddq_seal")
            if self._nonce is None:
                self._nonce = se._nonce_fn(self._nonce_arg)
            if not self._ctrs:
                self._ctrs.append(se._enc_ctr(self._hkey, self._pads))
            nb = self._last = se._nonce_ok(self._nonce(), self._last)
            ctr = self._ctrs[0]
        mv = _pack_env(self._buf, m, self._sha, self._max_topic, self._hkey, self._pads, ctr, nb)
        m.payload = b""  # the caller's payload is not held
        q = self.queue
        for _ in range(_IO_LOOPS):
            try:
                seq = q.enqueue(mv)
                break
            except Full:
                self._full = True
                if not self._drop_oldest:
                    raise
                # drop_oldest [E13]: retire the oldest unclaimed message, due or backing off,
                # durably (CLAIM + ACK: reclaimable; counted). A claimed message (in flight) is
                # never dropped (DESIGN §10 T11).
                s = q.oldest_available()  # only while full: O(n) is fine
                if s is None:
                    raise Full("full, and no unclaimed message to drop")
                n = self._many(s)
                self._dead.pop(s, None)  # a waiting dead letter whose lease ran out [E32]
                q.ack(q.claim_seq(s, self.lease_ms).seq)
                self.counters["dropped"] += n
                self._wrote(2)
        else:
            raise Full("drop_oldest made no room")
        self._full = False
        self.counters["put"] += 1
        self._wrote(1)
        return seq

    def _quar(self, seq: int, cls: str, why: "Any" = "", counter: str = "") -> None:
        # Dead-letter seq with reason "cls[: why]" [E10]; count it under counter (cls if "").
        self._bury(seq, cls + (": %s" % why if why else ""), counter or cls)

    def _bury(self, seq: int, t: str, c: str, drop: bool = False) -> None:
        # Quarantine seq with reason t, counted c. Full (no room for even an empty reason, SPEC
        # H4): seq waits, claimed and never sent, while another message is pending (its end may
        # return room) and fewer than _WAITS wait; else (or with drop, or ordered) it is acked:
        # dropped, counted c and dead_dropped [E32]. Counted in messages (a batch's readings, B7).
        q, n, k = self.queue, self._many(seq), t.split(":")[0]
        try:
            q.quarantine(seq, t.encode()[0 : min(120, q.reason_budget)].replace(b"\0", b"?"))
            self._qcls[seq] = k
        except Full:
            s, w = q.stats(), self._dead
            if (
                not (drop or self._ordered)
                and (seq in w or len(w) < _WAITS)
                and s.available_items + s.claimed_items > len(w) + (seq not in w)
            ):
                w[seq] = [t, c]
                return
            q.ack(seq)
            self._lost[k] = self._lost.get(k, 0) + n
            self.counters[c] += n
            c = "dead_dropped"
        self._dead.pop(seq, None)
        self._wrote(1)
        self.counters[c] += n - 1
        self._count(c, seq, t)

    def _stuck(self, now: int) -> bool:
        # With dead letters waiting and nothing claimable: does nothing else pending or in
        # flight remain whose end could return room, or is a due message refused for want of
        # room (SPEC H3)? Then one waiting dead letter must end now [E32].
        s, n = self.queue.stats(), len(self._dead)
        return s.claimed_items <= n and (s.available_items == 0 or self._next_ready(now) == 0)

    def _many(self, seq: int, m: "Optional[Message]" = None) -> int:
        # How many messages item seq (or m, read from it) holds: 1; a batch its readings [B4].
        return 1

    def _count(self, what: str, seq: int, detail: "Any" = "") -> None:
        # One outcome of one message (seq; detail: its reason or why): its counter [E18]. The
        # host's replay (host/ddqhost/replay.py) also reports each one [E26].
        self.counters[what] += 1

    def _bad(self, seq: int, data: "Buf", e: BadEnvelope) -> "Optional[Message]":
        # A claimed item that is not a valid envelope: dead-lettered (forged, altered or
        # unsigned: never sent [E22]); None. The host's replay delivers raw ones [E26].
        self._quar(
            seq, "unauthenticated" if isinstance(e, Unauthenticated) else "corrupt", e.args[0]
        )
        return None

    def _peek(self, seq: int, now: int, auth: bool = False) -> Message:
        # With a key, a verified envelope (an encrypted one decrypted); an unauthenticated one
        # reads unchecked (its payload the ciphertext if encrypted) or, with auth, as raw bytes.
        raw = self.queue.read(seq)
        try:
            try:
                m = _decode(raw, True, self._hkey, self._pads, self._ctrs)
            except Unauthenticated:
                if auth:
                    raise
                m = _decode(raw, True, None, None)
        except BadEnvelope:
            m = Message()
            m.payload = raw  # not an envelope: shown raw
        m.seq, m.age_ms = seq, max(0, now - m.enqueued_ms) if m.enqueued_ms else 0
        return m

    def _next_ready(self, now: int) -> "Optional[int]":
        best = None
        for it in self.queue.items():
            if it.state == "claimed":  # claimable when the lease ends; > 7 days ahead: now [T3]
                t, far = it.lease_until_ms, _MAX_LEASE_MS
            elif it.state == "available":  # a retry deadline > 2**32 ms ahead: now [T3]
                t, far = it.not_before_ms, _U32
            else:
                continue
            d = 0 if t <= now or t - now > far else t - now
            best = d if best is None else min(best, d)
            if self._ordered or best == 0:
                break
        return None if best is None else min(best, _MAX_WAIT)

    def _requeued(self) -> "list[int]":
        # Dead letters already requeued: the orig_seq of every pending message, read once (a
        # payload read each), then kept up to date by requeue().
        if self._hidden is None:
            h: "list[int]" = []
            for it in self.queue.items():
                if it.state in ("available", "claimed"):
                    o = self._peek(it.seq, 0, True).orig_seq
                    if o:
                        h.append(o)
            self._hidden = h
        return self._hidden

    def settle(self, m: Message, ok: "Any", e: "Optional[BaseException]" = None) -> int:
        """Settle m by the send contract [E17] (a delivery loop's, ddq_window's): ok True -> ack
        (1); e Rejected -> dead letter (0); else nack, and the round ends (-1; -2: the loop
        too, the host replay's failure="stop" [E26])."""
        if e is None and ok is True:
            return 1 if self.ack(m) else 0
        if isinstance(e, Rejected):
            why = e.args[0] if e.args else ""
            if isinstance(e, Unpublishable):  # [E4] [E26]
                self._quar(m.seq, "unpublishable", why)
            else:
                self.reject(m, why)
            return 0
        self.nack(m, repr(e) if e is not None else "send returned %r" % (ok,))
        return -1

    # ------------------------------------------------------------------ public (locked)
    @_locked
    def put(
        self,
        topic: "Any",
        payload: "Any",
        qos: int = 1,
        retain: bool = False,
        ttl_ms: "Optional[int]" = None,
        key: "Any" = b"",
    ) -> int:
        """Enqueue a message; return its seq (durable on return unless group commit) [E13]."""
        m = self._env  # one envelope for every put: nothing allocated per message
        m.topic, m.payload = topic, payload
        m.qos, m.retain, m.key = qos, retain, key
        m.ttl_ms = self._ttl if ttl_ms is None else ttl_ms
        m.orig_seq, m.enqueued_ms = 0, self.clock()
        return self._put(m)

    def _lapsed(self, now: int) -> None:
        # A lease that ran out with no ack or nack (the sender hung, or the device died while
        # sending) is a failed attempt: a RETRY records it durably, so max_attempts also stops a
        # message that kills the device on every send [E10]. Claims are few: O(in flight).
        q = self.queue
        for s, a in q.lapsed(now):
            if s in self._dead:  # claim() takes it again; get() tries its reason again [E32]
                continue
            if self._max_att and a + 1 >= self._max_att:
                self._quar(s, "max_attempts", "lease expired", "exhausted")
            else:
                q.retry(s, self._bo.delay(a))
                self._wrote(1)
                self._count("lapsed", s)

    @_locked
    def get(self, lease_ms: "Optional[int]" = None) -> "Optional[Message]":
        """Claim and return the next ready message, or None [E12]; retire expired ones [E7]."""
        lease = _opt(lease_ms or self.lease_ms, 1, _MAX_LEASE_MS, "lease_ms")  # [O24]
        q, now, dead = self.queue, self.clock(), self._dead
        self._lapsed(now)
        for _ in range(_GET_SCAN):
            c = q.claim_ordered(lease) if self._ordered else q.claim(lease)
            if c is None:
                if not dead or not self._stuck(now):
                    return None
                s = min(dead)  # the oldest waiting dead letter ends [E32]
                self._bury(s, dead[s][0], dead[s][1], True)
                continue
            s = c.seq
            self._wrote(1)
            if s in dead:  # its lease ran out: its reason again, never sent [E32]
                self._bury(s, dead[s][0], dead[s][1])
                continue
            data = q.read(s)
            try:
                m = _decode(data, True, self._hkey, self._pads, self._ctrs, True)
            except BadEnvelope as e:
                r = self._bad(s, data, e)
                if r is None:
                    continue
                m = r
            m.seq, m.attempts, m.lease_until_ms = s, c.attempts, c.lease_until_ms
            if m.expired(now) and not self._send_expired:
                if self._drop_expired:
                    q.ack(s)
                    self._wrote(1)
                    self.counters["expired"] += self._many(s, m) - 1
                    self._count("expired", s)
                else:
                    self._quar(s, "expired")
                continue
            why = publishable(m.topic) if m.topic else ""  # an old or forged record [E4]
            if why:
                self._quar(s, "unpublishable", why)
                continue
            if self._max_att:  # the CLAIM durable before the send: a reset counts [E33]
                self._sync()
            return m
        return None

    @_locked
    def ack(self, m: Message) -> bool:
        """Mark m delivered, once the far end confirmed; False if already acked [O4]."""
        if not self.queue.ack(_seq(m)):
            return False
        self._wrote(1)
        self._count("sent", m.seq)
        return True

    @_locked
    def reread(self, m: Message) -> "Optional[Message]":
        """m (claimed, its payload dropped) again, from the queue: a resend holds no copy [E25]."""
        r = _decode(self.queue.read(m.seq), True, self._hkey, self._pads, self._ctrs, True)
        r.seq, r.attempts = m.seq, m.attempts
        r.lease_until_ms, r.age_ms = m.lease_until_ms, m.age_ms
        return r

    @_locked
    def nack(self, m: Message, why: "Any" = "") -> "Optional[int]":
        """Retry m after a full-jitter delay (returned) or dead-letter it (None) [E8][E10]."""
        _seq(m)
        if self._max_att and m.attempts + 1 >= self._max_att:
            self._quar(m.seq, "max_attempts", why, "exhausted")
            return None
        d = self._bo.delay(m.attempts)
        self.queue.retry(m.seq, d)
        self._wrote(1)
        self._count("retried", m.seq, why)
        return d

    @_locked
    def reject(self, m: Message, why: "Any" = "") -> None:
        """Failed for good: quarantine m with reason "rejected: why" [E10]."""
        self._quar(_seq(m), "rejected", why)

    @_locked
    def next_ready_ms(self, now_ms: "Optional[int]" = None) -> "Optional[int]":
        """Return ms until get() can return a message, None if nothing is pending [E11]."""
        return self._next_ready(
            self.clock() if now_ms is None else _opt(now_ms, 0, _U64, "now_ms")
        )

    @_locked
    def qsize(self) -> int:  # pending: available and in flight
        s = self.queue.stats()
        return s.available_items + s.claimed_items

    def empty(self) -> bool:
        return self.qsize() == 0

    def full(self) -> bool:  # approximate: the last put() met Full and none succeeded since
        return self._full

    @_locked
    def stats(self) -> "dict[str, Any]":
        """Return log-derived counts (they survive a restart) and this run's counters [E18]."""
        q, now, oldest = self.queue, self.clock(), 0
        by: "dict[str, int]" = {}
        for it in q.items():
            if it.state == "quarantined":
                c = self._qcls.get(it.seq)
                if c is None:
                    r = q.reason(it.seq)
                    c = self._qcls[it.seq] = repr(r.split(b":")[0])[2:-1]
                by[c] = by.get(c, 0) + 1
            elif it.state != "acked" and not oldest:
                oldest = it.seq
        s = q.stats()
        # this run's counters, then the log-derived counts [K12] (keywords: each name shares its
        # string with the attribute of that name)
        return dict(
            self.counters,
            pending=s.available_items + s.claimed_items,
            in_flight=s.claimed_items,
            quarantined=s.quarantined_items,
            durable_seq=q.durable_seq,
            next_ready_ms=self._next_ready(now),
            quarantined_by_reason=by,
            oldest_age_ms=self._peek(oldest, now).age_ms if oldest else None,
            salvaged=s.salvaged,
            salvage_lost=s.salvage_lost,
            dead_waiting=len(self._dead),
            dead_dropped_by_reason=dict(self._lost),
        )

    @_locked
    def dead_letters(self) -> "list[Message]":
        """Return the quarantined messages not yet requeued, oldest first [E14]."""
        out, hidden, now = [], self._requeued(), self.clock()
        for it in self.queue.items():
            if it.state == "quarantined" and it.seq not in hidden:
                m = self._peek(it.seq, now)
                m.attempts, m.reason = it.attempts, self.queue.reason(it.seq)
                out.append(m)
        return out

    @_locked
    def requeue(self, seq: "Optional[int]" = None, purge: bool = True) -> "list[int]":
        """Re-enqueue a dead letter (or all) under new seqs, then purge the originals [E14]."""
        hidden, q, done = self._requeued(), self.queue, []
        if seq is not None:
            q.reason(seq)  # NotFound / BadState unless seq is quarantined
        out = []
        for s in [seq] if seq is not None else [i.seq for i in q.items() if i.state[0] == "q"]:
            if s not in hidden:
                try:  # with a key, an unauthenticated dead letter is never re-signed [E22]
                    m = _decode(q.read(s), True, self._hkey, self._pads, self._ctrs, True)
                except BadEnvelope:
                    if seq is not None:
                        raise
                    continue  # requeue-all leaves undecodable ones where they are
                if seq is None and publishable(m.topic, self._max_topic):
                    continue  # and one whose topic put() refuses (an old record) [E4]
                m.orig_seq, m.enqueued_ms = m.orig_seq or s, self.clock()
                out.append(self._put(m))
                hidden.append(s)
            done.append(s)
        if purge and done:
            q.purge(done)  # a crash before this leaves both; the copy's orig_seq hides the old
        return out

    @_locked
    def purge(self, seqs: "Optional[list[int]]" = None) -> int:
        """Delete dead letters (all, or seqs) for good through a compaction [E14][C10]."""
        return self.queue.purge(
            [i.seq for i in self.queue.items() if i.state[0] == "q"] if seqs is None else seqs
        )

    @_locked
    def sync(self) -> int:  # make everything written so far durable; return durable_seq [E15]
        return self._sync()

    @_locked
    def save_index(self) -> None:  # sync, then write queue.index now [X1]
        self._unsynced = 0
        self.queue.save_index()

    @_locked
    def tick(self) -> None:  # sync if sync_interval_ms passed since the first unsynced record
        self._wrote(0)

    @property
    def durable_seq(self) -> int:  # every put() with a seq up to this one is durable [D4]
        return self.queue.durable_seq

    @_locked
    def close(self) -> None:  # sync; close the queue if the Outbox opened it
        if self._own:
            self.queue.close()
        elif not self.queue.stats().failed:
            self._sync()

    # ------------------------------------------------------------------ delivery loops
    def pump(
        self,
        send: "Any",
        budget: int = 16,
        budget_ms: int = 0,
        stop: "Optional[Callable[[], bool]]" = None,
    ) -> int:
        """Deliver up to budget messages (budget_ms of ticks) via send; return acks [E17].
        send may be a windowed sender (publish/poll/inflight_max): a window of them [E25].
        stop() returning True claims no more (what is in flight is settled) [E26]."""
        w = _sender(send, stop)
        _opt(budget_ms, 0, _MAX_WAIT, "budget_ms")
        if w:
            return int(self._window(send, stop).pump(budget, budget_ms))
        t0, n = self.ticks(), 0
        self.tick()
        for _ in range(_opt(budget, 1, _MAX_WAIT, "budget")):
            go = self.within(t0, budget_ms) and (stop is None or not stop())
            m = self.get() if go else None
            if m is None:
                break
            try:
                ok, e = send(m), None
            except Exception as x:
                ok, e = False, x
            r = self.settle(m, ok, e)
            if r < 0:
                break
            n += r
        return n

    def _window(self, send: "Any", stop: "Any" = None) -> "Any":
        # The windowed delivery loop over send [E25] (the host's replay brings its own [E26]).
        return _addon("ddq_window").Window(self, send, stop)

    def within(self, t0: int, budget_ms: int) -> bool:
        """Whether budget_ms (0: no bound) of ticks since t0 are left [E17]."""
        return not budget_ms or _tdiff(self.ticks(), t0) < budget_ms

    async def run(
        self,
        send: "Callable[[Message], Any]",
        idle_ms: int = 1000,
        stop: "Optional[Callable[[], bool]]" = None,
    ) -> int:
        """Deliver on asyncio until stop() returns True; send may be async [E17], or a
        windowed sender [E25]."""
        import asyncio

        if _sender(send, stop):
            return int(await self._window(send).run(idle_ms, stop))

        sleep_ms = getattr(asyncio, "sleep_ms", None)  # MicroPython's asyncio has sleep_ms
        _opt(idle_ms, 1, _MAX_WAIT, "idle_ms")
        n = 0
        while stop is None or not stop():
            self.tick()
            m = self.get()
            if m is not None:
                try:
                    ok, e = send(m), None
                    if hasattr(ok, "send"):  # a coroutine (a generator on MicroPython)
                        ok = await ok
                except Exception as x:
                    ok, e = False, x
                r = self.settle(m, ok, e)
                n += max(r, 0)
                if r >= 0:
                    await asyncio.sleep(0)
                    continue
                if r < -1:  # the host replay's failure="stop": the loop ends [E26]
                    break
            d = self.next_ready_ms()
            d = idle_ms if d is None else min(d, idle_ms)
            await (sleep_ms(d) if sleep_ms is not None else asyncio.sleep(d / 1000))
        return n
