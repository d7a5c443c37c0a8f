# Reads of any retained item (O12: the RAM index keeps no offset, a read walks the item's
# segment) and the RAM copies that serve reads of unsynced DATA records under sync="none" (D3,
# D7). Split from test_core.py so that a board with a small heap runs them in a session of their
# own (tests/host/test_host_smallheap.py: at the end of test_core's session its heap was too
# fragmented for them). Shared suite: CPython and MicroPython over POSIX, LittleFS and FAT.
import ddq
import support
from faults import FaultStorage

T0 = 1767225600000


def _unsynced(d, fs, max_payload):
    # sync="none" over fs, in one segment: what it keeps unsynced is bounded only by the rule
    return ddq.Queue(
        d,
        storage=fs,
        clock=support.FakeClock(T0),
        sync="none",
        segment_bytes=1048576,
        max_payload_bytes=max_payload,
        max_items=1000,
    )


def test_unsynced_ram_copies_are_bounded():
    # EVIDENCE-OF: D3 D7
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    fs = FaultStorage()
    d = support.tmpdir() + "/q"
    q = _unsynced(d, fs, 64)
    n = fs.calls.get("sync", 0)
    for k in range(255):
        q.enqueue(b"p%d" % k)
    assert fs.calls.get("sync", 0) == n and q.durable_seq == 0
    q.enqueue(b"p255")  # the 256th RAM copy: synced instead of kept
    assert fs.calls.get("sync", 0) == n + 1 and q.durable_seq == 256
    assert q.read(1) == b"p0" and q.read(256) == b"p255"
    q.close()
    # ... and at 16 KiB of payload bytes (a board's heap holds them): 1000-byte payloads sync
    # at the 17th, however few copies that is. Two payload objects, each enqueued again and
    # again (a copy is the caller's bytes object, not a new one): the bound counts bytes
    # enqueued, and the test itself stays small for a small board.
    pay = (b"a" * 1000, b"b" * 1000)
    q = _unsynced(d + "2", fs, 1024)
    for r in range(2):
        n = fs.calls.get("sync", 0)
        for k in range(16):
            q.enqueue(pay[k % 2])
        assert fs.calls.get("sync", 0) == n and q.durable_seq == 17 * r
        q.enqueue(b"y" * 1000)  # 17,000 bytes of copies: synced instead of kept
        assert fs.calls.get("sync", 0) == n + 1 and q.durable_seq == 17 * (r + 1)
    assert q.read(1) == pay[0] and q.read(2) == pay[1] and q.read(34) == b"y" * 1000
    q.close()


def _reads_match(q, want):
    # Every retained payload by seq, in an order that defeats the walk's hint (O12).
    seqs = sorted(want)
    order = seqs[::-1] + seqs[::3] + seqs[1::2]
    for s in order:
        assert q.read(s) == want[s], s
        buf = bytearray(len(want[s]) + 3)
        assert q.read_into(s, buf) == len(want[s]) and bytes(buf[: len(want[s])]) == want[s]


def test_reads_find_any_item_across_segments_gaps_and_reopens():
    # EVIDENCE-OF: O12 C3 R5
    # The RAM index keeps no offset: a read walks the item's segment. Items spread over many
    # segments, with control records between them, gaps in the seqs after a compaction that
    # dropped acked items out of order, and a reopen (replay) and payloads of every length.
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
    clock = support.FakeClock(T0)
    d = support.tmpdir() + "/q"
    opts = {"segment_bytes": 512, "max_payload_bytes": 100, "max_items": 400, "max_segments": 64}
    q = ddq.Queue(d, clock=clock, **opts)
    want = {}
    for k in range(60):
        s = q.enqueue(b"x" * (k % 41) + b"#%d" % k)
        want[s] = b"x" * (k % 41) + b"#%d" % k
        if k % 3 == 0:
            c = q.claim_seq(s, 1000)
            if k % 2:
                q.ack(c.seq)
                del want[s]
    _reads_match(q, want)
    assert q.compact()
    _reads_match(q, want)
    for _ in range(10):  # claims through the runs of seqs the compaction left
        c = q.claim(1000)
        assert q.read(c.seq) == want[c.seq]
        q.ack(c.seq)
        del want[c.seq]
    q.close()
    q = ddq.Queue(d, clock=clock, **opts)
    _reads_match(q, want)
    assert [i.seq for i in q.items() if i.state != "acked"] == sorted(want)
    q.close()
