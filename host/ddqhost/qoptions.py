"""A queue directory's options: DDQ options are not stored on disk (SPEC §7.1, M8), and a reader
must use limits at least as large as the writer's; appending (replay's acks) must use the writer's
exact segment_bytes. They are taken from, first match wins per key:
  1. command-line flags (--segment-bytes, --max-payload-bytes, --max-items, --max-segments);
  2. the board profile given with --board;
  3. DIR/ddq-options.json (flat JSON with any of those four keys; written by whoever creates
     the queue);
  4. DIR/.ddq-pull.json "options" (`ddq pull` records the profile of the board it pulled from);
  5. DDQ's defaults (4 MiB segments, 1 MiB payloads, 100000 items, 1024 segments).
"""

import json
import os
import stat
from typing import Any

from . import boards, fsck, options
from .fsck.report import printable
from .qdir import OPTIONS_FILE, PULL_META, QueueDirError

OPTION_KEYS = options.KEYS
DEFAULTS = options.DEFAULTS
MAX_JSON_BYTES = 1 << 20  # ddq-options.json and .ddq-pull.json are a few hundred bytes


def _not_json(name: str) -> Any:
    raise ValueError("%s is not a JSON number" % name)  # Python's json reads NaN, Infinity


def read_json(path: str) -> Any:
    """The JSON value in path, None when it does not exist; QueueDirError when it is not a small
    regular file of JSON (a FIFO is never opened; deep nesting is an error, not a
    RecursionError)."""
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
    path: str,
    options: dict[str, int],
    sources: dict[str, str],
    what: str,
    writes: str | None = None,
) -> None:
    """QueueDirError when a tool about to write to path (what; writes: what it writes, default
    "to PATH") would use options other than the writer's: appending with another segment_bytes
    (or limits) leaves a directory its own device reads as corrupt."""
    mine, where = writer_options(path)
    for key in OPTION_KEYS:
        if key in mine and options.get(key) != mine[key]:
            raise QueueDirError(
                "%s writes %s, but --%s %s (%s) disagrees with the writer's %d (%s); "
                "writing with other options would make the directory corrupt for its device: "
                "drop the option, or correct %s"
                % (
                    what,
                    writes or "to " + path,
                    key.replace("_", "-"),
                    options.get(key),
                    sources.get(key, "given"),
                    mine[key],
                    where[key],
                    where[key],
                )
            )


def _write_json(path: str, obj: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def carry_options(
    src: str, out: str, options: dict[str, int], sources: dict[str, str], what: str
) -> list[str]:
    """A new queue directory out written from src (what: "salvage") takes src's options with
    it, so every command reads out with them and push can put it back (docs/HOST.md "Queue
    options"): src's ddq-options.json is copied; src's .ddq-pull.json too (the device, its
    remote path and listing at the pull: what push compares), its "options" the ones used;
    without one, options from flags or --board are written to out/ddq-options.json. Returns
    the names written."""
    used = {k: options[k] for k in OPTION_KEYS}
    own = read_json(os.path.join(src, OPTIONS_FILE))
    meta = read_json(os.path.join(src, PULL_META))
    written = []
    if isinstance(own, dict):
        _write_json(os.path.join(out, OPTIONS_FILE), own)
        written.append(OPTIONS_FILE)
    if isinstance(meta, dict):
        had: dict[str, Any] = meta["options"] if isinstance(meta.get("options"), dict) else {}
        meta = dict(
            meta, options=dict(had, **used), derived_from=os.path.abspath(src), derived_by=what
        )
        _write_json(os.path.join(out, PULL_META), meta)
        written.append(PULL_META)
    elif any(sources.get(k) != "default" for k in OPTION_KEYS) and own != used:
        if written:
            os.remove(os.path.join(out, OPTIONS_FILE))
        _write_json(os.path.join(out, OPTIONS_FILE), used)
        written = [OPTIONS_FILE]
    return written


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
