"""`ddq verify` / `ddq inspect` and the recovery index `queue.index` (SPEC §12.1, X1-X8).

host/ddqhost/fsck/ decodes queue.index from the SPEC without importing ddq: "valid" must mean
exactly "ddq adopts it" (X4: checked here against ddq's own `index_used` / `replayed_records`), and
a valid index must hold the state of fsck's own replay at its covered end (X3), else it is corrupt.
"""

import json
import os
import struct
import tempfile
import zlib

import pytest
from test_host_fsck import golden

from conftest import ddq, option_flags, tree_hash
from ddqhost import fsck, inspect_dir, locate, qdir

OPTS = {"segment_bytes": 1024, "max_payload_bytes": 64, "max_items": 64, "max_segments": 16}
FLAGS = option_flags(OPTS)
T0 = 1767225600000
IX_BODY_CRC, IX_HEADER_CRC = 88, 92  # offsets of body_crc and header_crc in the 96-byte header


def _queue(d, index_bytes=1, now=T0):
    return locate.load_ddq().Queue(str(d), clock=lambda: now, index_bytes=index_bytes, **OPTS)


def _fill(d):
    """A queue over several segments with every state and history, closed with an index."""
    q = _queue(d)
    try:
        for i in range(40):
            q.enqueue(b"m%02d" % i + b"x" * (i % 9))
        for i in range(12):
            c = q.claim(60000)
            if i % 4 == 0:
                q.ack(c.seq)
            elif i % 4 == 1:
                q.retry(c.seq, 5000)
            elif i % 4 == 2:
                q.quarantine(c.seq, b"bad %d" % i)
            # i % 4 == 3: stays claimed
    finally:
        q.close()
    assert os.path.exists(os.path.join(d, fsck.INDEX_NAME))


def _verify(d):
    r = ddq("verify", d, "--json", *FLAGS)
    return r.returncode, json.loads(r.stdout)


def _ddq_view(d, tmp_path):
    """(index_used, replayed_records) of ddq opening a copy of d.

    Its close may rewrite the index.
    """
    work = os.path.join(tempfile.mkdtemp(dir=tmp_path), "q")
    qdir.copy_queue(str(d), work)
    q = _queue(work, index_bytes=1)
    try:
        return q.index_used, q.replayed_records
    finally:
        q.close()


def _index_layout(data):
    h = struct.unpack_from(fsck.IX_FMT, data)
    f = dict(zip(fsck.IX_FIELDS, h, strict=True))
    col0 = fsck.IX_HEADER + fsck.IX_SEG * f["segment_count"]
    return f, col0


def _filled_index(d):
    """_fill(d), then its index: (path, bytes, header fields, offset of the first column)."""
    _fill(d)
    p = d / fsck.INDEX_NAME
    data = p.read_bytes()
    return (p, data, *_index_layout(data))


def _reseal(data):
    """Recompute body and header CRCs: a forged index that passes every CRC."""
    b = bytearray(data)
    struct.pack_into("<I", b, IX_BODY_CRC, zlib.crc32(bytes(b[fsck.IX_HEADER :])))
    struct.pack_into("<I", b, IX_HEADER_CRC, zlib.crc32(bytes(b[: fsck.IX_HEADER - 4])))
    return bytes(b)


# EVIDENCE-OF: X2 X3 X4 X6
def test_valid_index_is_adopted_and_equals_the_replay(tmp_path):
    d = tmp_path / "q"
    _fill(d)
    before = tree_hash(d)
    code, js = _verify(d)
    ix = js["index"]
    assert code == 0 and js["verdict"] == "clean", js["problems"]
    assert ix["present"] and ix["status"] == "valid" and ix["reason"] == ""
    assert ix["items"] == js["stats"]["total_items"] == 40
    assert ix["covered_bytes"] == sum(s["size"] for s in js["segments"]) > OPTS["segment_bytes"]
    assert ix["records_after"] == 0 and ix["disagreement"] is None
    assert fsck.INDEX_NAME not in js["ignored_files"] + js["obsolete_files"]
    assert not [p for p in js["problems"] if p["file"] == fsck.INDEX_NAME]
    assert _ddq_view(d, tmp_path) == (True, 0)
    r = ddq("verify", d, *FLAGS)
    golden("index-valid.verify", r.stdout, d)
    line = "index: valid, 40 items, covers %s, 0 records after it" % fsck._human(
        ix["covered_bytes"]
    )
    assert line in r.stdout.splitlines(), r.stdout
    # inspect shows the same, with ddq's own view, and recovery created nothing.
    info = inspect_dir.inspect(str(d), OPTS, now_ms=T0)
    assert info["index"]["status"] == "valid" and info["index"]["used_by_ddq"] is True
    assert info["index"]["ddq_replayed_records"] == 0
    assert info["recovery_changes"] == {"truncated": [], "deleted": [], "created": []}
    r = ddq("inspect", d, *FLAGS)
    assert r.returncode == 0 and line in r.stdout.splitlines(), r.stdout
    assert tree_hash(d) == before


