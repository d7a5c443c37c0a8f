"""The host reads what a board wrote to raw flash (issue 36 item 5; SPEC §16 Y10-Y12): a queue
written through port/ddq_flash.py onto tests/blockdev.py's NORBlockDev (CPython), saved as an
image file of the region's bytes, block 0 first, then `ddq export`, `inspect`, `verify`,
`records`, `salvage` and `replay` on that file, as real processes."""

import binascii
import fcntl
import hashlib
import json
import os
import resource
import struct
import subprocess
import sys

import pytest

import blockdev
import ddqfmt
import libddqmodel
from conftest import Subscriber, cli_env, ddq, one_line_error, tree_hash
from ddqhost import locate

BS = 4096
NB = 48
OPTS = {"segment_bytes": 4096, "max_payload_bytes": 512, "max_items": 200, "max_segments": 16}
FLAGS = [
    "--segment-bytes",
    "4096",
    "--max-payload-bytes",
    "512",
    "--max-items",
    "200",
    "--max-segments",
    "16",
]
T0 = 1767225600000


def _flash():
    locate.load_ddq()
    import ddq_flash

    return ddq_flash


def _write_queue(dev, name="outbox"):
    """A queue in every state on dev: compacted once (manifest, marker, generation 1), then
    live records after the snapshot. Returns the ddq.Queue's view: {seq: (state, payload)}."""
    ddqmod = locate.load_ddq()
    now = [T0]
    st = _flash().FlashStorage(dev)
    q = ddqmod.Queue(name, storage=st, clock=lambda: now[0], **OPTS)
    try:
        for i in range(30):
            q.enqueue(b"reading %02d " % i + bytes(range(i, i + 40)))
        for _ in range(10):
            c = q.claim(60000)
            q.ack(c.seq)
        c = q.claim(60000)
        q.retry(c.seq, 5000)
        c = q.claim(60000)
        q.quarantine(c.seq, b"bad\tpayload")
        q.claim(600000)  # stays claimed
        q.compact()
        for i in range(5):
            q.enqueue(b"after %d" % i)
        c = q.claim(60000)
        q.ack(c.seq)
        return {it.seq: (it.state, q.read(it.seq)) for it in q.items()}
    finally:
        q.close()


