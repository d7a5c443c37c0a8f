"""The `ddq` command: a table of (handler, argparse factory), one CommandError, `ddq: message` on
stderr.

Exit status: 0 success; 1 any error (one line on stderr); 2 corruption (verify: corrupt; inspect,
replay, push: the directory is corrupt) and an argument out of range or malformed (ARG_RANGES);
verify also exits 1 when only a torn tail would be removed; 130 interrupted.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from . import (
    boards,
    envelope,
    flashimg,
    fsck,
    inspect_dir,
    locate,
    options,
    pboard,
    qboard,
    qoptions,
    vboard,
)
from .errors import HostError, as_host_error

if TYPE_CHECKING:
    from .device import Device


class CommandError(HostError):
    """A command refused its arguments or failed; printed as `ddq: message`."""


def out_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def show(args: argparse.Namespace, res: Any, *lines: str) -> int:
    """A command's result: one JSON object with --json, else its lines of text; exit 0."""
    if args.json:
        out_json(res)
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


def log_err(msg: str) -> None:
    sys.stderr.write(msg + "\n")


# ---------------------------------------------------------------- device selection


def add_device_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        "-d",
        metavar="DEV",
        help="serial port or pty of the board (default: $DDQ_DEVICE, else the running virtual "
        "board)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--resume",
        action="store_true",
        default=None,
        help="do not soft-reset on connect (automatic for the virtual board)",
    )
    g.add_argument(
        "--soft-reset",
        dest="resume",
        action="store_false",
        help="soft-reset on connect (default for real boards: stops the running app)",
    )
    p.add_argument(
        "--state-dir", metavar="DIR", help="virtual board state directory (for the default device)"
    )


def open_device(args: argparse.Namespace) -> "Device":
    dev = args.device or os.environ.get("DDQ_DEVICE")
    state_dir = getattr(args, "state_dir", None)
    if not dev:
        dev = (
            vboard.running_device(state_dir) or qboard.running_device() or pboard.running_device()
        )
        if not dev:
            raise CommandError(
                "no device: pass --device DEV, set DDQ_DEVICE, or start `ddq board virtual start`"
            )
    if args.resume is None:
        soft_reset = not vboard.is_virtual_device(dev, state_dir)
    else:
        soft_reset = not args.resume
    from .device import (
        Device,  # imports mpremote and pyserial: only for commands that need a board
    )

    return Device(dev, soft_reset=soft_reset)


# ---------------------------------------------------------------- options


OPTIONS_PRECEDENCE = (
    "DDQ does not store a queue's options; each is taken from the first of: its flag here; "
    "--board PROFILE; DIR/ddq-options.json; DIR/.ddq-pull.json (what `ddq pull` recorded); "
    "DDQ's defaults. A reader needs options at least the writer's; a tool that appends needs "
    'the writer\'s own (docs/HOST.md "Queue options")'
)


def add_option_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("queue options", OPTIONS_PRECEDENCE)
    g.add_argument(
        "--board",
        metavar="PROFILE",
        help="the queue options of a board profile (`ddq board list`; `ddq board show PROFILE` "
        "prints one)",
    )
    for key in options.KEYS:
        g.add_argument(
            "--" + key.replace("_", "-"),
            dest=key,
            type=int,
            metavar="N",
            help="queue option %s" % key,
        )


def add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON object on stdout instead of text (for scripts; "
        "errors stay one `ddq:` line on stderr)",
    )


def resolve_options(
    args: argparse.Namespace, path: str | None
) -> tuple[dict[str, int], dict[str, str]]:
    flags = {k: getattr(args, k, None) for k in options.KEYS}
    opts, src = qoptions.resolve_options(path, flags, getattr(args, "board", None))
    try:
        fsck.check_options(opts)
    except ValueError as e:
        raise CommandError("bad queue options: %s" % e) from None
    return opts, src


# ---------------------------------------------------------------- board virtual


def add_board_action_args(p: argparse.ArgumentParser, default_dir: str) -> None:
    """A test board's action and its state directory: `board virtual` and `board qemu`."""
    p.add_argument("action", choices=["start", "stop", "status", "kill"])
    p.add_argument(
        "--state-dir",
        dest="state_dir",
        metavar="DIR",
        help="state directory (default %s)" % default_dir,
    )
    p.add_argument("--dir", dest="state_dir", help=argparse.SUPPRESS)  # the old name


def _virtual_args(v: argparse.ArgumentParser) -> None:
    """The virtual board's options: `board virtual ACTION` and `board start|stop`."""
    v.add_argument(
        "--image", metavar="PATH", help="LittleFS image file (default STATE_DIR/flash.img)"
    )
    v.add_argument(
        "--size-kib",
        type=int,
        default=vboard.DEFAULT_BLOCKS * vboard.DEFAULT_BLOCK_SIZE // 1024,
        help="size of a new image (default %(default)s KiB)",
    )
    v.add_argument(
        "--raw-kib",
        type=int,
        default=vboard.DEFAULT_RAW_BLOCKS * vboard.DEFAULT_BLOCK_SIZE // 1024,
        help="size of a new raw flash region STATE_DIR/raw.img, `import vboard; vboard.raw` on "
        "the board (default %(default)s KiB; 0: none; an existing one keeps its size)",
    )
    v.add_argument(
        "--micropython",
        metavar="EXE",
        help="unix port executable (default: the venv's micropython)",
    )
    v.add_argument(
        "--heapsize", metavar="SIZE", help="MicroPython heap, e.g. 8M (for `ddq test --fs lfs2`)"
    )
    add_json_arg(v)


def argparse_board(p: argparse.ArgumentParser) -> None:
    """virtual board; board profiles; probe a device"""
    sub = p.add_subparsers(dest="board_cmd", required=True)
    what = (
        "the virtual board: the MicroPython unix port (the venv's micropython, from the "
        "[board] extra) behind a pty, on a LittleFS image file mounted at /flash (its cwd), "
        "with a raw flash region STATE_DIR/raw.img (`import vboard; vboard.raw` on the board), "
        "driven like a real board (device STATE_DIR/tty). start: power it on (creates and formats "
        "the image when missing; main.py is not run: `ddq app start` runs it, as a reset does); "
        "stop: unmount and exit; status; kill: a power cut (SIGKILL). A soft reset (mpremote's "
        "own, Ctrl-D) restarts the port on the same pty and image, as a board resets"
    )
    v = sub.add_parser(
        "virtual", help="the virtual board (unix port + LittleFS image + pty)", description=what
    )
    add_board_action_args(v, "$DDQ_STATE_DIR or ~/.local/state/ddq/virtual")
    _virtual_args(v)
    # `ddq board start|stop`: the virtual board's, the obvious words for the board one has
    for verb in ("start", "stop"):
        a = sub.add_parser(
            verb,
            help="the virtual board: the same as `ddq board virtual %s`" % verb,
            description=what,
        )
        a.add_argument(
            "--state-dir",
            dest="state_dir",
            metavar="DIR",
            help="state directory (default $DDQ_STATE_DIR or ~/.local/state/ddq/virtual)",
        )
        _virtual_args(a)
        a.set_defaults(board_cmd="virtual", action=verb)
    qb = sub.add_parser(
        "qemu",
        help="the qemu board: your MicroPython firmware for the MPS2-AN385 (Cortex-M3) under qemu",
    )
    add_board_action_args(qb, "$DDQ_QEMU_STATE_DIR or ~/.local/state/ddq/qemu")
    qb.add_argument(
        "--firmware",
        metavar="ELF",
        help="firmware (default $DDQ_QEMU_FIRMWARE; none: start says what to pass): MicroPython "
        ">= 1.25 ports/qemu for MPS2_AN385 with VfsLfs2 (docs/HOST.md, qemu board)",
    )
    qb.add_argument("--qemu", metavar="EXE", help="qemu-system-arm executable (default: on PATH)")
    qb.add_argument(
        "--fresh",
        action="store_true",
        help="start with a blank RAM disk (drop STATE_DIR/disk.img)",
    )
    add_json_arg(qb)
    pb = sub.add_parser(
        "pico",
        help="the pico board: your MicroPython RPI_PICO firmware on an emulated Raspberry Pi "
        "Pico (rp2040py)",
        description="the pico board: the official MicroPython firmware for the Raspberry Pi "
        "Pico (a .uf2 you download) on rp2040py's emulated RP2040, its LittleFS on the emulated "
        "flash, its USB console on a pty (device STATE_DIR/tty). start: boot it (waits for the "
        "prompt, 10-20 s); stop: the power-off (the flash's filesystem saved to "
        "STATE_DIR/flash.img, booted from at the next start); status; kill: SIGKILL, nothing "
        "saved",
    )
    add_board_action_args(pb, "$DDQ_PICO_STATE_DIR or ~/.local/state/ddq/pico")
    pb.add_argument(
        "--firmware",
        metavar="UF2",
        help="firmware (default $DDQ_PICO_FIRMWARE; none: start says what to pass): the "
        "official MicroPython RPI_PICO .uf2 (docs/HOST.md, pico board)",
    )
    pb.add_argument(
        "--fresh",
        action="store_true",
        help="start with a blank flash (drop STATE_DIR/flash.img; the firmware formats it)",
    )
    add_json_arg(pb)
    pr = sub.add_parser("probe", help="detect the board profile of a connected device")
    add_device_args(pr)
    add_json_arg(pr)
    sub.add_parser("list", help="list board profiles (their names are what --board takes)")
    sh = sub.add_parser("show", help="print one board profile: its queue options and settings")
    sh.add_argument("profile", metavar="PROFILE", help="a name `ddq board list` prints")
    add_json_arg(sh)


