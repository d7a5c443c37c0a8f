"""The raw layout (docs/BOARDS.md "Raw layout"): a board's queue on a raw flash region through
ddq_flash.FlashStorage (SPEC §16), beside a smaller filesystem.

A profile opts in with raw_bytes (the region), raw_block_bytes, raw_fs_bytes (the filesystem
beside it), raw_page (FlashStorage's page: 256 on rp2, whose flash programs whole pages) and the
queue options of the raw layout (raw_segment_bytes, raw_max_segments, raw_max_items: segments in
whole erase blocks, as many as the region holds; tools/board_capacity.py --raw derives them).
`ddq flash --layout raw` writes :ddq_layout.py, the one board-side contract:

    import ddq_layout
    ddq_layout.use(OPTIONS)     # OPTIONS gets storage=FlashStorage(region()) and the raw options

(the example apps' ddq_app.bind(globals()) makes that call).

Its region() is the port's own block device (PORTS below); the boot code that mounts the
filesystem on the rest is the port's too. The first change to the raw layout (no
:ddq_layout.py, or a different one) erases the region and, where the filesystem shrinks,
reformats it: what() says which, and the CLI asks before any of it runs.
"""

from typing import Any

from .device import Device, DeviceError, DeviceExecError, djoin, parse_reply
from .errors import HostError

LAYOUT_FILE = "ddq_layout.py"
# The profile keys of the raw layout: the region, the filesystem beside it, FlashStorage's page,
# and the queue options there (segments in whole erase blocks with their frame headers).
RAW_KEYS = ("raw_bytes", "raw_fs_bytes", "raw_page")  # boards.RAW_KEYS: these and RAW_OPTIONS
RAW_OPTIONS = {
    "raw_segment_bytes": "segment_bytes",
    "raw_max_segments": "max_segments",
    "raw_max_items": "max_items",
}
# port: (module to import, the raw region, the filesystem's block device in the raw layout or
# None where it stays as it is, its mount point, VfsLfs2 arguments). %(fs)d and %(raw)d are
# raw_fs_bytes and raw_bytes.
PORTS = {
    # rp2.Flash(start=, len=) are byte offsets into the firmware's storage area; the flash
    # programs whole 256-byte pages (progsize=256, FlashStorage page=256)
    "rp2": ("rp2", "rp2.Flash(start=%(fs)d, len=%(raw)d)", "rp2.Flash(start=0, len=%(fs)d)",
            "/", "progsize=256"),
    # a data partition labelled "ddq" beside a smaller "vfs" (a partition table of your build)
    "esp32": ("esp32", "esp32.Partition.find(esp32.Partition.TYPE_DATA, label='ddq')[0]", None,
              "/", ""),
    # MicroPython's stm32 boot sizes its flash block device from a LittleFS superblock
    "stm32": ("pyb", "pyb.Flash(start=%(fs)d, len=%(raw)d)", "pyb.Flash(start=0, len=%(fs)d)",
              "/flash", ""),
    # the virtual board: its own raw image (host/ddqhost/vboard.py), the filesystem untouched
    "unix": ("vboard", "vboard.raw", None, None, ""),
}  # fmt: skip
# Why a stock firmware does not keep the layout by itself, per port (printed before the change).
NEEDS = {
    "rp2": "a firmware whose _boot.py mounts rp2.Flash(start=0, len=%(fs)d) (the stock one "
    "formats the whole storage area when the filesystem does not span it)",
    "esp32": "a partition table with a data partition labelled ddq of %(raw)d bytes and a vfs "
    "partition of %(fs)d bytes (esptool)",
}
# What the port's region does not give, said before the change (and in docs/BOARDS.md).
WARN = {
    "stm32": "on internal flash (PYBV11) pyb.Flash writes go to a RAM sector cache "
    "(ports/stm32/flashbdev.c) that ddq_flash writes back at each sync (ioctl 3, SPEC Y7): "
    "each sync erases and rewrites a 16-128 KiB sector, and a power cut in that write-back can "
    "take what the sector held; boards whose pyb.Flash is external SPI flash (PYBD) program it "
    "directly",
}
ERASE_BATCH = 16  # blocks erased per exec (progress between them)


class LayoutError(HostError):
    """The raw layout cannot be set up; one line for the user."""


def has_raw(prof: dict[str, Any]) -> bool:
    return all(isinstance(prof.get(k), int) for k in RAW_KEYS + tuple(RAW_OPTIONS)) and (
        prof.get("port") in PORTS
    )


def raw_options(prof: dict[str, Any]) -> dict[str, int]:
    """The queue options of the raw layout: the profile's, with the raw_* ones in place."""
    from . import boards

    opts = boards.queue_options(prof)
    opts.update({o: prof[k] for k, o in RAW_OPTIONS.items()})
    return opts


