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
    # the third: migration manifest, marker, staged data; then the publish
    d, e = _compact_with(fs, lambda: fs.arm("sync_dir", after=3), strict=True)
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


# ---------------------------------------------------------------- found by tests/torture
# Minimal reproductions of what the torture harness found (docs/RELIABILITY.md, "Bugs found").
# Each storage below is a small ddq.PosixStorage subclass that injects one event.


class _Recorder(ddq.PosixStorage):
    """Counts open handles (the lock file's handle is the lock token and not counted), logs
    mkdir/sync_dir, and can inject an error around the n-th rename over queue.manifest."""

    def __init__(self, how=None, nth=2):
        super().__init__()
        self.log = []
        self.handles = []
        self.how = how
        self.nth = nth
        self.renames = 0
        self.fail_dir = False

    def open(self, path, mode):
        h = super().open(path, mode)
        if not path.endswith("queue.lock"):
            self.handles.append(h)
        return h

    def close(self, h):
        for i in range(len(self.handles)):
            if self.handles[i] is h:
                del self.handles[i]
                break
        super().close(h)

    def mkdir(self, path):
        self.log.append(("mkdir", path.rstrip("/")))
        super().mkdir(path)

    def sync_dir(self, path):
        self.log.append(("sync_dir", path.rstrip("/")))
        if self.fail_dir:
            self.fail_dir = False
            raise OSError(5, "injected sync_dir failure")
        super().sync_dir(path)

    def rename(self, src, dst):
        if not dst.endswith("queue.manifest"):
            return super().rename(src, dst)
        self.renames += 1
        if self.renames != self.nth or self.how is None:
            return super().rename(src, dst)
        if self.how == "after":  # the rename happened, the call still reports an error
            super().rename(src, dst)
            raise OSError(5, "injected error after rename")
        if self.how == "fat":  # FAT: dst removed first, then the rename itself failed
            self.remove(dst)
            raise OSError(5, "injected error between remove and rename")
        if self.how == "dirsync":  # the rename is fine; the directory sync after it fails
            super().rename(src, dst)
            self.fail_dir = True


def _compact_with(fs, arm=None, strict=False):
    # max_items 2: the third enqueue compacts (migration publish = rename 1, generation 1 = 2);
    # arm() runs just before it. The close must succeed if strict, else it may raise a ddq.Error.
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), **OPTS)
    q.enqueue(b"one")
    q.claim(1000)
    q.ack(1)
    q.enqueue(b"two")
    if arm is not None:
        arm()
    e = None
    try:
        q.enqueue(b"three")
    except ddq.IOFailure as x:
        e = x
    if strict:
        q.close()
        return d, e
    try:
        q.close()
    except ddq.Error:
        pass
    return d, e


def test_torture_rename_error_after_the_rename_keeps_the_published_generation():
    # EVIDENCE-OF: C5 C7 R20
    # torture part 4, fault rename_after_eio: rename(tmp, queue.manifest) took effect but
    # reported EIO. _publish then removed the (gone) tmp, that raised, and _compact deleted the
    # staged generation the manifest now names: the next open said Corrupt ("fewer segments
    # than the manifest names") and every item was unreadable.
    d, e = _compact_with(_Recorder("after"))
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    assert q.read(2) == b"two"
    q.close()


def test_torture_fat_rename_error_keeps_the_tmp_generation():
    # EVIDENCE-OF: C5 C7 R14 R20
    # torture part 4, fault rename_partial: as FAT does, the old queue.manifest was removed and
    # then the rename failed. The tmp is now the manifest (R14 adopts it), but _compact deleted
    # the staged generation it names: Corrupt at the next open.
    d, e = _compact_with(_Recorder("fat"))
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    assert q.read(2) == b"two"
    q.close()


def test_torture_no_handle_left_open_after_a_failed_publish_dir_sync():
    # EVIDENCE-OF: C7 R20 S7
    # torture part 4, fault sync_dir_eio right after the manifest rename: the new generation is
    # published (kept, see above) but its write handle was never closed, not even by close().
    # On LittleFS a second write handle on that segment after recover() loses data (S7).
    fs = _Recorder("dirsync")
    d, e = _compact_with(fs)
    assert e is not None
    assert len(fs.handles) == 0, fs.handles


def test_torture_created_queue_directory_is_made_durable():
    # EVIDENCE-OF: S3 O1
    # torture part 1, posix model: Queue() creates the missing directory with mkdir but never
    # syncs its parent, so after a power cut the whole directory, with enqueues that returned,
    # may be gone (lost, and sequence numbers reused). The parent must be synced before the
    # first enqueue returns (a no-op where the platform has no directory fsync).
    fs = _Recorder()
    parent = support.tmpdir().rstrip("/")
    q = ddq.Queue(parent + "/q", storage=fs, clock=support.FakeClock(T0), **OPTS)
    q.enqueue(b"x")
    q.close()
    i = fs.log.index(("mkdir", parent + "/q"))
    assert ("sync_dir", parent) in fs.log[i:], fs.log


class _BadCloseLock(ddq.PosixStorage):
    def open(self, path, mode):
        f = super().open(path, mode)
        if path.endswith("queue.lock"):
            return _CloseFails(f)
        return f


class _CloseFails:
    def __init__(self, f):
        self.f = f

    def fileno(self):
        return self.f.fileno()

    def close(self):
        self.f.close()
        raise OSError(5, "injected close error")


def test_torture_lock_is_released_when_closing_the_lock_file_fails():
    # EVIDENCE-OF: L2 L3
    # torture part 2 (MicroPython, raise mode): after a cut, closing queue.lock raised, and
    # unlock() never closed the abstract socket that is the lock on the unix port: every later
    # Queue() on that directory in the process raised Locked. (CPython passes: flock dies with
    # the descriptor.)
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=_BadCloseLock(), clock=support.FakeClock(T0), **OPTS)
    try:
        q.close()
    except (OSError, ddq.Error):
        pass
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    q.close()


