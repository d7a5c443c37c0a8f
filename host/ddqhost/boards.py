"""Board profiles: boards/<BOARD>.json (flat JSON, sorted keys, named after the firmware board
name).

Keys: board, port, description, mpy_arch (mpy-cross -march value, or null for portable bytecode),
filesystem, install ("mpy" or "py"), segment_bytes, max_payload_bytes, max_items, max_segments (the
queue options the example app and the host tools use for this board), queue_dir, lease_ms, app
(path of the example app relative to boards/); fs_bytes (the filesystem's size), heap_bytes (the
firmware's MicroPython heap), app_heap_bytes (the heap the application keeps for itself): from
these tools/board_capacity.py derives max_segments and max_items (docs/BOARDS.md); network (false:
no `socket`, so `ddq flash` never installs ddq_mqtt there); builds (optional: other firmware board
names, space-separated, that this profile covers); raw_bytes, raw_block_bytes, raw_fs_bytes,
raw_page, raw_segment_bytes, raw_max_segments, raw_max_items, raw_heap_fit (optional: the raw
layout, the queue on a raw flash region beside a filesystem of raw_fs_bytes;
host/ddqhost/layout.py, tools/board_capacity.py --raw); mpy_opt (optional:
the mpy-cross -O level `ddq flash` compiles with when no -O is given; 3 drops line numbers from
device tracebacks, function names stay, for less flash and heap: docs/BOARDS.md).

Selection (STYLE rule 23): probe sys.implementation._build.split("-")[0] on the device (getattr
defaults); a profile with that name wins; a unix-port build ("standard", "coverage", ... on
linux/darwin) maps to UNIX, which is also the virtual board's profile.
"""

import json
import os
from typing import Any

from . import options
from .errors import HostError

QUEUE_KEYS = options.KEYS
REQUIRED = ("board", "filesystem", "install", "mpy_arch") + QUEUE_KEYS
SIZE_KEYS = ("fs_bytes", "heap_bytes", "app_heap_bytes")  # for tools/board_capacity.py
# The hold rule's options (SPEC §10.1), which a profile may set: not format options (not on disk;
# the host's readers ignore them), but the board's app opens its Queue with them.
HOLD_KEYS = ("window", "evidence_bytes")
# With OUTBOX = "ddq_batch" (readings share items, OUTBOX §13.4) the hold rule's reserve of the
# app's batch options: an item holds tens of readings, so a few items claimed at once carry the
# app's whole publish window (DESIGN §5.1); each replaces window / evidence_bytes.
BATCH_KEYS = ("batch_window", "batch_evidence_bytes")
STEP_KEYS = ("reclaim_step",)  # staged reclamation (SPEC C13), where the profile's heap fits it
# The raw layout (`ddq flash --layout raw`, host/ddqhost/layout.py): the region, the filesystem
# beside it, FlashStorage's page and the queue options there.
RAW_KEYS = (
    "raw_block_bytes",
    "raw_heap_fit",
    "raw_bytes",
    "raw_fs_bytes",
    "raw_page",
    "raw_segment_bytes",
    "raw_max_segments",
    "raw_max_items",
)
MPY_ARCHS = {  # sys.implementation._mpy >> 10 (py/persistentcode.h MP_NATIVE_ARCH_*)
    0: None,
    1: "x86",
    2: "x64",
    3: "armv6",
    4: "armv6m",
    5: "armv7m",
    6: "armv7em",
    7: "armv7emsp",
    8: "armv7emdp",
    9: "xtensa",
    10: "xtensawin",
    11: "rv32imc",
    12: "rv64imc",
}


class BoardProfileError(HostError):
    """Unknown or malformed profile; one line for the user."""


def boards_dir() -> str:
    """$DDQ_BOARDS_DIR, else the profiles an installed wheel carries (ddqhost/boards_data, built
    from boards/), else boards/ of the checkout this module runs from."""
    env = os.environ.get("DDQ_BOARDS_DIR")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "boards_data")
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(os.path.dirname(os.path.dirname(here)), "boards")


def names() -> list[str]:
    d = boards_dir()
    try:
        return sorted(n[:-5] for n in os.listdir(d) if n.endswith(".json"))
    except OSError:
        return []


def load(name: str) -> dict[str, Any]:
    p = os.path.join(boards_dir(), name + ".json")
    try:
        with open(p) as f:
            prof = json.load(f)
    except FileNotFoundError:
        raise BoardProfileError(
            "unknown board profile %s (known: %s)" % (name, ", ".join(names()) or "none")
        ) from None
    except (ValueError, RecursionError) as e:
        raise BoardProfileError("%s: bad JSON (%s)" % (p, e or "nested too deeply")) from None
    if not isinstance(prof, dict):
        raise BoardProfileError("%s must hold a JSON object" % p)
    missing = [k for k in REQUIRED if k not in prof]
    if missing:
        raise BoardProfileError("%s lacks %s" % (p, ", ".join(missing)))
    bad = [
        k
        for k in QUEUE_KEYS + SIZE_KEYS + HOLD_KEYS + BATCH_KEYS + STEP_KEYS + RAW_KEYS
        if k in prof and type(prof[k]) is not int
    ]
    if bad or not isinstance(prof.get("network", True), bool):
        raise BoardProfileError(
            "%s: %s must be integers, network true/false" % (p, ", ".join(bad) or "sizes")
        )
    prof["_path"] = p
    return prof


def queue_options(prof: dict[str, Any]) -> dict[str, int]:
    return {k: prof[k] for k in QUEUE_KEYS + HOLD_KEYS + STEP_KEYS if k in prof}


def batch_options(prof: dict[str, Any]) -> dict[str, int]:
    """The app's BATCH_OPTIONS: what replaces queue_options' reserve with OUTBOX = "ddq_batch"."""
    return {k[6:]: prof[k] for k in BATCH_KEYS if k in prof}


def app_path(prof: dict[str, Any]) -> str | None:
    app = prof.get("app")
    return os.path.join(boards_dir(), app) if app else None


def select(probe: dict[str, Any]) -> str | None:
    """Profile name for a device probe dict (see device.Device.probe), or None."""
    build = str(probe.get("build") or "").split("-")[0]
    known = names()
    if build and build in known:
        return build
    for n in known:
        if build and build in str(load(n).get("builds") or "").split():
            return n
    if probe.get("platform") in ("linux", "darwin") and "UNIX" in known:
        return "UNIX"
    return None


def device_mpy(probe: dict[str, Any]) -> tuple[int, int, str | None] | None:
    """(major version, sub-version, arch name) from sys.implementation._mpy, or None."""
    v = probe.get("mpy")
    if not isinstance(v, int):
        return None
    return v & 0xFF, (v >> 8) & 3, MPY_ARCHS.get(v >> 10, "arch%d" % (v >> 10))
