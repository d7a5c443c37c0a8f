# At the edges (docs/RELIABILITY.md parts 1c and 6): every state ddq's own writes, power cuts and a
# full disk can leave must open, and keep opening after more writes. Shared suite: CPython and
# MicroPython over POSIX, LittleFS and FAT.
import ddq
import support

T0 = 1767225600000
SEG1 = "/segment-00000000000000000001.log"
SEG2 = "/segment-00000000000000000002.log"
ENOSPC = 28


def _rotated(d, opts):
    # Segment 0 = 1,000 B (two 452 B payloads), segment 1 = 448 B (a 400 B payload).
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    q.enqueue(b"a" * 452)
    q.enqueue(b"b" * 452)
    q.enqueue(b"c" * 400)
    q.close()
    assert support.file_size(d + SEG1) == 448


def _reopens(d, opts, n):
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    assert q.stats().total_items == n, q.stats().total_items
    q.close()


def test_interrupted_rotation_then_a_small_record_reopens():
    # EVIDENCE-OF: F7 R23 W3
    # A power cut after W3 created segment 2 for a 600 B record, before the record was durable:
    # an empty segment 2. The next open continued into it with a 10 B record, and the open after
    # that raised Corrupt("a segment of generation 0 ends early"): 448 + 58 < 1,000. Recovery
    # now removes an empty last segment past the manifest's boundary (R23), so the record goes
    # into segment 1, where it fits, as if the rotation had never begun.
    opts = {"segment_bytes": 1024, "max_payload_bytes": 900}
    d = support.tmpdir() + "/q"
    _rotated(d, opts)
    support.write_file(d + SEG2, b"")
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    assert "segment-00000000000000000002.log" not in support.listdir_sorted(d)
    assert q.enqueue(b"d" * 10) == 4
    q.close()
    assert support.file_size(d + SEG1) == 448 + 58
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    assert q.read(4) == b"d" * 10 and q.stats().total_items == 4
    # the 600 B record that caused the rotation, now: a real rotation, and it reopens
    assert q.enqueue(b"e" * 600) == 5
    q.close()
    _reopens(d, opts, 5)


def test_torn_first_record_of_a_new_segment_then_more_writes_reopens():
    # EVIDENCE-OF: R10 R11 R23 F7
    # The same rotation, the power cut in the middle of the 600 B record: a torn first record,
    # cut to nothing (R10, or R11 for zeros) leaves an empty last segment, removed (R23).
    opts = {"segment_bytes": 1024, "max_payload_bytes": 900}
    for cut in (100, 0, 5, 647):
        d = support.tmpdir() + "/q"
        _rotated(d, opts)
        q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
        q.enqueue(b"e" * 600)  # 648 B: segment 2
        q.close()
        tail = support.read_file(d + SEG2)[0:cut] if cut else b"\x00" * 300  # (R11: zeros)
        support.write_file(d + SEG2, tail)
        q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
        assert q.stats().recovered_tail_bytes == len(tail)
        q.enqueue(b"d" * 10)
        q.claim(1000)
        q.ack(1)
        q.close()
        _reopens(d, opts, 4)


def test_empty_segment_in_the_manifest_is_kept():
    # EVIDENCE-OF: R23 R4 R8
    # A compacted generation whose snapshot is empty: its one segment (the manifest's) is kept,
    # and the queue goes on in it.
    opts = {"segment_bytes": 256, "max_payload_bytes": 100, "max_items": 4, "max_segments": 4}
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    q.enqueue(b"x")
    q.claim(1000)
    q.ack(1)
    q.compact()
    q.close()
    q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
    assert q.stats().total_items == 0
    q.enqueue(b"y")
    q.close()
    _reopens(d, opts, 1)


def _fill(q, seed, n, lo, hi):
    # n enqueues of lo..hi bytes (a tiny LCG: the same on both interpreters); returns the seqs.
    x = seed
    seqs = []
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        seqs.append(q.enqueue(bytes([65 + i % 26]) * (lo + x % (hi - lo + 1))))
    return seqs