# EVIDENCE-OF: X5 X7
def test_appends_by_a_writer_without_index_keep_it_valid_with_records_after(tmp_path):
    d = tmp_path / "q"
    _fill(d)
    q = _queue(d, index_bytes=0)  # like libddq: appends and leaves queue.index alone
    try:
        for i in range(5):
            q.enqueue(b"late %d" % i)
        c = q.claim(1000)
        q.ack(c.seq)
    finally:
        q.close()
    code, js = _verify(d)
    ix = js["index"]
    assert code == 0, js["problems"]
    assert ix["status"] == "valid" and ix["items"] == 40 and ix["records_after"] == 7
    assert js["stats"]["total_items"] == 45
    assert ix["covered_bytes"] < sum(s["size"] for s in js["segments"])
    assert _ddq_view(d, tmp_path) == (True, 7)


# EVIDENCE-OF: X4 X7
def test_compaction_by_another_writer_makes_it_stale(tmp_path):
    d = tmp_path / "q"
    _fill(d)
    q = _queue(d, index_bytes=0)
    try:
        assert q.compact()
    finally:
        q.close()
    code, js = _verify(d)
    ix = js["index"]
    assert code == 0 and js["verdict"] == "clean", js["problems"]
    assert ix["status"] == "stale" and ix["reason"] == "generation 0, queue is at 1"
    assert ix["records_after"] > 0  # ddq replays every record
    notes = [p for p in js["problems"] if p["file"] == fsck.INDEX_NAME]
    assert [p["kind"] for p in notes] == ["note"]
    assert _ddq_view(d, tmp_path) == (False, ix["records_after"])
    r = ddq("verify", d, *FLAGS)
    golden("index-stale.verify", r.stdout, d)
    assert "index: stale (generation 0, queue is at 1): ignored by ddq" in r.stdout.splitlines()


# EVIDENCE-OF: X2 X4
def test_index_over_a_compacted_generation_and_a_changed_manifest(tmp_path):
    d = tmp_path / "q"
    _fill(d)
    q = _queue(d)
    try:
        assert q.compact()
    finally:
        q.close()  # rewrites the index for generation 1, with the manifest's CRC
    code, js = _verify(d)
    assert code == 0 and js["generation"] == 1, js["problems"]
    assert js["index"]["status"] == "valid" and js["index"]["items"] == 37
    assert _ddq_view(d, tmp_path) == (True, 0)
    # The same generation, another manifest (next_seq may only grow, R8): no longer covered.
    m = bytearray((d / fsck.MANIFEST_NAME).read_bytes())
    struct.pack_into("<Q", m, 16, struct.unpack_from("<Q", m, 16)[0] + 5)
    struct.pack_into("<I", m, 40, zlib.crc32(bytes(m[:40])))
    (d / fsck.MANIFEST_NAME).write_bytes(bytes(m))
    code, js = _verify(d)
    assert code == 0 and js["stats"]["next_seq"] == 46, js["problems"]
    assert (js["index"]["status"], js["index"]["reason"]) == ("stale", "manifest changed")
    assert _ddq_view(d, tmp_path)[0] is False


def test_changed_segment_bytes_make_it_stale(tmp_path):
    # A record rewritten with a valid CRC: the log still replays, the index no longer covers it.
    d = tmp_path / "q"
    _fill(d)
    seg = d / fsck.segment_name(0, 0)
    b = bytearray(seg.read_bytes())
    b[40] ^= 0x20  # first payload byte of seq 1's DATA record ("m" -> "M")
    struct.pack_into("<I", b, 32, fsck.record_crc(bytes(b), 0, struct.unpack_from("<I", b, 24)[0]))
    seg.write_bytes(bytes(b))
    code, js = _verify(d)
    assert code == 0, js["problems"]
    assert js["index"]["status"] == "stale"
    assert js["index"]["reason"] == "segment bytes changed at segment 0"
    assert _ddq_view(d, tmp_path)[0] is False


