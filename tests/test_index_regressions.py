# Regressions of the recovery index (queue.index, SPEC §12.1) found by the torture harness
# (tests/torture: index_bytes=1 workloads, every crash state opened through the index and with
# index_bytes=0, which must agree). Shared suite: CPython and MicroPython on POSIX, LittleFS, FAT.
import binascii

import support

# Each test opens its queue several times with ddq_index and ddq_compact beside ddq_recover: on
# the 64-bit 140 KiB model this session's larger open-time code left no block for the index's
# code (close() then writes no queue.index, X9) or the next open's (NoMemory).
support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
import ddq  # noqa: E402

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 50, "max_segments": 16}


def _state(q):
    items = [
        (i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms, i.payload_len)
        for i in q.items()
    ]
    payloads = [(i.seq, q.read(i.seq)) for i in q.items()]
    s = q.stats().as_dict()
    del s["recovered_tail_bytes"]
    return items, payloads, s


def _ten(index_bytes):
    # A fresh queue (its clock, its directory) holding 10 payloads.
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=clock, index_bytes=index_bytes, **OPTS)
    for k in range(10):
        q.enqueue(b"payload %d" % k)
    return clock, d, q


def test_index_covering_an_empty_last_segment_opens():
    # torture part 1 (posix, a crash while the first record of a new segment was written): the
    # new segment's name is durable before its records (S3), so a crash can leave it empty (or
    # with a torn first record that recovery cuts to nothing). Recovery accepts that; close()
    # then writes queue.index covering the empty segment (first record length 0). The next open
    # through that index must give the same queue as a full replay; it raised
    # Corrupt("a segment of generation 0 ends early (lost its end)"): _adopt_index adds an F7
    # bound (previous size + 0) for the empty covered segment, which no segment size satisfies.
    clock, d, q = _ten(0)
    n = q.stats().segment_count
    q.close()
    assert n >= 2, n
    support.write_file(d + "/" + ddq.segment_name(0, n), b"")  # the crash: created, nothing in it
    q = ddq.Queue(d, clock=clock, index_bytes=0, **OPTS)
    want = _state(q)
    q.close()
    q = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)  # a full replay; close writes the index
    assert not q.index_used
    assert _state(q) == want
    q.close()
    assert "queue.index" in support.listdir_sorted(d)
    q = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)  # raised Corrupt
    try:
        assert _state(q) == want
    finally:
        q.close()


def test_index_is_ignored_when_the_manifest_changed():
    # torture part 3 (bad images: a manifest field re-encoded with a valid CRC; the index from the
    # same run). X4: the index is adopted only if its manifest_crc matches the manifest, so a full
    # replay reports the inconsistent manifest exactly as without an index. But manifest_crc is
    # crc32 of all 48 manifest bytes, which end with the manifest's own CRC-32 (of bytes 0..39)
    # and 4 zero reserved bytes: that crc32 is the same constant (0x6522df69) for every valid
    # manifest, so the check never fails. Here item_count is off by one: index_bytes=0 reports
    # Corrupt; through the index the queue opened cleanly with the old state.
    clock, d, q = _ten(1)
    for _k in range(4):
        q.ack(q.claim(60000).seq)
    q.compact()
    q.enqueue(b"after the compaction")
    assert q.stats().generation >= 1
    q.close()
    m = bytearray(support.read_file(d + "/queue.manifest"))
    assert len(m) == 48
    n = m[28] | m[29] << 8  # item_count: u32 at offset 28 (M1)
    m[28], m[29] = (n + 1) & 0xFF, (n + 1) >> 8
    c = binascii.crc32(bytes(m[0:40])) & 0xFFFFFFFF
    m[40:44] = bytes(
        [c & 0xFF, (c >> 8) & 0xFF, (c >> 16) & 0xFF, c >> 24]
    )  # a valid manifest CRC
    support.write_file(d + "/queue.manifest", bytes(m))
    assert "queue.index" in support.listdir_sorted(d)
    support.raises(ddq.Corrupt, ddq.Queue, d, clock=clock, index_bytes=0, **OPTS)
    try:
        q = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)
    except ddq.Corrupt:
        return
    q.close()
    raise AssertionError(
        "the index was adopted with another manifest: expected Corrupt as with "
        "index_bytes=0, the queue opened"
    )


