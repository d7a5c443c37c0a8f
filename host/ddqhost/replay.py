"""ddq replay: deliver the pending messages of a (pulled) queue directory to an MQTT broker, QoS 1.

Each message is claimed in DIR (ddq.Queue), published with QoS 1, and acked in DIR when its PUBACK
arrives, so an interrupted replay resumes without re-sending what was acked. The window between a
PUBACK and the durable ACK record is the only place a hard kill can cause one duplicate (QoS 1 is
at-least-once); Ctrl-C finishes the message in flight first.

Topics (URL mqtt://[user[:password]@]HOST[:PORT][/PREFIX], PREFIX defaults to "ddq"):
  - a payload that decodes as a message-layer envelope (ddq_outbox.decode_envelope) is
    published to PREFIX/<envelope topic> (to <envelope topic> itself with an empty prefix, mqtt://h:p/),
    with the envelope's retain flag and its inner payload;
  - any other payload is published unchanged to PREFIX/raw ("raw" with an empty prefix).
Replay always publishes with QoS 1, whatever the envelope asked for: the ack needs a PUBACK.
An envelope past its TTL (enqueued_ms + ttl_ms <= now) is not published but quarantined with the
reason "expired", as the Outbox does by default; --send-expired publishes it anyway.

Counts: sent (acked this run), expired (quarantined, not sent), failed (no PUBACK in time / connection lost: released with retry(0),
which counts an attempt, and the run stops), skipped (pending but not deliverable now: backing off
after a retry, or under a live lease), remaining (deliverable but not attempted: --limit, Ctrl-C, or
the stop after a failure), raw (of sent, published to PREFIX/raw).
"""

import signal
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from . import qdir

DEFAULT_PREFIX = "ddq"
DEFAULT_PORT = 1883


class ReplayError(Exception):
    """Bad URL, broker unreachable, queue unusable; one line for the user."""


def parse_url(url: str) -> dict[str, Any]:
    u = urlsplit(url)
    if u.scheme != "mqtt":
        raise ReplayError(
            "broker URL must look like mqtt://HOST:PORT[/TOPIC-PREFIX], got %r" % url
        )
    if not u.hostname:
        raise ReplayError("broker URL %r has no host" % url)
    try:
        port = u.port or DEFAULT_PORT
    except ValueError:
        raise ReplayError("broker URL %r has a bad port" % url) from None
    path = u.path
    prefix = DEFAULT_PREFIX if path == "" else unquote(path[1:]).strip("/")
    return {
        "host": u.hostname,
        "port": port,
        "prefix": prefix,
        "username": unquote(u.username) if u.username else None,
        "password": unquote(u.password) if u.password else None,
    }


def topic_for(prefix: str, topic: str) -> str:
    return "%s/%s" % (prefix, topic) if prefix else topic


class Route:
    """Where and how one stored payload is published."""

    __slots__ = ("topic", "body", "retain", "raw", "expired")

    def __init__(self, topic: str, body: bytes, retain: bool, raw: bool, expired: bool) -> None:
        self.topic, self.body, self.retain, self.raw, self.expired = (
            topic,
            body,
            retain,
            raw,
            expired,
        )


def route(ddq: ModuleType, prefix: str, payload: bytes, now_ms: int) -> Route:
    """The route of a stored payload: an envelope to PREFIX/<topic>, anything else to PREFIX/raw."""
    env = qdir.envelope_parts(ddq, payload, now_ms)
    if env is None:
        return Route(topic_for(prefix, "raw"), bytes(payload), False, True, False)
    topic, body, retain, expired = env
    return Route(topic_for(prefix, topic), body, retain, False, expired)


def plan(
    path: str,
    options: dict[str, int],
    prefix: str,
    now_ms: int | None = None,
    send_expired: bool = False,
) -> dict[str, Any]:
    """Dry run on a copy: what would be sent where, what would be skipped. DIR is not written."""
    ddq = qdir.load_ddq()
    info = qdir.inspect(path, options, payloads=True, now_ms=now_ms)
    now = info["now_ms"]
    would, skipped = [], []
    for it in info["items"]:
        if it["state"] not in ("available", "claimed"):
            continue
        due = (it["state"] == "available" and it["not_before_ms"] <= now) or (
            it["state"] == "claimed" and it["lease_until_ms"] <= now
        )
        if not due:
            skipped.append(it["seq"])
            continue
        r = route(ddq, prefix, bytes.fromhex(it["payload_hex"]), now)
        would.append(
            {
                "seq": it["seq"],
                "topic": r.topic,
                "bytes": len(r.body),
                "retain": r.retain,
                "raw": r.raw,
                "expired": r.expired,
            }
        )
    expired = [w["seq"] for w in would if w["expired"] and not send_expired]
    would = [w for w in would if w["seq"] not in expired]
    return {
        "dry_run": True,
        "would_send": would,
        "sent": 0,
        "failed": 0,
        "skipped": len(skipped),
        "skipped_seqs": skipped,
        "expired": len(expired),
        "expired_seqs": expired,
        "remaining": len(would),
        "raw": sum(1 for w in would if w["raw"]),
    }