def _image(path, dev):
    with open(path, "wb") as f:
        f.write(dev.data)
    return str(path)


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_export_writes_the_flash_bytes_and_libddq_reads_every_item(tmp_path):
    # EVIDENCE-OF: Y10 Y11
    dev = blockdev.NORBlockDev(BS, NB)
    items = _write_queue(dev)
    img = _image(tmp_path / "region.img", dev)
    before = _sha(img)
    out = tmp_path / "exported"
    r = ddq("export", img, out, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert (res["name"], res["block_size"], res["blocks"], res["unit"]) == ("outbox", BS, NB, 1)
    assert _sha(img) == before  # the image is only read
    # Byte for byte what ddq_flash holds: every file of the queue, read through a fresh mount.
    st = _flash().FlashStorage(blockdev.NORBlockDev(BS, NB, bytearray(dev.data)))
    held = {}
    for n in st.listdir("outbox"):
        b = bytearray(st.size("outbox/" + n))
        assert st.read_into(st.open("outbox/" + n, "rb"), 0, b) == len(b)
        held[n] = bytes(b)
    assert "queue.manifest" in held and "queue.format" in held
    files = libddqmodel.snapshot(str(out))
    assert files.pop("queue.lock") == b""  # (the lock a directory has; ddq_flash's is in RAM)
    assert files == held
    assert sorted(f["name"] for f in res["files"]) == sorted(held)
    # The C library's open (tests/libddqmodel.py, as the interop tests run it): no refusal,
    # nothing to cut, the flash queue's next_seq, and every item it holds with its payload.
    verdict, seqs, nxt, changes, why = libddqmodel.view(files)
    assert (verdict, changes, why) == ("ok", {}, None), why
    man = ddqfmt.decode_manifest(files["queue.manifest"])
    data = {}
    for n in sorted(files):
        p = ddqfmt.parse_seg_name(n)
        if p is not None and p[0] == man[0]:
            for _off, rtype, seq, _arg, payload in ddqfmt.decode_records(files[n])[0]:
                if rtype == ddqfmt.T_DATA:
                    data[seq] = payload
    assert set(items) <= set(seqs)
    assert {s: data[s] for s in items} == {s: p for s, (_st, p) in items.items()}
    # ddq itself, on the exported directory (posix), recovers the same queue.
    ddqmod = locate.load_ddq()
    with ddqmod.Queue(str(out), **OPTS) as q:
        assert {it.seq: (it.state, q.read(it.seq)) for it in q.items()} == items
        assert q.stats().next_seq == nxt


def test_a_pulled_image_is_read_with_what_pull_recorded_beside_it(tmp_path):
    # EVIDENCE-OF: Y10
    # `ddq pull --raw` writes IMG.json beside the image: the queue's name, the block size and the
    # board's raw-layout options. inspect, verify and records read them as they read a pulled
    # directory's .ddq-pull.json: no --name, --block-size or option flag needed; a flag wins.
    dev = blockdev.NORBlockDev(1024, 192)
    items = _write_queue(dev, "data/q")
    img = _image(tmp_path / "q.img", dev)
    meta = {"queue": "data/q", "block_size": 1024, "options": OPTS, "layout": "raw"}
    (tmp_path / "q.img.json").write_text(json.dumps(meta))
    before = _sha(img)
    r = ddq("verify", img)
    assert r.returncode == 0 and r.stdout.startswith("verify %s\n" % img), r.stderr
    r = ddq("inspect", img, "--now-ms", str(T0), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["options"] == OPTS and set(info["options_source"].values()) == {".ddq-pull.json"}
    assert {it["seq"]: it["state"] for it in info["items"]} == {s: v[0] for s, v in items.items()}
    r = ddq("records", img, "--json")
    assert r.returncode == 0, r.stderr
    r = ddq("inspect", img, "--now-ms", str(T0), "--json", "--max-items", "300")
    src = json.loads(r.stdout)["options_source"]
    assert src["max_items"] == "command line" and src["segment_bytes"] == ".ddq-pull.json"
    d = tmp_path / "d"  # the export carries them, as a pulled directory does
    assert ddq("export", img, d).returncode == 0
    a = ddq("inspect", img, "--now-ms", str(T0))
    b = ddq("inspect", d, "--now-ms", str(T0))
    assert a.returncode == b.returncode == 0 and a.stdout.replace(img, "P") == b.stdout.replace(
        str(d), "P"
    )
    assert _sha(img) == before


@pytest.mark.parametrize("unit,page", [(1, 256), (8, 1), (16, 1), (32, 1)])
def test_every_program_unit_and_a_nested_name(tmp_path, unit, page):
    # EVIDENCE-OF: Y10 Y11 Y6
    # The unit is read from the image (where its name slots sit); pages change nothing there.
    ddqmod = locate.load_ddq()
    dev = blockdev.NORBlockDev(BS, 24, unit=unit, page=page if page > 1 else 0)
    st = _flash().FlashStorage(dev, unit=unit, page=page)
    with ddqmod.Queue("data/q", storage=st, clock=lambda: T0, **OPTS) as q:
        for i in range(20):
            q.enqueue(b"m%d" % i)
        q.ack(q.claim(1000).seq)
        q.compact()
        q.enqueue(b"after")
        items = {it.seq: (it.state, q.read(it.seq)) for it in q.items()}
    img = _image(tmp_path / "u.img", dev)
    r = ddq("export", img, tmp_path / "d", "--name", "data/q", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["unit"] == unit
    with ddqmod.Queue(str(tmp_path / "d"), **OPTS) as q:
        assert {it.seq: (it.state, q.read(it.seq)) for it in q.items()} == items
    r = ddq("verify", img, "--name", "data/q", *FLAGS)
    assert r.returncode == 0 and r.stdout.startswith("verify %s\n" % img), r.stdout
    assert "queues in it: data/q" in one_line_error(ddq("verify", img), 1)


def _dir_of(tmp_path, dev):
    img = _image(tmp_path / "region.img", dev)
    d = tmp_path / "dir"
    assert ddq("export", img, d).returncode == 0
    return img, str(d)


def _same(img, d, *args):
    """`ddq ARGS IMG` and `ddq ARGS DIR`: the same exit status, text (the path aside) and
    JSON."""
    a = ddq(*args[:1], img, *args[1:], *FLAGS)
    b = ddq(*args[:1], d, *args[1:], *FLAGS)
    assert a.returncode == b.returncode, (a.stderr, b.stderr)
    assert a.stdout.replace(img, "PATH") == b.stdout.replace(d, "PATH"), (a.stdout, b.stdout)
    return a


def test_read_commands_on_an_image_are_the_directory_s(tmp_path):
    # EVIDENCE-OF: Y10
    dev = blockdev.NORBlockDev(BS, NB)
    items = _write_queue(dev)
    img, d = _dir_of(tmp_path, dev)
    before = _sha(img)
    for cmd in (("verify",), ("verify", "--json"), ("records", "--all"), ("records", "--json")):
        _same(img, d, *cmd)
    r = _same(img, d, "inspect", "--now-ms", str(T0), "--json")
    got = {it["seq"]: it["state"] for it in json.loads(r.stdout)["items"]}
    assert got == {s: v[0] for s, v in items.items()}
    _same(img, d, "inspect", "--now-ms", str(T0))
    _same(img, d, "replay", "--to", "mqtt://127.0.0.1:1/x", "--dry-run", "--json")
    a = ddq("salvage", img, tmp_path / "s1", "--json", *FLAGS)
    b = ddq("salvage", d, tmp_path / "s2", "--json", *FLAGS)
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja.pop("source") == img and ja.pop("output") == str(tmp_path / "s1")
    assert jb.pop("source") == d and jb.pop("output") == str(tmp_path / "s2")
    assert ja == jb
    assert tree_hash(tmp_path / "s1") == tree_hash(tmp_path / "s2")
    assert _sha(img) == before  # none of them wrote to the image


class _Snapshots(blockdev.NORBlockDev):
    """NOR flash that keeps its bytes as they were before each program and erase once armed:
    each is the image a power cut just before that call leaves."""

    armed = False

    def __init__(self, *a):
        super().__init__(*a)
        self.snaps = []

    @classmethod
    def queue(cls):
        """A device (not armed yet) and a queue on it: (dev, q)."""
        dev = cls(BS, NB)
        storage = _flash().FlashStorage(dev)
        return dev, locate.load_ddq().Queue("outbox", storage=storage, clock=lambda: T0, **OPTS)

    def program(self, a, buf):
        if self.armed:
            self.snaps.append(bytes(self.data))
        return super().program(a, buf)

    def erase(self, a):
        if self.armed:
            self.snaps.append(bytes(self.data))
        return super().erase(a)


def test_an_image_a_cut_left_superseded_is_never_written(tmp_path):
    # EVIDENCE-OF: Y10 Y2
    # A power cut between a rename over the manifest and the old manifest's deletion leaves a
    # file that the next mount deletes (SPEC Y2, Y4): on a board that mount writes. On the host
    # the image stays as it was.
    dev, q = _Snapshots.queue()
    for i in range(20):
        q.enqueue(b"x%d" % i)
    for _ in range(5):
        q.ack(q.claim(1000).seq)
    q.compact()  # a manifest: the next publication renames over it
    for _ in range(5):
        q.ack(q.claim(1000).seq)
    dev.armed = True
    q.compact()
    q.close()
    found = None
    for snap in dev.snaps:
        again = blockdev.NORBlockDev(BS, NB, bytearray(snap))
        _flash().FlashStorage(again)
        if again.progs:  # this mount writes (a deletion)
            found = snap
            break
    assert found is not None
    img = str(tmp_path / "cut.img")
    with open(img, "wb") as f:
        f.write(found)
    before = _sha(img)
    d = str(tmp_path / "d")
    assert ddq("export", img, d).returncode == 0
    _same(img, d, "verify", "--json")
    _same(img, d, "inspect", "--now-ms", str(T0), "--json")
    for args in (("verify",), ("inspect", "--json"), ("records",)):
        r = ddq(args[0], img, *args[1:], *FLAGS)
        assert r.returncode in (0, 1), r.stderr
    assert _sha(img) == before


def test_a_torn_record_on_the_image_recovers_as_in_the_directory(tmp_path):
    # EVIDENCE-OF: Y10 Y5 R12
    # A record larger than ddq_flash's 512-byte buffer is two frames; a cut between them
    # leaves a torn DDQ record. inspect recovers it with ddq on ddq_flash (the image's copy and
    # rename, R12, in RAM), verify reads the export: both as for the directory.
    dev, q = _Snapshots.queue()
    for i in range(3):
        q.enqueue(b"small %d" % i)
    dev.armed = True
    q.enqueue(b"L" * 500)
    q.close()
    torn = 0
    for k, snap in enumerate(dev.snaps):
        img = str(tmp_path / ("s%d.img" % k))
        with open(img, "wb") as f:
            f.write(snap)
        d = str(tmp_path / ("s%d" % k))
        assert ddq("export", img, d).returncode == 0
        v = _same(img, d, "verify", "--json")
        r = _same(img, d, "inspect", "--now-ms", str(T0), "--json")
        if v.returncode == 1:  # a torn tail only
            torn += 1
            assert json.loads(r.stdout)["recovered_tail_bytes"] > 0
            assert sorted(it["seq"] for it in json.loads(r.stdout)["items"]) == [1, 2, 3]
        assert _sha(img) == hashlib.sha256(snap).hexdigest()
    assert torn


def test_replay_writes_its_acks_into_the_image(tmp_path, mosquitto):
    # EVIDENCE-OF: Y10
    dev = blockdev.NORBlockDev(BS, NB)
    items = _write_queue(dev)
    img = _image(tmp_path / "region.img", dev)
    pending = sorted(s for s, (state, _p) in items.items() if state in ("available", "claimed"))
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", img, "--to", "mqtt://127.0.0.1:%d/site" % mosquitto, "--json", *FLAGS)
        assert r.returncode == 0, r.stderr
        assert "raw-flash image: replay writes its claims and acks into it" in r.stderr
        res = json.loads(r.stdout)
        got = sub.wait_for(len(pending))
    finally:
        sub.close()
    assert (res["sent"], res["remaining"]) == (len(pending), 0)
    assert sorted(p for _t, p in got) == sorted(items[s][1] for s in pending)
    # The acks are in the image, written as ddq_flash writes them: a board's mount reads them.
    with open(img, "rb") as f:
        st = _flash().FlashStorage(blockdev.NORBlockDev(BS, NB, bytearray(f.read())))
    ddqmod = locate.load_ddq()
    with ddqmod.Queue("outbox", storage=st, clock=lambda: T0, **OPTS) as q:
        assert {it.seq: it.state for it in q.items()} == {
            s: ("acked" if s in pending else items[s][0]) for s in items
        }
    assert ddq("verify", img, *FLAGS).returncode == 0
    r = ddq("replay", img, "--to", "mqtt://127.0.0.1:%d/site" % mosquitto, "--json", *FLAGS)
    assert r.returncode == 0 and json.loads(r.stdout)["sent"] == 0, r.stderr


def test_bad_images_are_one_line(tmp_path):
    # EVIDENCE-OF: Y12
    dev = blockdev.NORBlockDev(BS, NB)
    _write_queue(dev)
    img = _image(tmp_path / "region.img", dev)
    trunc = tmp_path / "trunc.img"
    trunc.write_bytes(dev.data[: BS * 10 + 1000])
    blank = tmp_path / "blank.img"
    blank.write_bytes(b"\xff" * BS * 8)
    zero = tmp_path / "zero.img"
    zero.write_bytes(bytes(BS * 8))
    small = tmp_path / "small.img"
    small.write_bytes(dev.data[:BS])
    crafted = bytearray(dev.data)  # a live file's name slot: its CRC holds, its name not UTF-8
    h = next(
        a
        for a in range(0, BS * NB, BS)
        if crafted[a : a + 4] == b"DQF2"
        and crafted[a + 12 : a + 16] == bytes(4)  # a file's first block
        and crafted[a + 20 : a + 24] == b"\xff" * 4  # not deleted
    )
    n = 9 + crafted[h + 28 + 8]  # the slot's CRC follows its name (SPEC Y2)
    crafted[h + 28 + 9] = 0xFF
    crafted[h + 28 + n : h + 28 + n + 4] = struct.pack(
        "<I", binascii.crc32(crafted[h + 28 : h + 28 + n])
    )
    (tmp_path / "crafted.img").write_bytes(crafted)
    cases = [
        (("verify", trunc), "not a whole number of 4096-byte blocks"),
        (("export", trunc, tmp_path / "o"), "a truncated image"),
        (("verify", img, "--block-size", "2048"), "--block-size 4096"),
        (("inspect", img, "--block-size", "8192"), "--block-size 4096"),
        (("records", blank), "is blank: every byte reads 0xFF"),
        (("verify", zero), "holds no ddq_flash block"),
        (("verify", small), "at least 2 blocks"),
        (("inspect", tmp_path / "crafted.img"), "not a readable ddq_flash region"),
        (("export", tmp_path, tmp_path / "o"), "is a directory, not a raw-flash image"),
        (("verify", tmp_path, "--name", "outbox"), "is not a raw-flash image"),
        (
            ("verify", img, "--name", "inbox"),
            "holds no queue named 'inbox' (queues in it: outbox)",
        ),
        (("salvage", img, tmp_path / "o", "--name", "x/.."), "is not a queue name"),
        (("export", tmp_path / "missing.img", tmp_path / "o"), "No such file"),
        (("export", img, tmp_path), "exists (export writes a new directory)"),
    ]
    for args, says in cases:
        line = one_line_error(ddq(*args), 1)
        assert says in line, (args, line)
    with open(img, "rb+") as held:  # what a replay holds while it writes the image
        fcntl.flock(held, fcntl.LOCK_EX)
        assert "is in use by another ddq" in one_line_error(ddq("verify", img), 1)
    for bad in ("100", "70000", "x"):
        one_line_error(ddq("verify", img, "--block-size", bad), 2)
    assert not (tmp_path / "o").exists()


def test_a_huge_image_is_read_in_bounded_memory(tmp_path):
    # EVIDENCE-OF: Y12
    # A 1.25 GiB image (sparse: it reads as zeros) checked under a 1 GiB address-space limit:
    # the check streams it in 64 KiB reads; reading it whole would fail with MemoryError.
    big = tmp_path / "big.img"
    with open(big, "wb") as f:
        f.truncate(5 << 28)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = subprocess.run(
        [sys.executable, "-m", "ddqhost.cli", "verify", str(big)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=600,
        preexec_fn=limit,
    )
    assert "holds no ddq_flash block" in one_line_error(r, 1)
    assert os.path.getsize(big) == 5 << 28
