# The recovery index (queue.index, SPEC §12.1): written at close, adopted at open only when it
# matches the directory byte for byte, otherwise ignored. Shared suite: CPython and MicroPython
# over POSIX, LittleFS and FAT.
import binascii
import struct

import ddq
import shared
import support
from faults import FaultStorage

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 200, "max_segments": 64}
IX_FMT = "<IHHIIQQ" + "I" * 16
# In a heap under 256 KiB the module skips (support.needs_heap). The index is loaded only where
# there is room for it (X5: else the whole log is replayed), and these tests assert that it was
# used. On the 140 KiB board of tests/host/test_host_smallheap.py (unix port, 64-bit) with
# ddq_index loaded beside ddq_recover, ddq_compact, the module and the runner, 4 of the 7 tests
# that need the least heap still failed (MemoryError, or X5's fallback where a test expects the
# index); alone beside the runner the other 8 need 160-224 KiB.
support.needs_heap(
    256 * 1024,
    "queue.index written and adopted (ddq_index loaded beside "
    "ddq_recover and ddq_compact, or X5's fallback replays everything instead)",
)


def _open(d, clock, ixb=1, **kw):
    o = dict(OPTS)
    o.update(kw)
    return ddq.Queue(d, clock=clock, index_bytes=ixb, **o)


def _state(q):
    items = [
        (i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms, i.payload_len)
        for i in q.items()
    ]
    reasons = [(i.seq, q.reason(i.seq)) for i in q.items() if i.state == "quarantined"]
    payloads = [(i.seq, q.read(i.seq)) for i in q.items()]
    s = q.stats().as_dict()
    del s["recovered_tail_bytes"]
    return items, reasons, payloads, s


def _fill(q, clock, n=40):
    # Every state: acked, retried (history), quarantined with reasons, claimed, a swept claim.
    shared.every_state(q, n, n // 2)
    c = q.claim_seq(n, 50)
    clock.advance(100)
    q.claim(5000)  # sweeps c's expired lease in RAM only [T2]
    return c.seq


def _indexed(clock=None):
    """A queue in every state (_fill), closed with its index written: (clock, directory)."""
    clock = clock or support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock)
    _fill(q, clock)
    q.close()
    return clock, d


def _adopt(d, clock):
    """Open d, its index allowed, and close it: (index used, records replayed, _state)."""
    q = _open(d, clock)
    got = q.index_used, q.replayed_records, _state(q)
    q.close()
    return got


def _same_as_full_replay(d, clock, want):
    q = _open(d, clock, ixb=0)
    assert not q.index_used
    got = _state(q)
    q.close()
    assert got == want, (got, want)


def test_close_writes_an_index_and_open_adopts_it():
    # EVIDENCE-OF: X1 X3 X5 X6 R9 O11
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock)
    swept = _fill(q, clock)
    q.close()
    names = support.listdir_sorted(d)
    assert "queue.index" in names and "queue.index.tmp" not in names, names
    q = _open(d, clock)
    assert q.index_used and q.replayed_records == 0, (q.index_used, q.replayed_records)
    want = _state(q)
    # The swept claim is claimed again, as after a full replay, and still ackable.
    assert [i.state for i in q.items() if i.seq == swept] == ["claimed"]
    q.close()
    _same_as_full_replay(d, clock, want)
    q = _open(d, clock)
    assert q.ack(swept) is True
    q.close()


def _crc(b):
    return binascii.crc32(b) & 0xFFFFFFFF  # CRC-32/ISO-HDLC (SPEC §2), not ddq's own


def test_header_fields_describe_the_queue():
    # EVIDENCE-OF: X2
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock)
    _fill(q, clock)
    s = q.stats()
    q.close()
    b = support.read_file(d + "/queue.index")
    f = struct.unpack(IX_FMT, b[0:96])
    assert f[0] == 0x49514444 and f[1] == 1 and b[0:4] == b"DDQI"
    assert f[5] == s.generation and f[6] == s.next_seq and f[7] == s.total_items
    # available/claimed hold the durable state: the swept claim counts as claimed [X3]
    assert (f[9], f[10], f[11], f[12]) == (
        s.available_items - 1,
        s.claimed_items + 1,
        s.acknowledged_items,
        s.quarantined_items,
    )
    assert f[16] == s.segment_count
    assert f[22] == _crc(b[0:92]) and f[21] == _crc(b[96:])
    n, segs = f[7], f[16]
    assert len(b) == 96 + 12 * segs + 19 * n + 28 * f[13] + 20 * (f[14] + f[15])
    total = 0
    for k in range(segs):
        crc, size, first = struct.unpack_from("<III", b, 96 + 12 * k)
        name = ddq.segment_name(s.generation, k)
        data = support.read_file(d + "/" + name)
        assert size == len(data) and crc == _crc(data), (k, size, len(data))
        if k:
            assert first == struct.unpack_from("<I", data, 28)[0]
        total += size
    assert total == s.stored_bytes
    seqs = struct.unpack_from("<%dQ" % n, b, 96 + 12 * segs)
    q = ddq.Queue(d, index_bytes=0, **OPTS)
    assert list(seqs) == [i.seq for i in q.items()]
    q.close()