def replay(
    path: str,
    url: str,
    options: dict[str, int],
    limit: int | None = None,
    lease_ms: int = 60000,
    timeout: float = 10.0,
    client_id: str | None = None,
    log: Callable[[str], None] | None = None,
    send_expired: bool = False,
) -> dict[str, Any]:
    """Deliver; return the summary dict (see the module docstring)."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    ddq = qdir.load_ddq()
    qdir.check_queue_dir(path)
    cfg = parse_url(url)
    connected = threading.Event()
    state: dict[str, Any] = {"rc": None, "lost": False}

    def on_connect(
        client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any = None
    ) -> None:
        state["rc"] = reason_code
        connected.set()

    def on_disconnect(
        client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any = None
    ) -> None:
        state["lost"] = True

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id or "ddq-replay-%d" % int(time.time()),
        clean_session=True,
    )
    client.on_connect = on_connect
    client.on_disconnect = on_disconnect
    if cfg["username"]:
        client.username_pw_set(cfg["username"], cfg["password"])
    try:
        client.connect(cfg["host"], cfg["port"], keepalive=30)
    except OSError as e:
        raise ReplayError(
            "cannot connect to broker %s:%d: %s" % (cfg["host"], cfg["port"], e.strerror or e)
        ) from None
    client.loop_start()
    interrupted: list[bool] = []
    old = None
    try:
        if not connected.wait(timeout) or state["rc"] is None:
            raise ReplayError(
                "broker %s:%d accepted the TCP connection but sent no CONNACK: "
                "timed out after %g s (--timeout)" % (cfg["host"], cfg["port"], timeout)
            )
        if state["rc"].is_failure:
            raise ReplayError(
                "broker %s:%d refused the connection (%s)"
                % (cfg["host"], cfg["port"], state["rc"])
            )

        def on_sigint(signum: int, frame: Any) -> None:
            interrupted.append(True)

        if threading.current_thread() is threading.main_thread():
            old = signal.signal(signal.SIGINT, on_sigint)
        res = _deliver(
            ddq,
            path,
            options,
            client,
            cfg["prefix"],
            limit,
            lease_ms,
            timeout,
            interrupted,
            state,
            log,
            send_expired,
        )
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
        client.disconnect()
        client.loop_stop()
    res["broker"] = "%s:%d" % (cfg["host"], cfg["port"])
    res["prefix"] = cfg["prefix"]
    res["interrupted"] = bool(interrupted)
    return res


def _deliver(
    ddq: ModuleType,
    path: str,
    options: dict[str, int],
    client: Any,
    prefix: str,
    limit: int | None,
    lease_ms: int,
    timeout: float,
    interrupted: list[bool],
    state: dict[str, Any],
    log: Callable[[str], None] | None,
    send_expired: bool = False,
) -> dict[str, Any]:
    sent: list[int] = []
    failed: list[int] = []
    expired: list[int] = []
    raw = 0
    q = ddq.Queue(path, **options)
    try:
        pending = [it.seq for it in q.items() if it.state in ("available", "claimed")]
        attempted: set[int] = set()
        stop = False
        for _ in range(len(pending) + 1):  # bounded: each pass claims a different pending item
            if stop or interrupted or (limit is not None and len(sent) + len(expired) >= limit):
                break
            c = q.claim(lease_ms)
            if c is None:
                break
            if c.seq in attempted:
                q.retry(c.seq, 0)
                break
            attempted.add(c.seq)
            r = route(ddq, prefix, q.read(c.seq), int(time.time() * 1000))
            if r.expired and not send_expired:
                # Past its TTL: retired like the Outbox does by default (dead letter "expired").
                q.quarantine(c.seq, b"expired")
                expired.append(c.seq)
                if log:
                    log("seq %d expired (TTL): quarantined, not sent" % c.seq)
                continue
            topic = r.topic
            info = client.publish(topic, r.body, qos=1, retain=r.retain)
            try:
                info.wait_for_publish(timeout)
                ok = info.is_published()
            except (RuntimeError, ValueError):
                ok = False
            if ok:
                q.ack(c.seq)
                sent.append(c.seq)
                raw += 1 if r.raw else 0
                if log:
                    log("sent seq %d -> %s (%d bytes)" % (c.seq, topic, len(r.body)))
            else:
                q.retry(c.seq, 0)
                failed.append(c.seq)
                stop = True
                if log:
                    log("no PUBACK for seq %d on %s; stopping" % (c.seq, topic))
        left = [it for it in q.items() if it.state in ("available", "claimed")]
        now = int(time.time() * 1000)
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
    return {
        "dry_run": False,
        "sent": len(sent),
        "failed": len(failed),
        "skipped": len(skipped),
        "remaining": len(remaining),
        "raw": raw,
        "expired": len(expired),
        "expired_seqs": expired,
        "sent_seqs": sent,
        "failed_seqs": failed,
        "skipped_seqs": skipped,
        "remaining_seqs": remaining,
        "stats": {
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
        "connection_lost": state["lost"],
    }
