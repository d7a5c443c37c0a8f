# Capacity: admission reserve, compaction into generations, manifest publication and recovery.
# C DDQ's capacity scenarios (test_ddq.c) one by one, plus ddq's FAT extension. Shared suite.
import os

import ddq
import support

T0 = 1767225600000


def _open(d, clock, seg=256, payload=16, items=2, segs=4):
    return ddq.Queue(
        d,
        segment_bytes=seg,
        max_payload_bytes=payload,
        max_items=items,
        max_segments=segs,
        clock=clock,
    )


def _disk_bytes(d):
    n = 0
    for name in os.listdir(d):
        if name.endswith(".log"):
            n += support.file_size(d + "/" + name)
    return n


def _capacity_reuse(items):
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock, items=items, segs=2)
    payload = b"\0\\a\xff"
    for i in range(12):
        seq = q.enqueue(payload)
        assert seq == i + 1, (items, i, seq)
        c = q.claim(600000)
        assert c.seq == seq
        assert q.read(seq) == payload
        assert q.ack(seq)
        s = q.stats()
        assert s.total_items <= items and s.segment_count <= 2, s.as_dict()
        assert _disk_bytes(d) <= 2 * 2 * 256
    assert q.stats().next_seq == 13
    q.close()
    q = _open(d, clock, items=items, segs=2)
    assert q.enqueue(payload) == 13
    q.close()


def test_capacity_reuse_2():
    # EVIDENCE-OF: C1 C6 O14 M4 A6 C9
    _capacity_reuse(2)


def test_capacity_reuse_32():
    # EVIDENCE-OF: C1 C6 O14 M4 A1 C9
    _capacity_reuse(32)


def test_control_headroom_1_segment():
    # EVIDENCE-OF: A1 A4 A7 A2 A3 V5
    d = support.tmpdir() + "/q"
    q = _open(d, support.FakeClock(T0), payload=208, items=32, segs=1)
    support.raises(ddq.Full, q.enqueue, b"x" * 208)
    s = q.stats()
    assert s.total_items == 0 and s.stored_bytes == 0 and s.next_seq == 1, s.as_dict()
    q.close()


def test_control_headroom_8_segments():
    # EVIDENCE-OF: A1 A4 A5 A7 C1 O6 A2 A3 V5
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock, payload=208, items=32, segs=8)
    assert q.enqueue(b"a" * 208) == 1
    assert q.enqueue(b"b" * 208) == 2
    support.raises(ddq.Full, q.enqueue, b"c" * 208)
    s = q.stats()
    assert s.available_items == 2 and s.next_seq == 3 and s.segment_count == 2, s.as_dict()
    q.claim(600000)
    q.ack(1)
    q.claim(600000)
    reason = b"r" * 208
    assert q.quarantine(2, reason)
    assert q.enqueue(b"c" * 208) == 3
    assert q.read(2) == b"b" * 208 and q.reason(2) == reason
    q.close()
    stored = b""
    for name in os.listdir(d):
        if name.endswith(".log"):
            stored += support.read_file(d + "/" + name)
    assert stored.count(reason) == 1


def test_a_copy_needing_more_than_max_segments_is_no_benefit():
    # EVIDENCE-OF: C11 C8
    # A quarantined item's copy (DATA, STATE, reason) is longer than what it had (DATA, CLAIM,
    # reason): nine of them, written with room to spare, fill 3 segments. Opened with
    # max_segments=3 (a writer with other options: this one's admission plan would have
    # stopped it sooner), the queue is full, and the compaction an enqueue tries needs more
    # than 3 segments for its copy: Full naming max_segments (C11), the staged files deleted,
    # nothing else changed, not fail-stopped (libddq returns LIMIT and fail-stops). compact()
    # itself is no benefit (C8: the copy is not smaller): False, nothing changed.
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock, seg=512, payload=64, items=64, segs=16)
    q.enqueue(b"a")
    q.ack(q.claim(600000).seq)
    for _ in range(9):
        q.enqueue(b"p")
        assert q.quarantine(q.claim(600000).seq, b"rr")
    assert q.stats().segment_count == 3
    q.close()
    before = {n: support.read_file(d + "/" + n) for n in os.listdir(d)}
    q = _open(d, clock, seg=512, payload=64, items=64, segs=3)
    e = support.raises(ddq.Full, q.enqueue, b"x")
    assert "max_segments" in str(e), str(e)
    assert q.compact() is False
    s = q.stats()
    assert (s.generation, s.segment_count, s.total_items, s.next_seq, s.failed) == (
        0,
        3,
        10,
        11,
        False,
    ), s.as_dict()
    after = {n: support.read_file(d + "/" + n) for n in os.listdir(d)}
    assert [n for n in after if n.startswith("generation-")] == []  # staged files deleted
    for n in before:  # the log is as it was (C2's migration adds the manifest and marker)
        if n.endswith(".log"):
            assert after[n] == before[n], n
    assert q.read(10) == b"p" and q.reason(10) == b"rr"
    q.close()