def test_records_after_the_index_are_replayed():
    # EVIDENCE-OF: X5 X6 X7
    # A writer that does not maintain the index (C DDQ, or index_bytes=0) appends after it:
    # the index still describes the prefix; only the new records are replayed.
    clock, d = _indexed()
    q = _open(d, clock, ixb=0)
    for k in range(30):  # enough to start new segments
        q.enqueue(b"later %d" % k)
    c = q.claim(1000)
    q.ack(c.seq)
    c = q.claim(1000)
    q.quarantine(c.seq, b"late reason")
    q.close()
    used, replayed, want = _adopt(d, clock)
    assert used and replayed == 34, replayed
    _same_as_full_replay(d, clock, want)


def test_index_of_an_old_generation_is_ignored():
    # EVIDENCE-OF: X4 X7
    clock, d = _indexed()
    old = support.read_file(d + "/queue.index")
    q = _open(d, clock, ixb=0)
    assert q.compact()
    q.close()
    support.write_file(d + "/queue.index", old)  # as a compacting C DDQ would leave it
    used, _, want = _adopt(d, clock)
    assert not used
    _same_as_full_replay(d, clock, want)
    assert support.read_file(d + "/queue.index") != old  # rewritten for the new generation


def test_damaged_index_is_ignored():
    # EVIDENCE-OF: X4
    clock, d = _indexed()
    good = support.read_file(d + "/queue.index")
    q = _open(d, clock, ixb=0)
    want = _state(q)
    q.close()
    for bad in (
        good[:-1],
        good + b"\0",
        good[:40],
        b"",
        good[:50] + bytes([good[50] ^ 1]) + good[51:],
        good[:200] + bytes([good[200] ^ 0x80]) + good[201:],
    ):
        support.write_file(d + "/queue.index", bad)
        used, _, got = _adopt(d, clock)  # its close writes a good index again
        assert not used and got == want
        used, _, got = _adopt(d, clock)
        assert used and got == want


def test_changed_log_bytes_fall_back_to_the_full_replay():
    # EVIDENCE-OF: X4 R13
    # A flipped payload bit inside the covered prefix: the index is not trusted, and the full
    # replay reports the damage by segment and offset, exactly as without an index.
    clock, d = _indexed()
    name = d + "/" + ddq.segment_name(0, 0)
    data = bytearray(support.read_file(name))
    data[45] ^= 1  # inside the first record's payload
    support.write_file(name, bytes(data))
    for ixb in (1, 0):
        e = support.raises(ddq.Corrupt, _open, d, clock, ixb)
        assert "offset 0" in str(e), str(e)


def test_smaller_limits_than_the_index_fall_back():
    # EVIDENCE-OF: X4 R15
    clock, d = _indexed()
    support.raises(ddq.Full, _open, d, clock, 1, max_items=10)
    support.raises(ddq.Corrupt, _open, d, clock, 1, max_payload_bytes=8)
    q = _open(d, clock)
    assert q.index_used
    q.close()


def test_small_log_gets_no_index_and_a_stale_one_is_removed():
    # EVIDENCE-OF: X1
    clock, d = _indexed()
    q = _open(d, clock, ixb=1 << 20)  # the log is far below 1 MiB: no index kept
    assert q.index_used
    q.enqueue(b"one more")
    q.close()
    assert "queue.index" not in support.listdir_sorted(d)
    q = _open(d, clock, ixb=0)
    q.close()
    assert "queue.index" not in support.listdir_sorted(d)


def test_index_write_failures_lose_nothing():
    # EVIDENCE-OF: X1 X8 R16
    clock = support.FakeClock(T0)
    for method in ("write", "sync", "rename", "sync_dir", "open"):
        d = _indexed(clock)[1]
        fs = FaultStorage()
        q = ddq.Queue(d, clock=clock, index_bytes=1, storage=fs, **OPTS)
        seq = q.enqueue(b"after the index")
        want = _state(q)
        fs.arm(method)  # the first such call of close() belongs to the index write
        q.close()  # the log is durable; a failed index only costs the next open time
        assert method not in fs.fail, method  # the fault was hit
        q = _open(d, clock)
        got = _state(q)
        assert q.read(seq) == b"after the index"
        assert got[0] == want[0] and got[1] == want[1], method
        q.close()
        assert "queue.index.tmp" not in support.listdir_sorted(d)


def test_save_index_covers_everything_written():
    # EVIDENCE-OF: X1 X6
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock, ixb=0)
    _fill(q, clock)
    q.save_index()
    q.enqueue(b"after save")
    q.close()  # index_bytes=0: close leaves the saved index alone
    q = _open(d, clock)
    assert q.index_used and q.replayed_records == 1, q.replayed_records
    q.close()


