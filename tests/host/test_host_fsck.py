"""`ddq verify` / `ddq records`: the independent reader (host/ddqhost/fsck/) against the C
fixtures, ddq-written directories, an independent writer, and damaged copies; golden CLI output.

Golden files live in tests/host/golden/*.exp; temp paths are replaced by <DIR> and \\r dropped.
Regenerate with DDQ_UPDATE_GOLDEN=1 (then read the diff).
"""

import json
import os
import re
import struct

import cwriter
import pytest

import ddqfmt
import libddqmodel
from conftest import (
    FIXTURE_NAMES,
    FIXTURES,
    copy_fixture,
    ddq,
    one_line_error,
    option_flags,
    tree_hash,
)
from ddqhost import fsck, inspect_dir, locate, qdir

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def fixture_json(name):
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        return json.load(f)


def golden(name, text, dirpath):
    text = text.replace("\r", "").replace(str(dirpath), "<DIR>")
    path = os.path.join(GOLDEN, name + ".exp")
    if os.environ.get("DDQ_UPDATE_GOLDEN"):
        os.makedirs(GOLDEN, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), "golden %s differs:\n%s" % (name, text)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_records_and_state_match_the_c_library(name, tmp_path):
    exp = fixture_json(name)
    d = copy_fixture(name, tmp_path / name)
    before = tree_hash(d)
    rep = fsck.scan(str(d), exp["options"])
    assert rep.verdict == fsck.OK and rep.c_compatible
    js = rep.to_json(with_records=True)
    got = {
        s["name"]: [{k: r[k] for k in exp["records"][s["name"]][0]} for r in s["records"]]
        for s in js["segments"]
    }
    assert got == exp["records"]
    stats = dict(js["stats"])
    assert stats.pop("generation") == exp["recovered_generation"]
    assert stats == exp["stats"]
    keys = (
        "seq",
        "state",
        "attempts",
        "lease_until_ms",
        "not_before_ms",
        "payload_len",
        "quarantine_reason_hex",
    )
    assert [{k: it[k] for k in keys} for it in js["items"]] == [
        {k: it[k] for k in keys} for it in exp["items"]
    ]
    if exp["manifest"]:
        assert {k: js["manifest"][k] for k in exp["manifest"]} == exp["manifest"]
    assert tree_hash(d) == before  # read-only


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_golden_cli_output(name, tmp_path):
    exp = fixture_json(name)
    d = copy_fixture(name, tmp_path / name)
    flags = option_flags(exp["options"])
    r = ddq("records", d, *flags)
    assert r.returncode == 0, r.stderr
    golden(name + ".records", r.stdout, d)
    r = ddq("verify", d, *flags)
    assert r.returncode == 0, r.stderr
    golden(name + ".verify", r.stdout, d)
    r = ddq("records", d, "--json", *flags)
    js = json.loads(r.stdout)
    assert {
        s["name"]: [{k: x[k] for k in exp["records"][s["name"]][0]} for x in s["records"]]
        for s in js["segments"]
    } == exp["records"]


def test_options_from_ddq_options_json(tmp_path):
    exp = fixture_json("legacy_uncompacted")
    d = copy_fixture("legacy_uncompacted", tmp_path / "q")
    # With the defaults the directory still verifies (limits only grow); a smaller payload limit
    # than the writer's makes it corrupt, and ddq-options.json is where such limits are read from.
    assert ddq("verify", d).returncode == 0
    (d / qdir.OPTIONS_FILE).write_text(json.dumps(dict(exp["options"], max_payload_bytes=8)))
    r = ddq("verify", d, "--json")
    assert r.returncode == 2
    js = json.loads(r.stdout)
    assert js["options"]["max_payload_bytes"] == 8
    assert js["options_source"]["max_payload_bytes"] == qdir.OPTIONS_FILE
    assert "max_payload_bytes" in js["problems"][0]["message"]
    r = ddq("verify", d, "--max-payload-bytes", "64")  # the command line wins
    assert r.returncode == 0, r.stdout


