# Interop with the C DurableDeliveryQueue: directories written by the real C library open in ddq
# with the state the C library recovers (the ddq-c fixtures, support.FIXTURES), and ddq's own
# directories decode with tests/ddqfmt.py, the tests' independent codec (docs/SPEC.md, not ddq's
# code).
import binascii
import json
import struct

import ddq
import ddqfmt
import support


def _need_fixtures():
    # They ship with the suite (tests/fixtures/ddq-c, in the wheel as ddqhost/suite/fixtures): a
    # run without them was pointed elsewhere (DDQ_FIXTURES, --fixtures) or has a damaged copy.
    try:
        support.file_size(support.FIXTURES + "/basic.json")
    except OSError:
        raise support.Skip(
            "no C fixtures at %s: DDQ_FIXTURES=DIR (or mprun --fixtures DIR) must "
            "name a copy of tests/fixtures/ddq-c" % support.FIXTURES
        )


def _load(name):
    _need_fixtures()
    # Parsed from a stream, not from one string of the whole file (up to 17 KB): a small heap
    # may have no block that large; and from a copy on the filesystem under test, since
    # json.load reads a character at a time (through `ddq test`'s mount, a round trip to the
    # host each). Only the keys the tests compare are kept (the records' dump and the C
    # library's log are most of the parsed fixture: 50 KB of heap for legacy_uncompacted on
    # a 64-bit port).
    path = support.tmpdir() + "/" + name + ".json"
    support.copyfile(support.FIXTURES + "/" + name + ".json", path)
    f = open(path)
    try:
        meta = json.load(f)
    finally:
        f.close()
    for k in list(meta):
        if k not in _KEEP:
            del meta[k]
    return meta


_KEEP = ("options", "stats", "recovered_generation", "items", "claim_order", "wall_clock", "files")


def _open_copy(name, clock, meta):
    d = support.tmpdir() + "/q"
    support.copytree(support.FIXTURES + "/" + name, d)
    o = meta["options"]
    q = ddq.Queue(
        d,
        segment_bytes=o["segment_bytes"],
        max_payload_bytes=o["max_payload_bytes"],
        max_items=o["max_items"],
        max_segments=o["max_segments"],
        clock=clock,
    )
    return meta, q, d


def _check_fixture(name):
    meta = _load(name)
    clock = support.FakeClock(meta["wall_clock"]["reference_now_ms"])
    meta, q, d = _open_copy(name, clock, meta)
    try:
        s = q.stats()
        for k, v in meta["stats"].items():
            assert getattr(s, k) == v, (name, k, getattr(s, k), v)
        assert s.generation == meta["recovered_generation"], s.generation
        got = list(q.items())
        assert len(got) == len(meta["items"]), (name, len(got))
        for it, want in zip(got, meta["items"]):
            assert it.seq == want["seq"], (it.seq, want["seq"])
            assert it.state == want["state"], (name, it.seq, it.state, want["state"])
            assert it.attempts == want["attempts"], (name, it.seq, it.attempts)
            assert it.lease_until_ms == want["lease_until_ms"], (name, it.seq, it.lease_until_ms)
            assert it.not_before_ms == want["not_before_ms"], (name, it.seq, it.not_before_ms)
            assert it.payload_len == want["payload_len"]
            assert binascii.hexlify(q.read(it.seq)).decode() == want["payload_hex"]
            if want["quarantine_reason_hex"] is not None:
                assert binascii.hexlify(q.reason(it.seq)).decode() == want["quarantine_reason_hex"]
    finally:
        q.close()
    # The claim order at the reference time, and 8 days later, on fresh copies.
    for key in ("at_reference_now", "at_reference_now_plus_8_days"):
        want = meta["claim_order"][key]
        clock = support.FakeClock(want["now_ms"])
        meta2, q, d = _open_copy(name, clock, meta)
        try:
            order = []
            for _ in range(100):
                c = q.claim(want["lease_ms"])
                if c is None:
                    break
                order.append({"seq": c.seq, "attempts": c.attempts, "payload_len": c.payload_len})
            assert order == want["claims"], (name, key, order, want["claims"])
        finally:
            q.close()


