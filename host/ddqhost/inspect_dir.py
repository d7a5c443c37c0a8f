"""`ddq inspect`: a queue directory's state as ddq itself recovers it (ddq.Queue on a copy), with
each payload's envelope (envelope.py) and what recovery would change."""

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import envelope, fsck, locate, options, qdir
from .fsck.report import printable

# 2001-01-01 in Unix ms. A board without an RTC starts its clock at 2000-01-01 (ddq maps the
# 2000 epoch to Unix ms), so its leases and enqueue times lie before this: their age on the host
# (some 26 years) says nothing, and inspect says where they come from instead.
CLOCK_2001_MS = 978307200000
NO_RTC = "by a clock before 2001 (board without RTC?)"


def _preview(b: bytes, n: int = 40) -> str:
    """The first n bytes as text when they are printable UTF-8 (a character the cut at n split
    does not count against it), else as 0x-hex."""
    b = bytes(b)
    head = b[:n]
    for cut in range(4 if len(b) > n else 1):  # a UTF-8 character is at most 4 bytes
        try:
            s = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if all(c.isprintable() or c in "\t" for c in s):
            return s + ("..." if len(b) > n else "")
        break
    return "0x" + head.hex() + ("..." if len(b) > n else "")


_ENV_FIELDS = ("topic", "qos", "retain", "enqueued_ms", "ttl_ms", "key", "orig_seq")


def _expiry(env: Any, now_ms: int) -> tuple[int | None, bool]:
    """(age_ms or None, expired?) by the Outbox's one TTL rule, ddq_outbox.Message.expired
    (OUTBOX E7, E27: no enqueue time, never expired); without an enqueue time no age is shown."""
    expired = env.expired(now_ms)
    return (env.age_ms if env.enqueued_ms else None), expired


def envelope_fields(
    payload: bytes, now_ms: int | None = None, hmac_key: bytes | None = None
) -> dict[str, Any] | None:
    """Envelope fields for inspect (topic, qos, retain, times, age, key hex), or None.
    "encrypted": the payload is stored encrypted; "decrypted": whether the preview is the
    plaintext (the key verified the tag) -- without, the ciphertext is not previewed."""
    env = envelope.decode(payload, hmac_key)
    if env is None or not getattr(env, "topic", None):
        return None
    out: dict[str, Any] = {}
    for k in _ENV_FIELDS:
        v = getattr(env, k, None)
        if v is not None:
            out[k] = v.hex() if isinstance(v, (bytes, bytearray)) else v
    body = getattr(env, "payload", None)
    enc = bool(getattr(env, "encrypted", False))
    out["encrypted"] = enc
    if enc:
        out["decrypted"] = hmac_key is not None and envelope.auth_status(payload, hmac_key) == "ok"
    if isinstance(body, (bytes, bytearray, memoryview)):
        out["payload_len"] = len(body)
        out["payload_preview"] = (
            "(encrypted)" if enc and not out["decrypted"] else _preview(bytes(body))
        )
        batch = locate.load_batch()
        if getattr(env, "key", None) in (batch.KEY, batch.KEY_B) and not (
            enc and not out["decrypted"]
        ):  # readings that share the item (OUTBOX B2): how many, the first one's bytes
            try:
                rs = batch.entries(env)
                out["readings"] = len(rs)
                if rs:
                    out["payload_preview"] = _preview(bytes(rs[0].payload))
            except Exception as e:  # noqa: BLE001 (BadEnvelope: the Outbox dead-letters it)
                out["readings_error"] = str(e.args[0] if e.args else e)
    if now_ms is not None:
        age, expired = _expiry(env, now_ms)
        if age is not None:
            out["age_ms"] = age
            out["expired"] = expired
            if getattr(env, "enqueued_ms", 0) < CLOCK_2001_MS <= now_ms:
                out["clock_before_2001"] = True
    return out


