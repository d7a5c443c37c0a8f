# Misuse: every public call given a wrong-typed or out-of-range argument raises a documented
# ddq error (InvalidArgument; NotFound for a seq [O18]; IOFailure for a clock's value [T4])
# and changes nothing: never TypeError, AttributeError, ValueError or OverflowError, and the
# queue reopens with the same items, its files unchanged [O24]. Subset Python (both
# interpreters). Each table row: (expected error, label, callable, arguments).
import ddq
import support

# (the message layer's modules are imported by the tests that use them: in a board's small heap
# they skip, support.needs_heap, while the queue's cases run)

T0 = 1700000000000
OPTS = {"segment_bytes": 4096, "max_payload_bytes": 512, "max_items": 64, "max_segments": 8}
BIG = 1 << 64


class _Junk:
    """An object that is no buffer, no iterable, no storage, no lock, no Message."""


class _HalfStorage:
    # a storage seam with one method: the rest missing
    def kind(self, path):
        return 2


class _HalfLock:
    # acquire without release
    def acquire(self, *a):
        return True


def _sizes(d):
    return [(n, support.file_size(d + "/" + n)) for n in support.listdir_sorted(d)]


def _run_open(rows, d):
    # _run(rows) on the open queue in d, and a problem more if its files changed meanwhile.
    files_open = _sizes(d)
    bad = _run(rows)
    if _sizes(d) != files_open:
        bad.append("files changed while open: %r -> %r" % (files_open, _sizes(d)))
    return bad


def _run(rows):
    # Each row's call must raise exactly its documented error; return the labels that did not.
    bad = []
    for exp, label, fn, args in rows:
        try:
            fn(*args)
            bad.append(label + ": nothing raised")
        except exp:
            pass
        except Exception as e:
            bad.append("%s: %s %s" % (label, type(e).__name__, e))
    return bad


def _snapshot(d):
    # The directory's files and sizes, and what the queue holds after a reopen.
    files = [(n, support.file_size(d + "/" + n)) for n in support.listdir_sorted(d)]
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    try:
        items = [
            (i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms, q.read(i.seq))
            for i in q.items()
        ]
    finally:
        q.close()
    return files, items


def _report(bad, n):
    for b in bad:
        print("MISUSE " + b)
    assert not bad, "%d of %d misuse cases escaped: %s" % (len(bad), n, bad[0])


def _filled(d):
    # a queue with one item of each kind: available, claimed, quarantined, acked
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    for p in (b"one", b"two", b"three", b"four"):
        q.enqueue(p)
    q.quarantine(q.claim(1000).seq, b"why")
    q.ack(q.claim(1000).seq)
    q.claim(1000)
    return q


