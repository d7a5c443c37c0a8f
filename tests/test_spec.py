# Requirements of docs/SPEC.md not proven elsewhere: worked bytes, tail cuts by copy + rename,
# re-validating reads, limits smaller than the writer's, reads of unsynced records, rotation,
# error codes and ignored names. Shared suite.
import binascii

import ddq
import support
from faults import FaultStorage

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 16, "max_segments": 16}


def _q(d, **kw):
    o = dict(OPTS)
    o.update(kw)
    return ddq.Queue(d, clock=support.FakeClock(T0), **o)


def test_worked_record_bytes():
    # EVIDENCE-OF: F12 F1 F2 F3 M7
    d = support.tmpdir() + "/q"
    q = _q(d)
    q.enqueue(b"alpha")
    q.claim(1000)
    q.ack(1)
    q.close()
    data = support.read_file(d + "/" + ddq.segment_name(0, 0))
    want_data = (
        "44514731010001000100000000000000000000000000000005000000350000008793"
        "77a500000000616c706861434d495435000000"
    )
    want_ack = (
        "445147310100030001000000000000000000000000000000000000003000000"
        "07fdb092800000000434d495430000000"
    )
    assert binascii.hexlify(data[0:53]).decode() == want_data
    assert binascii.hexlify(data[101:149]).decode() == want_ack
    m = ddq.encode_manifest(1, 13, 1, 0, 0)
    assert binascii.hexlify(m).decode() == (
        "4444514d0100300001000000000000000d0000000000000001000000000000000000000000000000"
        "b7154d0f00000000"
    )


def test_leftover_cut_is_adopted_or_dropped():
    # EVIDENCE-OF: R12 S4 S8
    d = support.tmpdir() + "/q"
    q = _q(d)
    q.enqueue(b"one")
    q.enqueue(b"two")
    q.close()
    seg = d + "/" + ddq.segment_name(0, 0)
    data = support.read_file(seg)
    # A cut whose rename never happened: the original stands, the .cut goes.
    support.write_file(seg + ".cut", data[:51])
    q = _q(d)
    assert q.stats().total_items == 2
    q.close()
    assert ddq.segment_name(0, 0) + ".cut" not in support.listdir_sorted(d)
    # FAT's rename-over removed the original first: the complete .cut is the segment.
    support.write_file(seg + ".cut", data[:51])
    import os

    os.remove(seg)
    q = _q(d)
    assert q.stats().total_items == 1 and q.read(1) == b"one"
    q.close()


def test_read_revalidates_the_record():
    # EVIDENCE-OF: R19 R13
    d = support.tmpdir() + "/q"
    q = _q(d)
    for i in range(6):
        q.enqueue(b"payload-%d" % i + b"x" * 40)
    assert q.stats().segment_count >= 2
    seg0 = d + "/" + ddq.segment_name(0, 0)  # closed: not the segment being written
    data = bytearray(support.read_file(seg0))
    data[45] ^= 1
    support.write_file(seg0, bytes(data))
    e = support.raises(ddq.Corrupt, q.read, 1)
    assert ddq.segment_name(0, 0) in str(e) and "offset 0" in str(e)
    q.close()


def test_limits_smaller_than_the_writers():
    # EVIDENCE-OF: R15 M8
    d = support.tmpdir() + "/q"
    q = _q(d)
    for _ in range(5):
        q.enqueue(b"p" * 40)
    q.close()
    support.raises(ddq.Corrupt, _q, d, max_payload_bytes=32)
    support.raises(ddq.Full, _q, d, max_items=4)
    q = _q(d)  # the writer's limits still open it
    assert q.stats().total_items == 5
    q.close()


def test_unsynced_records_are_read_without_a_sync():
    # EVIDENCE-OF: D3 D7
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), sync="none", **OPTS)
    q.enqueue(b"synced")
    q.sync()
    n = fs.calls.get("sync", 0)
    q.enqueue(b"group")
    c = q.claim(1000)
    assert q.read(1) == b"synced" and q.read(2) == b"group"
    assert fs.calls.get("sync", 0) == n  # served from the synced file and from RAM
    q.quarantine(c.seq, b"why")
    assert q.reason(c.seq) == b"why"  # not a DATA record: the segment is synced first
    assert fs.calls.get("sync", 0) == n + 1
    q.close()
    q = _q(d)
    assert q.read(2) == b"group" and q.reason(1) == b"why"
    q.close()


def test_rotation_syncs_the_finished_segment():
    # EVIDENCE-OF: W3 F7
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), sync="none", **OPTS)
    n = fs.calls.get("sync", 0)
    for _ in range(5):
        q.enqueue(b"x" * 60)  # 108 bytes each: four to a segment
    assert q.stats().segment_count == 2
    assert fs.calls.get("sync", 0) == n + 1 and q.durable_seq == 4
    q.close()