def test_torn_tail_after_the_index_is_cut():
    # EVIDENCE-OF: X5 R10
    clock, d = _indexed()
    q = _open(d, clock, ixb=0)
    q.enqueue(b"whole")
    q.close()
    q = ddq.Queue(d, index_bytes=0, **OPTS)
    s = q.stats()
    q.close()
    name = d + "/" + ddq.segment_name(0, s.segment_count - 1)
    data = support.read_file(name)
    support.write_file(name, data + data[-60:-30])  # a torn append
    q = _open(d, clock)
    assert q.index_used and q.stats().recovered_tail_bytes == 30
    assert q.read(s.next_seq - 1) == b"whole"
    q.close()


def _saved_plan(d):
    # (plan_segs, plan_off) of queue.index: the admission plan the writer had (X2)
    f = struct.unpack(IX_FMT, support.read_file(d + "/queue.index")[0:96])
    return f[17], f[18]


def test_a_plan_computed_with_other_options_is_not_used():
    # EVIDENCE-OF: X2 X5 M8
    # The stored admission plan is an upper bound only under the writer's segment_bytes,
    # max_segments and reason budget: a reader with other options recomputes it (A1). Seen
    # from outside: save_index() writes the plan the queue holds (no plan: 0xFFFFFFFF).
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock, segment_bytes=1024, max_segments=12)
    for k in range(16):
        q.enqueue(b"p%d" % k)
    q.close()
    plan = _saved_plan(d)
    flags = struct.unpack(IX_FMT, support.read_file(d + "/queue.index")[0:96])[20]
    assert flags & 0xFF == 0 and flags >> 8 != 0  # no manifest yet; a plan key
    assert plan[0] != 0xFFFFFFFF  # the writer had a plan
    q = _open(d, clock, segment_bytes=1024, max_segments=12)
    assert q.index_used
    q.save_index()  # the adopted plan, written again unchanged
    q.close()
    assert _saved_plan(d) == plan
    for opts in (
        {"segment_bytes": 2048, "max_segments": 12},
        {"max_segments": 13},
        {"max_payload_bytes": 200},
    ):
        o = {"segment_bytes": 1024, "max_segments": 12}
        o.update(opts)
        e = support.tmpdir() + "/q"
        support.copytree(d, e)
        q = _open(e, clock, **o)
        assert q.index_used, opts
        q.save_index()  # no plan adopted: none to write
        q.close()
        assert _saved_plan(e)[0] == 0xFFFFFFFF, opts


def test_outbox_saves_the_index_without_closing():
    # EVIDENCE-OF: X1 X6
    # A gateway that never closes: save_index() now and then bounds the replay after a cut.
    import ddq_outbox  # here, not at the top: the module's other tests fit a small heap without it

    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/ob"
    ob = ddq_outbox.Outbox(d, clock=clock, sync_every=50, index_bytes=1, **OPTS)
    for k in range(20):
        ob.put("t/%d" % k, b"v")
    ob.ack(ob.get())
    ob.save_index()
    ob.put("t/late", b"w")
    ob.sync()
    # a power cut now: the process dies without close (a copy stands for the disk it left)
    support.copytree(d, d + "-cut")
    ob.close()
    q = _open(d + "-cut", clock)
    assert q.index_used and q.replayed_records == 1, (q.index_used, q.replayed_records)
    assert q.stats().total_items == 21
    q.close()


def test_a_compaction_writes_the_index_so_a_power_cut_replays_only_what_follows():
    # EVIDENCE-OF: X1 X5 X6 C1
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    q = _open(d, clock)
    _fill(q, clock)
    assert q.compact()
    gen = q.stats().generation
    for k in range(5):
        q.enqueue(b"after the compaction %d" % k)
    q.ack(q.claim(1000).seq)
    want = _state(q)
    support.copytree(d, d + "-cut")  # the power cut: no close
    q.close()
    q = _open(d + "-cut", clock)
    assert q.index_used and q.stats().generation == gen
    assert q.replayed_records == 7, q.replayed_records
    got = _state(q)
    q.close()
    assert got == want, (got, want)
    _same_as_full_replay(d + "-cut", clock, want)


def test_the_index_module_is_loaded_only_when_a_queue_needs_it():
    # EVIDENCE-OF: X9
    import sys

    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    was = "ddq_index" in sys.modules
    q = _open(d, clock, ixb=1 << 20)  # small log, no index file: nothing to load
    _fill(q, clock)
    q.close()
    q = _open(d, clock, ixb=1 << 20)
    q.close()
    if not was:  # (an earlier test of this process may have loaded it)
        assert "ddq_index" not in sys.modules
    q = _open(d, clock)  # index_bytes=1: close writes the index through ddq_index
    q.close()
    assert "ddq_index" in sys.modules and "queue.index" in support.listdir_sorted(d)
    q = _open(d, clock)
    assert q.index_used
    q.close()
