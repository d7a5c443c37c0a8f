"""ddq replay: deliver the pending messages of a (pulled) queue directory to an MQTT broker, QoS 1.

Delivery is the message layer's loop (ddq_outbox.Outbox.pump over DIR's ddq.Queue, with its replay
options, OUTBOX E26) and a windowed paho sender; --dry-run runs the same on a copy of DIR through
a client that confirms everything. Each message is claimed in DIR, published with QoS 1, and acked
in DIR when its PUBACK arrives, so an interrupted replay resumes without re-sending what was acked.
The time between a PUBACK and the durable ACK record is the only place a hard kill can cause
duplicates (at most the window's; QoS 1 is at-least-once); Ctrl-C finishes the messages in flight
first.

Window (--window W, default 16; OUTBOX E25's, through paho's max_inflight_messages): up to W
publishes wait for their PUBACK at once; each is acked in DIR when its PUBACK arrives (they come
back in order), and none is waited for past its lease. A failure releases every message of the
window (retry(0)) and stops that directory, except a connection the broker closed: once paho
reconnected the window's messages are republished one at a time, and one the broker closes the
connection for --max-attempts times (default 3) while alone is quarantined "unpublishable: the
broker closed the connection ..." and named (OUTBOX E26, E30). Many directories (`ddq replay DIR...
--to URL`): one connection and thread each, all at once; {dir} in the URL's prefix or --client-id
is the directory's name, --prefix-per-dir publishes under PREFIX/<name>, and client ids always
differ (-<name> is appended). Each is resumable on its own; --json gives a summary per directory
(one DIR: the summary itself); --progress (or a terminal on stderr) shows sent/total.

Connection: mqtt://HOST[:PORT] (1883) or mqtts://HOST[:PORT] (8883, TLS: the broker's certificate
must chain to --ca-file, else to the system's CAs, and name HOST; --cert/--key: a client
certificate). A user name comes from the URL (user@HOST) or --username, the password from
--password-env or --password-file; a password in the URL still works but shows in the process
list. No message, log or summary repeats a password: URLs are shown redacted (user:***@HOST).

Topics (URL mqtt[s]://[user[:password]@]HOST[:PORT][/PREFIX]; no PREFIX by default):
  - a payload that decodes as a message-layer envelope (ddq_outbox.decode_envelope) is
    published to its envelope topic, the one the device would have used (PREFIX/<topic> with one),
    with the envelope's retain flag and its inner payload;
  - any other payload is published unchanged to PREFIX/raw ("raw" with an empty prefix);
  - a batch (ddq_batch, OUTBOX §13.4) is published reading by reading, its item acked once all
    are (sent counts messages, readings those of batches, sent_seqs the items).
Replay always publishes with QoS 1, whatever the envelope asked for: the ack needs a PUBACK.
An envelope past its TTL (enqueued_ms + ttl_ms <= now) is not published but quarantined with the
reason "expired", as the Outbox does by default; --send-expired publishes it anyway.
A message MQTT cannot publish (a topic with a wildcard "+"/"#", a control or non-character from
an old or forged record, one over 65,535 bytes once the prefix is added, one paho refuses) is
quarantined with the reason "unpublishable: <why>", named (its seq), and replay goes on with the
next. With an HMAC key (--hmac-key-file F or
$DDQ_HMAC_KEY, SPEC E21/OUTBOX E22) every message must carry a valid tag: anything else (unsigned,
altered, forged, a raw payload) is quarantined as "unauthenticated: <why>", never published. An
encrypted payload (SPEC E23) is published decrypted, after its tag is verified; without the key (or
without the cryptography package) replay refuses to start while any pending message is encrypted:
it never publishes a ciphertext, and changes nothing.

Counts: sent (acked this run), expired (quarantined, not sent), unpublishable and unauthenticated
(quarantined, not sent), failed (no PUBACK in time / connection lost and not back within --timeout:
released with retry(0), which counts an attempt, and the run stops), skipped (pending but not
deliverable now: backing off after a retry, or under a live lease), remaining (deliverable but not
attempted: --limit, Ctrl-C, or the stop after a failure), raw (of sent, published to PREFIX/raw).
"""

import errno
import os
import shutil
import signal
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from . import envelope, locate, qdir
from .errors import HostError

DEFAULT_PREFIX = ""  # the device's own topics: a prefix is opt-in (docs/HOST.md "replay")
DEFAULT_PORT = 1883
DEFAULT_TLS_PORT = 8883


class ReplayError(HostError):
    """Bad URL, broker unreachable, queue unusable; one line for the user."""


# What replay reads from a broker (OUTBOX E29's rule for ddq's own senders, held here for paho,
# which buffers whatever a packet announces, up to 256 MiB, whole): a 3.1.1 broker sends a
# client that never subscribes one CONNACK (2 bytes), then PUBACKs (2) and PINGRESPs (0).
# Anything else is refused from its header, before its body is read: a longer packet, and
# every other type (paho would answer a PUBLISH, PUBREC or PUBREL, and republish the window on
# each CONNACK: replies that grow without bound towards a broker that does not read them).
MAX_IN = 16
_EXPECTED = {0x40: 2, 0xD0: 0}  # after the CONNACK: PUBACK, PINGRESP (header byte: length)


class InboundGuard:
    """Follows the MQTT framing of the bytes a broker sends on one connection; feed() raises
    OSError (EPROTO, one line naming the broker and at most the header) at the first length
    byte of a packet replay does not take (see MAX_IN), so no body is ever read."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.head: int | None = None  # the header byte of the packet being framed
        self.left = 0  # body bytes still to come (each at most MAX_IN)
        self.packets = 0

    def feed(self, data: bytes) -> None:
        i = 0
        while i < len(data):
            if self.left:
                take = min(self.left, len(data) - i)
                self.left -= take
                i += take
                continue
            b = data[i]
            i += 1
            if self.head is None:
                self.head = b
                continue
            h, self.head = self.head, None
            want = 0x20 if self.packets == 0 else None
            ok = (b == 2 and h == want) if want is not None else _EXPECTED.get(h) == b
            if not ok:
                raise OSError(
                    errno.EPROTO,
                    "broker %s sent an MQTT packet 0x%02x announcing %s bytes; replay takes %s "
                    "(at most %d bytes, OUTBOX E29): connection dropped"
                    % (
                        self.broker,
                        h,
                        "128 or more" if b & 0x80 else str(b),
                        "a CONNACK (0x20, 2 bytes) first"
                        if want is not None
                        else "only PUBACK (0x40, 2 bytes) and PINGRESP (0xd0, 0 bytes) after it",
                        MAX_IN,
                    ),
                )
            self.packets += 1
            self.left = b


def bounded_client(mqtt: ModuleType, broker: str, **kw: Any) -> Any:
    """A paho Client whose every read from the broker passes an InboundGuard (a fresh one per
    connection). Its .refused is the first refusal's text ("" while none)."""
    if not hasattr(mqtt.Client, "_sock_recv"):  # the one read paho 2.x makes; never unguarded
        raise ReplayError(
            "this paho-mqtt has no Client._sock_recv: ddq replay needs paho-mqtt 2.x"
        )

    class Bounded(mqtt.Client):  # type: ignore[misc, name-defined]
        refused = ""
        _guarded: Any = None
        _guard = InboundGuard(broker)

        def _sock_recv(self, bufsize: int) -> bytes:
            data: bytes = super()._sock_recv(bufsize)
            if self._sock is not self._guarded:  # a new connection: a new framing
                self._guarded, self._guard = self._sock, InboundGuard(broker)
            try:
                self._guard.feed(data)
            except OSError as e:
                self.refused = self.refused or str(e.strerror)
                raise
            return data

    return Bounded(**kw)