# EVIDENCE-OF: X4
@pytest.mark.parametrize(
    "damage, reason",
    [
        ("body", "bad body CRC"),
        ("header", "bad header CRC"),
        ("truncate", "size mismatch"),
        ("short", "shorter than the 96-byte header"),
    ],
)
def test_damaged_index_is_a_note(tmp_path, damage, reason):
    d = tmp_path / "q"
    _fill(d)
    p = d / fsck.INDEX_NAME
    b = bytearray(p.read_bytes())
    if damage == "body":
        b[len(b) - 3] ^= 0x01
    elif damage == "header":
        b[20] ^= 0x01  # inside generation
    elif damage == "truncate":
        b = b[:-1]
    else:
        b = b[:50]
    p.write_bytes(bytes(b))
    before = tree_hash(d)
    code, js = _verify(d)
    ix = js["index"]
    assert code == 0 and js["verdict"] == "clean", js["problems"]
    assert ix["present"] and ix["status"] == "damaged" and reason in ix["reason"], ix
    notes = [p for p in js["problems"] if p["file"] == fsck.INDEX_NAME]
    assert [p["kind"] for p in notes] == ["note"]
    assert _ddq_view(d, tmp_path)[0] is False
    r = ddq("verify", d, *FLAGS)
    assert r.returncode == 0
    assert any(ln.startswith("index: damaged (") for ln in r.stdout.splitlines()), r.stdout
    assert tree_hash(d) == before


# EVIDENCE-OF: X3
def test_forged_index_that_disagrees_with_the_log_is_corrupt(tmp_path):
    d = tmp_path / "q"
    p, data, f, col0 = _filled_index(d)
    n = f["items"]
    seqs = struct.unpack_from("<%dQ" % n, data, col0)
    st0 = col0 + 18 * n  # the state column follows seq (8), segment (2), offset (4), length (4)
    i = n - 1  # the newest item: never claimed, a plain available item
    assert data[st0 + i] == fsck.S_AVAILABLE
    b = bytearray(data)
    b[st0 + i] = fsck.S_ACKED  # the message would be lost
    p.write_bytes(_reseal(b))
    assert _ddq_view(d, tmp_path)[0] is False  # the counts disagree with the column (X10)
    # With the counts moved too, ddq adopts it: every CRC matches, the covered bytes are
    # unchanged and no cheap cross-check sees a state (docs/SECURITY.md: trusted as the log).
    struct.pack_into("<II", b, 40, f["available"] - 1, f["claimed"])
    struct.pack_into("<I", b, 48, f["acked"] + 1)
    p.write_bytes(_reseal(b))
    assert _ddq_view(d, tmp_path) == (True, 0)
    code, js = _verify(d)
    assert code == 2 and js["verdict"] == "corrupt"
    bad = [p for p in js["problems"] if p["kind"] == "corrupt"]
    assert len(bad) == 1 and bad[0]["file"] == fsck.INDEX_NAME
    msg = "queue.index disagrees with the log at seq %d" % seqs[i]
    assert bad[0]["message"].startswith(msg), bad[0]["message"]
    assert "state acked, the log gives available" in bad[0]["message"]
    assert bad[0]["seqs"] == [seqs[i], seqs[i]]
    assert js["index"]["status"] == "valid" and js["index"]["disagreement"] == bad[0]["message"]
    r = ddq("verify", d, *FLAGS)
    assert r.returncode == 2 and "CORRUPT: queue.index, seq %d: %s" % (seqs[i], msg) in r.stdout


def test_forged_live_entry_attempts_is_corrupt(tmp_path):
    d = tmp_path / "q"
    p, data, f, col0 = _filled_index(d)
    assert f["live_count"] > 0
    live0 = col0 + 19 * f["items"]
    b = bytearray(data)
    seq, attempts = struct.unpack_from("<QI", b, live0)
    struct.pack_into("<I", b, live0 + 8, attempts + 1)
    p.write_bytes(_reseal(b))
    code, js = _verify(d)
    assert code == 2
    msg = js["index"]["disagreement"]
    assert msg.startswith("queue.index disagrees with the log at seq %d: attempts" % seq), msg


def _forge_segment_entry(d, k, size, seg_bytes):
    """Point the index's entry for segment k at `size` bytes of seg_bytes, with a matching CRC."""
    p = d / fsck.INDEX_NAME
    b = bytearray(p.read_bytes())
    pos = fsck.IX_HEADER + fsck.IX_SEG * k
    struct.pack_into("<II", b, pos, zlib.crc32(bytes(seg_bytes[:size])), size)
    p.write_bytes(_reseal(b))


