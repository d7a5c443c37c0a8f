"""Queue directories on the host: locate ddq, resolve queue options, inspect a directory with ddq.Queue.

Options: DDQ options are not stored on disk (SPEC §7.1, M8), and a reader must use limits at least
as large as the writer's; appending (replay's acks) must use the writer's exact segment_bytes. They are
taken from, first match wins per key:
  1. command-line flags (--segment-bytes, --max-payload-bytes, --max-items, --max-segments);
  2. the board profile given with --board;
  3. DIR/ddq-options.json (flat JSON with any of those four keys; written by whoever creates the queue);
  4. DIR/.ddq-pull.json "options" (`ddq pull` records the profile of the board it pulled from);
  5. DDQ's defaults (4 MiB segments, 1 MiB payloads, 100000 items, 1024 segments).
"""

import json
import os
import shutil
import stat
import sys
import tempfile
import time
from types import ModuleType
from typing import Any

from . import boards, fsck, options
from .errors import HostError
from .fsck.format import index_limit, not_regular, read_entry
from .fsck.report import printable

OPTION_KEYS = options.KEYS
DEFAULTS = options.DEFAULTS
PULL_META = ".ddq-pull.json"
OPTIONS_FILE = "ddq-options.json"
QUEUE_NAMES = ("queue.manifest", "queue.format")
# Every name ddq may open in a queue directory besides the segments (SPEC §3, §12).
QUEUE_FILE_NAMES = QUEUE_NAMES + (
    "queue.manifest.tmp",
    "queue.index",
    "queue.index.tmp",
    "queue.lock",
)
MAX_JSON_BYTES = 1 << 20  # ddq-options.json and .ddq-pull.json are a few hundred bytes
# 2001-01-01 in Unix ms. A board without an RTC starts its clock at 2000-01-01 (ddq maps the
# 2000 epoch to Unix ms), so its leases and enqueue times lie before this: their age on the host
# (some 26 years) says nothing, and inspect says where they come from instead.
CLOCK_2001_MS = 978307200000
NO_RTC = "by a clock before 2001 (board without RTC?)"

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class QueueDirError(HostError):
    """Not a queue directory, or options that cannot be used; one line for the user."""


def repo_root() -> str:
    return _REPO


def port_dir() -> str:
    return os.path.join(_REPO, "port")


def load_ddq() -> ModuleType:
    """Import ddq: an installed module, else port/ddq.py of this checkout."""
    try:
        import ddq  # noqa: F401
    except ImportError:
        p = port_dir()
        if os.path.exists(os.path.join(p, "ddq.py")) and p not in sys.path:
            sys.path.insert(0, p)
        try:
            import ddq  # noqa: F401
        except ImportError:
            raise QueueDirError(
                "cannot import ddq (install the ddq package or run from a checkout)"
            ) from None
    import ddq

    return ddq


def ddq_source() -> str:
    """Path of ddq.py to install on a device."""
    ddq = load_ddq()
    src = getattr(ddq, "__file__", None)
    if not isinstance(src, str) or not src.endswith(".py"):
        raise QueueDirError("cannot find ddq.py source to install")
    return src


def looks_like_queue(names: Any) -> bool:
    ddq = load_ddq()
    return any(n in QUEUE_NAMES or ddq.parse_segment_name(n) for n in names)