def test_max_items_with_nothing_acked_is_full():
    # EVIDENCE-OF: C12 A6 A7
    d = support.tmpdir() + "/q"
    q = _q(d, max_items=2)
    q.enqueue(b"a")
    q.enqueue(b"b")
    e = support.raises(ddq.Full, q.enqueue, b"c")
    assert e.code == -7 and q.stats().next_seq == 3 and not q.stats().failed
    q.close()


def test_error_codes():
    # EVIDENCE-OF: O19
    codes = {
        ddq.InvalidArgument: -1,
        ddq.IOFailure: -2,
        ddq.Corrupt: -3,
        ddq.Locked: -4,
        ddq.TooLarge: -6,
        ddq.Full: -7,
        ddq.NotFound: -8,
        ddq.BadState: -9,
        ddq.BufferTooSmall: -10,
        ddq.Limit: -11,
    }
    for cls, code in codes.items():
        assert issubclass(cls, ddq.Error) and cls.code == code, cls


def test_reserve_files_are_checked_and_unknown_files_left_alone():
    # EVIDENCE-OF: N5 N6
    d = support.tmpdir() + "/q"
    q = _q(d)
    q.enqueue(b"a")
    q.close()
    spare = d + "/" + ddq.segment_name(0, 1) + ".reserve"
    support.write_file(spare, b"")
    support.write_file(d + "/notes.txt", b"mine")
    q = _q(d)
    assert q.read(1) == b"a"
    q.close()
    names = support.listdir_sorted(d)
    # an empty spare holds nothing: removed, as libddq's recovery removes it; others stay
    assert ddq.segment_name(0, 1) + ".reserve" not in names and "notes.txt" in names
    # a non-empty one holding a record its segment does not: Corrupt, and nothing is removed
    other = support.tmpdir() + "/other"
    q = _q(other)
    q.enqueue(b"z")
    q.close()
    rec = support.read_file(other + "/" + ddq.segment_name(0, 0))
    spare = d + "/" + ddq.segment_name(0, 0) + ".reserve"
    support.write_file(spare, rec)
    support.raises(ddq.Corrupt, _q, d)
    assert support.read_file(spare) == rec and "notes.txt" in support.listdir_sorted(d)


def test_claim_seq_takes_an_available_item_due_or_not():
    # EVIDENCE-OF: O20 E13
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=clock, **OPTS)
    q.enqueue(b"a")
    q.enqueue(b"b")
    c = q.claim(1000)
    q.retry(c.seq, 60000)  # 1 backs off for a minute
    c = q.claim_seq(1, 5000)  # taken anyway
    assert c.seq == 1 and c.attempts == 1 and c.lease_until_ms == T0 + 5000
    support.raises(ddq.BadState, q.claim_seq, 1, 5000)  # claimed, live
    support.raises(ddq.NotFound, q.claim_seq, 9, 5000)
    clock.advance(5000)
    assert q.claim_seq(1, 5000).seq == 1  # an expired lease is swept first
    q.ack(1)
    support.raises(ddq.BadState, q.claim_seq, 1, 5000)
    q.close()
    q = ddq.Queue(d, clock=clock, **OPTS)
    assert [i.state for i in q.items()] == ["acked", "available"]
    q.close()


class _Order(FaultStorage):
    def __init__(self):
        super().__init__()
        self.log = []

    def sync_dir(self, path):
        self.log.append("sync_dir")
        super().sync_dir(path)

    def remove(self, path):
        self.log.append("remove " + path[path.rfind("/") + 1 :])
        super().remove(path)


def test_selected_generation_is_synced_before_anything_is_deleted():
    # EVIDENCE-OF: R18 R16
    d = support.tmpdir() + "/q"
    q = _q(d)
    q.enqueue(b"a")
    q.close()
    stray = ddq.segment_name(7, 0)
    support.write_file(d + "/" + stray, b"unpublished")
    fs = _Order()
    q = ddq.Queue(d, storage=fs, clock=support.FakeClock(T0), **OPTS)
    q.close()
    i = fs.log.index("remove " + stray)
    assert "sync_dir" in fs.log[:i], fs.log
    assert stray not in support.listdir_sorted(d)


def test_an_existing_next_segment_is_not_overwritten():
    # EVIDENCE-OF: S9 R20
    # No O_EXCL on VfsPosix: ddq checks that a segment name is free (under the lock) before it
    # creates it; a file in the way fail-stops instead of being appended to.
    d = support.tmpdir() + "/q"
    q = _q(d)
    q.enqueue(b"x" * 60)
    planted = d + "/" + ddq.segment_name(0, 1)
    support.write_file(planted, b"not ours")
    e = None
    for _ in range(8):  # fill segment 0 until the next record needs segment 1
        try:
            q.enqueue(b"x" * 60)
        except ddq.IOFailure as x:
            e = x
            break
    assert e is not None and q.stats().failed
    assert support.read_file(planted) == b"not ours"
    q.close()