def redact_url(url: str) -> str:
    """url as it may be shown: the password (anything after user: before the last @) is ***."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, _, tail = rest.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return "%s://%s%s@%s" % (scheme, user, ":***" if ":" in userinfo else "", tail)


def parse_url(url: str) -> dict[str, Any]:
    """host, port, prefix, tls, username, password of a broker URL; ReplayError (the URL
    redacted)."""
    shown = redact_url(url)
    try:
        u = urlsplit(url)
    except ValueError:
        raise ReplayError("broker URL %r is not a valid URL" % shown) from None
    if u.scheme not in ("mqtt", "mqtts"):
        raise ReplayError(
            "broker URL must look like mqtt://HOST[:PORT][/TOPIC-PREFIX] or mqtts://..., got %r"
            % shown
        )
    try:
        port = u.port
        host = u.hostname
    except ValueError:
        raise ReplayError("broker URL %r has a bad port" % shown) from None
    if not host:
        raise ReplayError("broker URL %r has no host" % shown)
    tls = u.scheme == "mqtts"
    path = u.path
    prefix = DEFAULT_PREFIX if path == "" else unquote(path[1:]).strip("/")
    return {
        "host": host,
        "port": port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT),
        "prefix": prefix,
        "tls": tls,
        "username": unquote(u.username) if u.username else None,
        "password": unquote(u.password) if u.password else None,
    }


def resolve_auth(
    cfg: dict[str, Any],
    username: str | None = None,
    password_env: str | None = None,
    password_file: str | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[str | None, str | None, list[str]]:
    """(user, password, warnings) from the URL's cfg and the options; ReplayError when they
    conflict or a source is unusable. No message contains the password."""
    warnings: list[str] = []
    if username is not None and cfg["username"] is not None and username != cfg["username"]:
        raise ReplayError("two user names: one in the URL and --username; give one")
    user = username if username is not None else cfg["username"]
    password = cfg["password"]
    if password is not None:
        if password_env is not None or password_file is not None:
            raise ReplayError(
                "two passwords: one in the URL and --password-env/--password-file; give one"
            )
        warnings.append(
            "warning: the password in the --to URL is visible to other users in the process list;"
            " use --password-env VAR or --password-file PATH"
        )
    if password_env is not None:
        password = (os.environ if environ is None else environ).get(password_env)
        if not password:
            raise ReplayError("--password-env: environment variable %s is not set or empty"
                              % password_env)  # fmt: skip
    if password_file is not None:
        try:
            fd = os.open(password_file, os.O_RDONLY)
            try:
                st = os.fstat(fd)
                data = os.read(fd, 65536)
            finally:
                os.close(fd)
        except OSError as e:
            raise ReplayError("--password-file %s: %s" % (password_file, e.strerror)) from None
        password = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
        if not password:
            raise ReplayError("--password-file %s is empty" % password_file)
        if st.st_mode & 0o077:
            warnings.append(
                "warning: --password-file %s can be read by other users (mode %04o); chmod 600 it"
                % (password_file, st.st_mode & 0o7777)
            )
    if password is not None and user is None:
        raise ReplayError("a password needs a user name: --username NAME or user@HOST in the URL")
    return user, password, warnings


def tls_context(
    ca_file: str | None = None, certfile: str | None = None, keyfile: str | None = None
) -> ssl.SSLContext:
    """A client context that verifies the broker: its certificate chains to ca_file (else the
    system's CAs) and names the host connected to. certfile/keyfile: the client certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    try:
        if ca_file is not None:
            ctx.load_verify_locations(cafile=ca_file)
        else:
            ctx.load_default_certs()
    except (OSError, ValueError) as e:
        raise ReplayError("--ca-file %s: %s" % (ca_file, _tls_reason(e))) from None
    if certfile is not None:
        try:
            ctx.load_cert_chain(certfile, keyfile)
        except (OSError, ValueError) as e:
            raise ReplayError(
                "--cert %s / --key %s: %s" % (certfile, keyfile or certfile, _tls_reason(e))
            ) from None
    return ctx


def _tls_reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return str(e.verify_message)
    if isinstance(e, ssl.SSLError):
        return str(e.reason or e)
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)


def topic_for(prefix: str, topic: str) -> str:
    return "%s/%s" % (prefix, topic) if prefix else topic


def check_prefix(prefix: str) -> None:
    """A prefix MQTT cannot publish under would make every message unpublishable: refuse it
    (exit 2, a bad argument): a wildcard, a control or non-character (SPEC E4), over 65,535 B."""
    why = unpublishable(prefix) if prefix else ""
    if why:
        raise ReplayError("topic prefix %r: %s" % (prefix, why.replace("topic ", "", 1)), code=2)


def unpublishable(topic: str) -> str:
    """ "" if MQTT can publish topic (after the prefix), else why not (ddq_outbox.publishable)."""
    return str(locate.load_outbox().publishable(topic.encode("utf-8", "surrogatepass"), 65535))


def _retired(
    expired: list[int], unpublishable: list[int], unauth: list[int], dropped: list[int]
) -> dict[str, Any]:
    """The summary's counts (messages) and seqs (items, each once) of what was dead-lettered
    instead of sent; a batch's reading is dropped and counted, its item acked (OUTBOX B5); a dead
    letter the queue had no room for is dropped and counted (dead_dropped, OUTBOX E32)."""
    return {
        "dead_dropped": len(dropped),
        "dead_dropped_seqs": _items_of(dropped),
        "expired": len(expired),
        "expired_seqs": _items_of(expired),
        "unpublishable": len(unpublishable),
        "unpublishable_seqs": _items_of(unpublishable),
        "unauthenticated": len(unauth),
        "unauthenticated_seqs": _items_of(unauth),
    }


