"""A hostile device (docs/HOST.md "Trust"): whatever a tampered board prints, the host parses it as
data only (ast.literal_eval, shape-checked, bounded), never runs it, and refuses with one clear
line; a pull never writes outside its destination, never follows or opens anything but a regular
file, and writes nothing at all when it refuses.

The device here is a fake transport under the real Device class (so every parser the host has runs
for real): it answers each snippet the host sends with crafted bytes. This is the one place a fake
stands in for a board; a real board cannot be made to lie like this without custom firmware.
"""

import base64
import hashlib
import os
import stat

import pytest

from conftest import REPO
from ddqhost import cli, locate, qdir, qoptions, testrun, transfer
from ddqhost.device import MAX_REPLY, Device, DeviceError

SEG = "segment-00000000000000000000.log"
SEG_DATA = b""  # an empty segment: enough for `looks like a queue`
PROBE = {
    "name": "micropython",
    "version": (1, 29, 0),
    "build": "standard",
    "mpy": 6,
    "machine": "linux [GCC 12.2.0] version",
    "platform": "linux",
    "cwd": "/flash",
}


def _sha(b):
    return hashlib.sha256(b).hexdigest()


class FakeTransport:
    """Answers Device's snippets: replies[kind] (bytes) overrides the honest answer of that
    kind."""

    mounted = False

    def __init__(self, replies=None, files=None, listing=None):
        self.replies = dict(replies or {})
        self.files = dict(files if files is not None else {SEG: SEG_DATA})
        self.listing = listing
        self.codes = []

    @staticmethod
    def kind(code):
        if "sys.implementation" in code or "s.implementation" in code:
            return "probe"
        if "ilistdir" in code and "hashlib" in code:
            return "hash_dir"
        if "ilistdir" in code:
            return "listdir"
        if "b2a_base64" in code and "readinto" in code:
            return "read_file"
        if "print(repr((ddq.__version__" in code:
            return "import_check"
        if "ddq.Queue(" in code:
            return "stats"
        if "tuple(__import__('os').stat(" in code:
            return "stat"
        if "hashlib.sha256()" in code:
            return "sha256"
        if "__version__', '?')" in code:
            return "ddq_version"
        if "print(repr(_rc))" in code:
            return "rc"
        return "other"

    def honest(self, kind, code):
        if kind == "probe":
            return repr(PROBE).encode()
        if kind == "hash_dir":
            rows = self.listing
            if rows is None:
                rows = [(n, 0x8000, len(d), _sha(d)) for n, d in sorted(self.files.items())]
            return repr(rows).encode()
        if kind == "listdir":
            return repr([(n, False, len(d)) for n, d in self.files.items()]).encode()
        if kind == "read_file":
            name = code.split("open(")[1].split(",")[0].strip("'\"").rsplit("/", 1)[-1]
            data = self.files[name]
            return b"".join(
                base64.b64encode(data[i : i + 1536]) + b"\n" for i in range(0, len(data), 1536)
            )
        if kind == "import_check":
            return repr((locate.load_ddq().__version__, "ddq.py")).encode()
        if kind == "stats":
            return repr({"next_seq": 1, "total_items": 0}).encode()
        if kind == "stat":
            return repr((0x8000, 0, 0, 0, 0, 0, 10, 0, 0, 0)).encode()
        if kind == "sha256":
            return _sha(b"").encode()
        if kind == "ddq_version":
            return b"'0.1.0'"
        if kind == "rc":
            return b"0"
        return b""

    def exec(self, code, data_consumer=None):
        self.codes.append(code)
        k = self.kind(code)
        out = self.replies[k] if k in self.replies else self.honest(k, code)
        if data_consumer is not None:
            data_consumer(out)
            return b""
        return out

    def exec_raw(self, code, timeout=None, data_consumer=None):
        # Device.exec with its own idle bound (a silent open: ddq stats) uses mpremote's exec_raw
        return self.exec(code, data_consumer), b""

    # what Device.run / mount_local / close use
    def exec_raw_no_follow(self, code):
        self.codes.append(code)

    def follow(self, timeout, data_consumer=None):
        return b"", b""

    def mount_local(self, path):
        import types

        self.mounted = True
        self.cmd = types.SimpleNamespace(root=path + "/")  # what mpremote's mount leaves behind
        self.serial = types.SimpleNamespace(cmd=self.cmd)

    def umount_local(self):
        self.mounted = False

    def exit_raw_repl(self):
        pass

    def close(self):
        pass