def _check(prof: dict[str, Any]) -> tuple[str, str, str | None, str | None, str]:
    if not has_raw(prof):
        raise LayoutError(
            "profile %s has no raw layout (keys %s)"
            % (prof.get("board"), ", ".join(RAW_KEYS + tuple(RAW_OPTIONS)))
        )
    return PORTS[prof["port"]]


def table_files(max_segments: int) -> int:
    """FlashStorage's files= for a queue of max_segments: both generations of a compaction,
    + 8 for its manifest, index, their copies and a tail cut's copy (the table made at mount
    never grows inside an operation, as a drain late in a board's life needs)."""
    return 2 * max_segments + 8


def source(prof: dict[str, Any]) -> str:
    """The text of :ddq_layout.py for the profile (byte for byte what flash compares)."""
    mod, region, _fs, _mnt, _a = _check(prof)
    sizes = {"fs": prof["raw_fs_bytes"], "raw": prof["raw_bytes"]}
    opts = {o: prof[k] for k, o in sorted(RAW_OPTIONS.items())}
    return (
        "# ddq_layout: written by `ddq flash --layout raw` (profile %s): the queue on a raw\n"
        '# flash region, not on the filesystem (docs/BOARDS.md "Raw layout"). `ddq flash`\n'
        "# compares this file: its OPTIONS, PAGE or region() edited, the next flash --layout\n"
        "# raw erases the region again.\n"
        "OPTIONS = %r\n"
        "PAGE = %d\n"
        "FILES = %d  # FlashStorage's file table: 2 x max_segments + 8\n\n\n"
        "def region():\n"
        "    import %s\n\n"
        "    return %s\n\n\n"
        "def use(options):\n"
        '    """Put the raw region\'s storage and queue options into an app\'s OPTIONS."""\n'
        "    import ddq_flash\n\n"
        "    options.update(OPTIONS)\n"
        '    options["storage"] = ddq_flash.FlashStorage(region(), page=PAGE, files=FILES)\n'
        % (
            prof["board"],
            opts,
            prof["raw_page"],
            table_files(opts["max_segments"]),
            mod,
            region % sizes,
        )
    )