# A batch's reading is handed out as Message.seq READING + (item seq << 12) + its index
# (ddq_batch, OUTBOX B4): replay reports it as the item's seq and the reading's index.
READING = 1 << 64


def split_id(mid: int) -> tuple[int, int | None]:
    """(item seq, reading index or None) of a message id the delivery reported."""
    if mid < READING:
        return mid, None
    return (mid - READING) >> 12, (mid - READING) & 4095


def seq_name(mid: int) -> str:
    s, k = split_id(mid)
    return str(s) if k is None else "%d reading %d" % (s, k)


def _items_of(ids: list[int]) -> list[int]:
    out: list[int] = []
    for mid in ids:
        s = split_id(mid)[0]
        if s not in out:
            out.append(s)
    return out


def _messages(outbox: ModuleType, batch: ModuleType, payload: bytes, key: bytes | None) -> int:
    # The messages an item is delivered as: a batch's readings (OUTBOX B2), else one.
    try:
        m = outbox.decode_envelope(payload)  # unchecked: the key field is in clear (E1)
        if m.key in (batch.KEY, batch.KEY_B):
            if getattr(m, "encrypted", False):  # only a batch's readings need the plaintext
                m = outbox.decode_envelope(payload, hmac_key=key)
            return max(1, len(batch.entries(m)))
    except Exception:  # noqa: BLE001 (anything else is one message: the loop decides its fate)
        pass
    return 1


# ---------------------------------------------------------------- the replay's Outbox (OUTBOX E26)
_CLASSES: dict[Any, Any] = {}


def outbox_class(base: Any) -> Any:
    """The Outbox `ddq replay` delivers with: base (ddq_batch.BatchOutbox, or ddq_outbox.Outbox)
    with the delivery options for what a device kept (OUTBOX E26), which no device needs:
    raw=True (a payload that is not an envelope is delivered to topic "", QoS 1), qos=0|1 (every
    claimed message's QoS), lapsed="reclaim" (a lapsed claim is taken as it is, no RETRY),
    failure="stop" (a failed send and everything in flight beside it is retried at once, and
    the loop ends) and report(what, seq, detail) (called once per outcome, with its counter's
    name). The defaults are base's behaviour."""
    cls = _CLASSES.get(base)
    if cls is not None:
        return cls
    ddq_outbox, ddq_window, batch = locate.load_outbox(), locate.load_window(), locate.load_batch()
    Message, InvalidArgument = ddq_outbox.Message, ddq_outbox.InvalidArgument
    reading = batch._ID  # a batch's reading: its Message.seq is at least this (OUTBOX B4)

    def pick(v: Any, ok: tuple[Any, ...], name: str) -> Any:
        if v not in ok:
            raise InvalidArgument("%s: one of %r" % (name, ok))
        return v

    window: Any = ddq_window.Window

    class ReplayWindow(window):  # type: ignore[misc]
        fl: dict[int, Any]
        redo: list[int]

        # failure="stop" [E26]: a failure (a lost connection, a failed publish, a lease at its
        # margin) releases everything in flight (retry 0, seq order), nothing is republished,
        # and the loop ends.
        def end(self, why: str) -> None:
            self.release(why)

        def lost(self, e: BaseException) -> None:
            self.release(repr(e))

        def due(self) -> int:
            now = self.ob.clock()
            if any(m.lease_until_ms - now - self.margin <= 0 for m in self.fl.values()):
                self.release("lease would run out in flight")
                return int(ddq_window._MAX_WAIT)
            return int(super().due())

        def release(self, why: str) -> None:
            for seq in sorted(self.fl):
                self.ob._release(self.fl[seq], why, len(self.fl) == 1)
            self.fl, self.redo = {}, []
            self.failed = True

        async def run(self, idle_ms: int, stop: Any) -> int:
            return int(
                await super().run(idle_ms, lambda: (stop is not None and stop()) or self.failed)
            )

    class ReplayOutbox(base):  # type: ignore[misc]
        def __init__(
            self,
            queue: Any,
            raw: bool = False,
            qos: int | None = None,
            lapsed: str = "retry",
            failure: str = "backoff",
            report: Callable[[str, int, str], Any] | None = None,
            **options: Any,
        ) -> None:
            self._raw, self._qos = bool(raw), pick(qos, (None, 0, 1), "qos")
            self._reclaim = pick(lapsed, ("retry", "reclaim"), "lapsed") == "reclaim"
            self._stop = pick(failure, ("backoff", "stop"), "failure") == "stop"
            if report is not None and not callable(report):
                raise InvalidArgument("report: a callable")
            self._report = report
            super().__init__(queue, **options)

        def get(self, lease_ms: int | None = None) -> Any:
            m = super().get(lease_ms)
            if m is not None and self._qos is not None:
                m.qos = self._qos
            return m

        def _lapsed(self, now: int) -> None:
            if not self._reclaim:
                super()._lapsed(now)

        def _bad(self, seq: int, data: Any, e: Any) -> Any:
            if not self._raw or isinstance(e, ddq_outbox.Unauthenticated):
                return super()._bad(seq, data, e)
            if self._hkey is not None:  # a raw payload carries no tag (E22)
                self._quar(seq, "unauthenticated", "not an envelope (%s)" % e.args[0])
                return None
            m = Message()  # raw: topic "", the stored bytes, no enqueue time
            m.payload, m.qos = data, 1
            return m

        def reread(self, m: Any) -> Any:
            if m.topic or m.seq >= reading:
                return super().reread(m)
            r = Message()  # raw: read again as raw
            r.payload, r.qos = self.queue.read(m.seq), m.qos
            r.seq, r.attempts = m.seq, m.attempts
            r.lease_until_ms, r.age_ms = m.lease_until_ms, m.age_ms
            return r

        def _count(self, what: str, seq: int, detail: Any = "") -> None:
            super()._count(what, seq, detail)
            if self._report is not None:
                self._report(what, seq, detail if isinstance(detail, str) else repr(detail))

        def settle(self, m: Any, ok: Any, e: BaseException | None) -> int:
            if not self._stop or (e is None and ok is True) or isinstance(e, ddq_outbox.Rejected):
                return int(super().settle(m, ok, e))
            self._release(m, repr(e) if e is not None else "send returned %r" % (ok,))
            return -2  # the loop ends

        def _window(self, send: Any, stop: Any = None) -> Any:
            if not self._stop:
                return super()._window(send, stop)
            return ReplayWindow(self, send, stop)

        @ddq_outbox._locked  # type: ignore[untyped-decorator]
        def _release(self, m: Any, why: str, alone: bool = True) -> None:
            # The message (a reading: its whole item, as nack, B5) is due again at once (RETRY,
            # delay 0); a failure pinned on it (alone in flight) on its last attempt
            # dead-letters it instead (E10).
            if m.seq >= reading:
                p = self._parts.pop(self._split(m)[0], None)
                if p is None:
                    return
                m = p[0]
            if alone and self._max_att and m.attempts + 1 >= self._max_att:
                self._quar(m.seq, "max_attempts", why, "exhausted")
                return
            self.queue.retry(m.seq, 0)
            self._wrote(1)
            self._count("failed", m.seq, why)

    _CLASSES[base] = ReplayOutbox
    return ReplayOutbox