def test_fixture_basic():
    # EVIDENCE-OF: F1 F2 F3 F10 N2 R5 R6 O9 O12 O13 V3
    _check_fixture("basic")


def test_fixture_compacted():
    # EVIDENCE-OF: M1 M2 M5 N3 R2 R7 R8 O14
    _check_fixture("compacted")


def test_fixture_legacy_uncompacted():
    # EVIDENCE-OF: R9 F11 O2 T2 O11
    _check_fixture("legacy_uncompacted")


def test_fixture_opening_changes_no_file():
    # EVIDENCE-OF: R1 R16 N5
    for name in ("basic", "compacted", "legacy_uncompacted"):
        meta = _load(name)
        clock = support.FakeClock(meta["wall_clock"]["reference_now_ms"])
        meta, q, d = _open_copy(name, clock, meta)
        q.close()
        for f in meta["files"]:
            assert support.file_size(d + "/" + f["name"]) == f["size"], (name, f["name"])
            data = support.read_file(d + "/" + f["name"])
            import hashlib

            assert binascii.hexlify(hashlib.sha256(data).digest()).decode() == f["sha256"]
        meta = data = None  # freed before the next fixture is parsed (a small heap)


def test_ddq_directory_reads_with_independent_reader():
    # EVIDENCE-OF: F1 F2 F3 F4 F7 F9 F10 F11 M1 M3 M4 M5 N1 N3 C1 C2 C5 C6 V2 V4 F8
    d = support.tmpdir() + "/q"
    clock = support.FakeClock()
    q = ddq.Queue(
        d, segment_bytes=256, max_payload_bytes=16, max_items=4, max_segments=8, clock=clock
    )
    seqs = [q.enqueue(b"m%d" % i) for i in range(4)]
    c = q.claim(600000)
    q.ack(c.seq)
    c = q.claim(600000)
    q.retry(c.seq, 5000)
    c = q.claim(600000)
    q.quarantine(c.seq, 'ñ"\\')
    assert q.compact()
    n5 = q.enqueue(b"five")
    st = q.stats()
    q.close()
    assert seqs == [1, 2, 3, 4] and n5 == 5
    names = support.listdir_sorted(d)
    assert "queue.format" in names and "queue.manifest" in names and "queue.lock" in names
    assert support.file_size(d + "/queue.format") == 0
    man = ddqfmt.decode_manifest(support.read_file(d + "/queue.manifest"))
    assert man is not None
    gen, nxt, segs, items, end = man
    assert gen == st.generation == 1 and nxt == 5 and items == 3 and segs == 2, (gen, nxt, segs)
    assert not [n for n in names if n.startswith("segment-")]
    recs = []
    for k in range(segs):
        segname = ddqfmt.seg_name(1, k)
        assert segname in names
        recs += ddqfmt.read_records(support.read_file(d + "/" + segname))
    kinds = [(r[0], r[1]) for r in recs]
    # seq 2: DATA + STATE(available, attempts 1); seq 3: DATA + STATE(quarantined) + reason;
    # seq 4: DATA only; then seq 5 after the snapshot boundary.
    assert kinds == [(1, 2), (6, 2), (1, 3), (6, 3), (5, 3), (1, 4), (1, 5)], kinds
    state = struct.unpack(ddqfmt.STATE_FMT, recs[1][3])
    assert state[0] == 1 and state[1] == 1 and state[2] == 0 and state[3] == 1767225600000 + 5000
    assert struct.unpack(ddqfmt.STATE_FMT, recs[3][3])[0] == ddqfmt.S_QUARANTINED
    assert recs[4][3] == 'ñ"\\'.encode()
    # Segment 0 holds 50+72+50+72 bytes; the 52-byte reason opens segment 1, then DATA 4 (50):
    # the snapshot boundary is at offset 102 of segment 1.
    assert end == 52 + 50, end