def _device_ddq_version(dev: "Device") -> str | None:
    """ddq.__version__ as the device imports it now, or None when it cannot import ddq."""
    from .device import DeviceExecError, is_str

    try:
        v = dev.eval(
            "getattr(__import__('ddq'), '__version__', '?')",
            check=lambda x: is_str(x, 64),
            what="ddq.__version__",
        )
    except DeviceExecError:
        return None
    return str(v)


def do_board(args: argparse.Namespace) -> int:
    if args.board_cmd == "show":
        if args.profile not in boards.names():
            raise CommandError("no board profile %r: `ddq board list` names them" % args.profile)
        prof = {k: v for k, v in boards.load(args.profile).items() if not k.startswith("_")}
        if args.json:
            out_json(prof)
        else:
            for k in sorted(prof):
                print("%-18s %s" % (k, json.dumps(prof[k])))
            app = boards.app_path(prof)
            if app:  # where the example is (a wheel's site-packages), and how to get a copy
                print(
                    "example app: %s (`ddq app init DIR --board %s` copies it to edit)"
                    % (app, args.profile)
                )
        return 0
    if args.board_cmd == "list":
        for n in boards.names():
            prof = boards.load(n)
            print(
                "%-14s %-9s mpy_arch %-10s segment %6d x %-4d payload <= %d"
                % (
                    n,
                    prof.get("port", ""),
                    prof["mpy_arch"] or "portable",
                    prof["segment_bytes"],
                    prof["max_segments"],
                    prof["max_payload_bytes"],
                )
            )
        return 0
    if args.board_cmd == "probe":
        with open_device(args) as dev:
            probe = dev.probe()
            ddq_version = _device_ddq_version(dev)
        name = boards.select(probe)
        found: dict[str, Any] = {
            "device": dev.port,
            "probe": probe,
            "board": name,
            "mpy": boards.device_mpy(probe),
            "ddq_version": ddq_version,
        }
        if args.json:
            out_json(found)
        else:
            print(
                "%s: %s (build %r, platform %s, mpy %s, ddq %s)"
                % (
                    dev.port,
                    name or "unknown board",
                    probe.get("build"),
                    probe.get("platform"),
                    found["mpy"],
                    ddq_version or "not installed",
                )
            )
        return 0
    if args.board_cmd == "qemu":
        res, msg, rc = qboard.command(
            args.action, args.state_dir, args.firmware, args.qemu, args.fresh
        )
        show(args, res, msg)
        return rc
    if args.board_cmd == "pico":
        res, msg, rc = pboard.command(args.action, args.state_dir, args.firmware, args.fresh)
        show(args, res, msg)
        return rc
    state_dir = args.state_dir or vboard.default_state_dir()
    try:
        if args.action == "start":
            bs = vboard.DEFAULT_BLOCK_SIZE
            res = vboard.start(
                state_dir,
                image=args.image,
                micropython=args.micropython,
                block_size=bs,
                blocks=max(8, args.size_kib * 1024 // bs),
                heapsize=args.heapsize,
                raw_blocks=max(0, args.raw_kib * 1024 // bs),
            )
            msg = "virtual board running: device %s (image %s)" % (res["device"], res["image"])
        elif args.action == "stop":
            res = vboard.stop(state_dir)
            msg = "virtual board stopped" if res["stopped"] else "virtual board was not running"
        elif args.action == "kill":
            res = vboard.kill(state_dir)
            msg = (
                "virtual board killed (power cut)"
                if res["killed"]
                else "virtual board was not running"
            )
        else:
            res = vboard.status(state_dir)
            msg = (
                "running: device %s, pids %d/%d, image %s"
                % (res["device"], res["bridge_pid"], res["micropython_pid"], res["image"])
                if res["running"]
                else "not running (state dir %s)" % res["state_dir"]
            )
    except vboard.BoardError as e:
        raise CommandError(str(e)) from None
    show(args, res, msg)
    return 0 if args.action != "status" or res["running"] else 3


# ---------------------------------------------------------------- app


def argparse_app(p: argparse.ArgumentParser) -> None:
    """start main.py on the board as a reset does (a soft reset), stop it (Ctrl-C), ask whether
    it runs, or copy a profile's example app to edit"""
    p.add_argument(
        "action",
        choices=["start", "stop", "status", "init"],
        help="start: soft-reset the board from its friendly REPL, as a reset does: boot.py, then "
        "main.py (`ddq flash --example-app` installs the example as main.py) runs and keeps "
        "running after ddq lets go (exit 1 when it stopped with an error within --seconds); "
        "stop: Ctrl-C to the running main.py (any ddq command that connects stops it too); "
        "status: whether an app runs (the REPL does not answer), without stopping it (exit 0 "
        "running, 3 not); init DIR: copy the --board profile's example app to DIR/main.py, to "
        "edit (BROKER, ...) and install with `ddq flash --app DIR/main.py`",
    )
    p.add_argument("dir", nargs="?", metavar="DIR", help="init: where main.py goes (created)")
    p.add_argument(
        "--board",
        metavar="PROFILE",
        help="init: the profile whose example app to copy (`ddq board list` names them)",
    )
    p.add_argument("--force", action="store_true", help="init: replace an existing DIR/main.py")
    add_device_args(p)
    p.add_argument(
        "--seconds",
        type=float,
        default=2.0,
        metavar="S",
        help="start: show the app's output for S seconds, then let go (default %(default)s)",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="start: show the app's output until Ctrl-C (which leaves the app running)",
    )
    add_json_arg(p)


def _app_init(args: argparse.Namespace) -> int:
    if not args.dir or not args.board:
        raise CommandError(
            "app init needs a directory and a profile: `ddq app init DIR --board PROFILE` "
            "(`ddq board list` names the profiles)"
        )
    if args.board not in boards.names():
        raise CommandError("no board profile %r: `ddq board list` names them" % args.board)
    src = boards.app_path(boards.load(args.board))
    if not src or not os.path.isfile(src):
        raise CommandError("board profile %s has no example app" % args.board)
    dst = os.path.join(args.dir, "main.py")
    if os.path.exists(dst) and not args.force:
        raise CommandError("%s exists: edit it, or pass --force to replace it" % dst)
    os.makedirs(args.dir, exist_ok=True)
    shutil.copyfile(src, dst)
    res = {"board": args.board, "app": dst, "from": src}
    return show(
        args,
        res,
        "wrote %s: the %s example app (set BROKER, BROKER_PORT, CLIENT_ID, TOPIC, the WiFi "
        "settings and read_sensor() there)" % (dst, args.board),
        "next: `ddq flash --board %s --app %s`, then `ddq app start`" % (args.board, dst),
    )


def _app_failure(said: bytes) -> str | None:
    """What stopped main.py, from its output: the last line of a traceback, or that the REPL
    came back (main.py returned); None while it runs."""
    text = said.decode("utf-8", "replace")
    # Only a REPL prompt at the end means main.py is over (an app may print a traceback it
    # caught and go on): the friendly REPL's `>>> `, or the raw REPL's end of an exec (qemu).
    if not (text.rstrip(" ").endswith(">>>") or text.endswith("\x04>")):
        return None
    if "Traceback (most recent call last)" in text:
        tb = text[text.rindex("Traceback (most recent call last)") :]
        lines = [ln.strip() for ln in tb.splitlines()[1:] if ln.strip()]
        for ln in lines:
            if not ln.startswith("File ") and not ln.startswith("MicroPython "):
                return fsck.printable(ln)[:200]
        return "a traceback"
    return "main.py returned (the REPL is back)"


def do_app(args: argparse.Namespace) -> int:
    from .device import Device, DeviceError, interrupt_app, repl_answers

    if args.action == "init":
        return _app_init(args)
    if args.dir:
        raise CommandError("DIR is for `ddq app init DIR --board PROFILE` only")
    if not args.seconds >= 0:
        raise CommandError("--seconds must be 0 or more")
    if args.action == "status":
        dev = args.device or os.environ.get("DDQ_DEVICE") or vboard.running_device(args.state_dir)
        if not dev:
            raise CommandError(
                "no device: pass --device DEV, set DDQ_DEVICE, or start `ddq board virtual start`"
            )
        running = not repl_answers(dev)
        res = {"device": dev, "running": running}
        show(
            args,
            res,
            "an app is running on %s (its REPL does not answer; `ddq app stop` ends it)" % dev
            if running
            else "no app is running on %s (its REPL answers; `ddq app start` starts main.py)"
            % dev,
        )
        return 0 if running else 3
    if args.action == "stop":
        dev = args.device or os.environ.get("DDQ_DEVICE") or vboard.running_device(args.state_dir)
        if not dev:
            raise CommandError(
                "no device: pass --device DEV, set DDQ_DEVICE, or start `ddq board virtual start`"
            )
        said = interrupt_app(dev)
        with Device(dev, soft_reset=False) as d:
            d.probe()  # the REPL answers again
        stopped = b"KeyboardInterrupt" in said
        res = {"device": dev, "stopped": stopped}
        msg = (
            "stopped the app on %s (KeyboardInterrupt)" % dev
            if stopped
            else "nothing was running on %s (its REPL answers)" % dev
        )
    else:
        with open_device(args) as d:
            if not d.exists("main.py"):
                raise CommandError(
                    "%s has no main.py in its directory: `ddq flash --example-app` (or --app "
                    "FILE) installs one" % d.port
                )
            port = d.port
            echo = None
            if not args.json:
                echo = _Echo()
            try:
                said = d.reset_to_main(None if args.follow else args.seconds, echo)
            except DeviceError as e:
                raise CommandError("could not soft-reset %s: %s" % (port, e)) from None
        said = said.lstrip(b"\r\n")
        failed = _app_failure(said)
        if failed:
            raise CommandError(
                "main.py on %s stopped: %s; nothing runs now (`ddq flash --example-app` "
                "installs the example app and what it imports, `ddq flash --app FILE` yours)"
                % (port, failed)
            )
        res = {"device": port, "started": True, "output": said.decode("utf-8", "replace")}
        msg = (
            "" if not said or said.endswith(b"\n") else "\n"
        ) + "app started on %s (soft reset: boot.py, then main.py; `ddq app stop` ends it)" % port
    return show(args, res, msg)


class _Echo:
    """The app's output to stdout as it comes, without the blank line(s) a reset begins with."""

    def __init__(self) -> None:
        self.begun = False

    def __call__(self, b: bytes) -> None:
        if not self.begun:
            b = b.lstrip(b"\r\n")
            self.begun = bool(b)
        if b:
            sys.stdout.buffer.write(b)
            sys.stdout.flush()


# ---------------------------------------------------------------- flash / pull / push


def argparse_flash(p: argparse.ArgumentParser) -> None:
    """install ddq (.py or .mpy) on a device and check it imports"""
    add_device_args(p)
    p.add_argument(
        "--board", metavar="PROFILE", help="board profile (`ddq board list`; default: probed)"
    )
    p.add_argument(
        "--format",
        choices=["py", "mpy"],
        help="install as source or mpy-cross output (default: the profile's `install`)",
    )
    p.add_argument(
        "--dest", default="", metavar=":DIR", help="device directory (default: the device's cwd)"
    )
    p.add_argument("--app", metavar="MAIN_PY", help="also install this file as :main.py")
    p.add_argument(
        "--example-app", action="store_true", help="install the profile's example app as :main.py"
    )
    p.add_argument(
        "-O", dest="opt", type=int, choices=[0, 1, 2, 3], help="mpy-cross optimisation level"
    )
    p.add_argument(
        "--layout",
        choices=["fs", "raw"],
        help="raw: the queue on a raw flash region beside a smaller filesystem (the profile's "
        "raw_* keys, docs/BOARDS.md); the first change erases the region (and reformats the "
        "filesystem where it shrinks) after saying so and asking; fs: the queue on the "
        "filesystem (default: what the board has)",
    )
    p.add_argument(
        "--yes", action="store_true", help="do not ask before --layout raw erases (scripts)"
    )
    add_transfer_args(p)


def confirm_layout(args: argparse.Namespace, dev: "Device", prof: dict[str, Any]) -> Any:
    """--layout raw: set the board's raw layout up when it is not in place, after printing what
    that erases and reading `yes` (unless --yes); the plan, or None when nothing changed."""
    from . import layout

    try:
        pl = layout.plan(dev, prof, args.dest or ".")
        if not pl["change"]:
            if pl.get("rewrite"):  # the same region and options: an older ddq's file, updated
                w = layout.rewrite(dev, prof, args.dest or ".")
                log_err("raw layout: %s brought up to date (nothing erased)" % w["path"])
            return None
        log_err(
            "ddq flash --layout raw on %s (profile %s):\n%s"
            % (dev.port, prof["board"], "\n".join("  - %s" % w for w in pl["what"]))
        )
        if not args.yes:
            sys.stderr.write("Type yes to go on: ")
            sys.stderr.flush()
            if sys.stdin.readline().strip().lower() != "yes":
                sys.stderr.write("\n")
                raise CommandError("not confirmed: nothing was erased (--yes skips the question)")
        bar = None
        if args.progress or (args.progress is None and sys.stderr.isatty()):
            from .transfer import Progress

            n, bs = pl["geometry"]
            p = Progress(n * bs, "erase", True)
            bar = lambda done, total: p.update(done * bs)  # noqa: E731
        pl.update(layout.apply(dev, prof, args.dest or ".", bar))
        return pl
    except layout.LayoutError as e:
        raise CommandError(str(e)) from None


def layout_lines(changed: Any) -> list[str]:
    if not changed:
        return []
    out = ["raw layout: erased %d blocks" % changed["erased_blocks"]]
    if changed["reformatted"]:
        out.append("reformatted the filesystem on %s" % changed["reformatted"])
    return out


def do_flash(args: argparse.Namespace) -> int:
    from . import transfer

    if args.app and args.example_app:
        raise CommandError("give --app or --example-app, not both")
    if args.app and not os.path.isfile(args.app):
        raise CommandError("%s: no such file" % args.app)
    with open_device(args) as dev:
        app = args.app
        changed = None
        if args.example_app or args.layout == "raw":
            prof, _ = transfer.pick_profile(dev, args.board)
            if args.example_app:
                app = boards.app_path(prof)
            if args.layout == "raw":
                changed = confirm_layout(args, dev, prof)
        res = transfer.flash(
            dev,
            board=args.board,
            fmt=args.format,
            dest=args.dest,
            app=app,
            opt=args.opt,
            progress_enabled=args.progress,
            layout=args.layout,
        )
    res["layout_change"] = changed
    if changed:
        res["written"].insert(0, changed["wrote"])
    return show(
        args,
        res,
        *layout_lines(changed),
        *["wrote %(path)s (%(bytes)d bytes)" % w for w in res["written"]],
        *["removed %s" % r for r in res["removed"]],
        "ddq %(version)s imports on %(device)s (%(board)s, %(imported_from)s) in %(seconds).1f s"
        % res,
    )


def add_transfer_args(p: argparse.ArgumentParser, force: str | None = None) -> None:
    """--force (with its help, when given), --progress and --json: flash, pull, push."""
    if force is not None:
        p.add_argument("--force", action="store_true", help=force)
    p.add_argument(
        "--progress", action="store_true", default=None, help="progress bar even when not a tty"
    )
    add_json_arg(p)


def add_remote_arg(p: argparse.ArgumentParser) -> None:
    add_device_args(p)
    p.add_argument(
        "remote", metavar="REMOTE_DIR", help="queue directory on the device (':outbox')"
    )


def argparse_pull(p: argparse.ArgumentParser) -> None:
    """copy a queue directory off a device, sha256-verified"""
    add_remote_arg(p)
    p.add_argument("local", metavar="LOCAL_DIR", help="new local directory")
    p.add_argument(
        "--board",
        metavar="PROFILE",
        help="profile whose queue options to record (default: probed)",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="the board's raw flash region (`ddq flash --layout raw`): LOCAL is an image file of "
        "exactly the region's bytes, block 0 first, and LOCAL.json what it is; REMOTE_DIR names "
        "the queue in it",
    )
    add_transfer_args(p, "overwrite a local pull that has local changes")


def do_pull(args: argparse.Namespace) -> int:
    from . import transfer

    with open_device(args) as dev:
        res = (transfer.pull_raw if args.raw else transfer.pull)(
            dev,
            args.remote,
            args.local,
            board=args.board,
            force=args.force,
            progress_enabled=args.progress,
        )
    kib = "%.1f" % (res["kib_per_s"] or 0)
    if args.raw:
        return show(
            args,
            res,
            "pulled the raw region (%(block_count)d blocks of %(block_size)d bytes) to %(local)s "
            "in %(seconds).1f s (%(kib)s KiB/s), %(check)s; %(meta)s says what it holds"
            % dict(
                res,
                kib=kib,
                check="sha256 verified" if res["sha256_verified"] else "no hashlib on the device",
            ),
        )
    return show(
        args,
        res,
        "pulled %(files)d files (%(bytes)d bytes) from %(remote)s to %(local)s in %(seconds).1f s"
        " (%(kib)s KiB/s), sha256 verified" % dict(res, kib=kib),
    )


def argparse_push(p: argparse.ArgumentParser) -> None:
    """put a pulled (replayed) directory back on the device"""
    add_device_args(p)
    p.add_argument("local", metavar="LOCAL_DIR")
    p.add_argument("remote", metavar="REMOTE_DIR")
    add_transfer_args(p, "push even if the device copy changed since the pull")


def do_push(args: argparse.Namespace) -> int:
    from . import transfer

    with open_device(args) as dev:
        res = transfer.push(
            dev, args.local, args.remote, force=args.force, progress_enabled=args.progress
        )
    n = {k: len(res[k]) for k in ("written", "appended", "removed")}
    lines = [
        "pushed %(local)s to %(remote)s: " % res
        + "%(written)d written, %(appended)d appended, %(removed)d removed" % n
        + " (%(bytes)d bytes, %(seconds).1f s)" % res
    ]
    ow = res.get("overwritten")
    if ow is not None:  # one line per kind of change, never one per item
        lines.append(
            "--force overwrote the device copy (next_seq %d kept)%s"
            % (ow["pushed_next_seq"], "" if ow["kinds"] else ": no item changed")
        )
        lines += ["--force: " + transfer.kind_text(k) for k in ow["kinds"]]
    return show(args, res, *lines)


def argparse_stats(p: argparse.ArgumentParser) -> None:
    """stats() of a queue directory, computed by ddq on the device"""
    add_remote_arg(p)
    add_option_args(p)
    add_json_arg(p)


def do_stats(args: argparse.Namespace) -> int:
    from . import transfer

    with open_device(args) as dev:
        board = args.board
        if board is None:
            try:
                prof, _ = transfer.pick_profile(dev)
                board = prof["board"]
            except transfer.TransferError:
                board = None
        opts, _src = resolve_options(argparse.Namespace(**dict(vars(args), board=board)), None)
        res = transfer.device_stats(dev, args.remote, opts)
    return show(args, res, *("%-22s %s" % kv for kv in sorted(res.items())))


# ---------------------------------------------------------------- inspect / verify / records


IMAGE_HELP = (
    "DIR may be a raw-flash image instead: a regular file holding the bytes of a board's "
    'ddq_flash region, block 0 first (docs/HOST.md "Raw-flash images"); its queue is read '
    "through ddq_flash.FlashStorage, the image only read (a replay writes its acks into it)"
)


def add_image_args(p: argparse.ArgumentParser, what: str = IMAGE_HELP) -> None:
    g = p.add_argument_group("raw-flash image", what)
    g.add_argument(
        "--name",
        metavar="NAME",
        help="the queue in the image: the name the board gave ddq.Queue (default %s)"
        % flashimg.DEFAULT_NAME,
    )
    g.add_argument(
        "--block-size",
        type=int,
        metavar="N",
        help="the region's erase block size in bytes (default %d; checked against the "
        "image)" % flashimg.DEFAULT_BLOCK_SIZE,
    )


def _image(args: argparse.Namespace, path: str) -> "flashimg.Image | None":
    """The checked image when path is a regular file, else None (a directory: --name and
    --block-size are refused)."""
    if flashimg.is_image(path):
        return flashimg.Image(path, args.block_size, args.name)
    if args.name is not None or args.block_size is not None:
        raise CommandError(
            "%s is not a raw-flash image (a regular file): --name and --block-size are for one"
            % path
        )
    return None


@contextlib.contextmanager
def queue_source(
    args: argparse.Namespace, path: str
) -> "Iterator[tuple[str, flashimg.Image | None]]":
    """(the directory a command reads, the image or None): path itself, or for a raw-flash
    image a private export of its queue (0700, files 0600, removed after), so that the
    command's output, --json and exit status are the directory's own; errors that name the
    export name path."""
    img = _image(args, path)
    if img is None:
        yield path, None
        return
    tmp = tempfile.mkdtemp(prefix="ddq-image-")
    d = os.path.join(tmp, "q")
    try:
        img.export(d)
        try:
            yield d, img
        except HostError as e:
            e.args = (str(e).replace(d, path),)
            raise
    finally:
        img.close()
        shutil.rmtree(tmp, ignore_errors=True)


def argparse_inspect(p: argparse.ArgumentParser) -> None:
    """recovered state of a queue directory (not modified)"""
    p.add_argument("dir", metavar="DIR")
    add_option_args(p)
    add_image_args(p)
    p.add_argument("--payloads", action="store_true", help="include every payload in hex (--json)")
    p.add_argument("--now-ms", type=int, help="wall clock for lease/due figures (default: now)")
    add_hmac_arg(p)
    add_json_arg(p)


def add_hmac_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hmac-key-file",
        metavar="F",
        help="the device's HMAC key in hex (else $%s): check every message's tag, decrypt "
        "encrypted payloads (SPEC E23)" % envelope.HMAC_KEY_ENV,
    )


def do_inspect(args: argparse.Namespace) -> int:
    key = envelope.load_hmac_key(args.hmac_key_file, args.dir)
    with queue_source(args, args.dir) as (d, img):
        opts, src = resolve_options(args, d)
        info = inspect_dir.inspect(
            d,
            opts,
            payloads=args.payloads,
            now_ms=args.now_ms,
            hmac_key=key,
            # an image: ddq's recovery runs on ddq_flash over it, as on the board
            flash=None if img is None else (img.storage, img.name),
        )
    info["path"] = args.dir
    info["options_source"] = src
    if args.json:
        out_json(info)
    else:
        sys.stdout.write(inspect_dir.render_inspect(info))
    return 0


def _scan(args: argparse.Namespace, d: str) -> tuple[fsck.Report, dict[str, str]]:
    opts, src = resolve_options(args, d)
    if not os.path.isdir(d):
        raise CommandError("%s: no such directory" % d)
    try:
        rep = fsck.scan(d, opts, exact_segment_bytes=src["segment_bytes"] != "default")
    except fsck.NotAQueue as e:
        raise CommandError(str(e)) from None
    rep.path = args.dir  # (a raw-flash image: its name, not its export's)
    return rep, src


def argparse_verify(p: argparse.ArgumentParser) -> None:
    """fsck: exit 0 clean, 1 torn tail only, 2 corrupt"""
    p.add_argument("dir", metavar="DIR")
    add_option_args(p)
    add_image_args(p)
    add_json_arg(p)


def do_verify(args: argparse.Namespace) -> int:
    with queue_source(args, args.dir) as (d, _img):
        rep, src = _scan(args, d)
        hint = qoptions.options_hint(d, rep.options, src) if rep.verdict == fsck.CORRUPT else None
        if hint:
            hint = hint.replace(d, args.dir)
    if args.json:
        js = rep.to_json()
        js["options_source"] = src
        js["options_hint"] = hint
        out_json(js)
    else:
        sys.stdout.write(fsck.render_verify(rep))
        if hint:
            sys.stdout.write("hint: %s\n" % fsck.printable(hint))
        elif rep.verdict == fsck.CORRUPT:  # the fix, as records, inspect, replay and push name it
            sys.stdout.write(
                "next: `ddq salvage %s OUT` copies every intact item into a new directory OUT "
                "(%s is only read)\n" % ((fsck.printable(args.dir),) * 2)
            )
    return rep.verdict


def argparse_records(p: argparse.ArgumentParser) -> None:
    """dump the records of a queue directory"""
    p.add_argument("dir", metavar="DIR")
    add_option_args(p)
    add_image_args(p)
    p.add_argument(
        "--all", action="store_true", help="also show invalid records and torn/invalid tails"
    )
    add_json_arg(p)


def do_records(args: argparse.Namespace) -> int:
    with queue_source(args, args.dir) as (d, _img):
        rep, _src = _scan(args, d)
    if args.json:
        js = rep.to_json(with_records=True)
        if not args.all:
            for s in js["segments"]:
                s["records"] = [r for r in s["records"] if r.get("status") != "invalid"]
                s["tail"] = (
                    None
                    if s["tail"] is None
                    else {k: v for k, v in s["tail"].items() if k != "header"}
                )
        out_json(
            {
                "path": js["path"],
                "manifest": js["manifest"],
                "segments": js["segments"],
                "verdict": js["verdict"],
                "generation": js["generation"],
            }
        )
    else:
        sys.stdout.write(fsck.render_records(rep, show_all=args.all))
    if rep.verdict != fsck.CORRUPT:
        return 0
    # exit 2, as verify (docs/HOST.md "Errors and exit status"), naming the fix
    raise CommandError(
        "%s is corrupt (`ddq verify %s` says where); `ddq salvage %s OUT` copies every intact "
        "item into a new directory OUT (%s is only read)"
        % (args.dir, args.dir, args.dir, args.dir),
        code=2,
    )


# ---------------------------------------------------------------- export


def argparse_export(p: argparse.ArgumentParser) -> None:
    """write the queue of a raw-flash image as a DDQ directory, its files byte for byte as on
    the flash (the image only read)"""
    p.add_argument(
        "image",
        metavar="IMG",
        help="the raw-flash image: a ddq_flash region's bytes, block 0 first",
    )
    p.add_argument("out", metavar="DIR", help="the new queue directory (must not exist)")
    add_image_args(
        p,
        "IMG is read through ddq_flash.FlashStorage and never written (docs/HOST.md "
        '"Raw-flash images"); DIR gets the queue\'s files and an empty queue.lock',
    )
    add_json_arg(p)


def do_export(args: argparse.Namespace) -> int:
    if os.path.lexists(args.out):
        raise CommandError("%s: exists (export writes a new directory)" % args.out)
    img = flashimg.Image(args.image, args.block_size, args.name)
    parent = os.path.dirname(os.path.abspath(args.out))
    tmp = tempfile.mkdtemp(prefix=".ddq-export-", dir=parent)
    try:
        files = img.export(os.path.join(tmp, "q"))
        os.rename(os.path.join(tmp, "q"), args.out)  # the directory appears whole or not at all
        fd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res = {
        "image": args.image,
        "name": img.name,
        "block_size": img.bs,
        "blocks": img.info["blocks"],
        "unit": img.unit,
        "dir": args.out,
        "files": files,
        "bytes": sum(f["bytes"] for f in files),
    }
    return show(
        args,
        res,
        "exported queue %s of %s (%d blocks of %d bytes, program unit %d): %d files, %d bytes "
        "to %s"
        % (
            fsck.printable(img.name),
            args.image,
            res["blocks"],
            img.bs,
            img.unit,
            len(files),
            res["bytes"],
            args.out,
        ),
    )


# ---------------------------------------------------------------- salvage


def argparse_salvage(p: argparse.ArgumentParser) -> None:
    """copy every intact item of a damaged queue into a new one (DIR only read): exit 0 clean, 1
    with loss, 2 nothing usable"""
    p.add_argument("dir", metavar="DIR", help="the damaged queue directory (only read)")
    p.add_argument("out", metavar="OUT", help="the new queue directory (must not exist)")
    add_option_args(p)
    add_image_args(p)
    p.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="say what it will take and show progress on stderr even when it is not a terminal",
    )
    add_json_arg(p)