def test_independent_writer_generation_with_snapshot(tmp_path):
    d = str(tmp_path / "q")
    opts, items, stats = cwriter.compacted_scenario(d)
    rep = fsck.scan(d, opts)
    assert rep.verdict == fsck.OK, [p.message for p in rep.problems]
    st = rep.stats()
    assert {k: st[k] for k in stats} == stats
    for it in rep.to_json()["items"]:
        e = items[it["seq"]]
        assert (
            it["state"],
            it["attempts"],
            it["lease_until_ms"],
            it["not_before_ms"],
            it["payload_len"],
        ) == (
            e["state"],
            e["attempts"],
            e["lease_until_ms"],
            e["not_before_ms"],
            len(e["payload"]),
        )
        assert it["quarantine_reason_hex"] == (e["reason"].hex() if "reason" in e else None)


def test_ddq_written_directory_verifies_and_agrees_with_inspect(tmp_path):
    ddqmod = locate.load_ddq()
    d = str(tmp_path / "q")
    opts = {"segment_bytes": 1024, "max_payload_bytes": 64, "max_items": 16, "max_segments": 8}
    now = [1767225600000]
    q = ddqmod.Queue(d, clock=lambda: now[0], **opts)
    try:
        for i in range(30):  # enough acked traffic to force compactions into new generations
            q.enqueue(b"m%02d" % i)
            seq = q.claim(60000).seq
            if i % 7 == 3:
                q.retry(seq, 5000)
            elif i % 11 == 5:
                q.quarantine(seq, b"nope %d" % i)
            else:
                q.ack(seq)
            now[0] += 1000
        q.enqueue(b"last")
    finally:
        q.close()
    rep = fsck.scan(d, opts)
    assert rep.verdict == fsck.OK, [p.message for p in rep.problems]
    info = inspect_dir.inspect(d, opts, now_ms=now[0])
    st = rep.stats()  # the ten ddq.Stats fields a reader of the log can derive
    assert len(st) == 10 and set(st) <= set(info["stats"]), sorted(st)
    for k in st:
        assert st[k] == info["stats"][k], k
    assert info["generation"] >= 1
    keys = ("seq", "state", "attempts", "lease_until_ms", "not_before_ms", "payload_len")
    mine = [tuple(i[k] for k in keys) for i in rep.to_json()["items"]]
    theirs = [tuple(i[k] for k in keys) for i in info["items"]]
    assert mine == theirs


# ---------------------------------------------------------------- damage


def _basic(tmp_path):
    exp = fixture_json("basic")
    return copy_fixture("basic", tmp_path / "q"), option_flags(exp["options"])


def test_torn_tail_exit_1_and_records_all(tmp_path):
    d, flags = _basic(tmp_path)
    seg = d / "segment-00000000000000000001.log"
    with open(seg, "ab") as f:
        f.write(b"garbage")  # 7 bytes: shorter than a header
    before = tree_hash(d)
    r = ddq("verify", d, *flags)
    assert r.returncode == 1, r.stdout
    golden("basic-torn.verify", r.stdout, d)
    r = ddq("records", d, "--all", *flags)
    assert r.returncode == 0
    golden("basic-torn.records-all", r.stdout, d)
    r = ddq("records", d, *flags)
    assert "use --all" in r.stdout and "TORN" not in r.stdout
    assert tree_hash(d) == before
    info = inspect_dir.inspect(str(d), fixture_json("basic")["options"])
    assert info["recovered_tail_bytes"] == 7 and info["recovery_changes"]["truncated"] == [
        seg.name
    ]