def test_queue_misuse_raises_invalid_argument_and_changes_nothing():
    # EVIDENCE-OF: O8 O18 O24 T4
    support.needs_heap(160 * 1024, support.MARGIN_HEAP)  # 140 KiB: the 2nd open met NoMemory
    I, N = ddq.InvalidArgument, ddq.NotFound
    d = support.tmpdir() + "/q"
    q = _filled(d)
    q.close()
    before = _snapshot(d)
    rows = []
    # Queue(...) on the existing directory: refused before the lock and before anything is
    # read or written (the reopen below would raise Locked otherwise)
    for k, vals in (
        ("segment_bytes", (None, "4096", 4096.0, -1, BIG, True)),
        ("max_payload_bytes", (None, "1", 1.5, BIG)),
        ("max_items", (None, "64", 64.0, -5, BIG)),
        ("max_segments", (None, 8.0, BIG)),
        ("index_bytes", (None, -1, BIG, 1.0)),
        ("reclaim_step", (None, 1.5, -1)),
        ("window", (None, -1, "4", 1 << 32)),
        ("evidence_bytes", (None, 1.5, BIG)),
        ("clock", (5, "clock")),
        ("sync", (None, 5, 1.5, ["always"])),
        ("on_corrupt", (None, 5, ["raise"])),
        ("storage", (5, "posix", _Junk(), _HalfStorage(), ddq.PosixStorage)),
    ):
        for v in vals:
            kw = dict(OPTS)
            kw[k] = v
            rows.append((I, "Queue(%s=%r)" % (k, v), lambda kw=kw: ddq.Queue(d, **kw), ()))
    for p in (None, 5, b"bytes", ["q"], "", _Junk()):
        rows.append((I, "Queue(path=%r)" % (p,), ddq.Queue, (p,)))
    # the operations of an open queue
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    avail, claimed = 4, 3  # seqs as _filled left them (1 quarantined, 2 acked)
    for v in (None, 5, 1.5, [1, 2], _Junk()):
        rows.append((I, "enqueue(%r)" % (v,), q.enqueue, (v,)))
    for name in ("claim", "claim_ordered"):
        for v in (None, "1", 1.5, -1, 0, BIG):
            rows.append((I, "%s(%r)" % (name, v), getattr(q, name), (v,)))
    for v in (None, "1", 1.5, -1, BIG):
        rows.append((I, "claim_seq(%d, %r)" % (avail, v), q.claim_seq, (avail, v)))
    for v in (None, "4", 4.0, -1, BIG, True):
        rows.append((N, "claim_seq(%r, 1000)" % (v,), q.claim_seq, (v, 1000)))
        rows.append((N, "read(%r)" % (v,), q.read, (v,)))
        rows.append((N, "ack(%r)" % (v,), q.ack, (v,)))
        rows.append((N, "reason(%r)" % (v,), q.reason, (v,)))
        rows.append((N, "retry(%r, 0)" % (v,), q.retry, (v, 0)))
        rows.append((N, "quarantine(%r)" % (v,), q.quarantine, (v,)))
        rows.append((N, "read_into(%r, buf)" % (v,), q.read_into, (v, bytearray(64))))
    for v in (None, "1", 1.5, -1, BIG):
        rows.append((I, "retry(%d, %r)" % (claimed, v), q.retry, (claimed, v)))
    for v in (None, 5, 1.5, _Junk(), b"a\0b"):
        rows.append((I, "quarantine(%d, %r)" % (claimed, v), q.quarantine, (claimed, v)))
    for v in (None, b"immutable bytes", "a str buffer", memoryview(b"read-only view"), 5):
        rows.append((I, "read_into(%d, %r)" % (avail, v), q.read_into, (avail, v)))
    rows.append((I, "read_into(%d, list)" % avail, q.read_into, (avail, [0] * 16)))
    rows.append((I, "read_into(%d, _Junk)" % avail, q.read_into, (avail, _Junk())))
    for v in (None, 5, _Junk(), 1.5):
        rows.append((I, "purge(%r)" % (v,), q.purge, (v,)))
    for v in ([None], ["1"], [1.5]):
        rows.append((N, "purge(%r)" % (v,), q.purge, (v,)))
    for v in (None, "now", 1.5, -1, BIG):
        rows.append((I, "lapsed(%r)" % (v,), q.lapsed, (v,)))
    # helpers
    for a in ((None, 0), (0, None), ("1", 0), (1.5, 0), (-1, 0), (0, BIG)):
        rows.append((I, "segment_name%r" % (a,), ddq.segment_name, a))
    for v in (None, 5, _Junk()):
        rows.append((I, "parse_segment_name(%r)" % (v,), ddq.parse_segment_name, (v,)))
    for v in (None, 5, [0] * 48):
        rows.append((I, "decode_manifest(%r)" % (v,), ddq.decode_manifest, (v,)))
    for a in ((None, 1, 1, 0, 0), (0, "1", 1, 0, 0), (0, 1, -1, 0, 0), (0, 1, 1, 0, BIG)):
        rows.append((I, "encode_manifest%r" % (a,), ddq.encode_manifest, a))
    for a in ((None, 0, 4096, 512), (b"", 0, 4096, 512), (bytes(48), -1, 4096, 512)):
        rows.append((I, "check_record%r" % (a,), ddq.check_record, a))
    rows.append((I, "check_record(buf, None)", ddq.check_record, (bytes(48), None, 4096, 512)))
    rows.append((ddq.Corrupt, "check_record(str)", ddq.check_record, ("x" * 48, 0, 4096, 512)))
    rows.append((I, "check_record(list)", ddq.check_record, ([0] * 48, 0, 4096, 512)))
    bad = _run_open(rows, d)
    q.close()
    # a clock returning what is not wall-clock ms: IOFailure from the call that read it [T4]
    n = len(rows)
    for v in (None, "now", 1.5, -1, 0, BIG, [T0]):
        q = ddq.Queue(d, clock=lambda v=v: v, **OPTS)
        bad += _run(
            (
                (ddq.IOFailure, "clock() -> %r: claim" % (v,), q.claim, (1000,)),
                (ddq.IOFailure, "clock() -> %r: claim_ordered" % (v,), q.claim_ordered, (1,)),
                (ddq.IOFailure, "clock() -> %r: retry" % (v,), q.retry, (claimed, 0)),
                (ddq.IOFailure, "clock() -> %r: claim_seq" % (v,), q.claim_seq, (avail, 1)),
            )
        )
        n += 4
        q.close()
    if _snapshot(d) != before:
        bad.append("the queue changed")
    _report(bad, n)


class _Once:
    # stop(): False once, then True (bounds the loop of a run() that should not have started)
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n > 1


def _arun(run, send, stop):
    import asyncio

    asyncio.run(run(send, 1, _Once() if stop is None else stop))