def fake_device(**kw):
    dev = Device.__new__(Device)
    dev.port = "hostile"
    dev.t = FakeTransport(**kw)
    return dev


@pytest.fixture
def marker(tmp_path):
    """A file a hostile reply tries to create on the host; it must never exist."""
    m = tmp_path / "pwned"
    yield m
    assert not m.exists(), "the host ran code sent by the device"


def hostile_replies(marker):
    """Replies that are code, not data, or data of the wrong kind, or too much of it."""
    m = str(marker)
    return [
        # The issue's payload: runs a shell command through object.__subclasses__ under eval().
        (
            "(('0.1.0' if [c for c in ().__class__.__base__.__subclasses__() "
            "if c.__name__=='_wrap_close'][0].__init__.__globals__['system']('id > %s')==0 "
            "else '0.1.0'), 'ddq.mpy')" % m
        ).encode(),
        ("__import__('os').system('touch %s')" % m).encode(),
        ("(open(%r, 'w').write('x'), 'ddq.py')" % m).encode(),
        b"'0.1.0' * 3",  # an expression
        b"[" * 400 + b"]" * 400,  # nested beyond the parser
        b"(" * 90 + b"1," + b")" * 90,  # nested, but a literal: the wrong shape
        b"{1, 2}",
        b"b'\\x00\\x01'",
        b"('0.1.0', 'ddq.py', 'extra')",
        b"(1, 2)",
        b"None",
        b"{'name': ('x',) * 3}",
        b"{'name': ('x', 'y'), 'version': (1,), 'build': '', 'mpy': 'six', 'machine': '', "
        b"'platform': '', 'cwd': ''}",
        b"\xff\xfe not utf-8",
        b"'" + b"a" * (MAX_REPLY + 10) + b"'",  # far more than any reply
    ]


def hostile_ids():
    return [
        "subclasses",
        "import-os",
        "open",
        "expression",
        "deep",
        "nested",
        "set",
        "bytes",
        "3-tuple",
        "ints",
        "none",
        "dict-expression",
        "dict-wrong-types",
        "not-utf8",
        "huge",
    ]


# ---------------------------------------------------------------- every reply the host parses


@pytest.mark.parametrize("i", range(15), ids=hostile_ids())
def test_flash_import_check_never_evaluates_the_reply(i, marker):
    reply = hostile_replies(marker)[i]
    dev = fake_device(replies={"import_check": reply})
    with pytest.raises(transfer.TransferError) as ei:
        transfer.flash(dev, fmt="py")
    assert "import check" in str(ei.value) or "more than" in str(ei.value)