def test_segment_bytes_may_grow_or_shrink_between_opens():
    # EVIDENCE-OF: F7 R15 M8
    # Options are not on disk (M8): a writer reopened with a larger segment_bytes (or a smaller
    # one that still holds every segment, R15) appends and rotates at its own size. The old
    # F7 rule (one W for the whole generation) refused the larger writer's directory once its
    # segments outgrew the first writer's rotations.
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    d = support.tmpdir() + "/q"
    total = 0
    for w, seed in ((512, 1), (2048, 2), (0, 3), (0, 4), (4096, 5), (0, 6)):
        if not w:  # shrink to the largest segment there is: the least R15 allows
            for n in support.listdir_sorted(d):
                if n.startswith("segment-"):
                    w = max(w, support.file_size(d + "/" + n))
        opts = {"segment_bytes": w, "max_payload_bytes": 400, "max_items": 400, "max_segments": 64}
        q = ddq.Queue(d, clock=support.FakeClock(T0), **opts)
        total += len(_fill(q, seed, 16, 20, 400))
        q.close()
        _reopens(
            d,
            {
                "segment_bytes": 4096,
                "max_payload_bytes": 400,
                "max_items": 400,
                "max_segments": 64,
            },
            total,
        )
    # A segment larger than the options' is refused (R15): a refusal of the options, not damage.
    support.raises(
        ddq.Corrupt,
        ddq.Queue,
        d,
        clock=support.FakeClock(T0),
        segment_bytes=512,
        max_payload_bytes=400,
        max_items=400,
        max_segments=64,
    )


class _SmallDisk(ddq.PosixStorage):
    # A filesystem of `cap` bytes in blocks of 1 KiB for the queue's directory (as tmpfs, LittleFS
    # and FAT allocate: a new segment's first byte takes a whole free block): a write past the
    # free blocks writes what fits and raises ENOSPC, as write(2) does.
    def __init__(self, d, cap):
        super().__init__()
        self.d, self.cap = d, cap

    def _free(self):
        used = 0
        for n in ddq.PosixStorage.listdir(self.d):
            used += (support.file_size(self.d + "/" + n) + 1023) // 1024
        return self.cap // 1024 - used

    def write(self, f, buf):
        f.flush()
        size = f.seek(0, 2)  # (append mode: every write goes to the end anyway)
        room = ((size + 1023) // 1024 + self._free()) * 1024 - size
        if room < len(buf):
            if room > 0:
                super().write(f, memoryview(buf)[0:room])
                f.flush()
            raise OSError(ENOSPC, "no space")
        super().write(f, buf)


def test_full_disk_then_freed_space_reopens():
    # EVIDENCE-OF: R23 F7 R20 R10 C9
    # The natural way to the interrupted rotation: fill a small disk until the enqueue raises
    # IOFailure (ENOSPC), reopen (every returned item is there), free the space, enqueue 5 more,
    # close, reopen. Before R23 most seeds raised Corrupt at the last open.
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    opts = {"segment_bytes": 8192, "max_payload_bytes": 1500, "max_items": 400, "max_segments": 64}
    for seed in range(1, 9):
        d = support.tmpdir() + "/q"
        ddq.Queue(d, clock=support.FakeClock(T0), **opts).close()
        disk = _SmallDisk(d, 48 * 1024)
        q = ddq.Queue(d, storage=disk, clock=support.FakeClock(T0), **opts)
        x, done = seed, 0
        for _i in range(400):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            try:
                q.enqueue(b"z" * (1 + x % 1500))
            except ddq.IOFailure:
                break
            done += 1
        else:
            raise AssertionError("the disk never filled")
        q.close()
        try:  # the cut of a torn tail may need room where truncate is missing (R12, C9)
            q = ddq.Queue(d, storage=disk, clock=support.FakeClock(T0), **opts)
            assert q.stats().total_items == done
            q.close()
        except ddq.IOFailure:
            pass
        disk.cap += 64 * 1024
        q = ddq.Queue(d, storage=disk, clock=support.FakeClock(T0), **opts)
        assert q.stats().total_items == done, (seed, q.stats().total_items, done)
        _fill(q, seed, 5, 1, 1500)
        q.close()
        _reopens(d, opts, done + 5)