def _salvage_ranges(rs: list[list[int]]) -> str:
    return ", ".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in rs) or "none"


def _salvage_runs(seqs: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for x in seqs:
        if runs and runs[-1][1] == x - 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return runs


def render_salvage(rep: dict[str, Any], gen0: bool = False) -> str:
    """The report as text; gen0: DIR is generation 0 without a marker, which has no manifest by
    design (SPEC V2, K7), not a missing one."""
    out = ["salvage %s -> %s" % (rep["source"], rep["output"] or "(nothing written)")]
    man = rep["manifest"]
    if gen0 and man == "missing":
        man = "none (generation 0 has none until its first compaction)"
    out.append(
        "manifest: %s; generations read: %s"
        % (man, " ".join(str(g) for g in rep["generations_read"]) or "none")
    )
    out.append(
        "segments read: %d; missing: %s"
        % (len(rep["segments_read"]), " ".join(rep["segments_missing"]) or "none")
    )
    for name, start, end in rep["damaged"]:
        if end < 0:
            out.append("damaged: %d segment(s) missing from %s" % (-end, name))
        else:
            out.append("damaged: %s bytes %d..%d (%d bytes)" % (name, start, end, end - start))
    for name, start, _end in rep["out_of_order"]:
        out.append("out of order (a DATA seq that does not grow): %s at %d" % (name, start))
    o = rep.get("other_generations") or {}
    if o.get("damaged") or o.get("out_of_order"):
        out.append(
            "other generations (read for the items the selected one lacks): "
            "%d damaged, %d out of order" % (len(o["damaged"]), len(o["out_of_order"]))
        )
    if rep["torn_tail_bytes"]:
        out.append(
            "torn tail (a crash's unfinished write, not a loss): %d bytes" % rep["torn_tail_bytes"]
        )
    out.append(
        "intact records: %d (%d about a lost DATA)"
        % (rep["records_intact"], rep["orphan_records"])
    )
    out.append("kept: %d items; dropped (acked): %d" % (rep["kept"], rep["dropped_acked"]))
    out.append(
        "reset to available (possible duplicates): %d: %s"
        % (len(rep["reset"]), _salvage_ranges(_salvage_runs(rep["reset"])))
    )
    if rep["quarantined_uncertain"]:
        out.append(
            "quarantined, attempts/reason may be short: %s"
            % _salvage_ranges(_salvage_runs(rep["quarantined_uncertain"]))
        )
    out.append("lost seqs: %d: %s" % (rep["lost_count"], _salvage_ranges(rep["lost_seqs"])))
    if rep["snapshot_items_lost"] > 0:
        out.append("snapshot items lost: %d" % rep["snapshot_items_lost"])
    if rep["uncertain_gaps"]:
        out.append(
            "gaps lost or compacted away (unknown which): %s"
            % _salvage_ranges(rep["uncertain_gaps"])
        )
    out.append("next_seq: %d; generation: %d" % (rep["next_seq"], rep["generation"]))
    why = [
        w
        for w, on in (
            ("damaged bytes", rep["damaged"] or rep["segments_missing"]),
            ("a log out of order", rep["out_of_order"]),
            ("%d reset to available" % len(rep["reset"]), rep["reset"]),
            ("quarantines that may be short", rep["quarantined_uncertain"]),
            ("the manifest " + rep["manifest"], rep["manifest"] == "damaged" or man == "missing"),
        )
        if on
    ]
    known = rep["lost_count"] or rep["snapshot_items_lost"] > 0 or rep["uncertain_gaps"]
    if rep["status"] == "salvaged_with_loss" and not known and why:
        out.append("result: salvaged_with_loss (no seq known lost; %s)" % ", ".join(why))
    else:
        out.append("result: %s" % rep["status"])
    if rep["output"] is not None:
        out.append(
            "next: `ddq verify %s`; then `ddq replay %s --to URL`, or put it in place of %s "
            "(a pulled one: `ddq push %s :REMOTE_DIR`)"
            % (rep["output"], rep["output"], rep["source"], rep["output"])
        )
    return "\n".join(out) + "\n"


def _salvage_into(
    mod: Any, src: str, out: str, real_in: str, opts: dict[str, Any], carry: Any = None
) -> Any:
    """Salvage into OUT.partial, renamed to OUT at the end: a kill leaves no OUT (SPEC [K8]);
    carry(partial) writes what goes with the queue (its options) before the rename."""
    part = out.rstrip("/") + ".partial"
    real_part = os.path.realpath(part)
    if real_part == real_in or real_part.startswith(real_in + os.sep):
        raise CommandError("%s: inside %s (salvage never writes into DIR)" % (part, src))
    if os.path.lexists(part):
        if os.path.islink(part) or not os.path.isdir(part):
            raise CommandError("%s: exists and is not an earlier salvage's directory" % part)
        names = os.listdir(part)
        for n in names:
            p = os.path.join(part, n)
            if (
                os.path.islink(p)
                or not os.path.isfile(p)
                or not (
                    n in ("queue.format", "queue.manifest", "queue.manifest.tmp", "queue.lock")
                    or n in ("ddq-options.json", ".ddq-pull.json")  # carry_options writes them
                    or mod.ddq.parse_segment_name(n) is not None
                )
            ):
                raise CommandError(
                    "%s: holds %r, not only an interrupted salvage's files" % (part, n)
                )
        for n in names:  # an interrupted run's partial copy (its source untouched): redone
            os.remove(os.path.join(part, n))
        os.rmdir(part)
    rep = mod.salvage(src, part, **opts)
    if rep["output"] is not None:
        if carry is not None:
            carry(part)
        os.rename(part, out)  # the result appears whole or not at all
        parent = os.path.dirname(os.path.abspath(out))
        fd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename durable (S3)
        finally:
            os.close(fd)
        rep["output"] = out
    return rep


def do_salvage(args: argparse.Namespace) -> int:
    """Exit 0 clean, 1 salvaged with loss, 2 nothing usable (SPEC [K8])."""
    with queue_source(args, args.dir) as (d, _img):
        rep, gen0 = _salvage_dir(args, d)
    if args.json:
        out_json(rep)
    else:
        sys.stdout.write(render_salvage(rep, gen0))
    return {"clean": 0, "salvaged_with_loss": 1}.get(rep["status"], 2)


def _salvage_dir(args: argparse.Namespace, d: str) -> tuple[dict[str, Any], bool]:
    opts, src = resolve_options(args, d)
    if not os.path.isdir(d):
        raise CommandError("%s: no such directory" % d)
    if os.path.lexists(args.out):
        raise CommandError("%s: exists (salvage writes a new directory)" % args.out)
    real_in = os.path.realpath(args.dir)
    real_out = os.path.realpath(args.out)
    if real_out == real_in or real_out.startswith(real_in + os.sep):
        raise CommandError("%s: inside %s (salvage never writes into DIR)" % (args.out, args.dir))
    # OUT is written for DIR's device: with its writer's options, never others (HOST.md "Queue
    # options"), and they go with OUT (carry_options), as a pull records them.
    qoptions.check_writer_options(
        d, opts, src, "salvage", "%s for the device of %s" % (args.out, args.dir)
    )
    ddq = locate.load_ddq()
    try:
        import ddq_salvage
    except ImportError:
        if locate.port_dir() not in sys.path:
            sys.path.insert(0, locate.port_dir())
        import ddq_salvage
    run_opts: dict[str, Any] = opts
    bar = None
    if args.progress or (args.progress is None and sys.stderr.isatty()):
        # what it will take, then the bytes read as they go (docs/HOST.md "Progress")
        from . import progress
        from .transfer import Progress

        segs, size = progress.on_disk([d])
        log_err(progress.salvage_plan(args.dir, segs, size))
        bar = Progress(size, "salvage", True)
        count = progress.CountReads(ddq.PosixStorage(), lambda n: bar.update(min(n, size)))
        run_opts = dict(opts, storage=count)
    try:
        rep: dict[str, Any] = _salvage_into(
            ddq_salvage,
            d,
            args.out,
            real_in,
            run_opts,
            lambda part: qoptions.carry_options(d, part, opts, src, "salvage"),
        )
    finally:
        if bar is not None:
            bar.finish()
    if d != args.dir:
        rep["source"] = args.dir  # a raw-flash image: its name, not its export's
    rep["options_source"] = src
    # (render_salvage: a generation-0 directory has no manifest by design)
    gen0 = set(rep["generations_read"]) <= {0} and not os.path.lexists(
        os.path.join(d, "queue.format")
    )
    return rep, gen0


# ---------------------------------------------------------------- replay


def argparse_replay(p: argparse.ArgumentParser) -> None:
    """deliver pending messages to an MQTT broker (QoS 1)"""
    p.add_argument(
        "dir",
        metavar="DIR",
        nargs="+",
        help="queue directories (or raw-flash images: replay writes its acks into them); "
        "several are replayed at once, one connection each",
    )
    add_image_args(p)
    p.add_argument(
        "--to",
        required=True,
        metavar="mqtt[s]://HOST[:PORT][/PREFIX]",
        help="broker URL; mqtts:// is TLS (port 8883 by default). Each message goes to the topic "
        "its device gave it; /PREFIX (opt-in) publishes under PREFIX/",
    )
    p.add_argument("--username", metavar="NAME", help="MQTT user name (or user@HOST in the URL)")
    pw = p.add_mutually_exclusive_group()
    pw.add_argument(
        "--password-env",
        metavar="VAR",
        help="read the MQTT password from environment variable VAR",
    )
    pw.add_argument(
        "--password-file",
        metavar="PATH",
        help="read the MQTT password from PATH (its first line; keep it mode 600)",
    )
    p.add_argument(
        "--ca-file",
        metavar="PEM",
        help="mqtts: CA certificate(s) the broker's certificate must chain to (default: the "
        "system's)",
    )
    p.add_argument(
        "--cert", metavar="PEM", help="mqtts: client certificate (may hold the key too)"
    )
    p.add_argument("--key", metavar="PEM", help="mqtts: the client certificate's private key")
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be sent; DIR is not touched"
    )
    p.add_argument("--limit", type=int, metavar="N", help="deliver at most N messages, then stop")
    p.add_argument(
        "--lease-ms", type=int, default=60000, help="lease of each claim (default %(default)s)"
    )
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for CONNACK/PUBACK"
    )
    p.add_argument(
        "--client-id",
        help="MQTT client id (default ddq-replay-<time>); {dir} is the directory's name "
        "(several DIRs: -{dir} is appended when missing)",
    )
    p.add_argument(
        "--window",
        type=int,
        default=16,
        metavar="W",
        help="QoS 1 publishes in flight per connection (default %(default)s; 1: one at a time)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        metavar="N",
        help="a message the broker closes the connection for, N times while it is published "
        "alone, is quarantined as unpublishable and named (default %(default)s; 1..1000)",
    )
    p.add_argument(
        "--prefix-per-dir",
        action="store_true",
        help="publish each DIR under PREFIX/<its name> ({dir} in the URL's prefix does the same)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show progress on stderr even when it is not a terminal",
    )
    p.add_argument(
        "--send-expired",
        action="store_true",
        help="publish envelopes past their TTL too (default: quarantine them as 'expired')",
    )
    add_hmac_arg(p)
    add_option_args(p)
    p.add_argument("-v", "--verbose", action="store_true", help="one line per message on stderr")
    add_json_arg(p)