class _Confirmed:
    """paho's MQTTMessageInfo for the dry run: published at once."""

    def wait_for_publish(self, timeout: float) -> None:
        pass

    def is_published(self) -> bool:
        return True


class _DryClient:
    """The dry run's client: every publish is confirmed at once, nothing is sent."""

    def publish(self, topic: str, body: bytes, qos: int, retain: bool) -> _Confirmed:
        return _Confirmed()


@dataclass(frozen=True)
class ReplayOptions:
    """What every directory of one `ddq replay` shares, parsed and checked once (parse): the
    broker (host, port, TLS, the URL's prefix), the credentials, the TLS files, and the delivery
    options. url is kept as given only to be shown redacted."""

    url: str = field(repr=False)  # may hold a password: shown only through redact_url
    host: str
    port: int
    tls: bool
    prefix: str  # the URL's; a Job's prefix is what is published under
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    limit: int | None = None
    lease_ms: int = 60000
    timeout: float = 10.0
    window: int = 16
    max_attempts: int = 3
    send_expired: bool = False
    log: Callable[[str], None] | None = None

    @property
    def broker(self) -> str:
        return "%s:%d" % (self.host, self.port)

    @classmethod
    def parse(
        cls,
        url: str,
        username: str | None = None,
        password_env: str | None = None,
        password_file: str | None = None,
        warn: Callable[[str], None] | None = None,
        environ: dict[str, str] | None = None,
        **kw: Any,
    ) -> "ReplayOptions":
        """The one place the URL, the credentials, the TLS files, --window and --timeout are
        checked (ReplayError); warn(line) gets each warning about the credentials. kw: the
        fields from ca_file on."""
        cfg = parse_url(url)
        user, password, warnings = resolve_auth(
            cfg, username, password_env, password_file, environ
        )
        for w in warnings:
            if warn is not None:
                warn(w)
        ro = cls(url, cfg["host"], cfg["port"], cfg["tls"], cfg["prefix"], user, password, **kw)
        check_prefix(ro.prefix)
        if not 1 <= ro.window <= 65535:
            raise ReplayError("--window must be 1..65535, got %d" % ro.window)
        if not 1 <= ro.max_attempts <= 1000:
            raise ReplayError("--max-attempts must be 1..1000, got %d" % ro.max_attempts, code=2)
        check_timeout(ro.timeout)
        if not ro.tls and (ro.ca_file or ro.certfile or ro.keyfile):
            raise ReplayError("--ca-file, --cert and --key need an mqtts:// URL")
        if ro.keyfile and not ro.certfile:
            raise ReplayError("--key needs --cert (the client certificate)")
        return ro


@dataclass
class Job:
    """One directory to replay: its queue options and HMAC key, the prefix it publishes under
    and its client id (fleet_names, which checks both)."""

    dir: str
    options: dict[str, int]
    hmac_key: bytes | None = None
    prefix: str = ""
    client_id: str | None = None
    # A raw-flash image (flashimg.Image): the ddq_flash storage to open, when the delivery
    # starts, and the queue's name in it; dir is then the image's path, for the summary.
    storage: Callable[[], Any] | None = None
    name: str = ""


@dataclass
class _Run:
    """One delivery's moving parts: the shared stop flag (Ctrl-C), whether the connection was
    lost, progress(sent, total), the queue's clock (the dry run's fixed now) and routes, filled
    with what was published (seq -> topic, bytes, raw, retain, expired)."""

    interrupted: list[bool] = field(default_factory=list)
    lost: bool = False
    drops: int = 0  # connections the broker closed (paho's on_disconnect)
    progress: Callable[[int, int], None] | None = None
    clock: Callable[[], int] | None = None
    routes: dict[int, tuple[str, int, bool, bool, bool]] = field(default_factory=dict)


# The keys of a dry run's summary, and of a directory that failed in a fleet (Result.as_dict)
_PLAN_KEYS = frozenset(
    "dir dry_run would_send sent failed skipped skipped_seqs remaining raw".split()
    + [k + t for k in ("dead_dropped", "expired", "unpublishable", "unauthenticated")
       for t in ("", "_seqs")]
)  # fmt: skip
_ERROR_KEYS = frozenset(("dir", "error", "sent", "failed"))
_TOTAL_KEYS = ("sent", "failed", "skipped", "expired", "unpublishable", "unauthenticated",
               "dead_dropped", "remaining")  # fmt: skip


@dataclass
class Result:
    """What the replay (or the dry run) of one directory did, counted once: the summary line
    and `--json` (as_dict) print it as it is. Counts are messages (a batch's readings each);
    *_seqs name items, each once (module docstring, "Counts")."""

    dir: str = ""
    dry_run: bool = False
    sent: int = 0
    failed: int = 0
    skipped: int = 0
    remaining: int = 0
    raw: int = 0  # of sent (of would_send in a dry run): published to PREFIX/raw
    readings: int = 0  # of sent: readings of batches
    expired: int = 0
    unpublishable: int = 0
    unauthenticated: int = 0
    dead_dropped: int = 0  # dead letters the queue had no room for (OUTBOX E32)
    sent_seqs: list[int] = field(default_factory=list)
    sent_ids: list[int] = field(default_factory=list)  # (a reading's id: READING + ...)
    failed_seqs: list[int] = field(default_factory=list)
    skipped_seqs: list[int] = field(default_factory=list)
    remaining_seqs: list[int] = field(default_factory=list)
    expired_seqs: list[int] = field(default_factory=list)
    unpublishable_seqs: list[int] = field(default_factory=list)
    unauthenticated_seqs: list[int] = field(default_factory=list)
    dead_dropped_seqs: list[int] = field(default_factory=list)
    would_send: list[dict[str, Any]] = field(default_factory=list)  # a dry run's
    stats: dict[str, int] = field(default_factory=dict)  # the queue's, after the delivery
    connection_lost: bool = False
    broker: str = ""
    tls: bool = False
    prefix: str = ""
    interrupted: bool = False
    window: int = 0
    seconds: float = 0.0  # the delivery, after the CONNACK
    client_id: str | None = None
    error: str | None = None  # a fleet's directory that failed: why (the rest is 0)

    def as_dict(self) -> dict[str, Any]:
        """The `--json` summary: a delivery's fields, a dry run's or a failed directory's."""
        d = asdict(self)
        if self.error is not None:
            return {k: v for k, v in d.items() if k in _ERROR_KEYS}
        if self.dry_run:
            return {k: v for k, v in d.items() if k in _PLAN_KEYS}
        for k in ("error", "would_send", "sent_ids"):
            del d[k]
        return d