def _msg():
    import ddq_outbox

    m = ddq_outbox.Message()
    m.seq, m.topic, m.payload, m.qos = 1, "t", b"p", 1
    return m


def test_outbox_misuse_raises_invalid_argument_and_changes_nothing():
    # EVIDENCE-OF: O24 E4
    support.needs_heap(256 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    import ddq_batch
    import ddq_outbox

    I = ddq.InvalidArgument
    d = support.tmpdir() + "/q"
    ob = ddq_outbox.Outbox(d, clock=support.FakeClock(T0), **OPTS)
    for i in range(3):
        ob.put("t/%d" % i, b"x")
    ob.get()  # one in flight
    ob.close()
    before = _snapshot(d)
    rows = []
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    mk = ddq_outbox.Outbox
    for k, v in (
        ("clock", 5),
        ("clock", "clock"),
        ("ticks", 5),
        ("seed", "1"),
        ("seed", -1),
        ("lease_ms", None),
        ("lease_ms", 1.5),
        ("min_retry_ms", None),
        ("max_retry_ms", "1"),
        ("max_attempts", -1),
        ("ttl_ms", BIG),
        ("max_topic_bytes", None),
        ("sync_every", 1.5),
        ("sync_interval_ms", -1),
        ("expired", None),
        ("capacity", 5),
        ("lock", 5),
        ("lock", _Junk()),
        ("lock", _HalfLock()),
        ("lock", (1, 2)),
        ("lock", (len, None)),
        ("hmac_key", 5),
        ("nonce", 5),
        ("qos", "1"),
        ("lapsed", None),
        ("failure", 5),
        ("report", 5),
    ):
        kw = {k: v}
        rows.append((I, "Outbox(q, %s=%r)" % (k, v), lambda kw=kw: mk(q, **kw), ()))
    for v in (None, 5, _Junk()):
        rows.append((I, "Outbox(%r)" % (v,), mk, (v,)))
    ob = ddq_outbox.Outbox(q)
    put = ob.put
    for a in (
        (None, b"x"),
        ("t", None),
        ("t", 5),
        (5, b"x"),
        ("t", b"x", None),
        ("t", b"x", 0.5),
        ("t", b"x", "1"),
        ("t", b"x", 1, None),
        ("t", b"x", 1, False, "1"),
        ("t", b"x", 1, False, -1),
        ("t", b"x", 1, False, BIG),
        ("t", b"x", 1, False, None, 5),
        ("t", b"x", 1, False, None, None),
    ):
        rows.append((I, "put%r" % (a,), put, a))
    for v in ("1", -1, 1.5, BIG):
        rows.append((I, "get(%r)" % (v,), ob.get, (v,)))
    for v in (None, 5, "m", _Junk()):
        rows.append((I, "ack(%r)" % (v,), ob.ack, (v,)))
        rows.append((I, "nack(%r)" % (v,), ob.nack, (v,)))
        rows.append((I, "reject(%r)" % (v,), ob.reject, (v,)))
    for v in ("now", _Junk()):
        rows.append((I, "next_ready_ms(%r)" % (v,), ob.next_ready_ms, (v,)))
    for v in (5, _Junk(), 1.5):
        rows.append((I, "purge(%r)" % (v,), ob.purge, (v,)))
    for v in ("1", 1.5, -1):
        rows.append((ddq.NotFound, "requeue(%r)" % (v,), ob.requeue, (v,)))
    for a in ((None,), (5,), ("send",), (_Junk(),), (_msg, None), (_msg, "1"), (_msg, 0)):
        rows.append((I, "pump%r" % (a,), ob.pump, a))
    rows.append((I, "pump(send, 1, 'x')", ob.pump, (_msg, 1, "x")))
    rows.append((I, "pump(send, 1, -1)", ob.pump, (_msg, 1, -1)))
    rows.append((I, "pump(send, 1, 0, 5)", ob.pump, (_msg, 1, 0, 5)))
    try:
        import asyncio

        arun = hasattr(asyncio, "run")  # (the WebAssembly port's asyncio has no run())
    except ImportError:
        arun = False
    for a in ((None, None), (5, None), (_Junk(), None), (_msg, 5)) if arun else ():
        rows.append((I, "run%r" % (a,), _arun, (ob.run,) + a))
    # the public helpers
    for a in ((None,), ("t", None), ("t", "x"), ("t", 1.5)):
        rows.append((I, "publishable%r" % (a,), ddq_outbox.publishable, a))
    enc = ddq_outbox.encode_envelope
    for k, v in (
        ("qos", None),
        ("retain", "yes"),
        ("enqueued_ms", "1"),
        ("enqueued_ms", -1),
        ("ttl_ms", None),
        ("key", 5),
        ("orig_seq", BIG),
        ("orig_seq", 1.5),
        ("hmac_key", 5),
        ("hmac_key", [1] * 32),
    ):
        kw = {k: v}
        rows.append((I, "encode_envelope(%s=%r)" % (k, v), lambda kw=kw: enc("t", b"p", **kw), ()))
    for a in ((None, b"p"), ("t", None), ("t", [1])):
        rows.append((I, "encode_envelope%r" % (a,), enc, a))
    key = b"k" * 32
    env = enc("t", b"p", hmac_key=key)
    for a in ((None,), (5,), ("text",), (env, True, 5), (env, True, [1] * 32), (env, True, 1.5)):
        rows.append((I, "decode_envelope%r" % (a[0:1],), ddq_outbox.decode_envelope, a))
    bo = ddq_outbox.Backoff
    for a in ((None,), ("1",), (0,), (1.5,), (10, None), (10, 5), (10, BIG), (10, 20, "s")):
        rows.append((I, "Backoff%r" % (a,), bo, a))
    b = bo(10, 1000, 1)
    for v in (None, "1", -1, 1.5):
        rows.append((I, "Backoff.delay(%r)" % (v,), b.delay, (v,)))
    m = _msg()
    m.enqueued_ms = T0
    for v in (None, "now", 1.5):
        rows.append((I, "Message.expired(%r)" % (v,), m.expired, (v,)))
    for v in (None, 5, _Junk()):
        rows.append((I, "entries(%r)" % (v,), ddq_batch.entries, (v,)))
    bad = _run_open(rows, d)
    q.close()
    if _snapshot(d) != before:
        bad.append("the queue changed")
    _report(bad, len(rows))


def test_batch_and_group_misuse_raise_invalid_argument_and_change_nothing():
    # EVIDENCE-OF: O24 G4
    support.needs_heap(256 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    import ddq_batch
    import ddq_group
    import ddq_outbox

    I = ddq.InvalidArgument
    d = support.tmpdir() + "/q"
    ob = ddq_outbox.Outbox(d, clock=support.FakeClock(T0), **OPTS)
    ob.put("t", b"x")
    ob.close()
    before = _snapshot(d)
    rows = []
    for k, v in (("batch_bytes", None), ("batch_bytes", -1), ("batch_ms", "1"), ("batch_ms", 1.5)):
        kw = dict(OPTS)
        kw[k] = v
        # a path: the Outbox would open (and lock) the queue: refused before that
        rows.append((I, "BatchOutbox(path, %s=%r)" % (k, v), ddq_batch.BatchOutbox, (d,), kw))
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    bq = ddq_batch.BatchOutbox(q, clock=support.FakeClock(T0))
    bq.put("t", b"held")  # an open batch, in RAM: a refused put must not write it
    for a in (
        (None, b"x"),
        ("t", None),
        ("t", b"x", None),
        ("t", b"x", 1, "no"),
        ("t", b"x", 1, False, "1"),
        ("t", b"x", 1, False, -1),
        ("t", b"x", 1, False, None, 5),
        ("t", b"x", 1, False, None, _Junk()),
    ):
        rows.append((I, "BatchOutbox.put%r" % (a,), bq.put, a, None))
    for v in (None, 5, _Junk()):
        rows.append((I, "BatchOutbox.ack(%r)" % (v,), bq.ack, (v,), None))
        rows.append((I, "BatchOutbox.nack(%r)" % (v,), bq.nack, (v,), None))
    rows.append((I, "BatchOutbox.get('1')", bq.get, ("1",), None))
    g = ddq_group.Group(q, lock=None)
    for a in ((None,), (5,), (q,)):
        rows.append((I, "Group.call%r" % (a,), g.call, a, None))
        rows.append((I, "Group.locked%r" % (a,), g.locked, a, None))
    rows.append((I, "Group.put (a Queue's group)", g.put, ("t", b"x"), None))
    rows.append((I, "Group.enqueue(None)", g.enqueue, (None,), None))
    for k, v in (("lock", 5), ("lock", _HalfLock()), ("lock", _Junk())):
        rows.append((I, "Group(q, %s=%r)" % (k, v), ddq_group.Group, (q,), {k: v}))
    for v in (None, 5, _Junk(), "q"):
        rows.append((I, "Group(%r)" % (v,), ddq_group.Group, (v,), None))
    bad = []
    for exp, label, fn, args, kw in rows:
        try:
            fn(*args, **(kw or {}))
            bad.append(label + ": nothing raised")
        except exp:
            pass
        except Exception as e:
            bad.append("%s: %s %s" % (label, type(e).__name__, e))
    files = [(n, support.file_size(d + "/" + n)) for n in support.listdir_sorted(d)]
    if files != before[0]:
        bad.append("files changed while open: %r -> %r" % (before[0], files))
    q.close()  # (the open batch is dropped with bq: it was never written)
    if _snapshot(d) != before:
        bad.append("the queue changed")
    _report(bad, len(rows))