def is_queue_file_name(name: str) -> bool:
    """True for a name ddq may open as a file: a segment (or its .cut/.reserve), the marker,
    manifest, index, their .tmp, the lock."""
    ddq = load_ddq()
    for suffix in (".cut", ".reserve"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name in QUEUE_FILE_NAMES or bool(ddq.parse_segment_name(name))


def check_regular_files(path: str) -> None:
    """QueueDirError when an entry named like a queue file is not a regular file (a FIFO would
    block the open forever, a symlink points out of the directory). Uses lstat; opens nothing."""
    for n in sorted(os.listdir(path)):
        why = not_regular(os.path.join(path, n)) if is_queue_file_name(n) else None
        if why is not None:
            raise QueueDirError("%s: %s is %s; refusing to open the queue" % (path, n, why))


def check_queue_dir(path: str) -> None:
    if not os.path.exists(path):
        raise QueueDirError("%s: no such directory" % path)
    if not os.path.isdir(path):
        raise QueueDirError("%s is not a directory" % path)
    if not looks_like_queue(os.listdir(path)):
        raise QueueDirError(
            "%s is not a ddq queue directory (no segment, manifest or queue.format)" % path
        )
    check_regular_files(path)


def _not_json(name: str) -> Any:
    raise ValueError("%s is not a JSON number" % name)  # Python's json reads NaN, Infinity


def read_json(path: str) -> Any:
    """The JSON value in path, None when it does not exist; QueueDirError when it is not a small
    regular file of JSON (a FIFO is never opened; deep nesting is an error, not a RecursionError)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise QueueDirError("%s: %s" % (path, e.strerror or e)) from None
    if not stat.S_ISREG(st.st_mode):
        raise QueueDirError("%s is not a regular file" % path)
    if st.st_size > MAX_JSON_BYTES:
        raise QueueDirError("%s is too large for a settings file (%d bytes)" % (path, st.st_size))
    try:
        with open(path, "rb") as f:
            return json.loads(f.read(MAX_JSON_BYTES + 1), parse_constant=_not_json)
    except RecursionError:
        raise QueueDirError("%s: unreadable JSON (nested too deeply)" % path) from None
    except (OSError, ValueError) as e:
        raise QueueDirError("%s: unreadable JSON (%s)" % (path, e)) from None


def resolve_options(
    path: str | None, flags: dict[str, Any] | None = None, board: str | None = None
) -> tuple[dict[str, int], dict[str, str]]:
    """Return (options dict, {key: source}) following the precedence in the module docstring."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if flags:
        layers.append(("command line", {k: v for k, v in flags.items() if v is not None}))
    if board:
        layers.append(("board " + board, boards.queue_options(boards.load(board))))
    if path:
        own = read_json(os.path.join(path, OPTIONS_FILE))
        if own is not None:
            if not isinstance(own, dict):
                raise QueueDirError(
                    "%s must hold a JSON object" % os.path.join(path, OPTIONS_FILE)
                )
            layers.append((OPTIONS_FILE, own))
        meta = read_json(os.path.join(path, PULL_META))
        if isinstance(meta, dict) and isinstance(meta.get("options"), dict):
            layers.append((PULL_META, meta["options"]))
    layers.append(("default", DEFAULTS))
    opts, src = {}, {}
    for key in OPTION_KEYS:
        for name, layer in layers:
            v = layer.get(key)
            if v is not None:
                # A whole number only: int() would take 4096.9 as 4096 (and True as 1), and
                # raise OverflowError on 1e400 (a float infinity).
                if type(v) is not int:
                    raise QueueDirError(
                        "%s: %s is not an integer (%s)" % (name, key, printable(repr(v)[:40]))
                    )
                opts[key] = v
                src[key] = name
                break
    return opts, src


def writer_options(path: str) -> tuple[dict[str, int], dict[str, str]]:
    """The writer's options recorded in a directory, per key: DIR/ddq-options.json, else the
    "options" of DIR/.ddq-pull.json; ({}, {}) when neither records any."""
    opts, src = resolve_options(path)
    keep = {k for k, v in src.items() if v in (OPTIONS_FILE, PULL_META)}
    return {k: opts[k] for k in keep}, {k: src[k] for k in keep}


def check_writer_options(
    path: str, options: dict[str, int], sources: dict[str, str], what: str
) -> None:
    """QueueDirError when a tool about to write to path (what) would use options other than the
    writer's: appending with another segment_bytes (or limits) leaves a directory its own
    device reads as corrupt."""
    mine, where = writer_options(path)
    for key in OPTION_KEYS:
        if key in mine and options.get(key) != mine[key]:
            raise QueueDirError(
                "%s writes to %s, but --%s %s (%s) disagrees with the writer's %d (%s); "
                "appending with other options would make the directory corrupt for its device: "
                "drop the option, or correct %s"
                % (
                    what,
                    path,
                    key.replace("_", "-"),
                    options.get(key),
                    sources.get(key, "given"),
                    mine[key],
                    where[key],
                    where[key],
                )
            )


def options_hint(path: str, options: dict[str, int], sources: dict[str, str]) -> str | None:
    """For a directory that verifies corrupt with options: a hint when it verifies with the
    largest options a reader takes (the writer used other options than these: a pulled queue
    carries its board profile's, not what the app gave ddq.Queue), else None."""
    hi = fsck.OPTION_RANGES
    loose = {
        "segment_bytes": hi["segment_bytes"][1],
        "max_payload_bytes": hi["segment_bytes"][1] - fsck.REC_MIN,
        "max_items": hi["max_items"][1],
        "max_segments": hi["max_segments"][1],
    }
    try:
        rep = fsck.scan(path, loose, exact_segment_bytes=False)
    except (fsck.NotAQueue, OSError, ValueError):
        return None
    if rep.verdict == fsck.CORRUPT:
        return None
    data = [
        r["payload_length"]
        for seg in rep.segments
        for r in seg["records"]
        if r.get("type") == fsck.T_DATA and r.get("status") != "invalid"
    ]
    need = {
        "segment_bytes": max([s["size"] for s in rep.segments] or [0]),
        "max_payload_bytes": max(data or [0]),
        "max_items": max(len(rep.items), (rep.manifest or {}).get("item_count", 0)),
        "max_segments": len(rep.segments),
    }
    short = [k for k in OPTION_KEYS if need[k] > options[k]]
    names = {PULL_META: "the board profile's, recorded by ddq pull in " + PULL_META}
    where = sorted(
        {names.get(sources.get(k, ""), sources.get(k, "given")) for k in (short or OPTION_KEYS)}
    )
    text = (
        "%s verifies with larger queue options: its writer used other options than these (%s)"
        % (
            path,
            ", ".join(where),
        )
    )
    if short:
        text += "; it needs %s" % ", ".join("%s >= %d" % (k, need[k]) for k in short)
    return text + (
        ". Pass the writer's own: %s, or write them to %s as JSON"
        % (
            " ".join("--%s N" % k.replace("_", "-") for k in (short or ["segment_bytes"])),
            os.path.join(path, OPTIONS_FILE),
        )
    )


# ---------------------------------------------------------------- inspect


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
HMAC_KEY_ENV = "DDQ_HMAC_KEY"  # the key in hex, when no --hmac-key-file is given


class HmacKeyError(QueueDirError):
    """The HMAC key cannot be used (never shows the key)."""


def load_hmac_key(path: str | None, queue_dir: str | None = None) -> bytes | None:
    """The device's HMAC key (SPEC E21/OUTBOX E22): hex digits in the file `path` (whitespace ignored,
    e.g. `openssl rand -hex 32 > device.key`), else in $DDQ_HMAC_KEY, else None (no check).
    A key file inside the queue directory is refused: the key must never travel with the
    queue. The key is never echoed."""
    if path is not None:
        if queue_dir is not None:
            d, f = os.path.realpath(queue_dir), os.path.realpath(path)
            if os.path.commonpath([d, f]) == d:
                raise HmacKeyError(
                    "%s: the HMAC key file must not be inside the queue directory" % path
                )
        try:
            with open(path, "rb") as fh:
                text = fh.read(4096).decode("ascii", "replace")
        except OSError as e:
            raise HmacKeyError(
                "%s: cannot read the HMAC key file (%s)" % (path, e.strerror or e)
            ) from None
        where = path
    elif os.environ.get(HMAC_KEY_ENV):
        text, where = os.environ[HMAC_KEY_ENV], "$" + HMAC_KEY_ENV
    else:
        return None
    try:
        key = bytes.fromhex("".join(text.split()))
    except ValueError:
        key = b""
    if len(key) < 16:
        raise HmacKeyError("%s: the HMAC key must be at least 16 bytes written in hex" % where)
    return key


def _decode(ddq: ModuleType, payload: bytes, hmac_key: bytes | None = None) -> Any:
    """ddq_outbox.decode_envelope(payload) (the message layer's Message), or None when the
    payload is not an envelope (raw bytes enqueued with Queue.enqueue). With hmac_key an
    envelope with a valid tag is decoded verified (an encrypted payload decrypted, SPEC E23);
    one without is decoded unchecked, an encrypted payload left as ciphertext."""
    import ddq_outbox  # beside ddq (load_ddq put its directory on the path)

    if hmac_key is not None:
        try:
            return ddq_outbox.decode_envelope(payload, hmac_key=hmac_key)
        except ddq_outbox.Unauthenticated:
            pass  # shown unchecked; auth_status says why
        except Exception:
            return None
    try:
        return ddq_outbox.decode_envelope(payload)
    except Exception:  # BadEnvelope, InvalidArgument: not an envelope
        return None


class EncryptedError(QueueDirError):
    """Encrypted messages that cannot be decrypted here: no key, or no AES (never shows a key)."""


def is_encrypted(payload: bytes) -> bool:
    """True for an envelope whose payload is encrypted (flag bit 5, SPEC E23)."""
    p = bytes(payload[0:4])
    return len(p) == 4 and p[0:3] == b"DE\x01" and bool(p[3] & 0x20)


def check_decryptable(n_encrypted: int, hmac_key: bytes | None, what: str = "message") -> None:
    """Raise EncryptedError when n_encrypted > 0 encrypted messages cannot be decrypted here:
    without the key, or without the cryptography package (CPython's AES)."""
    if not n_encrypted:
        return
    are = "s are" if n_encrypted > 1 else " is"
    if hmac_key is None:
        raise EncryptedError(
            "%d %s%s encrypted (SPEC E23): give the device key with --hmac-key-file F or $%s"
            % (n_encrypted, what, are, HMAC_KEY_ENV)
        )
    import ddq_outbox

    try:
        ddq_outbox.aes_ctr(bytes(32), bytes(16), b"")
    except load_ddq().InvalidArgument:
        raise EncryptedError(
            "%d %s%s encrypted: decrypting needs the 'cryptography' package "
            "(pip install cryptography)" % (n_encrypted, what, are)
        ) from None


def auth_status(payload: bytes, hmac_key: bytes | None) -> str:
    """ "ok" (a valid tag), "unauthenticated: <why>" (with a key: no valid tag, or not an
    envelope), "unchecked" (a tag, no key given) or "unsigned" (no tag, no key)."""
    import ddq_outbox

    if hmac_key is None:
        p = bytes(payload)
        return "unchecked" if len(p) > 3 and p[0:2] == b"DE" and p[3] & 0x10 else "unsigned"
    check_decryptable(int(is_encrypted(payload)), hmac_key)  # no AES: an error, not a verdict
    try:
        ddq_outbox.decode_envelope(payload, hmac_key=hmac_key)
    except ddq_outbox.Unauthenticated as e:
        return "unauthenticated: %s" % e
    except Exception as e:  # BadEnvelope or not bytes: cannot carry a valid tag
        return "unauthenticated: not an envelope (%s)" % e
    return "ok"


def _expiry(env: Any, now_ms: int) -> tuple[int | None, bool]:
    """(age_ms or None, expired?) by the Outbox's one TTL rule, ddq_outbox.Message.expired
    (OUTBOX E7, E27: no enqueue time, never expired); without an enqueue time no age is shown."""
    expired = env.expired(now_ms)
    return (env.age_ms if env.enqueued_ms else None), expired


def decode_envelope(
    ddq: ModuleType, payload: bytes, now_ms: int | None = None, hmac_key: bytes | None = None
) -> dict[str, Any] | None:
    """Envelope fields for inspect (topic, qos, retain, times, age, key hex), or None.
    "encrypted": the payload is stored encrypted; "decrypted": whether the preview is the
    plaintext (the key verified the tag) -- without, the ciphertext is not previewed."""
    env = _decode(ddq, payload, hmac_key)
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
        out["decrypted"] = hmac_key is not None and auth_status(payload, hmac_key) == "ok"
    if isinstance(body, (bytes, bytearray, memoryview)):
        out["payload_len"] = len(body)
        out["payload_preview"] = (
            "(encrypted)" if enc and not out["decrypted"] else _preview(bytes(body))
        )
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


def _copy_bound(name: str, opts: dict[str, int]) -> tuple[int, str] | None:
    """The most bytes ddq reads of a queue file name (and that bound in words), None for a name
    it ignores (SPEC N5)."""
    if name in ("queue.manifest", "queue.manifest.tmp"):
        return fsck.MAN_SIZE, "48 bytes (SPEC M2)"
    if name == "queue.format":
        return 0, "0 bytes (SPEC M5)"
    if name in ("queue.index", "queue.index.tmp"):
        return index_limit(opts), "what these options allow (SPEC X2)"
    if name != "queue.lock" and is_queue_file_name(name):
        return opts["segment_bytes"], "segment_bytes (%d)" % opts["segment_bytes"]
    return None


def copy_queue(src: str, dst: str, options: dict[str, int] | None = None) -> None:
    """Copy what ddq reads in a queue directory (flat: the segments and their staged cuts, the
    marker, manifest, index and their .tmp) into a new directory dst, private (0700) and its
    files 0600 whatever the source's modes: a pulled directory of 0444 files opens for
    appending in the copy. Each file is read through fsck's read_entry within the bound the
    options allow (a sparse 8 GiB segment is refused in one line, never copied); QueueDirError
    when one is larger or not a regular file. Names ddq ignores are not copied."""
    opts = fsck.check_options(options)
    os.mkdir(dst, 0o700)
    for n in sorted(os.listdir(src)):
        bound = _copy_bound(n, opts)
        data: bytes | None
        if n == "queue.lock":  # never read, only locked: an empty one (else inspect shows it made)
            data, why = b"", not_regular(os.path.join(src, n))
        elif bound is None:
            continue
        else:
            data, why = read_entry(os.path.join(src, n), bound[0], bound[1])
        if data is None or why is not None:
            raise QueueDirError(
                "%s: %s is %s: ddq refuses the directory (`ddq verify %s` says more)"
                % (src, n, why, src)
            )
        fd = os.open(os.path.join(dst, n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def inspect(
    path: str,
    options: dict[str, int],
    payloads: bool = False,
    now_ms: int | None = None,
    hmac_key: bytes | None = None,
) -> dict[str, Any]:
    """Recovered state of the queue in path, computed on a temporary copy (path is never written)."""
    ddq = load_ddq()
    check_queue_dir(path)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    tmp = tempfile.mkdtemp(prefix="ddq-inspect-")
    try:
        work = os.path.join(tmp, "q")
        copy_queue(path, work, options)
        before = _snapshot(work)
        # The independent reader's view of queue.index (SPEC §12.1), then ddq's own.
        index = fsck.scan(work, options, exact_segment_bytes=False).index
        q = ddq.Queue(work, clock=lambda: now_ms, **options)
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
                env = decode_envelope(ddq, payload, now_ms, hmac_key)
                if env is not None:
                    d["envelope"] = env
                d["auth"] = auth_status(payload, hmac_key)
                if it.state == "quarantined":
                    r = q.reason(it.seq)
                    d["reason"] = r.decode("utf-8", "replace")
                    d["reason_hex"] = r.hex()
                items.append(d)
            # What recovery changed, before close() writes (or drops) queue.index [X1].
            after = _snapshot(work)
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
        "stats: %d items (%d available, %d claimed, %d acked, %d quarantined), %d bytes in %d segments, "
        "next_seq %d"
        % (
            st["total_items"],
            st["available_items"],
            st["claimed_items"],
            st["acknowledged_items"],
            st["quarantined_items"],
            st["stored_bytes"],
            st["segment_count"],
            st["next_seq"],
        ),
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
        line = "  %6d %-11s attempts %-3d %5d B%s  %s" % (
            d["seq"],
            d["state"],
            d["attempts"],
            d["payload_len"],
            extra,
            # an envelope's own payload (text when printable), not the envelope's bytes
            (d.get("envelope") or {}).get("payload_preview", d["preview"]),
        )
        lines.append(line.rstrip())
        env = d.get("envelope")
        if env:
            lines.append(
                "         envelope: topic %s qos %s%s%s%s%s"
                % (
                    env.get("topic"),
                    env.get("qos"),
                    " retain" if env.get("retain") else "",
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