@dataclass
class Fleet:
    """The replays of many directories (replay_many): each one's Result, and their total."""

    dirs: list[Result]

    def total(self) -> dict[str, int]:
        t = {k: sum(int(getattr(r, k)) for r in self.dirs) for k in _TOTAL_KEYS}
        t["errors"] = sum(1 for r in self.dirs if r.error is not None)
        return t

    def as_dict(self) -> dict[str, Any]:
        return {"dirs": [r.as_dict() for r in self.dirs], "total": self.total()}


def plan(job: Job, ro: ReplayOptions, now_ms: int | None = None) -> Result:
    """Dry run: the delivery itself (_deliver, the message layer's loop) on a copy of DIR, at
    now_ms, through a client that confirms every publish and sends nothing. DIR is not
    written. Only ro's send_expired and limit count (what it plans is what a run does), one
    message at a time."""
    qdir.check_queue_dir(job.dir)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    run = _Run(clock=lambda: now)
    dry = replace(ro, lease_ms=60000, timeout=1.0, window=1, log=None)
    tmp = tempfile.mkdtemp(prefix="ddq-replay-plan-")
    try:
        work = os.path.join(tmp, "q")
        qdir.copy_queue(job.dir, work, job.options)
        try:
            res = _deliver(replace(job, dir=work), dry, _DryClient(), run)
        except locate.load_ddq().Corrupt as e:  # one line, exit 2, naming the fix
            raise ReplayError(qdir.corrupt_message(job.dir, e, work), 2) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    would = []
    for mid in res.sent_ids:
        topic, nb, raw, retain, expired = run.routes[mid]
        s, k = split_id(mid)
        w = {"seq": s, "topic": topic, "bytes": nb, "retain": retain, "raw": raw,
             "expired": expired}  # fmt: skip
        if k is not None:
            w["reading"] = k  # a batch's reading (OUTBOX B2)
        would.append(w)
    return Result(
        dir=job.dir,
        dry_run=True,
        would_send=would,
        skipped=res.skipped,
        skipped_seqs=res.skipped_seqs,
        **_retired(
            res.expired_seqs,
            res.unpublishable_seqs,
            res.unauthenticated_seqs,
            res.dead_dropped_seqs,
        ),
        remaining=res.remaining,  # what the run would leave (--limit), as the run reports it
        remaining_seqs=res.remaining_seqs,
        raw=sum(1 for w in would if w["raw"]),
    )


def _connect_error(e: OSError, ro: ReplayOptions) -> ReplayError:
    """The one line for a connect that failed: TCP, or TLS (the certificate, the handshake)."""
    broker = ro.broker
    if isinstance(e, ssl.SSLCertVerificationError):
        if e.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH
            hint = "the host in the URL must be a name or address the certificate carries"
        elif ro.ca_file:
            hint = "it is not signed by --ca-file %s" % ro.ca_file
        else:
            hint = "it is not signed by a CA this system trusts: give --ca-file"
        return ReplayError(
            "TLS: broker %s: certificate refused: %s (%s)" % (broker, e.verify_message, hint)
        )
    if isinstance(e, ssl.SSLError):
        return ReplayError("TLS handshake with broker %s failed: %s" % (broker, _tls_reason(e)))
    return ReplayError("cannot connect to broker %s: %s" % (broker, e.strerror or e))


