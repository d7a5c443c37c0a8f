# Regression tests: one per bug found by review, torture or benchmarks (docs/RELIABILITY.md lists
# them). Shared suite: CPython and MicroPython over POSIX, LittleFS and FAT.
import ddq
import support
from faults import FaultStorage

T0 = 1767225600000
OPTS = {"segment_bytes": 256, "max_payload_bytes": 16, "max_items": 2, "max_segments": 4}


def test_dir_sync_failure_after_publish_keeps_the_new_generation():
    # EVIDENCE-OF: C5 C7 R20
    # The rename over queue.manifest succeeded, then the directory sync failed: the new
    # generation is the published one and its segments must not be deleted.
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), **OPTS)
    q.enqueue(b"one")
    q.claim(1000)
    q.ack(1)
    q.enqueue(b"two")
    fs.arm("sync_dir", after=3)   # migration manifest, marker, staged data; then the publish
    e = None
    try:
        q.enqueue(b"three")       # max_items: compaction
    except ddq.IOFailure as x:
        e = x
    q.close()
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    assert q.read(2) == b"two"
    if e is None:
        assert q.read(3) == b"three"
    q.close()


def test_purge_counts_each_item_once():
    # EVIDENCE-OF: C10 O9
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    q.enqueue(b"a")
    q.claim(1000)
    q.quarantine(1, b"bad")
    assert q.purge([1, 1]) == 1
    s = q.stats()
    assert s.quarantined_items == 0 and s.total_items == 0 and s.next_seq == 2
    support.raises(ddq.NotFound, q.read, 1)
    q.close()


def test_segment_names_take_ascii_digits_only():
    # EVIDENCE-OF: N4 N5
    assert ddq.parse_segment_name("segment-00000000000000000001.log") == (0, 1)
    assert ddq.parse_segment_name("segment-0000000000000000000\u00b2.log") is None
    assert ddq.parse_segment_name("segment-\u0660" * 1 + "0" * 19 + ".log") is None
    assert ddq.parse_segment_name("generation-%020d-segment-%020d.log" % (0, 1)) is None
    assert ddq.parse_segment_name("segment-99999999999999999999.log") is None  # over 2**64-1


def test_lock_key_is_normalised():
    # EVIDENCE-OF: L3
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, **OPTS)
    support.raises(ddq.Locked, ddq.Queue, d + "/", **OPTS)
    support.raises(ddq.Locked, ddq.Queue, d + "/../q", **OPTS)
    support.raises(ddq.Locked, ddq.Queue, d.replace("/q", "//q"), **OPTS)
    q.close()


def test_wide_memoryview_payload_is_stored_whole():
    # EVIDENCE-OF: O1 O8
    from array import array
    mv = memoryview(array("I", [1, 2]))
    if not hasattr(mv, "itemsize"):
        raise support.Skip("memoryview has no itemsize here")
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, **OPTS)
    q.enqueue(mv)
    assert q.read(1) == bytes(mv) and len(q.read(1)) == 8
    q.close()