def test_forged_covered_end_inside_a_record_is_stale(tmp_path):
    # EVIDENCE-OF: X10
    # Adopted, ddq would resume one byte before the end and cut that byte as a torn tail; its
    # walk from the last item to the covered end finds no whole record there, so it ignores it.
    d = tmp_path / "q"
    _fill(d)
    f, _col0 = _index_layout((d / fsck.INDEX_NAME).read_bytes())
    k = f["segment_count"] - 1
    data = (d / fsck.segment_name(0, k)).read_bytes()
    _forge_segment_entry(d, k, len(data) - 1, data)
    assert _ddq_view(d, tmp_path)[0] is False
    code, js = _verify(d)
    assert code == 0 and js["index"]["status"] == "stale", js["index"]
    assert "no whole record after the index's last item" in js["index"]["reason"]


def test_forged_index_over_a_damaged_record_is_corrupt(tmp_path):
    # The covered bytes no longer replay, but their CRC in the index was updated: ddq would adopt
    # the index and never see the damage; verify reports both.
    d = tmp_path / "q"
    _fill(d)
    seg = d / fsck.segment_name(0, 0)
    data = bytearray(seg.read_bytes())
    data[41] ^= 0x01  # a payload byte of seq 1: record CRC mismatch
    seg.write_bytes(bytes(data))
    _forge_segment_entry(d, 0, len(data), data)
    assert _ddq_view(d, tmp_path)[0] is True
    code, js = _verify(d)
    bad = [p["message"] for p in js["problems"] if p["kind"] == "corrupt"]
    assert code == 2 and len(bad) == 2 and bad[0].startswith("crc mismatch"), bad
    assert "covers records that do not replay" in bad[1]


@pytest.mark.parametrize("value", [0, 30, 41, 500])
def test_index_with_a_wrong_next_seq_is_stale(tmp_path, value):
    # EVIDENCE-OF: X10
    # next_seq 0 or below the log's highest seq (enqueue would reuse a seq) or above it (a gap):
    # ddq ignores the index and replays, and verify says so (a note, not damage).
    d = tmp_path / "q"
    _fill(d)
    p = d / fsck.INDEX_NAME
    b = bytearray(p.read_bytes())
    assert struct.unpack_from("<Q", b, 24)[0] == 41
    struct.pack_into("<Q", b, 24, value)
    p.write_bytes(_reseal(b))
    code, js = _verify(d)
    assert _ddq_view(d, tmp_path)[0] is (value == 41)
    if value != 41:
        assert code == 0 and js["index"]["status"] == "stale", js["index"]
        assert js["index"]["reason"] == "next_seq %d, the manifest gives 41" % value


def _lcg(x):
    return (x * 1103515245 + 12345) & 0x7FFFFFFF


def test_verify_calls_an_index_valid_exactly_when_ddq_adopts_it(tmp_path):
    # EVIDENCE-OF: X10 X4
    # fsck mirrors ddq's cross-checks from the SPEC: over resealed random changes to the index
    # (a bit, a byte, a field plus or minus one), "valid" in `ddq verify` is ddq's index_used.
    d = tmp_path / "q"
    _fill(d)
    good = (d / fsck.INDEX_NAME).read_bytes()
    x, seen = 7, {True: 0, False: 0}
    for k in range(120):
        b = bytearray(good)
        x = _lcg(x)
        pos = x % (len(b) - 8)
        pos = pos + 8 if pos >= IX_BODY_CRC else pos
        x = _lcg(x)
        if k % 3 == 0:
            b[pos] ^= 1 << (x % 8)
        elif k % 3 == 1:
            b[pos] = x % 256
        else:
            b[pos] = (b[pos] + (1 if x & 1 else 255)) & 255
        work = tmp_path / ("w%d" % k)
        qdir.copy_queue(str(d), str(work))
        (work / fsck.INDEX_NAME).write_bytes(_reseal(b))
        rep = fsck.scan(str(work), dict(OPTS))
        used = _ddq_view(work, tmp_path)[0]
        seen[used] += 1
        assert (rep.index["status"] == "valid") is used, (k, pos, rep.index)
    print("verify fuzz", seen)
    assert seen[True] >= 10 and seen[False] >= 10, seen