def test_lock_socket_is_named_by_device_and_inode():
    # EVIDENCE-OF: L2
    try:
        import fcntl  # noqa: F401

        raise support.Skip("flock on queue.lock is the lock here (L1)")
    except ImportError:
        pass
    import os
    import struct

    try:
        import socket
    except ImportError:  # bare metal: no socket module, L3 is the only exclusion
        raise support.Skip("this port has no socket module (L3 is the lock)")
    if not hasattr(socket, "AF_UNIX"):
        raise support.Skip("no AF_UNIX sockets")
    d = support.tmpdir() + "/q"
    q = _q(d)
    st = os.stat(d)
    if not st[1]:
        q.close()
        raise support.Skip("inode 0 (LittleFS/FAT in this process): L3 is the lock")
    lk = os.stat(d + "/queue.lock")[1]
    addr = struct.pack("<H", socket.AF_UNIX) + b"\0ddq-%d-%d-%d" % (st[2], st[1], lk)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        support.raises(OSError, s.bind, addr)  # the queue holds the name
        q.close()
        s.bind(addr)  # released with the queue
    finally:
        s.close()


def test_lock_a_stale_holder_of_a_reused_inode_does_not_lock_out_a_new_queue():
    # EVIDENCE-OF: L2
    # A process that still holds the name of a directory deleted since (its inode number now
    # a new directory's) once made every open of the new directory Locked: the name now
    # carries queue.lock's inode too, as flock's lock would (L1). The stale holder here is a
    # socket bound to the name the directory had with an earlier queue.lock.
    try:
        import fcntl  # noqa: F401

        raise support.Skip("flock on queue.lock is the lock here (L1)")
    except ImportError:
        pass
    import os

    try:
        import socket
    except ImportError:
        raise support.Skip("this port has no socket module (L3 is the lock)")
    if not hasattr(socket, "AF_UNIX"):
        raise support.Skip("no AF_UNIX sockets")
    d = support.tmpdir() + "/q"
    q = _q(d)
    if q._lock[2] is None:
        q.close()
        raise support.Skip("inode 0 (LittleFS/FAT in this process): L3 is the lock")
    # The stale holder: this queue's own socket, kept past its close (as a process that
    # outlived its directory keeps it); the directory then comes back under the same inode
    # number (here: it is the same directory) with a new queue.lock.
    key, f, stale = q._lock
    q._lock = (key, f, None)
    q.close()
    try:
        old = os.stat(d + "/queue.lock")[1]
        keep = d + "/keep"  # (the old queue.lock kept, so the new one cannot take its inode)
        support.write_file(keep, b"")
        os.rename(d + "/queue.lock", keep)
        q = _q(d)  # Locked while the name was the directory's alone
        assert os.stat(d + "/queue.lock")[1] != old
        q.close()
    finally:
        stale.close()


def test_recovery_reads_segment_names_as_parse_segment_name():
    # EVIDENCE-OF: N2 N3 N4 R16
    # Recovery lists the directory once and reads the names in place (no parse_segment_name
    # call, for its slices: the reopen churn of DESIGN §4.1). Names that are almost a segment's are
    # not segments: ignored and left alone, in generation 0 and in generation 1 (where generation
    # 0's segments are deleted); the directory's own name holds a "%" (segment paths are made
    # from a format).
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    d = support.tmpdir() + "/q%d%s"
    o = {"segment_bytes": 256, "max_payload_bytes": 64, "max_items": 64, "max_segments": 64}
    q = ddq.Queue(d, clock=support.FakeClock(T0), **o)
    for k in range(8):
        q.enqueue(b"%d" % k * 60)
    q.close()
    near = [
        "segment-0000000000000000000x.log",
        "segment-+0000000000000000001.log",
        "segment-99999999999999999999.log",
        "segment-00000000000000000001.lo",
        "generation-%020d-segment-%020d.log" % (0, 1),
        "segment-%020d.log.txt" % 2,
    ]
    for name in near:
        support.write_file(d + "/" + name, b"not a segment")
    q = ddq.Queue(d, clock=support.FakeClock(T0), **o)
    assert q.stats().total_items == 8 and q.read(8) == b"7" * 60
    assert q.replayed_records == 8
    for _ in range(4):
        q.ack(q.claim(1000).seq)
    assert q.compact()
    q.close()
    names = support.listdir_sorted(d)
    assert ddq.segment_name(0, 0) not in names and ddq.segment_name(1, 0) in names
    q = ddq.Queue(d, clock=support.FakeClock(T0), **o)
    assert q.stats().total_items == 4 and q.read(5) == b"4" * 60
    q.close()
    names = support.listdir_sorted(d)
    for name in near:
        assert name in names, name