def what(prof: dict[str, Any], geometry: tuple[int, int] | None = None) -> list[str]:
    """What changing the board to the raw layout erases, and what it needs, as lines."""
    _mod, region, fs, mnt, _a = _check(prof)
    sizes = {"fs": prof["raw_fs_bytes"], "raw": prof["raw_bytes"]}
    bs = prof.get("raw_block_bytes") or 4096
    n, bs = geometry or (prof["raw_bytes"] // bs, bs)
    lines = [
        "erases the raw region %s: %d blocks of %d bytes (%d KiB); any queue in it is lost"
        % (region % sizes, n, bs, n * bs // 1024)
    ]
    if fs:
        lines.append(
            "reformats the filesystem at %s as LittleFS on %s (%d KiB): every file on the "
            "board is lost (ddq and the app are installed again)"
            % (mnt, fs % sizes, sizes["fs"] // 1024)
        )
    if prof["port"] in NEEDS:
        lines.append("needs " + NEEDS[prof["port"]] % sizes)
    if prof["port"] in WARN:
        lines.append("beware: " + WARN[prof["port"]])
    return lines


def _region_code(prof: dict[str, Any]) -> str:
    mod, region, _fs, _mnt, _a = _check(prof)
    return "import %s\n_d=%s\n" % (
        mod,
        region % {"fs": prof["raw_fs_bytes"], "raw": prof["raw_bytes"]},
    )


def is_geometry(v: Any) -> bool:
    return (
        isinstance(v, tuple)
        and len(v) == 2
        and all(type(x) is int for x in v)
        and 2 <= v[0] <= 1 << 20
        and 256 <= v[1] <= 65536
        and v[1] & (v[1] - 1) == 0
    )


def geometry(dev: Device, code: str) -> tuple[int, int]:
    """(block count, block size) of the region that code binds to _d on the device."""
    try:
        out = dev._collect(code + "print(repr((_d.ioctl(4, 0), _d.ioctl(5, 0))))\ndel _d\n")
    except DeviceExecError as e:
        raise LayoutError("the board has no raw region there: %s" % e.exc_line) from None
    try:
        got = parse_reply(out, "the raw region's geometry", is_geometry)
    except DeviceError as e:
        raise LayoutError(str(e)) from None
    return int(got[0]), int(got[1])


def installed(dev: Device, dest: str = ".") -> str | None:
    """The text of :ddq_layout.py in dest on the device, or None."""
    path = djoin(dest, LAYOUT_FILE)
    if not dev.exists(path):
        return None
    return dev.read_file(path, size=65536).decode("utf-8", "replace")


def contract(text: str | None) -> Any:
    """What a :ddq_layout.py text fixes about the queue in its region: its OPTIONS, its PAGE and
    region()'s code; None where it is not such a text. The rest (FILES, the file table's room
    in RAM, and the comments) is how the board opens it, not what the region holds."""
    import ast

    try:
        tree = ast.parse(text or "")
    except (SyntaxError, ValueError):
        return None
    got: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", "")
            if name in ("OPTIONS", "PAGE"):
                try:
                    got[name] = ast.literal_eval(node.value)
                except ValueError:
                    return None
        elif isinstance(node, ast.FunctionDef) and node.name == "region":
            got["region"] = ast.dump(node)
    return got if len(got) == 3 else None


def plan(dev: Device, prof: dict[str, Any], dest: str = ".") -> dict[str, Any]:
    """What `flash --layout raw` would do on dev: {"change": False} when the board already has
    this profile's raw layout, else the region's geometry and the lines of what() to confirm.
    A :ddq_layout.py that differs from this one only where contract() does not look (an older
    ddq's, without FILES) is the same layout: {"change": False, "rewrite": True}, and
    rewrite() brings it up to date without erasing anything."""
    src = source(prof)
    try:
        geo = geometry(dev, _region_code(prof))
    except LayoutError as e:
        if prof["port"] == "unix":  # vboard.raw is None: started with --raw-kib 0
            raise LayoutError(
                "the virtual board has no raw flash region (`ddq board virtual start --raw-kib "
                "N` makes one when STATE_DIR/raw.img is missing)"
            ) from None
        if prof["port"] in NEEDS:  # no ddq partition, or a firmware that cannot make the region
            sizes = {"fs": prof["raw_fs_bytes"], "raw": prof["raw_bytes"]}
            raise LayoutError(
                "%s; the raw layout needs %s" % (e, NEEDS[prof["port"]] % sizes)
            ) from None
        raise e
    if prof["port"] != "unix" and geo[0] * geo[1] != prof["raw_bytes"]:
        raise LayoutError(
            "the board's raw region is %d bytes, the profile's raw_bytes %d: wrong --board?"
            % (geo[0] * geo[1], prof["raw_bytes"])
        )
    if geo[0] < 8:
        raise LayoutError("the board's raw region has %d blocks; ddq needs at least 8" % geo[0])
    got = installed(dev, dest)
    if got != src and got is not None and contract(got) == contract(src):
        return {"change": False, "rewrite": True, "geometry": list(geo), "what": []}
    same = got == src
    return {"change": not same, "geometry": list(geo), "what": [] if same else what(prof, geo)}


def apply(
    dev: Device, prof: dict[str, Any], dest: str = ".", progress: Any = None
) -> dict[str, Any]:
    """Change dev to the raw layout: reformat the filesystem where it shrinks, erase the region
    (ERASE_BATCH blocks an exec, progress(done, total) after each), write :ddq_layout.py last,
    so an interrupted change is done again by the next flash --layout raw."""
    _mod, _region, fs, mnt, vargs = _check(prof)
    sizes = {"fs": prof["raw_fs_bytes"], "raw": prof["raw_bytes"]}
    code = _region_code(prof)
    n, _bs = geometry(dev, code)
    if fs:
        # leave the mount point, put a smaller LittleFS there, come back (the cwd is where
        # flash installs); the region after it is not touched
        dev.exec(
            "import os, vfs, %s\nos.chdir('/')\nvfs.umount(%r)\n_b=%s\n"
            "vfs.VfsLfs2.mkfs(_b%s)\nvfs.mount(vfs.VfsLfs2(_b%s), %r)\nos.chdir(%r)\ndel _b\n"
            % (_mod, mnt, fs % sizes, ", " + vargs if vargs else "",
               ", " + vargs if vargs else "", mnt, mnt)
        )  # fmt: skip
    path = djoin(dest, LAYOUT_FILE)
    if dev.exists(path):
        dev.remove(path)  # an interrupted erase must not look like the layout in place
    for b in range(0, n, ERASE_BATCH):
        dev.exec(
            code
            + "for _i in range(%d, %d):\n _d.ioctl(6, _i)\ndel _d\n" % (b, min(n, b + ERASE_BATCH))
        )
        if progress:
            progress(min(n, b + ERASE_BATCH), n)
    wrote = rewrite(dev, prof, dest)
    return {"erased_blocks": n, "reformatted": fs % sizes if fs else None, "wrote": wrote}


def rewrite(dev: Device, prof: dict[str, Any], dest: str = ".") -> dict[str, Any]:
    """Write :ddq_layout.py for prof in dest (a .tmp, then renamed); what was written."""
    import hashlib

    path = djoin(dest, LAYOUT_FILE)
    data = source(prof).encode()
    if dest != ".":
        dev.mkdir(dest, exist_ok=True)
    dev.write_file(path + ".tmp", data)
    dev.rename(path + ".tmp", path)
    dev.exec("import sys\nsys.modules.pop('ddq_layout', None)")  # the next import reads it
    return {"path": ":" + path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