def test_index_tmp_is_obsolete_and_index_is_not_ignored(tmp_path):
    d = tmp_path / "q"
    _fill(d)
    (d / fsck.INDEX_TMP).write_bytes(b"half an index")
    code, js = _verify(d)
    assert code == 0
    assert js["obsolete_files"] == [fsck.INDEX_TMP]
    assert fsck.INDEX_NAME not in js["ignored_files"]
    assert any(
        p["kind"] == "note" and p["file"] == fsck.INDEX_TMP and "recovery deletes" in p["message"]
        for p in js["problems"]
    )
    assert js["index"]["status"] == "valid"


def test_no_index_and_a_directory_named_queue_index(tmp_path):
    d = tmp_path / "q"
    q = _queue(d, index_bytes=0)
    q.enqueue(b"one")
    q.close()
    code, js = _verify(d)
    assert code == 0 and js["index"]["status"] == "absent" and not js["index"]["present"]
    assert js["index"]["records_after"] == 1  # ddq replays every record
    assert "index: none" in ddq("verify", d, *FLAGS).stdout.splitlines()
    (d / fsck.INDEX_NAME).mkdir()
    code, js = _verify(d)
    assert code == 0
    assert (js["index"]["status"], js["index"]["reason"]) == ("damaged", "not a regular file")


def test_index_layout_constants_follow_the_spec():
    # SPEC X2: a 96-byte header; the abi of a little-endian writer is ddq's on this host.
    assert struct.calcsize(fsck.IX_FMT) == fsck.IX_HEADER == 96
    assert len(fsck.IX_FIELDS) == 23
    assert struct.calcsize("<4sHHIIQQ14I") == IX_BODY_CRC
    assert struct.calcsize("<4sHHIIQQ15I") == IX_HEADER_CRC
    locate.load_ddq()
    import ddq_index  # beside ddq

    assert fsck.IX_ABI[ddq_index.abi()] == "<"


def test_ddq_index_constants_equal_ddq_and_the_spec():
    # ddq_index keeps its own consts (a MicroPython const is no module global of ddq): CPython
    # holds them equal to ddq's and to the SPEC's header layout [X2][X9].
    ddq_mod = locate.load_ddq()
    import ddq_index

    assert (ddq_index._AVAILABLE, ddq_index._CLAIMED) == (ddq_mod._AVAILABLE, ddq_mod._CLAIMED)
    assert (ddq_index._ACKED, ddq_index._QUARANTINED) == (ddq_mod._ACKED, ddq_mod._QUARANTINED)
    assert (ddq_index._REC_MAGIC, ddq_index._T_DATA, ddq_index._T_QUAR) == (
        ddq_mod._REC_MAGIC,
        ddq_mod._T_DATA,
        ddq_mod._T_QUAR,
    )
    assert (ddq_index._MIN_REC, ddq_index._MAX_REASON) == (ddq_mod._MIN_REC, ddq_mod._MAX_REASON)
    assert (ddq_index._IO_LOOPS, ddq_index._EIO) == (ddq_mod._IO_LOOPS, ddq_mod._EIO)
    assert ddq_index._SCAN_RECORDS == ddq_mod._SCAN_RECORDS
    assert (ddq_index._CH, ddq_index._CS, ddq_index._CM) == (ddq_mod._CH, ddq_mod._CS, ddq_mod._CM)
    assert struct.calcsize(ddq_index._IX_FMT) == ddq_index._IX_SIZE == fsck.IX_HEADER
    assert ddq_mod._MAN_SIZE + 1 == 49  # ddq_index reads the manifest with this bound
    # the record header's offsets and the manifest's crc field, named once (issue 37 item 2)
    for name in ("_VERSION", "_R_TYPE", "_R_RLEN", "_HDR", "_M_CRC"):
        assert getattr(ddq_index, name) == getattr(ddq_mod, name), name
    assert struct.calcsize(ddq_mod._REC_FMT[:3]) == ddq_mod._R_TYPE  # magic version | type
    assert struct.calcsize(ddq_mod._MAN_FMT) == ddq_mod._M_CRC
    # the body's entries [X2], as SPEC §12.1, ddq_index's packing formats and fsck give them
    from ddqhost.fsck import format as ff

    assert ddq_index._IX_SEG == struct.calcsize("<III") == ff.IX_SEG
    assert ddq_index._IX_ITEM == struct.calcsize("<QHIIB")
    assert ddq_index._IX_OFFS == struct.calcsize("<QH")
    assert ddq_index._IX_LIVE == struct.calcsize("<QIQQ") == ff.IX_LIVE
    assert ddq_index._IX_HIST == struct.calcsize("<QIQ") == ff.IX_HIST == ff.IX_REASON