def test_flash_issue_payload_through_the_cli(marker, monkeypatch, capsys):
    payload = hostile_replies(marker)[0]
    monkeypatch.setattr(
        cli, "open_device", lambda args: fake_device(replies={"import_check": payload})
    )
    rc = cli.main(["flash", "--format", "py"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith(
        "ddq: reply to the import check from the device has the wrong shape"
    ) or err[0].startswith("ddq: unexpected reply to the import check")


@pytest.mark.parametrize(
    "kind, call",
    [
        ("probe", lambda d: d.probe()),
        ("stat", lambda d: d.stat(":x")),
        ("listdir", lambda d: d.listdir(":")),
        ("hash_dir", lambda d: d.hash_dir(":q")),
        ("sha256", lambda d: d.sha256(":x")),
        ("stats", lambda d: transfer.device_stats(d, ":q", qoptions.DEFAULTS)),
        ("ddq_version", lambda d: cli._device_ddq_version(d)),
        ("rc", lambda d: testrun.run(d)),
    ],
    ids=["probe", "stat", "listdir", "hash_dir", "sha256", "stats", "ddq_version", "test_rc"],
)
def test_every_parsed_reply_refuses_hostile_data(kind, call, marker):
    for reply in hostile_replies(marker):
        if kind == "rc" and reply == b"None":
            continue  # a legitimate answer there: the run ended before setting it
        dev = fake_device(replies={kind: reply})
        with pytest.raises((DeviceError, transfer.TransferError)) as ei:
            call(dev)
        msg = str(ei.value)
        assert "\n" not in msg and ("reply" in msg or "more than" in msg), msg


def test_read_file_longer_than_listed_is_refused(tmp_path):
    dev = fake_device(files={SEG: b"x" * 5000})
    with pytest.raises(DeviceError, match="more than the 100 bytes it listed"):
        dev.read_file(":q/" + SEG, size=100)


def test_pull_listing_that_lies_about_sizes_writes_nothing(tmp_path):
    lie = [(SEG, 0x8000, 10, _sha(b"y" * 10))]
    dev = fake_device(files={SEG: b"y" * 4000}, listing=lie)
    with pytest.raises(DeviceError):
        transfer.pull(dev, ":q", str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- pull: names and file types

BAD_NAMES = [
    "..",
    ".",
    "",
    "../x",
    "../../etc/cron.d/x",
    "/abs/path",
    "a/b",
    "a\\b",
    "..\\x",
    "a\x00b",
    "x\ny",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n) for n in BAD_NAMES])
def test_pull_refuses_names_that_are_not_plain_file_names(name, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    listing = [(SEG, 0x8000, 0, _sha(b"")), (name, 0x8000, 3, _sha(b"bad"))]
    dev = fake_device(listing=listing)
    with pytest.raises(transfer.TransferError) as ei:
        transfer.pull(dev, ":q", str(work / "out"))
    assert "not a plain file name" in str(ei.value) and "nothing was written" in str(ei.value)
    assert os.listdir(work) == []  # no destination, no staging directory
    assert os.listdir(tmp_path) == ["work"]  # nothing beside it either (../x)
    assert not any("b2a_base64" in c for c in dev.t.codes)  # no file was even read


TYPES = [
    (0xA000, "a symbolic link", SEG),
    (0x1000, "a FIFO", SEG),
    (0x2000, "a character device", "queue.manifest"),
    (0x6000, "a block device", "queue.index"),
    (0xC000, "a socket", "notes"),
    (0x4000, "a directory where ddq expects a file", SEG),
    (0x4000, "a directory where ddq expects a file", "queue.manifest"),
]


@pytest.mark.parametrize("mode, what, name", TYPES, ids=[t[1] + " " + t[2] for t in TYPES])
def test_pull_refuses_entries_that_are_not_regular_files(mode, what, name, tmp_path):
    listing = [("queue.format", 0x8000, 0, _sha(b"")), (name, mode, None, None)]
    dev = fake_device(files={"queue.format": b""}, listing=listing)
    with pytest.raises(transfer.TransferError) as ei:
        transfer.pull(dev, ":q", str(tmp_path / "out"))
    assert what in str(ei.value) and "nothing was written" in str(ei.value), str(ei.value)
    assert os.listdir(tmp_path) == []
    assert not any("b2a_base64" in c for c in dev.t.codes)


def test_pull_refusal_is_one_line_from_the_cli(tmp_path, monkeypatch, capsys):
    listing = [(SEG, 0x8000, 0, _sha(b"")), ("../escape", 0x8000, 3, _sha(b"bad"))]
    monkeypatch.setattr(cli, "open_device", lambda args: fake_device(listing=listing))
    rc = cli.main(["pull", ":q", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and err[0].startswith("ddq: refusing :q: "), err
    assert os.listdir(tmp_path) == []


def test_pull_skips_plain_subdirectories_and_writes_private_files(tmp_path):
    data = b"\x00" * 64
    files = {SEG: data, "queue.format": b""}
    listing = [(n, 0x8000, len(d), _sha(d)) for n, d in sorted(files.items())] + [
        ("notes", 0x4000, None, None)
    ]
    dev = fake_device(files=files, listing=listing)
    res = transfer.pull(dev, ":q", str(tmp_path / "out"))
    assert res["skipped_subdirs"] == ["notes"] and res["files"] == 2
    out = tmp_path / "out"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    for n in (SEG, "queue.format", qdir.PULL_META):
        assert stat.S_IMODE(os.stat(out / n).st_mode) == 0o600, n
    assert (out / SEG).read_bytes() == data


def test_no_eval_exec_or_unpickling_in_the_host_tools():
    """No builtin eval/exec/compile call, no pickle/marshal/shelve import anywhere in host/."""
    import ast

    hits = []
    root = os.path.join(REPO, "host", "ddqhost")
    for n in sorted(os.listdir(root)):
        if not n.endswith(".py"):
            continue
        with open(os.path.join(root, n)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("eval", "exec", "compile", "__import__")
            ):
                hits.append("%s:%d: %s()" % (n, node.lineno, node.func.id))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                )
                for m in mods:
                    if (m or "").split(".")[0] in ("pickle", "marshal", "shelve", "dill"):
                        hits.append("%s:%d: import %s" % (n, node.lineno, m))
    assert hits == []