def replay(
    job: Job,
    ro: ReplayOptions,
    progress: Callable[[int, int], None] | None = None,
    interrupted: list[bool] | None = None,
) -> Result:
    """Deliver job's directory as ro says; return its Result (see the module docstring).
    progress(sent, total): called with (0, pending) once, then (1, 0) per PUBACK; interrupted:
    a shared stop flag (set by the caller's SIGINT handler; None: replay installs its own)."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    if job.storage is None:
        qdir.check_queue_dir(job.dir)  # (an image was checked by flashimg.Image)
    broker = ro.broker
    connected = threading.Event()
    own_flag = interrupted is None
    run = _Run(interrupted=[] if interrupted is None else interrupted, progress=progress)
    rc: list[Any] = []

    def on_connect(
        client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any = None
    ) -> None:
        rc.append(reason_code)
        connected.set()

    def on_disconnect(
        client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any = None
    ) -> None:
        run.lost = True
        run.drops += 1
        connected.set()  # a close before CONNACK ends the wait

    client_id = job.client_id or "ddq-replay-%d" % int(time.time())
    client = bounded_client(
        mqtt,
        broker,
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=True,
    )
    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    client.max_inflight_messages_set(ro.window)
    if ro.tls:
        client.tls_set_context(tls_context(ro.ca_file, ro.certfile, ro.keyfile))
    if ro.user is not None:
        client.username_pw_set(ro.user, ro.password)
    client.connect_timeout = ro.timeout  # the TCP connect and the TLS handshake

    connecting = [True]

    def on_sigint(signum: int, frame: Any) -> None:
        run.interrupted.append(True)
        if connecting[0]:  # a TCP connect or TLS handshake that hangs: stop it now
            raise KeyboardInterrupt

    # Once the CONNECT is sent, Ctrl-C sets a flag that the CONNACK wait and the delivery read
    # at their own points: a KeyboardInterrupt raised while paho's thread takes the connection
    # ended a run as "closed the connection" (exit 1) instead of an interrupt (130) [item 11].
    old = None
    if own_flag and threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGINT, on_sigint)
    started = False
    try:
        try:
            client.connect(ro.host, ro.port, keepalive=30)
        except OSError as e:  # ssl's errors are OSErrors too
            raise _connect_error(e, ro) from None
        connecting[0] = False
        if own_flag and run.interrupted:
            raise KeyboardInterrupt
        client.loop_start()
        started = True
        t_end = time.monotonic() + ro.timeout
        while not connected.wait(0.2):
            if own_flag and run.interrupted:
                raise KeyboardInterrupt
            if time.monotonic() >= t_end:
                raise ReplayError(
                    "broker %s accepted the TCP connection but sent no CONNACK: "
                    "timed out after %g s (--timeout)" % (broker, ro.timeout)
                )
        if own_flag and run.interrupted:
            raise KeyboardInterrupt
        if client.refused:  # what the broker sent instead of its CONNACK
            raise ReplayError(client.refused)
        if not rc:
            why = "broker %s closed the connection before accepting it" % broker
            if ro.tls and not ro.certfile:
                why += " (a broker that requires a client certificate does this: --cert, --key)"
            raise ReplayError(why)
        if rc[0].is_failure:
            raise ReplayError("broker %s refused the connection: %s" % (broker, rc[0]))
        t_deliver = time.monotonic()
        try:
            res = _deliver(job, ro, client, run)
        except locate.load_ddq().Corrupt as e:  # one line, exit 2, naming the fix
            raise ReplayError(qdir.corrupt_message(job.dir, e), 2) from None
        if client.refused:  # the window was released (retry(0)); a rerun resumes
            raise ReplayError(client.refused)
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
        if started:
            client.disconnect()
            client.loop_stop()
    res.broker, res.tls, res.prefix, res.window = broker, ro.tls, job.prefix, ro.window
    res.interrupted = bool(run.interrupted)
    res.seconds = round(time.monotonic() - t_deliver, 3)  # delivery, after the CONNACK
    res.client_id = client_id
    return res


class _PahoWindow:
    """The windowed sender (OUTBOX E25) replay gives the message layer's loop: paho publishes
    each message QoS 1 under the prefix (a raw payload, topic "", to PREFIX/raw) and its
    PUBACKs come back in order (MQTT 3.1.1 §4.6), so poll() waits for the oldest first; no
    PUBACK within `timeout` s of the first wait for it is an OSError (the loop stops: E26). A
    topic MQTT cannot publish under the prefix, or one paho refuses, is Unpublishable."""

    def __init__(
        self,
        outbox: ModuleType,
        client: Any,
        prefix: str,
        window: int,
        timeout: float,
        clock: Callable[[], int],
        routes: dict[int, tuple[str, int, bool, bool, bool]],
        run: _Run | None = None,
    ) -> None:
        self.ob, self.client, self.prefix, self.timeout = outbox, client, prefix, timeout
        self.run = run or _Run()
        self.doomed: dict[int, str] = {}  # seq -> why: dead-lettered at its next publish
        self.refused = 0  # the seq publish refused, not connected (never sent: not its drop)
        self.inflight_max = max(1, window)
        self.timeout_ms = int(timeout * 1000)
        # [seq, info, first wait (monotonic s) or None, connections dropped before its publish]
        self.flight: list[list[Any]] = []
        self.clock = clock
        self.routes = routes  # seq -> topic, bytes, raw, retain, expired (what was published)
        self.readings: dict[int, list[int]] = {}  # item seq -> its readings published, in order

    def publish(self, m: Any, dup: bool = False) -> None:
        topic = topic_for(self.prefix, m.topic or "raw")
        why = (unpublishable(topic) if m.topic else "") or self.doomed.get(m.seq, "")
        if why:
            raise self.ob.Unpublishable(why)
        up = getattr(self.client, "is_connected", None)
        if up is not None and not up():  # never handed to paho, which would send it later
            self.withdraw()  # nor what is in flight: the loop republishes it (OUTBOX E30)
            self.refused = m.seq
            raise OSError(errno.ECONNRESET, "not connected to the broker")
        try:  # QoS 1 whatever the envelope asked for: the ack needs a PUBACK (E26 qos=1)
            info = self.client.publish(topic, m.payload, qos=1, retain=m.retain)
        except ValueError as e:  # paho refuses the topic or the payload: not sendable, ever
            raise self.ob.Unpublishable(str(e)) from None
        self.routes[m.seq] = (
            topic,
            len(m.payload),
            not m.topic,
            bool(m.retain),
            m.expired(self.clock()),
        )
        self.flight.append([m.seq, info, None, self.run.drops])
        if m.seq >= READING:
            self.readings.setdefault(split_id(m.seq)[0], []).append(m.seq)

    def poll(self, timeout_ms: int = 0) -> list[int]:
        out: list[int] = []
        while self.flight:
            seq, info, t0, drops = self.flight[0]
            now = time.monotonic()
            if t0 is None:
                t0 = self.flight[0][2] = now
            wait = min(timeout_ms / 1000, t0 + self.timeout - now)
            try:
                if wait > 0 and not info.is_published():  # in slices: a drop ends the wait
                    info.wait_for_publish(min(wait, 0.1))
                ok = info.is_published()
            except (RuntimeError, ValueError):
                ok = False
                t0 = now - self.timeout  # not published and never will be: a failure now
            if not ok and self.run.drops != drops:  # the broker closed the connection meanwhile
                self.withdraw()
                raise OSError(
                    errno.ECONNRESET,
                    "the broker closed the connection while seq %d was in flight" % seq,
                )
            if not ok:
                if time.monotonic() - t0 >= self.timeout:
                    self.withdraw()
                    raise OSError(errno.ETIMEDOUT, "no PUBACK for seq %d" % seq)
                break
            self.flight.pop(0)
            out.append(seq)
            timeout_ms = 0  # then take what is confirmed already, without waiting
        return out

    def withdraw(self) -> None:
        # Forget what is in flight, and withdraw it from paho's queue: paho would publish it
        # again after every reconnect on its own (ddq_mqtt.Paho does the same, OUTBOX E30).
        c = self.client
        lk = getattr(c, "_out_message_mutex", None)
        for f in self.flight:
            if lk is not None:
                with lk:
                    w = c._out_messages.pop(f[1].mid, None)
                    if w is not None and w.qos and w.state != 9:  # 9: mqtt_ms_queued
                        c._inflight_messages -= 1
        self.flight.clear()


def _reconnected(client: Any, timeout: float) -> bool:
    # paho's loop reconnects by itself after a drop (1 s, doubling); wait for it up to timeout.
    up = getattr(client, "is_connected", None)
    t_end = time.monotonic() + timeout
    while up is not None and not up():
        if time.monotonic() >= t_end:
            return False
        time.sleep(0.05)
    return True


def _deliver(job: Job, ro: ReplayOptions, client: Any, run: _Run) -> Result:
    # The message layer's delivery loop (Outbox.pump with a windowed sender, OUTBOX E25) with
    # replay's options (E26): raw payloads, QoS 1, expired ones sent on request, lapsed claims
    # taken as they are, and the first failure releases the window (retry(0)) and stops.
    ddq, ddq_outbox, batch = locate.load_ddq(), locate.load_outbox(), locate.load_batch()

    got: dict[str, list[int]] = {
        k: []
        for k in ("sent", "failed", "expired", "unpublishable", "unauthenticated", "dead_dropped")
    }
    # Within the hold rule (SPEC §10.1) at its smallest reserve, window 1 and no evidence
    # reserve: a subset of any board profile's, so every claim and dead letter of a directory a
    # board filled fits (H5) -- a claim beyond the first in flight waits for room (H3), a dead
    # letter without room waits or is dropped and counted (OUTBOX E32) -- where libddq's rule
    # would claim past the reserve and meet Limit at the segment limit (H6).
    if job.storage is None:
        q = ddq.Queue(job.dir, clock=run.clock, window=1, evidence_bytes=0, **job.options)
    else:  # a raw-flash image: written through ddq_flash, as the board writes it (SPEC §16)
        q = ddq.Queue(
            job.name,
            clock=run.clock,
            window=1,
            evidence_bytes=0,
            storage=job.storage(),
            **job.options,
        )
    try:
        # Claims found here were made by a writer that is not running (replay holds the lock):
        # the device pulled while sending, or a replay killed. Their leases mean nothing now:
        # each is released (a RETRY: the attempt counts) and delivered like the rest.
        for it in list(q.items()):
            if it.state == "claimed":
                q.retry(it.seq, 0)
        pending = [it.seq for it in q.items() if it.state in ("available", "claimed")]
        # Refuse before the first claim what cannot be decrypted here (SPEC E23).
        envelope.check_decryptable(
            sum(1 for s in pending if envelope.is_encrypted(q.read(s))),
            job.hmac_key,
            "pending message",
        )
        # A batch (OUTBOX B2) is delivered reading by reading: the messages to send.
        total = sum(_messages(ddq_outbox, batch, q.read(s), job.hmac_key) for s in pending)
        progress, log = run.progress, ro.log
        if progress is not None:
            progress(0, total)
        sender = _PahoWindow(
            ddq_outbox, client, job.prefix, ro.window, ro.timeout, q.clock, run.routes, run
        )
        # A connection the broker closes is an attempt, never a free retry (OUTBOX E30, E26):
        # the window in flight is released (retry 0) and, once paho reconnected, republished
        # one at a time (suspects), so a drop again pins the message the broker refuses; each
        # drop it was alone for counts (drops), and after --max-attempts it is dead-lettered.
        drops: dict[int, int] = {}
        doomed_at = -1  # len(got["sent"]) when the last message was doomed
        suspects: set[int] = set()
        failed_now: list[int] = []

        def report(what: str, seq: int, detail: str) -> None:
            if what == "failed":
                failed_now.append(seq)
            elif what != "retried":
                suspects.discard(seq)
            if what not in got:
                return
            if what == "sent" and sender.readings.get(seq):
                seq = sender.readings[seq].pop(0)  # a batch's reading, in PUBACK order
            got[what].append(seq)
            if what == "sent":
                if progress is not None:
                    progress(1, 0)
                if log:
                    topic, nb = sender.routes[seq][0:2]
                    log("sent seq %s -> %s (%d bytes)" % (seq_name(seq), topic, nb))
            elif log and what == "failed":
                if len(failed_now) == 1:  # the first of a failed round; why (the detail)
                    log("seq %d on %s not confirmed: %s"
                        % (seq, sender.routes.get(seq, ("?",))[0], detail))  # fmt: skip
            elif log and what == "expired":
                log("seq %d expired (TTL): quarantined, not sent" % seq)
            elif log and what == "dead_dropped":
                log(
                    "seq %d not sent: %s, and no room for its dead letter: dropped" % (seq, detail)
                )
            elif log:
                log("seq %d not sent: quarantined (%s)" % (seq, detail))

        def done() -> int:
            return sum(len(v) for k, v in got.items() if k != "failed") + len(sender.flight)

        def stop() -> bool:
            if run.interrupted or (ro.limit is not None and done() >= ro.limit):
                return True
            return sender.inflight_max == 1 < ro.window and not suspects  # back to the window

        ob = outbox_class(batch.BatchOutbox)(  # an Outbox that also hands out a batch's readings
            q,
            lease_ms=ro.lease_ms,
            raw=True,
            qos=1,
            hmac_key=job.hmac_key,
            lapsed="reclaim",
            expired="send" if ro.send_expired else "quarantine",
            failure="stop",
            report=report,
        )
        # bounded: each round settles a message, ends, or follows a drop (at most max_attempts
        # for each message alone, and one per window before)
        for _ in range((total + 1) * (ro.max_attempts + 2)):
            n, d0 = done(), run.drops
            del failed_now[:]
            sender.refused = 0
            try:
                ob.pump(sender, total + 1, stop=stop)
            except (ddq.Limit, ddq.Full) as e:  # not within H5: options other than the writer's
                raise ReplayError(
                    "%s: %s; the directory holds more than these queue options' reserve: give the"
                    " writer's own (--board PROFILE, or %s), or --send-expired to deliver expired"
                    " messages instead of dead-lettering them" % (job.dir, e, qdir.OPTIONS_FILE)
                ) from None
            if failed_now and (run.drops != d0 or sender.refused) and not run.interrupted:
                if not _reconnected(client, ro.timeout):
                    break  # the broker is away: stop, as after any failure (E26)
                if len(failed_now) == 1 and failed_now[0] != sender.refused:  # alone: its attempt
                    s = failed_now[0]
                    drops[s] = drops.get(s, 0) + 1
                    if drops[s] >= ro.max_attempts:
                        if doomed_at == len(got["sent"]):
                            # a second one in a row, nothing delivered since the first: the
                            # broker drops every message, not this one: stop (E26), not doom
                            if log:
                                log("the broker closed the connection for seq %d too, nothing"
                                    " delivered since the last: stopping" % s)  # fmt: skip
                            break
                        doomed_at = len(got["sent"])
                        sender.doomed[s] = (
                            "the broker closed the connection each time it was published"
                            " (%d times; --max-attempts %d)" % (drops[s], ro.max_attempts)
                        )
                if sender.inflight_max > 1 or not suspects:
                    suspects.update(failed_now)
                for s in failed_now:
                    got["failed"].remove(s)
                sender.inflight_max = 1
                continue
            if sender.inflight_max == 1 < ro.window and not suspects:
                sender.inflight_max = ro.window  # the suspects are settled: the window again
                if not got["failed"] and not stop():
                    continue
            if got["failed"] or stop() or done() == n:
                break
        raw = sum(1 for s in got["sent"] if sender.routes[s][2])
        readings = sum(1 for s in got["sent"] if s >= READING)
        left = [it for it in q.items() if it.state in ("available", "claimed")]
        now = q.clock()
        failed = got["failed"]
        skipped = [
            it.seq
            for it in left
            if it.seq not in failed
            and (
                (it.state == "available" and it.not_before_ms > now)
                or (it.state == "claimed" and it.lease_until_ms > now)
            )
        ]
        remaining = [it.seq for it in left if it.seq not in skipped and it.seq not in failed]
        stats = q.stats()
    finally:
        q.close()
    return Result(
        dir=job.dir,
        sent=len(got["sent"]),
        failed=len(failed),
        skipped=len(skipped),
        remaining=len(remaining),
        raw=raw,
        readings=readings,
        **_retired(
            got["expired"], got["unpublishable"], got["unauthenticated"], got["dead_dropped"]
        ),
        sent_seqs=_items_of(got["sent"]),
        sent_ids=got["sent"],
        failed_seqs=failed,
        skipped_seqs=skipped,
        remaining_seqs=remaining,
        stats={
            k: getattr(stats, k)
            for k in (
                "total_items",
                "available_items",
                "claimed_items",
                "acknowledged_items",
                "quarantined_items",
                "next_seq",
            )
        },
        connection_lost=run.lost,
    )


# ---------------------------------------------------------------- many directories at once


def dir_name(path: str) -> str:
    """The name a directory goes by in {dir}, --prefix-per-dir and client ids: its basename."""
    return os.path.basename(os.path.normpath(os.path.abspath(path)))


MAX_TIMEOUT_S = 3600.0


def check_timeout(t: float) -> None:
    """ReplayError (exit 2: a bad argument) unless t is a number of seconds in (0, 3600]: NaN,
    infinity, zero and negative waits would never end or never wait."""
    if not 0 < t <= MAX_TIMEOUT_S:  # (NaN fails every comparison)
        raise ReplayError(
            "--timeout must be more than 0 and at most %d seconds, got %s" % (MAX_TIMEOUT_S, t),
            code=2,
        )


def check_client_id(cid: str) -> None:
    """ReplayError (exit 2) unless cid is an MQTT string (MQTT 3.1.1 §1.5.3): UTF-8 of 1 to
    65,535 bytes without U+0000."""
    try:
        n = len(cid.encode("utf-8"))
    except UnicodeEncodeError:
        raise ReplayError("--client-id must be text (UTF-8)", code=2) from None
    if not 1 <= n <= 65535 or "\0" in cid:
        raise ReplayError(
            "--client-id must be 1 to 65535 bytes of UTF-8 without NUL, got %d bytes" % n, code=2
        )


def fleet_names(
    dirs: list[str], prefix: str, client_id: str | None, per_dir: bool
) -> list[tuple[str, str]]:
    """(prefix, client id) of each directory: {dir} in the prefix or the client id is the
    directory's name; per_dir appends /<name> to the prefix. With several directories every
    client id must differ (a broker drops the older of two sessions with one id): the default
    is ddq-replay-<time>-<name>, and a given id without {dir} gets -<name> appended.
    ReplayError for two directories with one name, or ids/prefixes that would collide."""
    names = [dir_name(d) for d in dirs]
    many = len(dirs) > 1
    if many and len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ReplayError(
            "two directories are named %s: {dir}, client ids and --prefix-per-dir "
            "need distinct names" % ", ".join(dup)
        )
    tmpl = client_id or "ddq-replay-%d" % int(time.time())
    if many and "{dir}" not in tmpl:
        tmpl += "-{dir}"
    out = []
    for n in names:
        p = prefix.replace("{dir}", n)
        if per_dir:
            p = "%s/%s" % (p, n) if p else n
        check_prefix(p)
        check_client_id(tmpl.replace("{dir}", n))
        out.append((p, tmpl.replace("{dir}", n)))
    return out


class Progress:
    """sent/total of every directory, shown on stderr: rewritten in place on a tty, else one
    line a second; stop() prints the last line."""

    def __init__(self, dirs: list[str], stream: Any, tty: bool) -> None:
        self.sent = {d: 0 for d in dirs}
        self.total = {d: 0 for d in dirs}
        self.done: set[str] = set()
        self.counted: set[str] = set()
        self.stream, self.tty = stream, tty
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def callback(self, d: str) -> Callable[[int, int], None]:
        def cb(sent: int, total: int) -> None:
            with self.lock:
                self.sent[d] += sent
                self.total[d] += total
                if sent == 0:  # (0, pending): d is open and counted
                    self.counted.add(d)
                    if len(self.counted) == len(self.total):  # what the sending will take
                        from .progress import replay_pending

                        line = replay_pending(sum(self.total.values()), len(self.total))
                        self.stream.write(("\r\033[K%s\n" if self.tty else "%s\n") % line)
                        self.stream.flush()

        return cb

    def line(self) -> str:
        with self.lock:
            s, t = sum(self.sent.values()), sum(self.total.values())
        dt = max(time.monotonic() - self.t0, 1e-6)
        return "replay: %d/%d sent, %d dir(s), %d done, %.0f msg/s, %.0f s" % (
            s,
            t,
            len(self.sent),
            len(self.done),
            s / dt,
            dt,
        )

    def _loop(self) -> None:
        while not self.stopped.wait(0.5 if self.tty else 1.0):
            self.stream.write(("\r%s\033[K" if self.tty else "%s\n") % self.line())
            self.stream.flush()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.stream.write(("\r%s\033[K\n" if self.tty else "%s\n") % self.line())
        self.stream.flush()


def replay_many(jobs: list[Job], ro: ReplayOptions, progress: Progress | None = None) -> Fleet:
    """Replay each job over its own connection, all at once (one thread each; paho runs its own
    network thread per connection), resumable per directory like replay(). Ctrl-C stops every
    directory after its window. A directory that fails (ReplayError) gets a Result with its
    error; the others go on."""
    interrupted: list[bool] = []
    results = [Result() for _ in jobs]

    def one(i: int) -> None:
        j = jobs[i]
        name = dir_name(j.dir)
        log = ro.log
        mine = replace(ro, log=(lambda m: log("%s: %s" % (name, m))) if log is not None else None)
        try:
            res = replay(
                j,
                mine,
                progress=progress.callback(j.dir) if progress is not None else None,
                interrupted=interrupted,
            )
        except ReplayError as e:
            res = Result(error=str(e))
        except Exception as e:  # a queue that cannot be opened, say: this directory only
            res = Result(error="%s: %s" % (type(e).__name__, e))
        res.dir = j.dir
        results[i] = res
        if progress is not None:
            progress.done.add(j.dir)

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.append(True)

    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGINT, on_sigint)
    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
        if progress is not None:
            progress.stop()
    return Fleet(results)