def test_retry_history_reclaim_without_ack():
    # EVIDENCE-OF: C1 C8 A8
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock, items=4, segs=2)
    q.enqueue(b"only")
    for r in range(12):
        c = q.claim(600000)
        assert c.seq == 1 and c.attempts == r, (r, c.attempts)
        q.retry(1, 0)
    s = q.stats()
    assert s.total_items == 1 and s.available_items == 1 and s.segment_count <= 2
    assert s.next_seq == 2 and s.generation >= 1
    q.close()
    q = _open(d, clock, items=4, segs=2)
    assert [i.attempts for i in q.items()] == [12]
    q.close()


def test_mixed_state_preservation():
    # EVIDENCE-OF: C1 C4 R7 R8 O6 O7 F11
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock, payload=64, items=5, segs=16)
    for i in range(5):
        q.enqueue(b"item-%d" % (i + 1))
    q.claim(600000)
    q.ack(1)
    q.claim(600000)
    q.retry(2, 600000)
    q.claim(600000)  # 3: live lease
    q.claim(600000)
    why = '原因 \\ "quoted"'.encode()
    assert q.quarantine(4, why)
    assert q.quarantine(4, b"again") is False
    q.claim(600000)
    q.retry(5, 0)
    assert q.enqueue(b"item-6") == 6  # max_items reached: compaction reclaims 1
    s = q.stats()
    assert (
        s.total_items,
        s.available_items,
        s.claimed_items,
        s.quarantined_items,
        s.next_seq,
    ) == (5, 3, 1, 1, 7), s.as_dict()
    assert s.generation == 1
    support.raises(ddq.NotFound, q.read, 1)
    c = q.claim(600000)
    assert c.seq == 5 and c.attempts == 1
    assert q.claim(600000).seq == 6
    q.close()
    q = _open(d, clock, payload=64, items=5, segs=16)
    assert q.claim(600000) is None
    assert q.reason(4) == why
    size = _disk_bytes(d)
    assert q.quarantine(4, b"third") is False
    assert _disk_bytes(d) == size  # nothing written
    q.close()


def test_manifest_recovery():
    # EVIDENCE-OF: C5 C7 R16 R20 R9 O11 N5 M6 C3
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = _open(d, clock)
    q.enqueue(b"one")
    q.claim(600000)
    q.ack(1)
    q.enqueue(b"two")
    os.mkdir(d + "/queue.manifest.tmp")  # blocks the publication
    support.raises(ddq.IOFailure, q.enqueue, b"three")
    assert q.stats().failed and q.stats().next_seq == 3
    support.raises(ddq.IOFailure, q.read, 2)
    support.raises(ddq.IOFailure, q.claim, 1000)
    q.close()
    os.rmdir(d + "/queue.manifest.tmp")
    q = _open(d, clock)
    assert q.read(2) == b"two"
    assert q.claim(1).seq == 2
    clock.advance(10)
    assert q.enqueue(b"three") == 3
    assert q.stats().generation == 1
    q.close()
    support.write_file(d + "/" + ddq.segment_name(999, 0), b"future")
    support.write_file(d + "/queue.manifest.tmp", b"garbage")
    support.write_file(d + "/" + ddq.segment_name(0, 0), b"legacy garbage")
    q = _open(d, clock)
    names = os.listdir(d)
    assert ddq.segment_name(999, 0) not in names and "queue.manifest.tmp" not in names
    assert ddq.segment_name(0, 0) not in names
    assert q.ack(2) is True  # the expired claim is still ackable
    assert q.claim(1).seq == 3
    q.close()
    clock.advance(10)
    q = _open(d, clock)
    assert q.claim(600000).seq == 3
    q.close()


def _compacted(d, clock):
    q = _open(d, clock)
    q.enqueue(b"one")
    q.claim(600000)
    q.ack(1)
    q.enqueue(b"two-two")
    q.enqueue(b"three")  # compaction to generation 1
    assert q.stats().generation == 1
    q.close()


def test_manifest_guard():
    # EVIDENCE-OF: R3 M2 M3 R8 R13
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    _compacted(d, clock)
    os.rename(d + "/queue.manifest", d + "/moved")
    support.raises(ddq.Corrupt, _open, d, clock)
    os.rename(d + "/moved", d + "/queue.manifest")
    m = bytearray(support.read_file(d + "/queue.manifest"))
    m[40] ^= 1
    support.write_file(d + "/queue.manifest", bytes(m))
    support.raises(ddq.Corrupt, _open, d, clock)
    m[40] ^= 1
    support.write_file(d + "/queue.manifest", bytes(m))
    seg = d + "/" + ddq.segment_name(1, 0)
    data = support.read_file(seg)
    support.write_file(seg, data[:54])  # one short of the first 55-byte DATA
    support.raises(ddq.Corrupt, _open, d, clock)
    assert support.file_size(seg) == 54  # the snapshot is not truncated