def test_corrupt_record_exit_2_names_segment_offset_and_seq(tmp_path):
    d, flags = _basic(tmp_path)
    seg = d / "segment-00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[53 + 40] ^= 0x01  # a payload byte of seq 2's DATA record: CRC mismatch
    seg.write_bytes(bytes(data))
    before = tree_hash(d)
    r = ddq("verify", d, *flags)
    assert r.returncode == 2
    golden("basic-crc.verify", r.stdout, d)
    assert "CORRUPT: segment-00000000000000000000.log, offset 53, seq 2: crc mismatch" in r.stdout
    assert "next: `ddq salvage %s OUT`" % d in r.stdout, r.stdout  # the fix, named
    r = ddq("records", d, "--all", *flags)
    golden("basic-crc.records-all", r.stdout, d)
    # The ddq reader agrees: inspect refuses with exit 2 and one line; nothing changed.
    one_line_error(ddq("inspect", d, *flags), 2)
    assert tree_hash(d) == before


def test_zero_filled_tail_is_torn_for_ddq_and_noted_as_corrupt_for_c(tmp_path):
    d, flags = _basic(tmp_path)
    with open(d / "segment-00000000000000000001.log", "ab") as f:
        # 40 bytes: a whole header's worth, so C checks (and rejects) its magic.
        f.write(b"\0" * 40)
    r = ddq("verify", d, "--json", *flags)
    js = json.loads(r.stdout)
    assert r.returncode == 1 and js["verdict"] == "torn-tail" and js["c_compatible"] is False
    assert js["stats"]["recovered_tail_bytes"] == 40
    assert "libddq would report it corrupt" in js["problems"][0]["message"]
    info = inspect_dir.inspect(str(d), fixture_json("basic")["options"])
    assert info["recovered_tail_bytes"] == 40


def test_garbage_tail_of_40_bytes_is_corrupt(tmp_path):
    d, flags = _basic(tmp_path)
    with open(d / "segment-00000000000000000001.log", "ab") as f:
        f.write(bytes(range(1, 41)))
    r = ddq("verify", d, *flags)
    assert r.returncode == 2 and "bad magic" in r.stdout


def test_manifest_damage_and_missing_segment(tmp_path):
    exp = fixture_json("compacted")
    flags = option_flags(exp["options"])
    d = copy_fixture("compacted", tmp_path / "a")
    m = bytearray((d / "queue.manifest").read_bytes())
    m[40] ^= 0xFF
    (d / "queue.manifest").write_bytes(bytes(m))
    r = ddq("verify", d, *flags)
    assert r.returncode == 2 and "manifest crc mismatch" in r.stdout
    d = copy_fixture("compacted", tmp_path / "b")
    os.remove(d / "queue.manifest")
    r = ddq("verify", d, *flags)
    assert r.returncode == 2 and "queue.format exists but queue.manifest is missing" in r.stdout
    d = copy_fixture("legacy_uncompacted", tmp_path / "c")
    os.rename(d / "segment-00000000000000000001.log", d / "segment-00000000000000000002.log")
    r = ddq("verify", d)
    assert r.returncode == 2 and "not contiguous" in r.stdout


def test_illegal_transition_is_corrupt(tmp_path):
    d = tmp_path / "q"
    # An ACK without a CLAIM.
    recs = ddqfmt.encode_record(ddqfmt.T_DATA, 1, 0, b"x") + ddqfmt.encode_record(ddqfmt.T_ACK, 1)
    cwriter.write_dir(str(d), 0, [recs])
    r = ddq("verify", d, "--json")
    js = json.loads(r.stdout)
    assert r.returncode == 2
    p = js["problems"][0]
    assert (p["file"], p["offset"], p["seqs"]) == ("segment-00000000000000000000.log", 49, [1, 1])
    assert "ACK of a available item" in p["message"]