def do_replay(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        return _replay(args, stack)


def _replay(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    from . import replay

    jobs = []
    for d in args.dir:
        # A raw-flash image: read from its export (options, checks, the dry run); a real
        # replay writes its claims and acks into the image itself, through ddq_flash.
        qd, img = stack.enter_context(queue_source(args, d))
        opts, src = resolve_options(args, qd)
        job = replay.Job(qd, opts, envelope.load_hmac_key(args.hmac_key_file, d))
        if not args.dry_run:
            # replay appends claims and acks: only with the writer's own options
            # (docs/HOST.md "Queue options").
            qoptions.check_writer_options(qd, opts, src, "replay")
            if img is not None:
                stack.callback(img.close)
                job.dir, job.name = d, img.name
                job.storage = lambda img=img: img.storage(writable=True)
                log_err(
                    "ddq: %s is a raw-flash image: replay writes its claims and acks into it "
                    "(ddq_flash programs, as the board does)" % d
                )
        jobs.append(job)
    same = ("ca_file", "limit", "lease_ms", "timeout", "window", "max_attempts", "send_expired")
    ro = replay.ReplayOptions.parse(
        args.to,
        args.username,
        args.password_env,
        args.password_file,
        warn=lambda w: log_err("ddq: %s" % w),
        certfile=args.cert,
        keyfile=args.key,
        log=(lambda m: log_err(fsck.printable(m))) if args.verbose else None,  # topics
        **{k: getattr(args, k) for k in same},
    )
    for j, (prefix, cid) in zip(
        jobs, replay.fleet_names(args.dir, ro.prefix, args.client_id, args.prefix_per_dir)
    ):
        j.prefix, j.client_id = prefix, cid
    show = args.progress or (sys.stderr.isatty() and not args.verbose)
    if args.dry_run:
        results = [replay.plan(j, ro) for j in jobs]
        for r, d in zip(results, args.dir):
            r.dir = d  # (an image's path, not its export's)
    else:
        if show:  # what it will take, before it opens anything (docs/HOST.md "Progress")
            from . import progress

            log_err(progress.replay_plan(args.dir, *progress.on_disk(args.dir)))
        prog = replay.Progress(args.dir, sys.stderr, sys.stderr.isatty()) if show else None
        if len(jobs) == 1:
            try:
                res = replay.replay(
                    jobs[0], ro, progress=prog.callback(jobs[0].dir) if prog else None
                )
            finally:
                if prog is not None:
                    prog.stop()
            results = [res]
        else:
            results = replay.replay_many(jobs, ro, prog).dirs
    if args.json:
        out_json(results[0].as_dict() if len(results) == 1 else replay.Fleet(results).as_dict())
    else:
        for res in results:
            head = "%s: " % res.dir if len(results) > 1 else ""  # fleet: whose line
            for w in res.would_send:  # a dry run's
                print(
                    "%swould send seq %d%s -> %s (%d bytes)"
                    % (
                        head,
                        w["seq"],
                        " reading %d" % w["reading"] if "reading" in w else "",
                        fsck.printable(w["topic"]),
                        w["bytes"],
                    )
                )
            if res.error is not None:
                print("%serror: %s" % (head, fsck.printable(res.error)))
                continue
            print(
                "%s%s %d, failed %d, skipped %d, expired %d, unpublishable %d, "
                "unauthenticated %d, remaining %d%s"
                % (
                    head,
                    "dry run: would send" if res.dry_run else "sent",
                    len(res.would_send) if res.dry_run else res.sent,
                    res.failed,
                    res.skipped,
                    res.expired,
                    res.unpublishable,
                    res.unauthenticated,
                    res.remaining,
                    # dead letters the queue had no room for: dropped, counted (OUTBOX E32)
                    ", dead letters dropped %d" % res.dead_dropped if res.dead_dropped else "",
                )
            )
            for k, seqs in (
                ("unpublishable", res.unpublishable_seqs),
                ("unauthenticated", res.unauthenticated_seqs),
            ):  # dead letters: name them
                if seqs:
                    print("%s%s: seq %s" % (head, k, ", ".join(map(str, seqs))))
    if any(r.interrupted for r in results):
        return 130
    return 1 if any(r.failed or r.error is not None for r in results) else 0


# ---------------------------------------------------------------- test


def argparse_test(p: argparse.ArgumentParser) -> None:
    """run the shared test suite on a device"""
    add_device_args(p)
    p.add_argument("-k", metavar="SUBSTR", help="only tests whose name contains SUBSTR")
    p.add_argument(
        "--fs",
        choices=["posix", "lfs2", "fat", "raw"],
        default="posix",
        help="filesystem under test (posix = the board's own flash; raw = the board's raw "
        "region through ddq_flash, beside the app's queue: stop the app first)",
    )
    p.add_argument(
        "--root", metavar=":DIR", help="device directory for test files (default :<cwd>/ddq-test)"
    )
    p.add_argument(
        "--installed",
        action="store_true",
        help="test ddq and its modules as installed on the device (`ddq flash`) instead of the "
        "checkout's port/ (which serves only what the device lacks)",
    )
    p.add_argument(
        "--ramdisk-kb",
        type=int,
        metavar="N",
        help="size of the --fs lfs2/fat RAM disk in KiB (it lives in the device's heap; "
        "default 2048 for lfs2, 4096 for fat)",
    )
    p.add_argument(
        "--each",
        action="store_true",
        help="one session per test module (a small heap need not hold them one after another)",
    )
    p.add_argument(
        "--mpy",
        action="store_true",
        help="mount the suite and port/ compiled to .mpy (the device compiles nothing)",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds without output from the device before the run is declared hung "
        "(interrupted, exit 1); default 300, 900 on the virtual board (the unix port shares "
        "this host's cores: a busy host slows a silent test)",
    )
    p.add_argument("modules", nargs="*", metavar="MODULE")


def do_test(args: argparse.Namespace) -> int:
    from . import testrun

    if args.ramdisk_kb is not None and args.fs == "posix":
        raise CommandError("--ramdisk-kb needs --fs lfs2 or --fs fat")
    if args.ramdisk_kb is not None and args.ramdisk_kb < 1:
        raise CommandError("--ramdisk-kb must be at least 1")
    if args.idle_timeout is not None and not args.idle_timeout > 0:
        raise CommandError("--idle-timeout must be more than 0")
    with open_device(args) as dev:
        rc, summary = testrun.run(
            dev,
            modules=args.modules,
            k=args.k,
            fs=args.fs,
            root=args.root,
            installed=args.installed,
            ramdisk_kb=args.ramdisk_kb,
            each=args.each,
            mpy=args.mpy,
            idle_timeout=args.idle_timeout,
            out=lambda b: (sys.stdout.buffer.write(b), sys.stdout.flush()),
        )
    if summary is None:
        raise CommandError("the test run ended without a summary line")
    return rc


# ---------------------------------------------------------------- demo


def argparse_demo(p: argparse.ArgumentParser) -> None:
    """the end-to-end demo (`make demo`): a virtual board queues telemetry and delivers it to a
    real MQTT broker through broker restarts and power cuts, then proves nothing was lost
    (about two minutes; `ddq demo -h` for its options)"""
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def demo_main(argv: list[str]) -> int:
    """`ddq demo ARGS`: demo/run.py's main (the wheel carries it as ddqhost/demo), the run
    `make demo` makes; its own options, help and exit status."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "demo"), os.path.join(locate.repo_root(), "demo")):
        path = os.path.join(d, "run.py")
        if os.path.isfile(path) and os.path.isfile(os.path.join(d, "devapp.py")):
            break
    else:
        raise CommandError(
            "the demo (run.py, devapp.py) is neither in this ddq package nor in "
            "a checkout: reinstall ddq"
        )
    spec = importlib.util.spec_from_file_location("ddq_demo_run", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ddq_demo_run"] = mod
    spec.loader.exec_module(mod)
    rc: int = mod.main(argv, prog="ddq demo")
    return rc


def do_demo(args: argparse.Namespace) -> int:
    return demo_main(list(args.rest))


# ---------------------------------------------------------------- table and main

# The command table (mpremote's shape): name -> (handler, argparse factory); a factory's
# docstring is the command's help line.
COMMANDS = {
    "board": (do_board, argparse_board),
    "app": (do_app, argparse_app),
    "flash": (do_flash, argparse_flash),
    "pull": (do_pull, argparse_pull),
    "push": (do_push, argparse_push),
    "stats": (do_stats, argparse_stats),
    "inspect": (do_inspect, argparse_inspect),
    "verify": (do_verify, argparse_verify),
    "records": (do_records, argparse_records),
    "salvage": (do_salvage, argparse_salvage),
    "export": (do_export, argparse_export),
    "replay": (do_replay, argparse_replay),
    "test": (do_test, argparse_test),
    "demo": (do_demo, argparse_demo),
}


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as every other: one line on stderr, exit 2 (docs/HOST.md)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, "ddq: %s: %s (%s -h)\n" % (self.prog, fsck.printable(message), self.prog))


# Every numeric argument of every command, by its dest: (lowest, highest, lowest excluded).
# Out of range (NaN and infinity included) is one line and exit 2, before anything runs
# (docs/HOST.md "Trust"); tests/host/test_host_cli_errors.py holds every int/float option to
# an entry here.
U64 = (1 << 64) - 1
ARG_RANGES: dict[str, tuple[float, float, bool]] = {
    **{k: (lo, hi, False) for k, (lo, hi) in options.RANGES.items()},  # SPEC §7.1
    "size_kib": (32, 4 << 20, False),  # 8 blocks of 4 KiB .. 4 GiB
    "raw_kib": (0, 4 << 20, False),  # the virtual board's raw region: 0 (none) .. 4 GiB
    "seconds": (0, 86400, False),
    "now_ms": (0, U64, False),  # a u64, as every time the format stores
    "limit": (0, U64, False),
    "lease_ms": (1, 604800000, False),  # what claim() takes (SPEC O8)
    "timeout": (0, 3600, True),  # replay.MAX_TIMEOUT_S
    "window": (1, 65535, False),  # OUTBOX E25
    "max_attempts": (1, 1000, False),  # replay: drops one message may take (OUTBOX E26)
    "ramdisk_kb": (1, 1 << 20, False),
    "idle_timeout": (0, 86400, True),
    "block_size": (flashimg.MIN_BLOCK_SIZE, flashimg.MAX_BLOCK_SIZE, False),  # a raw-flash image
}
# micropython's -X heapsize=: digits, then w (words), then K or M; at least 700 bytes.
_HEAPSIZE = re.compile(r"^([0-9]{1,10})([wW]?)([kKmM]?)$")


def check_ranges(args: argparse.Namespace) -> None:
    """CommandError (exit 2) for the first argument out of ARG_RANGES (or a bad --heapsize)."""
    for dest, (lo, hi, open_lo) in ARG_RANGES.items():
        v = getattr(args, dest, None)
        if v is None or isinstance(v, bool):
            continue
        if not ((lo < v) if open_lo else (lo <= v)) or not v <= hi:  # (NaN fails both)
            span = "more than %g and at most %g" % (lo, hi) if open_lo else "%d..%d" % (lo, hi)
            raise CommandError(
                "--%s must be %s, got %s" % (dest.replace("_", "-"), span, v), code=2
            )
    hs = getattr(args, "heapsize", None)
    if hs is not None:
        m = _HEAPSIZE.match(hs)
        n = (
            0
            if m is None
            else int(m.group(1)) * {"": 1, "k": 1024, "m": 1 << 20}[m.group(3).lower()]
        )
        if not 700 <= n <= 1 << 31:
            raise CommandError(
                "--heapsize must be a size such as 8M (700 bytes to 2048M), got %r" % hs, code=2
            )


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ddq", description="ddq host tools")
    ap.add_argument(
        "--version", action=_VersionAction, nargs=0, help="print the ddq version and exit"
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (_h, factory) in COMMANDS.items():
        helptext = " ".join((factory.__doc__ or "").split())
        p = sub.add_parser(name, help=helptext, description=helptext)
        factory(p)
    return ap


class _VersionAction(argparse.Action):
    # Lazy: importing ddq costs ~0.1 s, paid only when --version is asked for.
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        try:
            v = locate.load_ddq().__version__
        except locate.DdqNotFound:
            v = "unknown"
        print("ddq %s" % v)
        parser.exit(0)


def _run(handler: Any, args: argparse.Namespace) -> int:
    """The one boundary where what a command raises becomes a HostError (errors.as_host_error);
    interrupts pass through, and so does a bug (its traceback)."""
    try:
        return int(handler(args) or 0)
    except (HostError, KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as e:
        he = as_host_error(e)
        if he is None:
            raise
        raise he from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["demo"]:  # the demo's own parser: its options and -h
            return demo_main(argv[1:])
    except HostError as e:
        log_err("ddq: %s" % e)
        return e.code
    args = build_parser().parse_args(argv)
    try:
        check_ranges(args)
        return _run(COMMANDS[args.command][0], args)
    except HostError as e:
        log_err("ddq: %s" % fsck.printable(str(e)))  # one line, whatever a name holds
        return e.code
    except KeyboardInterrupt:
        log_err("ddq: interrupted")
        return 130
    except BrokenPipeError as e:  # the reader of stdout went away (`ddq records DIR | head`)
        _quiet_stdout()
        log_err("ddq: %s" % (e.strerror or e))
        return 1


def _quiet_stdout() -> None:
    # Python flushes stdout at exit once more, into the closed pipe: point it at /dev/null.
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