class _IndexWriteRaises(ddq.PosixStorage):
    # Writing queue.index.tmp raises something other than OSError: a power cut surfacing through
    # the file system's C code (torture raise mode), or MemoryError while a big index is written.
    def __init__(self):
        super().__init__()
        self.tmp = None

    def open(self, path, mode):
        f = super().open(path, mode)
        if path.endswith("queue.index.tmp"):
            self.tmp = f
        return f

    def write(self, f, buf):
        if self.tmp is not None and f is self.tmp:
            raise MemoryError("injected while writing queue.index.tmp")
        super().write(f, buf)


def test_close_releases_the_lock_when_the_index_write_raises():
    # torture part 2 (MicroPython, raise mode, FAT and LittleFS, a cut inside close() of a
    # close + reopen step): close() sets _closed, then _index_at_close() catches only OSError and
    # ddq.Error, so anything else raised while queue.index is written leaves close() before
    # _fail() and _release(): the log handle stays open, the lock stays held (and a second close()
    # returns at once), and every later Queue() on the directory in this process raises
    # Locked("locked by this process"). The index is optional (X1: a failed index write is
    # ignored); close() must release the lock whatever it raises (L2).
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    st = _IndexWriteRaises()
    q = ddq.Queue(d, clock=clock, index_bytes=1, storage=st, **OPTS)
    seq = q.enqueue(b"durable before close")
    try:
        q.close()
    except (MemoryError, ddq.NoMemory):  # (close reports it as NoMemory: O23)
        pass
    q.close()
    try:
        q2 = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)  # raised Locked
    except ddq.Locked:
        _release_leaked(q, st)
        raise
    try:
        assert q2.read(seq) == b"durable before close"
    finally:
        q2.close()


def _release_leaked(q, st):
    # Cleanup only, so the leak does not spill into later tests of this process (on the
    # MicroPython unix port the lock is an abstract socket named after the directory's inode,
    # which the next test's directory may reuse). Private attributes: the bug's leftovers.
    h = getattr(getattr(q, "_log", None), "h", None)
    if h is not None:
        try:
            st.close(h)
        except OSError:
            pass
    tok = getattr(q, "_lock", None)
    if tok is not None:
        st.unlock(tok)


def test_close_without_the_heap_to_load_the_index_code():
    # EVIDENCE-OF: X9 X1 (the qemu board, docs/HOST.md: on a full queue in a small heap, close()
    # raised MemoryError from loading ddq_compact for the index update). The index is optional:
    # close() syncs, releases the lock and raises nothing; no queue.index is written and the next
    # open replays the log to the same state. The failing load is injected as the module close()
    # loads (as a heap without a free block for the module's code would fail it; the test must
    # not depend on what this interpreter already imported).
    import sys

    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)
    for k in range(12):
        q.enqueue(b"reading %d" % k)
    q.ack(q.claim(1000).seq)
    want = _state(q)

    class NoHeap:  # ddq_compact where its code found no free block
        def __getattr__(self, name):
            raise MemoryError("memory allocation failed, allocating 2176 bytes")

    saved = sys.modules.get("ddq_compact")
    sys.modules["ddq_compact"] = NoHeap()
    try:
        q.close()  # raised MemoryError
    finally:
        if saved is None:
            del sys.modules["ddq_compact"]
        else:
            sys.modules["ddq_compact"] = saved
    assert "queue.index" not in support.listdir_sorted(d)
    q = ddq.Queue(d, clock=clock, index_bytes=1, **OPTS)  # the lock was released
    try:
        assert not q.index_used and _state(q) == want
    finally:
        q.close()
    assert "queue.index" in support.listdir_sorted(d)  # written by the close that had the heap