def test_not_a_queue_and_missing_dir(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    for cmd in ("verify", "records", "inspect"):
        line = one_line_error(ddq(cmd, tmp_path / "plain"), 1)
        assert "not a ddq queue directory" in line
        one_line_error(ddq(cmd, tmp_path / "missing"), 1)
    assert sorted(os.listdir(tmp_path / "plain")) == ["notes.txt"]


def test_record_layout_constants_follow_the_reference():
    # The tables of ddq-c-format.md §4.1 and §6.1, checked against the reader's format strings.
    assert struct.calcsize(fsck.REC_HEADER_FMT) == fsck.REC_HEADER == 40
    assert struct.calcsize(fsck.MAN_FMT) == fsck.MAN_SIZE == 48
    assert (
        fsck.record_crc(ddqfmt.encode_record(1, 1, 0, b"alpha"), 0, 5) == 0xA5779387
    )  # §4.4 example


def test_segment_that_lost_its_end_is_corrupt_whatever_the_limits(tmp_path):
    # SPEC F7/R15: without the writer's segment_bytes, verify and ddq agree: a snapshot segment
    # that ends where its successor's first record would have fitted in a segment before it
    # (every writer rotates past every segment there is) lost its end; the intact directory is
    # clean with default (larger) limits. Past a snapshot the same shape is what libddq writes
    # after a lost rotation (V3, issue 35 item 10): a note, and both open it.
    # The directories are the shared test's (tests/test_regressions.py), which the port reads.
    import ddq as port_ddq
    import test_regressions

    d = tmp_path / "q"
    test_regressions.snapshot_segments(str(d))
    assert ddq("verify", d).returncode == 0
    seg = d / ("generation-%020d-segment-%020d.log" % (1, 1))
    seg.write_bytes(seg.read_bytes()[:102])
    before = tree_hash(d)
    r = ddq("verify", d)
    assert r.returncode == 2 and "ends early" in r.stdout, r.stdout
    one_line_error(ddq("inspect", d), 2)
    assert tree_hash(d) == before
    # generation 0: segment 1 cut after its CLAIM (the ACK dropped)
    d = tmp_path / "q0"
    opts = test_regressions.generation0_segments(str(d))
    seg = d / "segment-00000000000000000001.log"
    seg.write_bytes(seg.read_bytes()[:106])
    r = ddq("verify", d)
    assert r.returncode == 0 and "ends early" in r.stdout and "V3" in r.stdout, r.stdout
    q = port_ddq.Queue(str(d), clock=lambda: 1767225600000, **opts)
    assert q.stats().claimed_items == 2
    q.close()


def test_libddq_lost_rotation_then_a_claim_verifies_clean(tmp_path):
    # SPEC F7 V3 (issue 35 item 10): libddq wrote 9 items (510 + 400 B segments of 512), lost
    # its rotation's record, reopened and claimed item 1 into the empty segment 2. ddq opens
    # it; verify agrees (with and without the writer's options), and an empty segment before
    # one with records is still corrupt to both.
    import ddq as port_ddq

    d = tmp_path / "q"
    d.mkdir()
    for i in range(1, 10):
        libddqmodel.enqueue(str(d), bytes([64 + i]) * (54 if i <= 5 else 52), 512)
    libddqmodel.enqueue(str(d), b"x" * 200, 512, lose=True)
    libddqmodel.claim(str(d), 1, 1767225660000, 512)
    for extra in ((), ("--segment-bytes", "512", "--max-payload-bytes", "400")):
        r = ddq("verify", d, *extra)
        assert r.returncode == 0 and "result: clean" in r.stdout, r.stdout
        assert "9 total, 8 available, 1 claimed" in r.stdout, r.stdout
    q = port_ddq.Queue(
        str(d), clock=lambda: 1767225600000, segment_bytes=512, max_payload_bytes=400
    )
    assert q.stats().claimed_items == 1 and q.stats().total_items == 9
    q.close()
    (d / "segment-00000000000000000001.log").write_bytes(b"")
    r = ddq("verify", d)
    assert r.returncode == 2 and "holds no record" in r.stdout, r.stdout


def test_interrupted_rotation_then_more_writes_verifies_clean(tmp_path):
    # SPEC F7 R23 W3: a power cut after a rotation created segment 2, before its
    # 600 B record was durable; ddq reopened and wrote a 10 B record. verify said "ends early"
    # (exit 2) like the open did; both now read the directory as ddq left it.
    import ddq as port_ddq

    d = tmp_path / "q"
    opts = {"segment_bytes": 1024, "max_payload_bytes": 900}
    q = port_ddq.Queue(str(d), clock=lambda: 1767225600000, **opts)
    for n in (452, 452, 400):
        q.enqueue(b"a" * n)
    q.close()
    (d / "segment-00000000000000000002.log").write_bytes(b"")
    r = ddq("verify", d, "--segment-bytes", "1024", "--max-payload-bytes", "900")
    assert r.returncode == 0 and "R23" in r.stdout, r.stdout
    q = port_ddq.Queue(str(d), clock=lambda: 1767225600000, **opts)
    q.enqueue(b"d" * 10)
    q.close()
    for extra in ((), ("--segment-bytes", "1024", "--max-payload-bytes", "900")):
        r = ddq("verify", d, *extra)
        assert r.returncode == 0 and "result: clean" in r.stdout, r.stdout
    q = port_ddq.Queue(str(d), clock=lambda: 1767225600000, **opts)
    assert q.stats().total_items == 4
    q.close()


def test_segment_bytes_grown_between_opens_verifies_clean(tmp_path):
    # SPEC F7 R15 M8: a queue written with segment_bytes 512, then reopened with 2048
    # and written on, opens in ddq; verify agrees, with or without the last writer's options
    # (the 512 B writer's rotations only get a note).
    import ddq as port_ddq

    d = tmp_path / "q"
    for w in (512, 2048):
        q = port_ddq.Queue(
            str(d), clock=lambda: 1767225600000, segment_bytes=w, max_payload_bytes=400
        )
        for k in range(20):
            q.enqueue(bytes([65 + k]) * (40 + 17 * k % 360))
        q.close()
    for extra in ((), ("--segment-bytes", "2048", "--max-payload-bytes", "400")):
        r = ddq("verify", d, *extra)
        assert r.returncode == 0 and "result: clean" in r.stdout, r.stdout
    q = port_ddq.Queue(
        str(d), clock=lambda: 1767225600000, segment_bytes=2048, max_payload_bytes=400
    )
    assert q.stats().total_items == 40
    q.close()


def test_fsck_package_never_imports_ddq():
    # STYLE 22, 26: the independent reader is written from docs/SPEC.md, in four small steps.
    pkg = os.path.dirname(fsck.__file__)
    assert sorted(n for n in os.listdir(pkg) if n.endswith(".py")) == [
        "__init__.py",
        "format.py",
        "index.py",
        "replay.py",
        "report.py",
    ]
    for n in os.listdir(pkg):
        if n.endswith(".py"):
            with open(os.path.join(pkg, n)) as f:
                src = f.read()
            assert not re.search(r"^\s*(import ddq\b|from ddq\b|import ddq_)", src, re.M), n
    with open(os.path.join(pkg, "__init__.py")) as f:
        assert f.readline().startswith('"""Independent reader')


def test_verify_hints_when_the_writer_used_other_options(tmp_path):
    # A pulled queue carries its board profile's options (.ddq-pull.json); an app that gave
    # ddq.Queue larger ones verifies CORRUPT with them. verify says the options differ, which
    # values the directory needs at least, and how to pass the writer's own.
    d = tmp_path / "q"
    writer = {
        "segment_bytes": 16384,
        "max_payload_bytes": 1024,
        "max_items": 200,
        "max_segments": 16,
    }
    q = locate.load_ddq().Queue(str(d), **writer)
    try:
        for _ in range(120):
            q.enqueue(b"x" * 40)
        q.enqueue(b"y" * 700)
    finally:
        q.close()
    board = {"segment_bytes": 4096, "max_payload_bytes": 512, "max_items": 100, "max_segments": 8}
    (d / qdir.PULL_META).write_text(json.dumps({"options": board}))
    before = tree_hash(str(d))
    r = ddq("verify", d)
    assert r.returncode == 2, r.stdout + r.stderr
    hint = [ln for ln in r.stdout.splitlines() if ln.startswith("hint: ")]
    assert len(hint) == 1, r.stdout
    assert (
        "its writer used other options than these (the board profile's, recorded by ddq "
        "pull in .ddq-pull.json)" in hint[0]
    ), hint
    assert "segment_bytes >= 11308, max_payload_bytes >= 700, max_items >= 121" in hint[0], hint
    assert "--segment-bytes N --max-payload-bytes N --max-items N" in hint[0], hint
    assert qdir.OPTIONS_FILE in hint[0]
    js = json.loads(ddq("verify", d, "--json").stdout)
    assert js["options_hint"] == hint[0][len("hint: ") :]
    # The writer's own options, on the command line or in ddq-options.json: clean, no hint.
    r = ddq("verify", d, *option_flags(writer))
    assert r.returncode == 0 and "hint:" not in r.stdout, r.stdout
    assert tree_hash(str(d)) == before  # verify never writes
    (d / qdir.OPTIONS_FILE).write_text(json.dumps(writer))
    r = ddq("verify", d)
    assert r.returncode == 0 and "hint:" not in r.stdout, r.stdout


def test_verify_gives_no_options_hint_for_real_damage(tmp_path):
    d = tmp_path / "q"
    q = locate.load_ddq().Queue(
        str(d), segment_bytes=4096, max_payload_bytes=512, max_items=100, max_segments=8
    )
    try:
        for _ in range(10):
            q.enqueue(b"x" * 40)
    finally:
        q.close()
    seg = sorted(p for p in os.listdir(d) if p.startswith("segment-"))[0]
    with open(d / seg, "r+b") as f:  # a flipped byte inside the first record's payload
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))
    r = ddq("verify", d, "--segment-bytes", "4096", "--max-payload-bytes", "512")
    assert r.returncode == 2 and "hint:" not in r.stdout, r.stdout
    assert json.loads(ddq("verify", d, "--json").stdout)["options_hint"] is None