# The two directories of test_torture_truncated_non_last_segment_is_corrupt, built by these
# (tests/host/test_host_fsck.py gives the same two to fsck): 3 snapshot segments of 204 B, and
# a generation 0 of segments 254, 154 and 148 B. Each returns its options.
def snapshot_segments(d):
    opts = {"segment_bytes": 256, "max_payload_bytes": 60, "max_items": 8, "max_segments": 64}
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    q.enqueue(b"z")
    q.claim(1000)
    q.ack(1)
    for _i in range(6):
        q.enqueue(b"p" * 54)  # 102 B records, two to a segment
    q.compact()
    q.close()
    return opts


def generation0_segments(d):
    opts = {"segment_bytes": 256, "max_payload_bytes": 128, "max_items": 8, "max_segments": 16}
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    q.enqueue(b"p" * 100)  # DATA 148 bytes at 0
    q.enqueue(b"0123456789")  # DATA 58: 206
    q.claim(1000)  # CLAIM 48: segment 0 is 254 bytes
    q.enqueue(b"0123456789")  # segment 1: DATA 58 at 0
    q.claim(1000)  # CLAIM at 58
    q.ack(2)  # ACK at 106; segment 1 is 154 bytes
    q.enqueue(b"p" * 100)  # 148 bytes do not fit: segment 2
    q.close()
    return opts


def test_torture_truncated_non_last_segment_is_corrupt():
    # EVIDENCE-OF: R13 F7 R15 V3
    # torture part 3, "truncate <segment> at <record boundary>": a segment cut right after its
    # CLAIM record (the ACK dropped) opened cleanly with the item claimed again, an acked item
    # resurrected. A segment ends only where the next record did not fit (F7); options are not
    # stored (M8) and each open may bring another segment_bytes W (R15: W >= every segment
    # there is), so the check is: end of a segment + the next segment's first record > every
    # segment before it. That record is the rotation's only inside a snapshot (one compaction
    # wrote both segments): past it libddq, which has no R23, appends to the empty segment a
    # lost rotation left, so there the cut is a directory libddq writes itself (issue 35 item
    # 10, RELIABILITY T16). Here: 3 snapshot segments of 204 B; segment 1 cut to 102 B says it
    # lost its end (102 + 102 <= 204).
    d = support.tmpdir() + "/q"
    opts = snapshot_segments(d)
    seg = d + "/generation-%020d-segment-%020d.log"
    assert [support.file_size(seg % (1, k)) for k in range(3)] == [204, 204, 204]
    data = support.read_file(seg % (1, 1))
    support.write_file(seg % (1, 1), data[:102])
    e = support.raises(ddq.Corrupt, ddq.Queue, d, clock=support.FakeClock(T0), **opts)
    assert "segment 1 of generation 1 ends early" in str(e), str(e)
    # The same directory, intact, opens with larger limits than the writer's (R15).
    support.write_file(seg % (1, 1), data)
    q = ddq.Queue(d, clock=support.FakeClock(T0))
    assert q.stats().total_items == 6
    q.close()
    # Generation 0 (no snapshot): segment 1 cut after its CLAIM (the ACK of item 2 dropped) is
    # what libddq leaves after a lost rotation and a write: it opens, item 2 claimed again.
    d = support.tmpdir() + "/q"
    opts = generation0_segments(d)
    seg1 = d + "/segment-00000000000000000001.log"
    support.write_file(seg1, support.read_file(seg1)[:106])
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    assert [(it.seq, it.state) for it in q.items()] == [
        (1, "claimed"),
        (2, "claimed"),
        (3, "available"),
        (4, "available"),
    ]
    q.close()


def test_torture_zero_footer_before_a_zero_tail_is_torn():
    # EVIDENCE-OF: R10 R11 S5
    # torture part 1, posix model c (sync="none", and "ack" when unsynced records follow each
    # other): the size covers appends whose bytes never reached the medium (S5). Record 2's
    # header and payload landed, its footer and the record after it read as zeros. Recovery said
    # Corrupt ("bad commit footer") instead of cutting the torn tail: R11 accepts a zero footer
    # only on the very last record and a zero tail only from a record boundary.
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    q.enqueue(b"one")  # 51 bytes at 0
    q.enqueue(b"two")  # 51 bytes at 51
    q.close()
    seg = d + "/segment-00000000000000000000.log"
    data = support.read_file(seg)
    assert len(data) == 102
    support.write_file(seg, data[:94] + b"\0" * 8 + b"\0" * 48)
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    assert q.read(1) == b"one"
    assert q.stats().total_items == 1
    assert q.stats().recovered_tail_bytes == 51 + 48
    q.close()


class _Cut(Exception):
    pass


class _SyncRaises(ddq.PosixStorage):
    # A power cut that surfaces through the file system's code as something other than OSError
    # (the torture's raise mode, found by `make torture` on LittleFS and FAT).
    def __init__(self):
        super().__init__()
        self.armed = False

    def sync(self, f):
        if self.armed:
            self.armed = False
            raise _Cut("cut inside sync")
        super().sync(f)


def test_close_releases_the_lock_when_its_final_sync_raises():
    # EVIDENCE-OF: O16 L3 R20
    # close() synced the dirty log outside its try/finally: anything but OSError left close()
    # with the lock held, and every later Queue() on the directory in this process raised Locked.
    fs = _SyncRaises()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), sync="none", **OPTS)
    q.enqueue(b"not yet synced")
    fs.armed = True
    try:
        q.close()
    except _Cut:
        pass
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)  # raised Locked
    q.close()