def test_ddq_reclaim_constants_equal_ddq():
    # ddq_reclaim keeps its own consts (a MicroPython const is no module global of ddq) [C13].
    ddq_mod = locate.load_ddq()
    import ddq_reclaim

    for name in (
        "_HDR",
        "_MIN_REC",
        "_STATE_REC",
        "_T_DATA",
        "_T_CLAIM",
        "_T_ACK",
        "_T_RETRY",
        "_T_QUAR",
        "_T_STATE",
        "_AVAILABLE",
        "_CLAIMED",
        "_ACKED",
        "_QUARANTINED",
        "_EIO",
        "_REC_FMT",
        "_REC_MAGIC",
    ):
        assert getattr(ddq_reclaim, name) == getattr(ddq_mod, name), name


def test_port_modules_constants_equal_ddq():
    # Every module beside ddq.py keeps its own private consts (a MicroPython const is folded in
    # the module that declares it and is no module global of ddq, STYLE 4), so a format constant
    # is written again in each module that needs it: every upper-case `_NAME` a port module
    # defines that ddq defines too holds ddq's value (one fact, its copies held equal).
    import importlib

    ddq_mod = locate.load_ddq()
    port = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "port"
    )
    # A name two parts define and ddq does not (recovery's state, _CP_* and _ST_*, which
    # ddq_recover hands to ddq_index.load) holds one value in both.
    seen = 0
    first: "dict[str, tuple[str, object]]" = {}
    for f in sorted(os.listdir(port)):
        if not (f.startswith("ddq_") and f.endswith(".py")):
            continue
        mod = importlib.import_module(f[:-3])
        names = [
            n
            for n in vars(mod)
            if n[:1] == "_" and n[1:2].isupper() and hasattr(ddq_mod, n) and n != "_PARTS"
        ]  # (_PARTS: a module's own table of the parts it loads, ddq's and ddq_mqtt's)
        seen += len(names)
        for name in names:
            assert getattr(mod, name) == getattr(ddq_mod, name), (mod.__name__, name)
        for name in vars(mod):
            if name[:1] == "_" and name[1:2].isupper() and not hasattr(ddq_mod, name):
                v = getattr(mod, name)
                if isinstance(v, (int, str, bytes)):
                    was = first.setdefault(name, (mod.__name__, v))
                    assert was[1] == v, (name, was, mod.__name__, v)
    assert seen >= 100, seen  # recover, compact, extra, index, reclaim, salvage, outbox...
    assert first["_CP_END"] == ("ddq_index", 2), first["_CP_END"]


def test_error_message_table_matches_its_names():
    # ddq.py keeps the messages of its errors in one string (_MSG, entries split by "|") and
    # names each entry by a const, in order; the class is named where it is raised,
    # _err("Class", _X_NAME, ...). The count and order must agree, every const must be raised
    # somewhere, always as one class, and make an error of that class with its message (O19).
    import re

    port = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "port")
    src = ""
    for f in sorted(os.listdir(port)):
        if f == "ddq.py" or f.startswith("ddq_"):
            with open(os.path.join(port, f)) as fh:
                src += fh.read()
    with open(os.path.join(port, "ddq.py")) as f:
        core = f.read()
    names = re.findall(r"^(_X_\w+) = const\((\d+)\)$", core, re.M)
    assert [int(v) for _n, v in names] == list(range(len(names)))
    body = re.search(r"^_MSG = \((.*?)\)\n", core, re.S | re.M).group(1)
    entries = "".join(re.findall(r'"([^"]*)"', body)).split("|")
    assert len(entries) == len(names)
    m = locate.load_ddq()
    for (name, k), msg in zip(names, entries):
        used = set(re.findall(r'_err\(\s*"(\w+)",\s*' + name + r"\b", src))
        if name == "_X_NOMEM":  # close() raises the NoMemory it kept in a variable
            used |= set(re.findall(r'_err\(\s*"(\w+)",\s*err\)', core))
        assert len(used) == 1, (name, used)  # raised, and always as one class
        cls = used.pop()
        args = tuple(1 if spec == "d" else "x" for spec in re.findall(r"%(\w)", msg))
        err = m._err(cls, int(k), *args)
        assert type(err) is getattr(m, cls) and isinstance(err, m.Error), (name, msg)
        assert str(err) == msg % args, (name, msg)
        assert not re.match(r"[A-Z]\w+:", msg), (name, msg)  # no "Class:" prefix left
