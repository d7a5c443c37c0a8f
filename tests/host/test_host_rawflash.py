"""Boards with the queue on raw flash (issue 36 item 4; SPEC §16, DESIGN §15, docs/BOARDS.md "Raw
layout"): `ddq flash` installs ddq_flash only for the raw layout, the virtual board's raw region
(`import vboard; vboard.raw`, NOR semantics over STATE_DIR/raw.img) survives a power cut, and the
example app delivers from a queue on it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import brokers
from conftest import REPO, Subscriber, ddq, kill_board, one_line_error
from ddqhost import boards, layout, transfer, vboard
from ddqhost.device import Device

MP32_PKG = os.path.join(
    REPO, ".venv", "npm", "node_modules", "@micropython", "micropython-webassembly-pyscript"
)


@pytest.fixture
def vb(tmp_path):
    d = str(tmp_path / "vb")
    st = vboard.start(d, raw_blocks=16)
    pids = {st["bridge_pid"], st["micropython_pid"]}
    try:
        yield d, st, pids
    finally:
        st2 = vboard.read_state(d) or {}
        pids.add(st2.get("micropython_pid"))
        assert kill_board(vboard.kill, d, [p for p in pids if p])


def names(mods):
    return [os.path.basename(m)[:-3] for m in mods]


def test_flash_installs_ddq_flash_for_the_raw_layout_only():
    for name in ("UNIX", "RPI_PICO", "ESP32_GENERIC", "PYBV11"):
        prof = boards.load(name)
        app = boards.app_path(prof)
        for a in (None, app):
            fs = names(transfer.modules_to_install(prof, a))
            raw = names(transfer.modules_to_install(prof, a, layout="raw"))
            # every .mpy costs a filesystem block: none for the LittleFS/FAT layout
            assert "ddq_flash" not in fs, (name, a)
            assert raw == [m for m in transfer.PORT_MODULES if m in fs or m == "ddq_flash"]


def test_virtual_board_raw_region_is_nor_flash_and_survives_a_power_cut(vb):
    d, st, pids = vb
    assert st["raw_bytes"] == 16 * 4096
    code = (
        "import vboard\n_d=vboard.raw\n"
        "_d.ioctl(6, 3)\n"
        "_d.writeblocks(3, b'\\x0f\\xf0\\x55', 10)\n"
        "_d.writeblocks(3, b'\\xf3\\x3f', 11)\n"  # a program only clears bits: f0 & f3
        "_b=bytearray(5)\n_d.readblocks(3, _b, 9)\n"
        "print(repr((_d.ioctl(4, 0), _d.ioctl(5, 0), bytes(_b))))\n"
    )
    with Device(st["device"], soft_reset=False) as dev:
        got = dev._collect(code)
    assert got.strip() == b"(16, 4096, b'\\xff\\x0f\\xf0\\x15\\xff')"
    kill_board(vboard.kill, d, [])  # a power cut: what was programmed is there at the next boot
    st = vboard.start(d)
    pids.update([st["bridge_pid"], st["micropython_pid"]])
    assert st["raw_bytes"] == 16 * 4096  # an existing region keeps its size
    with Device(st["device"], soft_reset=False) as dev:
        back = dev._collect(
            "import vboard\n_b=bytearray(4)\n_d=vboard.raw\n"
            "_d.readblocks(3,_b,10)\nprint(repr(bytes(_b)))\n"
            "_d.ioctl(6, 3)\n_d.readblocks(3,_b,10)\nprint(repr(bytes(_b)))\n"
        )
    assert back.split() == [b"b'\\x0f\\xf0\\x15\\xff'", b"b'\\xff\\xff\\xff\\xff'"]
    with open(os.path.join(d, "raw.img"), "rb") as f:
        assert f.read() == b"\xff" * (16 * 4096)


def raw_queue(path, opts):
    """The queue in a raw region image, opened on CPython through the same port code
    (ddq_flash.FlashStorage over tests/blockdev.NORBlockDev holding the image's bytes)."""
    import ddq
    import ddq_flash
    from blockdev import NORBlockDev

    with open(path, "rb") as f:
        data = bytearray(f.read())
    dev = NORBlockDev(4096, len(data) // 4096, data)
    return ddq.Queue("outbox", storage=ddq_flash.FlashStorage(dev), **opts)


def test_flash_layout_raw_asks_erases_once_and_the_app_delivers_from_raw_flash(
    vb, mosquitto, tmp_path
):
    d, st, pids = vb
    tty = st["device"]
    img = os.path.join(d, "raw.img")
    with Device(tty, soft_reset=False) as dev:  # something in the region before the change
        dev.exec("import vboard\nvboard.raw.writeblocks(5, b'old', 7)")
    with open(REPO + "/boards/UNIX/main.py") as f:
        src = f.read()
    app = tmp_path / "main.py"
    app.write_text(
        src.replace(
            "BROKER_PORT = 1883",
            "BROKER_PORT = %d\nPERIOD_MS = 100" % mosquitto,
        )
    )
    # Not confirmed: it says what it would erase, and nothing is erased or installed.
    r = ddq("flash", "-d", tty, "--layout", "raw", "--app", app, input="no\n")
    assert r.returncode == 1, r.stderr
    assert "erases the raw region vboard.raw: 16 blocks of 4096 bytes" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("ddq: not confirmed: nothing was erased")
    with open(img, "rb") as f:
        assert f.read()[5 * 4096 + 7 : 5 * 4096 + 10] == b"old"
    r = ddq("flash", "-d", tty, "--layout", "raw", "--app", app, "--json", input="yes\n")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["layout"] == "raw" and res["layout_change"]["erased_blocks"] == 16
    assert {":ddq_flash.mpy", ":ddq_layout.py", ":main.py"} <= {w["path"] for w in res["written"]}
    with open(img, "rb") as f:
        assert f.read() == b"\xff" * (16 * 4096)
    # In place: a second flash (--yes or not) erases nothing, and one without --layout keeps it.
    r = ddq("flash", "-d", tty, "--layout", "raw", "--app", app, "--json", input="")
    assert r.returncode == 0 and json.loads(r.stdout)["layout_change"] is None, r.stderr
    sub = Subscriber(mosquitto)
    try:
        r = ddq("app", "start", "-d", tty, "--seconds", "0.5")
        assert r.returncode == 0, r.stderr
        brokers.wait_until(lambda: len(sub.got) >= 5, 60, "five readings from the app")
        r = ddq("app", "stop", "-d", tty)
        assert r.returncode == 0, r.stderr
    finally:
        sub.close()
    assert {t for t, _p in sub.got} == {"ddq/unix/temp"}
    r = ddq("flash", "-d", tty, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["layout"] == "raw", r.stderr
    # ddq pull --raw: the region's bytes as an image (block 0 first, exactly the region) and
    # IMG.json saying what it holds; read in chunks, with a progress bar on a long pull.
    pulled = tmp_path / "outbox.img"
    r = ddq("pull", "-d", tty, "--raw", ":outbox", pulled, "--progress", "--json")
    assert r.returncode == 0, r.stderr
    assert "pull [" in r.stderr  # the progress bar
    with open(img, "rb") as f, open(pulled, "rb") as g:
        assert f.read() == g.read()
    meta = json.loads((tmp_path / "outbox.img.json").read_text())
    assert meta["sha256_verified"] and meta["queue"] == "outbox" and meta["board"] == "UNIX"
    assert (meta["block_size"], meta["block_count"], meta["page"]) == (4096, 16, 1)
    assert meta["options"] == layout.raw_options(boards.load("UNIX"))
    assert oct(os.stat(pulled).st_mode & 0o777) == "0o600"
    r = ddq("pull", "-d", tty, "--raw", ":outbox", pulled)
    assert "exists; choose a new image name" in one_line_error(r, 1)
    with Device(tty, soft_reset=False) as dev:
        assert not dev.exists("outbox")  # the queue is not on the filesystem
    q = raw_queue(img, layout.raw_options(boards.load("UNIX")))
    try:
        s = q.stats()
        assert s.next_seq - 1 >= len(sub.got) and s.quarantined_items == 0, s
    finally:
        q.close()
    # --layout fs: the app's queue is on the filesystem again (ddq_layout and ddq_flash go).
    r = ddq("flash", "-d", tty, "--layout", "fs", "--json")
    assert r.returncode == 0, r.stderr
    gone = set(json.loads(r.stdout)["removed"])
    assert {":ddq_layout.py", ":ddq_flash.mpy"} <= gone, gone


def test_ddq_test_runs_the_suite_on_the_board_s_raw_region(vb):
    # EVIDENCE-OF: Y1 Y2
    # `ddq test --fs raw`: the shared suite's queues on the board's own raw region (ddq_layout's
    # region through ddq_flash, mounted at /raw), beside the app's queue, which it leaves as it
    # was; each test's files are removed after it.
    import ddq_flash
    from blockdev import NORBlockDev

    d, st, _pids = vb
    tty = st["device"]
    r = ddq("flash", "-d", tty, "--layout", "raw", "--yes", timeout=300)
    assert r.returncode == 0, r.stderr
    with Device(tty, soft_reset=False) as dev:  # the app's queue, in the region
        dev.exec(
            "import ddq, ddq_layout\nO = {}\nddq_layout.use(O)\n"
            "q = ddq.Queue('outbox', max_payload_bytes=256, **O)\n"
            "q.enqueue(b'kept')\nq.close()\ndel q, O\n"
        )
    r = ddq("test", "-d", tty, "--fs", "raw", "test_core", "-k", "basic_scenario", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "fs=raw, root=/raw/" in r.stdout and r.stdout.strip().endswith(
        "raw: 1 passed, 0 failed"
    )
    with open(os.path.join(d, "raw.img"), "rb") as f:
        data = bytearray(f.read())
    fs = ddq_flash.FlashStorage(NORBlockDev(4096, len(data) // 4096, data))
    names = [fs.name(f[1]) for f in fs.files]
    assert sorted({k.split("/")[0] for k in names}) == ["outbox"], names
    q = raw_queue(os.path.join(d, "raw.img"), layout.raw_options(boards.load("UNIX")))
    try:
        assert [q.read(it.seq) for it in q.items()] == [b"kept"]
    finally:
        q.close()


def test_raw_layout_of_the_real_boards_names_their_region_and_what_it_erases(tmp_path):
    # The same code as on the virtual board, with the port's own block device: the region after
    # a smaller filesystem (rp2, pyb), or a partition of its own (esp32); run here on the unix
    # port with a stand-in `rp2` module whose Flash(start=, len=) checks what it is given.
    pico = boards.load("RPI_PICO")
    src = layout.source(pico)
    assert "rp2.Flash(start=393216, len=1048576)" in src and "PAGE = 256" in src
    lines = layout.what(pico)
    assert "256 blocks of 4096 bytes (1024 KiB)" in lines[0]
    assert (
        "reformats the filesystem at / as LittleFS on rp2.Flash(start=0, len=393216)" in lines[1]
    )
    assert lines[2].startswith("needs a firmware whose _boot.py mounts rp2.Flash(start=0")
    esp = layout.what(boards.load("ESP32_GENERIC"))
    assert "label='ddq'" in esp[0] and len(esp) == 2 and "partition table" in esp[1]
    pyb = layout.what(boards.load("PYBV11"))
    assert "pyb.Flash(start=65536, len=32768)" in pyb[0] and "/flash" in pyb[1]
    assert pyb[2].startswith("beware: on internal flash (PYBV11) pyb.Flash writes go to a RAM")
    assert "64 blocks of 512 bytes" in pyb[0]
    assert not layout.has_raw(boards.load("ARMV7M_GENERIC"))
    (tmp_path / "ddq_layout.py").write_text(src)
    (tmp_path / "rp2.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nfrom blockdev import NORBlockDev\n"
        "def Flash(start, len):\n"
        "    assert (start, len) == (393216, 1048576)\n"
        "    return NORBlockDev(4096, len // 4096, page=256)\n" % os.path.join(REPO, "tests")
    )
    (tmp_path / "run.py").write_text(
        "import ddq_layout, ddq\no = {'max_payload_bytes': 256, 'window': 1}\n"
        "ddq_layout.use(o)\nq = ddq.Queue('outbox', **o)\n"
        "print(q.enqueue(b'r1'), q.enqueue(b'r2'), o['segment_bytes'], o['max_segments'])\n"
    )
    mp = os.path.join(os.path.dirname(sys.executable), "micropython")
    r = subprocess.run(
        [mp, "run.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, MICROPYPATH=":.:" + os.path.join(REPO, "port")),
    )
    want = [str(pico["raw_segment_bytes"]), str(pico["raw_max_segments"])]
    assert r.stdout.split() == ["1", "2"] + want, r.stdout + r.stderr


def test_flash_layout_raw_refuses_a_profile_or_a_board_without_a_raw_region(tmp_path):
    d = str(tmp_path / "vb0")
    st = vboard.start(d, raw_blocks=0)
    pids = [st["bridge_pid"], st["micropython_pid"]]
    try:
        assert st["raw_image"] is None
        r = ddq("flash", "-d", st["device"], "--layout", "raw", "--yes")
        assert "the virtual board has no raw flash region" in one_line_error(r, 1)
        r = ddq("flash", "-d", st["device"], "--board", "ARMV7M_GENERIC", "--layout", "raw")
        assert "profile ARMV7M_GENERIC has no raw layout" in one_line_error(r, 1)
        with Device(st["device"], soft_reset=False) as dev:  # an esp32 without the partition
            dev.exec(
                "import sys\nclass P:\n    TYPE_DATA = 1\n    @staticmethod\n"
                "    def find(t, label=None):\n        return []\n"
                "class E:\n    Partition = P\nsys.modules['esp32'] = E"
            )
        r = ddq("flash", "-d", st["device"], "--board", "ESP32_GENERIC", "--layout", "raw")
        line = one_line_error(r, 1)
        assert (
            "IndexError" in line
            and "data partition labelled ddq of %d bytes"
            % boards.load("ESP32_GENERIC")["raw_bytes"]
            in line
        )
        with Device(st["device"], soft_reset=False) as dev:
            assert not dev.exists("ddq.mpy") and not dev.exists("ddq_layout.py")
    finally:
        assert kill_board(vboard.kill, d, pids)


def test_pull_raw_refuses_a_board_without_the_layout_and_a_region_that_lies(vb, tmp_path):
    d, st, pids = vb
    tty = st["device"]
    out = tmp_path / "x.img"
    r = ddq("pull", "-d", tty, "--raw", ":outbox", out)
    assert "has no raw layout (no :ddq_layout.py)" in one_line_error(r, 1)
    # A region whose count is absurd, one whose reads return the wrong size: one line each,
    # no image left behind.
    for region, says in (
        ("class R:\n    def ioctl(self, op, a):\n        return 10**12\n", "wrong shape"),
        (
            "import vboard\nclass R:\n    def ioctl(self, op, a):\n"
            "        return vboard.raw.ioctl(op, a)\n"
            "    def readblocks(self, n, b, off=0):\n        b[:] = b'x'\n",
            "raw region at 0",
        ),
    ):
        with Device(tty, soft_reset=False) as dev:
            dev.write_file("ddq_layout.py", (region + "def region():\n    return R()\n").encode())
            dev.exec("import sys\nsys.modules.pop('ddq_layout', None)")
        r = ddq("pull", "-d", tty, "--raw", ":outbox", out)
        assert says in one_line_error(r, 1), r.stderr
        assert os.listdir(tmp_path) == ["vb"]


def test_board_capacity_derives_the_raw_layout_the_profile_carries(tmp_path):
    # tools/board_capacity.py --raw: segment, max_segments (C9's worst case on FlashStorage over
    # the NOR model) and max_items (admission and the unix port's heap, ddq_flash in it) of the
    # UNIX profile's region are what boards/UNIX.json says, and docs/BOARDS.md shows the row.
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import board_capacity

    prof = boards.load("UNIX")
    d = board_capacity.derive_raw(prof, str(tmp_path))
    got = {k: d[k] for k in ("raw_segment_bytes", "raw_max_segments", "raw_max_items")}
    assert got == {k: prof[k] for k in got}, d
    assert d["heap_fit"] == prof["raw_heap_fit"] and d["code_bytes"] <= prof["raw_fs_bytes"]
    with open(os.path.join(REPO, "docs", "BOARDS.md")) as f:
        doc = f.read()
    assert board_capacity.render_raw([boards.load(n) for n in boards.names()]) in doc


def test_raw_region_holds_at_least_the_littlefs_layouts_readings_a_mib():
    # Issue 36's capacity criterion, for every profile with a raw layout: its region holds at
    # least as many of the app's readings a MiB as its filesystem layout (docs/BOARDS.md's "per
    # MiB" column), each figure what the tool's heap model holds through a whole cycle.
    rows = []
    for name in boards.names():
        prof = boards.load(name)
        if "raw_bytes" not in prof:
            continue
        raw = prof["raw_max_items"] * 1048576 // prof["raw_bytes"]
        fs = prof["max_items"] * 1048576 // prof["fs_bytes"]
        assert prof["raw_max_items"] <= prof["raw_heap_fit"], name
        rows.append((name, raw, fs))
    assert [r[0] for r in rows] == ["ESP32_GENERIC", "PYBV11", "RPI_PICO", "UNIX"], rows
    assert all(raw >= fs for _n, raw, fs in rows), rows


def test_esp32_raw_layout_fills_drains_and_compacts_in_its_heap():
    # Issue 36: ESP32_GENERIC's raw layout did not open in the 64-bit unix port's model of its
    # 110 KiB heap (raw_heap_fit 0; "needs a 148 KiB heap"). Measured on the 32-bit port
    # (tools/mp32.mjs) with the board's own heap, the peaks of the mount, the open and the
    # compaction on the unix port (board_capacity.model32): the profile's raw_max_items fill its
    # region's queue with the app's share kept, then all drain and the queue compacts.
    if shutil.which("node") is None or not os.path.isdir(MP32_PKG):
        pytest.skip("no Node.js or no 32-bit port (`make venv` installs %s)" % MP32_PKG)
    sys.path.insert(0, os.path.join(REPO, "tools"))
    sys.path.insert(0, os.path.join(REPO, "tests"))
    import board_capacity as bc

    prof = boards.load("ESP32_GENERIC")
    assert 0 < prof["raw_max_items"] <= prof["raw_heap_fit"] and "raw_heap_needed" not in prof
    opts = dict(
        boards.queue_options(prof),
        segment_bytes=prof["raw_segment_bytes"],
        max_segments=prof["raw_max_segments"],
        max_items=bc.BIG,
    )
    # (the model's own paths are in its heap, and its figure is found to the byte: a directory of
    # the same length as the tool's, <mkdtemp ddq-boardcap->/<board>/k<blocks>; a shorter one
    # can hold fewer, as the 16-byte blocks of the unix port's peak checks fall otherwise; in
    # /tmp whatever TMPDIR says, where the profile's figure was derived)
    top = tempfile.mkdtemp(prefix="ddq-boardcap-", dir="/tmp")
    tmp = os.path.join(
        top, "ESP32_GENERIC", "k%d" % bc.raw_blocks(prof, prof["raw_segment_bytes"])
    )
    os.makedirs(tmp)
    try:
        raw = bc.raw_image(prof, tmp, prof["raw_max_segments"])
        n = prof["raw_max_items"]
        ps = dict(prof, _layout="raw")
        app = prof["app_heap_bytes"]
        r = bc.fill_mp(ps, opts, bc.message(ps), tmp, n, app, raw=raw, cycle=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    assert (r["n"], r["ok"], r["end"]) == (n, n, "limit"), r
    assert r["cycle"] == "ok: drained %d, compacted" % n and r["free"] >= app, r


PYB_STANDIN = """
import sys, vboard
class Flash:
    # pyb.Flash(start=, len=) stand-in on the virtual board: 512-byte blocks of its raw image
    def __init__(self, start=0, len=-1):
        self.s, self.n, self.d = start, len // 512, vboard.raw
    def _a(self, n, off, ln):
        a = self.s + n * 512 + (off or 0)
        assert 0 <= n and a + ln <= self.s + self.n * 512, (n, off, ln)
        return a
    def readblocks(self, n, buf, off=0):
        a = self._a(n, off, len(buf))
        self.d.readblocks(a // 4096, buf, a % 4096)
    def writeblocks(self, n, buf, off=None):
        if off is None:
            for i in range(len(buf) // 512):
                self.ioctl(6, n + i)
        a = self._a(n, off, len(buf))
        self.d.writeblocks(a // 4096, buf, a % 4096)
    def ioctl(self, op, arg):
        if op == 6:
            self.d.f.seek(self._a(arg, 0, 512))
            self.d.f.write(b"\\xff" * 512)
        return self.n if op == 4 else 512 if op == 5 else 0
class M:
    Flash = Flash
sys.modules["pyb"] = M
"""


def test_layout_change_reformats_the_filesystem_where_it_shrinks_as_on_a_pyboard(vb):
    # The stm32 path of `ddq flash --layout raw`, run on the virtual board through mpremote with
    # a stand-in pyb.Flash over its raw image: /flash is unmounted, made a LittleFS of
    # raw_fs_bytes on pyb.Flash(start=0, len=raw_fs_bytes) and mounted again, the region after it
    # is erased, and :ddq_layout.py is written there last.
    d, st, pids = vb  # a 64 KiB raw image: PYBV11's layout at half size, 32 + 16 KiB
    prof = dict(boards.load("PYBV11"), raw_fs_bytes=32768, raw_bytes=16384)
    with Device(st["device"], soft_reset=False) as dev:
        dev.write_file("gone.txt", b"on the old filesystem")
        dev.exec(PYB_STANDIN)
        dev.exec("import pyb\npyb.Flash(32768, 16384).writeblocks(3, b'old', 5)")
        pl = layout.plan(dev, prof)
        assert pl["change"] and pl["geometry"] == [32, 512]
        assert (
            "reformats the filesystem at /flash as LittleFS on pyb.Flash(start=0, len=32768)"
            in (pl["what"][1])
        )
        res = layout.apply(dev, prof)
        assert res["erased_blocks"] == 32 and res["reformatted"] == "pyb.Flash(start=0, len=32768)"
        got = dev._collect(
            "import os\nprint(repr((os.getcwd(), sorted(os.listdir()), os.statvfs('/flash')[:3])))"
        )
        assert got.strip() == b"('/flash', ['ddq_layout.py'], (512, 512, 64))", got
        assert layout.installed(dev) == layout.source(prof)
        assert not layout.plan(dev, prof)["change"]  # in place: nothing to erase again
        # The previous release's file (no FILES: the table's room is RAM, not the region) is the
        # same layout: brought up to date, nothing erased. Other options are another layout.
        src = layout.source(prof)
        old = src.replace(", files=FILES", "")
        old = "".join(ln for ln in old.splitlines(True) if not ln.startswith("FILES = "))
        assert old != src and "FILES" not in old
        dev.write_file("ddq_layout.py", old.encode())
        dev.exec("import pyb\npyb.Flash(32768, 16384).writeblocks(0, b'kept', 20)")
        pl = layout.plan(dev, prof)
        assert not pl["change"] and pl["rewrite"], pl
        assert layout.rewrite(dev, prof)["path"] == ":ddq_layout.py"
        assert layout.installed(dev) == src and not layout.plan(dev, prof).get("rewrite")
        other = dict(prof, raw_max_items=prof["raw_max_items"] - 8)
        assert layout.plan(dev, other)["change"]  # another max_items: erased after asking
        assert layout.contract("not python (") is None and layout.contract("PAGE = 1\n") is None
    with open(os.path.join(d, "raw.img"), "rb") as f:
        img = f.read()
    # the region, erased, but for what was written after: the rewrite erased nothing
    assert img[32768 : 32768 + 24] == b"\xff" * 20 + b"kept"
    assert img[32768 + 24 : 32768 + 16384] == b"\xff" * (16384 - 24)
    assert b"littlefs" in img[:8192]  # the filesystem before it