def test_fat_interrupted_publication_is_completed():
    # EVIDENCE-OF: R14 S4
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    _compacted(d, clock)
    # FAT renames over a file by remove + rename: a cut between leaves only the synced tmp.
    os.rename(d + "/queue.manifest", d + "/queue.manifest.tmp")
    q = _open(d, clock)
    assert q.stats().generation == 1 and q.read(2) == b"two-two" and q.read(3) == b"three"
    q.close()
    assert "queue.manifest" in os.listdir(d) and "queue.manifest.tmp" not in os.listdir(d)
    os.rename(d + "/queue.manifest", d + "/queue.manifest.tmp")
    support.write_file(d + "/queue.manifest.tmp", b"not a manifest")
    support.raises(ddq.Corrupt, _open, d, clock)


def test_full_queue_can_be_drained():
    # EVIDENCE-OF: A7 A8
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock, payload=32, items=100, segs=4)
    n = 0
    for _ in range(200):
        try:
            q.enqueue(b"p" * 32)
            n += 1
        except ddq.Full:
            break
    assert 0 < n < 200
    before = q.stats().next_seq
    support.raises(ddq.Full, q.enqueue, b"p" * 32)
    assert q.stats().next_seq == before  # a rejected enqueue consumes no seq
    for k in range(n):
        c = q.claim(60000)
        if k % 3 == 0:
            q.retry(c.seq, 0)
            c = q.claim(60000)
        if k % 5 == 1:
            q.quarantine(c.seq, b"q" * 32)
        else:
            q.ack(c.seq)
    s = q.stats()
    assert s.available_items == 0 and s.claimed_items == 0
    q.close()


def test_sequences_survive_empty_snapshot_and_restart():
    # EVIDENCE-OF: M4 O14 O17
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock, items=4, segs=2)
    for _ in range(5):
        q.enqueue(b"x")
        q.claim(1000)
        q.ack(q.stats().next_seq - 1)
    assert q.compact()
    s = q.stats()
    assert s.total_items == 0 and s.next_seq == 6
    q.close()
    q = _open(d, clock, items=4, segs=2)
    assert q.enqueue(b"y") == 6
    assert q.compact() is False or q.stats().next_seq == 7
    q.close()


class _Listing(ddq.PosixStorage):
    """Logs listdir, rename and remove (by the file's name): what a compaction does when."""

    def __init__(self):
        super().__init__()
        self.log = []

    def listdir(self, path):
        self.log.append(("listdir", ""))
        return super().listdir(path)

    def rename(self, src, dst):
        self.log.append(("rename", dst[dst.rfind("/") + 1 :]))
        return super().rename(src, dst)

    def remove(self, path):
        self.log.append(("remove", path[path.rfind("/") + 1 :]))
        return super().remove(path)


def test_compaction_deletes_the_old_generation_by_name():
    # EVIDENCE-OF: C6 C3 R16
    # Before the copy a compaction deletes what is left of other generations (a listing); after
    # the publication it deletes g's own segments by name, one at a time, and lists nothing: a
    # listing of both generations was the compaction's heap peak on a board (issue 36).
    d = support.tmpdir() + "/q"
    st = _Listing()
    q = ddq.Queue(d, segment_bytes=512, max_payload_bytes=16, max_items=64, max_segments=16,
                  clock=support.FakeClock(T0), storage=st)  # fmt: skip
    for i in range(24):
        q.enqueue(bytes([65 + i]) * 16)
    for _ in range(10):
        q.ack(q.claim(60000).seq)
    old = [n for n in os.listdir(d) if n.endswith(".log")]
    assert len(old) > 2, old
    stray = ddq.segment_name(7, 3)  # another generation's leftover (a cut, R16)
    h = st.open(d + "/" + stray, "wb")
    st.write(h, b"x")
    st.sync(h)
    st.close(h)
    st.log = []
    assert q.compact()
    pub = len(st.log) - 1 - st.log[::-1].index(("rename", "queue.manifest"))  # (C2's is first)
    assert ("listdir", "") in st.log[:pub] and ("remove", stray) in st.log[:pub], st.log
    after = st.log[pub + 1 :]
    assert ("listdir", "") not in after, after
    assert sorted(n for k, n in after if k == "remove") == sorted(old), after
    new = sorted(n for n in os.listdir(d) if n.endswith(".log"))
    assert new and all(n.startswith("generation-00000000000000000001-") for n in new), new
    for s in range(11, 25):
        assert q.read(s) == bytes([64 + s]) * 16
    q.close()
    q = ddq.Queue(d, segment_bytes=512, max_payload_bytes=16, max_items=64, max_segments=16,
                  clock=support.FakeClock(T0))  # fmt: skip
    assert q.stats().total_items == 14 and q.read(24) == b"X" * 16
    q.close()