def _snapshot(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in os.listdir(path):
        p = os.path.join(path, n)
        if os.path.isfile(p):
            out[n] = os.path.getsize(p)
    return out


def inspect(
    path: str,
    options: dict[str, int],
    payloads: bool = False,
    now_ms: int | None = None,
    hmac_key: bytes | None = None,
    flash: tuple[Callable[[], Any], str] | None = None,
) -> dict[str, Any]:
    """Recovered state of the queue in path, computed on a temporary copy (path is never
    written). flash: (a read-only ddq_flash.FlashStorage's factory, the queue's name) when path
    is the export of a raw-flash image (flashimg): ddq opens the queue there, as the board
    does, and the changes are the region's (in RAM, never the image's)."""
    ddq = locate.load_ddq()
    qdir.check_queue_dir(path)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    tmp = tempfile.mkdtemp(prefix="ddq-inspect-")
    try:
        work = os.path.join(tmp, "q")
        qdir.copy_queue(path, work, options)
        where, more, fs = work, {}, None
        if flash is not None:
            fs, where = flash[0](), flash[1]
            more = {"storage": fs}

        def snapshot() -> dict[str, int]:
            if fs is None:
                return _snapshot(work)
            return {
                n: fs.size(where + "/" + n)
                for n in fs.listdir(where)
                if fs.kind(where + "/" + n) == 1
            }

        before = snapshot()
        # The independent reader's view of queue.index (SPEC §12.1), then ddq's own.
        index = fsck.scan(work, options, exact_segment_bytes=False).index
        try:
            q = ddq.Queue(where, clock=lambda: now_ms, **more, **options)
        except ddq.Corrupt as e:  # one line, exit 2, naming the fix
            raise qdir.QueueDirError(qdir.corrupt_message(path, e, work), 2) from None
        index["used_by_ddq"] = bool(getattr(q, "index_used", False))
        index["ddq_replayed_records"] = getattr(q, "replayed_records", None)
        try:
            st = q.stats()
            stats = (
                {k: getattr(st, k) for k in st.__slots__}
                if hasattr(st, "__slots__")
                else st.as_dict()
            )
            items: list[dict[str, Any]] = []
            for it in q.items():
                d = {
                    "seq": it.seq,
                    "state": it.state,
                    "attempts": it.attempts,
                    "lease_until_ms": it.lease_until_ms,
                    "not_before_ms": it.not_before_ms,
                    "payload_len": it.payload_len,
                }
                if it.state == "claimed" and it.lease_until_ms:
                    if it.lease_until_ms < CLOCK_2001_MS <= now_ms:
                        d["lease_clock_before_2001"] = True
                    else:
                        d["lease_remaining_ms"] = it.lease_until_ms - now_ms
                if it.not_before_ms and it.not_before_ms > now_ms and it.state == "available":
                    d["due_in_ms"] = it.not_before_ms - now_ms
                payload = q.read(it.seq)
                d["preview"] = _preview(payload)
                if payloads:
                    d["payload_hex"] = payload.hex()
                env = envelope_fields(payload, now_ms, hmac_key)
                if env is not None:
                    d["envelope"] = env
                d["auth"] = envelope.auth_status(payload, hmac_key)
                if it.state == "quarantined":
                    r = q.reason(it.seq)
                    d["reason"] = r.decode("utf-8", "replace")
                    d["reason_hex"] = r.hex()
                items.append(d)
            # What recovery changed, before close() writes (or drops) queue.index [X1].
            after = snapshot()
        finally:
            q.close()
        changes = {
            "truncated": sorted(n for n in before if n in after and after[n] < before[n]),
            "deleted": sorted(n for n in before if n not in after),
            "created": sorted(n for n in after if n not in before),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "path": path,
        "options": options,
        "hmac_checked": hmac_key is not None,
        "now_ms": now_ms,
        "generation": stats.get("generation"),
        "stats": stats,
        "recovered_tail_bytes": stats.get("recovered_tail_bytes"),
        "recovery_changes": changes,
        "index": index,
        "items": items,
    }


def render_inspect(info: dict[str, Any]) -> str:
    st = info["stats"]
    o = info["options"]
    lines = [
        "queue %s (generation %s)" % (info["path"], info["generation"]),
        "options: " + " ".join("%s %d" % (k, o[k]) for k in options.KEYS),
        "stats: %(total_items)d items (%(available_items)d available, %(claimed_items)d claimed,"
        " %(acknowledged_items)d acked, %(quarantined_items)d quarantined), %(stored_bytes)d bytes"
        " in %(segment_count)d segments, next_seq %(next_seq)d" % st,
    ]
    if info.get("hmac_checked"):
        bad = sum(1 for d in info["items"] if d.get("auth", "").startswith("unauthenticated"))
        lines.append("auth: HMAC checked with the given key, %d unauthenticated" % bad)
    lines.append(fsck.render_index(info["index"]))
    ch = info["recovery_changes"]
    if info["recovered_tail_bytes"]:
        lines.append("torn tail: recovery removes %d bytes" % info["recovered_tail_bytes"])
    for k in ("truncated", "deleted", "created"):
        if ch[k]:
            lines.append("recovery %s: %s" % (k, ", ".join(ch[k])))
    for d in info["items"]:
        extra = ""
        if "lease_remaining_ms" in d:
            extra += " lease %+ds" % (d["lease_remaining_ms"] // 1000)
        elif d.get("lease_clock_before_2001"):
            extra += " lease set " + NO_RTC
        if "due_in_ms" in d:
            extra += " due in %ds" % (d["due_in_ms"] // 1000)
        # An acked item the log holds no attempt count for (a claim a windowed sender's ack
        # closed): no "attempts 0" beside a delivered item; --json keeps the log's value.
        tries = "attempts %-3d" % d["attempts"]
        if d["state"] == "acked" and not d["attempts"]:
            tries = " " * len(tries)
        line = "  %6d %-11s %s %5d B%s  %s" % (
            d["seq"],
            d["state"],
            tries,
            d["payload_len"],
            extra,
            # an envelope's own payload (text when printable), not the envelope's bytes
            (d.get("envelope") or {}).get("payload_preview", d["preview"]),
        )
        lines.append(line.rstrip())
        env = d.get("envelope")
        if env:
            lines.append(
                "         envelope: topic %s qos %s%s%s%s%s%s"
                % (
                    env.get("topic"),
                    env.get("qos"),
                    " retain" if env.get("retain") else "",
                    " batch of %d readings (the first shown)" % env["readings"]
                    if "readings" in env
                    else " batch: %s" % env["readings_error"]
                    if "readings_error" in env
                    else "",
                    (" encrypted" + ("" if env.get("decrypted") else " (no key: not decrypted)"))
                    if env.get("encrypted")
                    else "",
                    " enqueued " + NO_RTC
                    if env.get("clock_before_2001")
                    else " age %ds" % (env["age_ms"] // 1000)
                    if "age_ms" in env
                    else "",
                    " EXPIRED" if env.get("expired") else "",
                )
            )
        auth = d.get("auth", "")
        if auth.startswith("unauthenticated") or (auth == "ok" and env):
            lines.append(
                "         auth: %s"
                % ("ok (HMAC)" if auth == "ok" else auth.upper()[:15] + auth[15:])
            )
        if "reason" in d:
            lines.append("         reason: %s" % d["reason"])
    return "".join(printable(line) + "\n" for line in lines)  # topics, reasons: escaped