def test_staged_cut_leftovers_follow_r22(tmp_path):
    # EVIDENCE-OF: R22 R21
    opts = fixture_json("legacy_uncompacted")["options"]
    seg = "segment-00000000000000000001.log"
    want = fsck.scan(str(copy_fixture("legacy_uncompacted", tmp_path / "w")), opts)
    seqs = sorted(want.items)
    # FAT's rename-over cut between remove and rename: recovery adopts the copy
    d = copy_fixture("legacy_uncompacted", tmp_path / "a")
    os.rename(d / seg, d / (seg + ".reserve"))
    rep = fsck.scan(str(d), opts)
    assert rep.verdict == 0 and sorted(rep.items) == seqs and rep.c_compatible is False
    assert any("R22" in p.message for p in rep.problems)
    # the rename never happened: the copy (a prefix of the segment's records) is deleted
    d = copy_fixture("legacy_uncompacted", tmp_path / "b")
    data = (d / seg).read_bytes()
    (d / (seg + ".cut")).write_bytes(data)
    rep = fsck.scan(str(d), opts)
    assert rep.verdict == 0 and rep.obsolete == [seg + ".cut"]
    # the segment was rewritten since (libddq reused the seqs): corrupt, both kept
    (d / seg).write_bytes(ddqfmt.encode_record(ddqfmt.T_DATA, 4, 0, b"new"))
    rep = fsck.scan(str(d), opts)
    assert rep.verdict == 2
    assert any("R22" in p.message and p.offset is not None for p in rep.problems)
