# Salvage (port/ddq_salvage.py, SPEC §15): a damaged queue directory is read without change
# and every intact item goes into a new one. Shared suite: CPython and MicroPython over POSIX,
# LittleFS and FAT. The expectations come from a small independent model of the log (_model):
# the records a damage destroys are listed from the undamaged bytes first.
import struct

import shared
import support

# In a heap under 320 KiB (unix port, 64-bit) this module's tests ran out of memory:
# 6 of 16 passed in 140 KiB with no test runner at all (ddq, ddq_salvage and the module:
# 68 KB imported before a test; ddq_recover, ddq_compact, ddq_extra: 25 KB more),
# none beside `ddq test`'s runner (32 KB); 15 in 256 KiB, all 16 in 320 KiB.
_SALVAGE_HEAP = (
    "ddq_salvage's salvage of damaged queues (ddq, ddq_salvage and this module: "
    "68 KB imported; open and compaction modules 25 KB) beside the test runner"
)
support.needs_heap(320 * 1024, _SALVAGE_HEAP)
import ddq
import ddq_salvage

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 64, "max_segments": 32}
T_DATA, T_CLAIM, T_ACK, T_RETRY, T_QUAR, T_STATE = 1, 2, 3, 4, 5, 6


def _pay(s):
    return b"item-%02d-" % s + b"x" * (s % 7)


def _claims(q, steps):
    # Claim each seq, then: "ack"; a retry delay (an int); a quarantine reason (bytes); or None:
    # left claimed (a 60 s lease; the others take 1 s).
    for seq, then in steps:
        q.claim_seq(seq, 60000 if then is None else 1000)
        if then is None:
            continue
        if isinstance(then, int):
            q.retry(seq, then)
        elif isinstance(then, bytes):
            q.quarantine(seq, then)
        else:
            q.ack(seq)


def _build(d, compact=False):
    # Items in every state, control records spread over the segments (generation 0 unless
    # compact): 1 5 17 acked, 2 6 retried, 3 16 quarantined, 4 15 claimed, the rest available.
    clock = support.FakeClock(T0)
    q = ddq.Queue(d, clock=clock, **OPTS)
    for s in range(1, 13):
        q.enqueue(_pay(s))
    _claims(q, ((1, "ack"), (2, 5000), (3, b"bad three"), (4, None)))
    for s in range(13, 21):
        q.enqueue(_pay(s))
    _claims(q, ((5, "ack"), (6, 0), (15, None), (16, b"bad sixteen"), (17, "ack")))
    if compact:
        q.compact()
        q.claim_seq(18, 1000)
        q.ack(18)
        q.enqueue(_pay(21))
    truth = _state(q)
    nxt = q.stats().next_seq
    q.close()
    return truth, nxt


_state = shared.live_items  # every item but the acked: state, deadlines, payload, reason


def _segments(d):
    names = []
    for n in support.listdir_sorted(d):
        p = ddq.parse_segment_name(n)
        if p is not None:
            names.append((p, n))
    names.sort()
    return [n for _, n in names]


def _log(d):
    # Every record in log order: (segment name, offset, type, seq, record length).
    out = []
    for n in _segments(d):
        b = support.read_file(d + "/" + n)
        p = 0
        while p + 48 <= len(b):
            typ, seq = struct.unpack_from("<HQ", b, p + 6)
            rlen = struct.unpack_from("<I", b, p + 28)[0]
            out.append((n, p, typ, seq, rlen))
            p += rlen
    return out


def _files(d):
    return [(n, support.read_file(d + "/" + n)) for n in support.listdir_sorted(d)]


def _model(truth, log, killed):
    # What salvage must give for a generation-0 log whose records `killed` (indexes into log)
    # are destroyed: (expected items, lost seqs, reset seqs).
    last = max(killed) if killed else -1
    intact = [r for i, r in enumerate(log) if i not in killed]
    acked = set(r[3] for r in intact if r[2] == T_ACK)
    quar = set(r[3] for r in intact if r[2] == T_QUAR)
    exp = {}
    reset = []
    lost = []
    all_seqs = sorted(set(r[3] for r in log if r[2] == T_DATA))
    for s in all_seqs:
        di = [i for i, r in enumerate(log) if r[2] == T_DATA and r[3] == s][0]
        if di in killed:
            if s not in acked:
                lost.append(s)
            continue
        if s in acked:
            continue
        # an acked item whose ACK is lost comes back (a possible duplicate, never a loss)
        t = truth.get(s, ("acked", 0, 0, 0, _pay(s), None))
        if s in quar:
            exp[s] = t
        elif di < last:
            retries = len([r for r in intact if r[2] == T_RETRY and r[3] == s])
            exp[s] = ("available", retries, 0, 0, t[4], None)
            reset.append(s)
        else:
            exp[s] = t
    return exp, lost, reset


def _check_out(out, exp, min_next):
    q = ddq.Queue(out, clock=support.FakeClock(T0), **OPTS)
    try:
        assert _state(q) == exp, (_state(q), exp)
        nxt = q.stats().next_seq
        assert nxt >= min_next, (nxt, min_next)
        # it delivers: everything can be claimed and acked, a new item takes next_seq
        assert q.enqueue(b"after") == nxt
        assert q.stats().generation >= 1
    finally:
        q.close()


def _ranges_to_list(rs):
    out = []
    for lo, hi in rs:
        out.extend(range(lo, hi + 1))
    return out


def _salvage_case(damage):
    # Build, list the log, apply damage(d, log) -> killed record indexes, salvage, check.
    d = support.tmpdir() + "/q"
    truth, nxt = _build(d)
    log = _log(d)
    killed = damage(d, log)
    before = _files(d)
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert _files(d) == before  # the source is never modified
    exp, lost, reset = _model(truth, log, killed)
    assert rep["status"] == "salvaged_with_loss", rep
    assert _ranges_to_list(rep["lost_seqs"]) == lost, (rep, lost)
    assert rep["reset"] == reset, (rep["reset"], reset)
    assert rep["kept"] == len(exp)
    assert rep["next_seq"] >= nxt
    _check_out(out, exp, nxt)
    return rep, log


def _flip(path, off):
    b = bytearray(support.read_file(path))
    b[off] ^= 0x5A
    support.write_file(path, bytes(b))


def test_salvage_clean_source_is_equal():
    # EVIDENCE-OF: K1 K4 K5 K7
    for compact in (False, True):
        d = support.tmpdir() + "/q"
        truth, nxt = _build(d, compact)
        before = _files(d)
        out = support.tmpdir() + "/out"
        rep = ddq_salvage.salvage(d, out, **OPTS)
        assert _files(d) == before
        assert rep["status"] == "clean", rep
        assert rep["damaged"] == [] and rep["lost_seqs"] == [] and rep["reset"] == []
        assert rep["kept"] == len(truth)
        assert rep["next_seq"] == nxt
        assert rep["uncertain_gaps"] == []
        _check_out(out, truth, nxt)
        # the manifest is the commit point: no tmp left, the marker exists
        names = support.listdir_sorted(out)
        assert "queue.manifest" in names and "queue.format" in names
        assert "queue.manifest.tmp" not in names
        # dst must not exist
        support.raises(ddq.InvalidArgument, ddq_salvage.salvage, d, out, **OPTS)


def test_salvage_flipped_byte_in_a_data_record():
    # EVIDENCE-OF: K2 K3 K6
    def damage(d, log):
        i = [k for k, r in enumerate(log) if r[2] == T_DATA and r[3] == 10][0]
        n, off, _, _, rlen = log[i]
        _flip(d + "/" + n, off + 40 + 3)  # in the payload: the CRC fails
        return set([i])

    rep, log = _salvage_case(damage)
    assert _ranges_to_list(rep["lost_seqs"]) == [10]
    n, off = [(r[0], r[1]) for r in log if r[2] == T_DATA and r[3] == 10][0]
    assert [n, off] == rep["damaged"][0][:2]
    assert rep["damaged"][0][2] == off + [r[4] for r in log if r[2] == T_DATA and r[3] == 10][0]


def test_salvage_flipped_byte_in_a_control_record():
    # EVIDENCE-OF: K2 K3
    def damage(d, log):
        i = [k for k, r in enumerate(log) if r[2] == T_CLAIM and r[3] == 15][0]
        n, off = log[i][0], log[i][1]
        _flip(d + "/" + n, off + 20)  # the lease field
        return set([i])

    rep, _ = _salvage_case(damage)
    assert 15 in rep["reset"] and rep["lost_seqs"] == []


def test_salvage_lost_segment_file():
    # EVIDENCE-OF: K2 K3 K6
    removed = []

    def damage(d, log):
        n = _segments(d)[1]
        support.write_file(d + "/junk", b"")
        import os

        os.remove(d + "/" + n)
        removed.append(n)
        return set(k for k, r in enumerate(log) if r[0] == n)

    rep, _ = _salvage_case(damage)
    assert rep["segments_missing"] == removed


def test_salvage_truncated_segment():
    # EVIDENCE-OF: K2 K6
    def damage(d, log):
        n = _segments(d)[1]
        b = support.read_file(d + "/" + n)
        cut = len(b) // 2
        support.write_file(d + "/" + n, b[:cut])
        return set(k for k, r in enumerate(log) if r[0] == n and r[1] + r[4] > cut)

    _salvage_case(damage)


def test_salvage_torn_tail_is_not_damage():
    # EVIDENCE-OF: K2 K7
    d = support.tmpdir() + "/q"
    truth, nxt = _build(d)
    n = _segments(d)[-1]
    b = support.read_file(d + "/" + n)
    support.write_file(d + "/" + n, b + ddq_salvage.encode_record(T_DATA, nxt, 0, b"torn")[:30])
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["status"] == "clean" and rep["torn_tail_bytes"] == 30, rep
    _check_out(out, truth, nxt)
    # R11: a uniform 0xFF tail of 100 bytes (erased flash) is torn too; a non-uniform one is damage
    support.write_file(d + "/" + n, b + b"\xff" * 100)
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["status"] == "clean" and rep["torn_tail_bytes"] == 100, rep
    support.write_file(d + "/" + n, b + b"\xff" * 50 + b"x" + b"\xff" * 49)
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["status"] == "salvaged_with_loss" and rep["damaged"] == [
        [n, len(b), len(b) + 100]
    ], rep
    # damage after every DATA: every item not quarantined may have lost records (K3)
    assert rep["reset"] == sorted(s for s in truth if truth[s][0] != "quarantined"), rep


def test_salvage_damaged_manifest_keeps_next_seq():
    # EVIDENCE-OF: K5 K7
    d = support.tmpdir() + "/q"
    clock = support.FakeClock(T0)
    q = ddq.Queue(d, clock=clock, **OPTS)
    for s in range(1, 9):
        q.enqueue(_pay(s))
    for s in range(5, 9):  # the highest seqs acked and compacted away
        q.claim_seq(s, 1000)
        q.ack(s)
    q.claim_seq(2, 1000)
    q.retry(2, 100)
    q.compact()
    truth = _state(q)
    nxt = q.stats().next_seq
    q.close()
    assert nxt == 9
    _flip(d + "/queue.manifest", 41)  # the CRC: next_seq still reads 9
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["status"] == "salvaged_with_loss" and rep["manifest"] == "damaged", rep
    assert rep["next_seq"] == 9 and rep["reset"] == [] and rep["kept"] == 4
    _check_out(out, truth, 9)
    # the manifest gone too: items kept, next_seq from the highest seq seen (SV5's floor)
    import os

    os.remove(d + "/queue.manifest")
    out2 = support.tmpdir() + "/out2"
    rep = ddq_salvage.salvage(d, out2, **OPTS)
    assert rep["status"] == "salvaged_with_loss" and rep["manifest"] == "missing", rep
    assert rep["next_seq"] >= 5
    _check_out(out2, truth, 5)


def test_salvage_nothing_usable():
    # EVIDENCE-OF: K1 K7
    d = support.tmpdir()
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["status"] == "nothing_usable" and rep["output"] is None
    assert support.listdir_sorted(d) == []
    g = support.tmpdir()
    support.write_file(g + "/" + ddq.segment_name(0, 0), b"\x13\x37" * 300)
    support.write_file(g + "/queue.manifest", b"nope")
    rep = ddq_salvage.salvage(g, out, **OPTS)
    assert rep["status"] == "nothing_usable" and rep["damaged"], rep
    try:
        import os

        os.stat(out)
        raise AssertionError("nothing_usable wrote " + out)
    except OSError:
        pass
    support.raises(ddq.InvalidArgument, ddq_salvage.salvage, g, out, segment_bytes=10)


def test_salvage_log_out_of_order():
    # EVIDENCE-OF: K2 K3
    # A segment copied over the next one: every byte is valid, but DATA seqs go back (R5) and
    # transitions R6 forbids appear. Items before it are uncertain: reset, never a wrong state.
    d = support.tmpdir() + "/q"
    truth, nxt = _build(d)
    segs = _segments(d)
    support.write_file(d + "/" + segs[1], support.read_file(d + "/" + segs[0]))
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["status"] == "salvaged_with_loss" and rep["out_of_order"], rep
    assert rep["damaged"] == [] and rep["next_seq"] >= nxt
    q = ddq.Queue(out, clock=support.FakeClock(T0), **OPTS)
    try:
        got = _state(q)
    finally:
        q.close()
    unsure = set(rep["reset"]) | set(rep["quarantined_uncertain"])
    for s, t in got.items():
        assert t[4] == _pay(s), s
        assert s in unsure or truth.get(s) == t, (s, t, truth.get(s))


# ---- Queue(..., on_corrupt="salvage"): salvage in place at open (SPEC §15 K9-K12) ----------
def _damaged(compact=False):
    # A built queue with the payload of seq 10's DATA record flipped; (dir, truth, next_seq,
    # expected items, lost seqs, reset seqs, the damaged image's files).
    d = support.tmpdir() + "/q"
    truth, nxt = _build(d, compact)
    log = _log(d)
    i = [k for k, r in enumerate(log) if r[2] == T_DATA and r[3] == 10][0]
    _flip(d + "/" + log[i][0], log[i][1] + 43)
    exp, lost, reset = _model(truth, log, [i]) if not compact else (None, None, None)
    return d, truth, nxt, exp, lost, reset, _files(d)


def _aside_ok(d, image):
    # Every file of the damaged image that salvage moved is kept, byte for byte, under
    # salvaged-<tag>-<name>; each segment of it is there or under its own name.
    now = dict(_files(d))
    for n, b in image:
        if ddq.parse_segment_name(n) is None:
            continue
        kept = [
            m for m in now if m.startswith("salvaged-") and m.endswith("-" + n) and now[m] == b
        ]
        assert kept or now.get(n) == b, ("damage not kept aside", n, sorted(now))


def test_salvage_on_open_in_place():
    # EVIDENCE-OF: K9 K10 K12
    d, truth, nxt, exp, lost, reset, image = _damaged()
    # the default stays fail-stop, and changes nothing
    e = support.raises(ddq.Corrupt, ddq.Queue, d, clock=support.FakeClock(T0), **OPTS)
    assert "segment" in str(e)
    assert _files(d) == image
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
    try:
        st = q.stats()
        assert (st.salvaged, st.salvage_lost) == (1, len(lost)), st.as_dict()
        assert q.salvage_report["reset"] == reset and q.salvage_report["in_place"]
        assert st.as_dict()["salvaged"] == 1
        assert not st.failed and st.next_seq >= nxt
        assert _state(q) == exp, (_state(q), exp)
        # it goes on delivering: a new item takes next_seq, a kept one is claimed and acked
        assert q.enqueue(b"after") == st.next_seq
        c = q.claim(1000)
        assert c is not None and q.ack(c.seq)
    finally:
        q.close()
    names = support.listdir_sorted(d)
    assert "salvage.intent" not in names and "queue.manifest.tmp" not in names
    reports = [n for n in names if n.startswith("salvage-report-")]
    assert len(reports) == 1, names
    text = support.read_file(d + "/" + reports[0])
    assert b"salvaged_with_loss" in text and b"lost_seqs" in text
    _aside_ok(d, image)
    # a second open is clean, even in the default mode, and keeps what the first one left
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    try:
        st = q.stats()
        assert (st.salvaged, st.salvage_lost) == (0, 0)
        assert len(_state(q)) == len(exp)  # one acked, one enqueued
    finally:
        q.close()
    _aside_ok(d, image)
    assert [n for n in support.listdir_sorted(d) if n.startswith("salvage-report-")] == reports


def test_salvage_on_open_compacted_and_clean():
    # EVIDENCE-OF: K9 K12
    # a compacted queue (generation 1, a manifest) with a damaged DATA record
    d, truth, nxt, _, _, _, image = _damaged(compact=True)
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
    try:
        st = q.stats()
        assert st.salvaged == 1 and st.generation >= 2 and st.next_seq >= nxt
        got = _state(q)
        for s, t in got.items():
            assert t[4] == _pay(s)  # no wrong payload
        for s in truth:
            assert s == 10 or s in got, (s, got)  # every intact item kept
    finally:
        q.close()
    _aside_ok(d, image)
    # an undamaged queue opened with on_corrupt="salvage" is opened as it is
    d = support.tmpdir() + "/q"
    truth, nxt = _build(d)
    image = _files(d)
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
    try:
        assert q.stats().salvaged == 0 and _state(q) == truth
    finally:
        q.close()
    assert [n for n, _ in _files(d)] == [n for n, _ in image]
    support.raises(ddq.InvalidArgument, ddq.Queue, d, on_corrupt="ignore", **OPTS)


class _CutAt:
    # The storage seam of a PosixStorage whose k-th state-changing call raises (a cut there:
    # nothing after it happens), counted from arm().
    def __init__(self, k):
        self.fs = ddq.PosixStorage()
        self.k = k
        self.n = -1

    def arm(self):
        self.n = 0

    def _step(self):
        if self.n >= 0:
            self.n += 1
            if self.n == self.k:
                raise OSError(5, "cut")

    def open(self, p, m):
        if m != "rb":
            self._step()
        return self.fs.open(p, m)

    def write(self, h, b):
        self._step()
        self.fs.write(h, b)

    def sync(self, h):
        self._step()
        self.fs.sync(h)

    def rename(self, a, b):
        self._step()
        self.fs.rename(a, b)

    def remove(self, p):
        self._step()
        self.fs.remove(p)

    def sync_dir(self, p):
        self._step()
        self.fs.sync_dir(p)

    def read_into(self, h, o, b):
        return self.fs.read_into(h, o, b)

    def close(self, h):
        self.fs.close(h)

    def size(self, p):
        return self.fs.size(p)

    def kind(self, p):
        return self.fs.kind(p)

    def listdir(self, p):
        return self.fs.listdir(p)

    def mkdir(self, p):
        self.fs.mkdir(p)

    def lock(self, p):
        return self.fs.lock(p)

    def unlock(self, t):
        self.fs.unlock(t)


def test_salvage_on_open_cut_at_every_step():
    # EVIDENCE-OF: K10
    # A salvage interrupted after its k-th write, sync, rename or remove; the next open with
    # on_corrupt="salvage" ends with every item the uncut salvage kept, same payloads, and no
    # seq reused; the damage stays kept aside. Generation 0 without a manifest here (a rerun
    # reads an earlier attempt's staging too); below, a compacted queue (a valid manifest: the
    # staging is deleted).
    d, truth, nxt, exp, lost, reset, image = _damaged()
    _cut_every_step(image, exp, nxt)


def test_salvage_on_open_cut_at_every_step_compacted():
    # EVIDENCE-OF: K10
    d, truth, nxt, _, _, _, image = _damaged(compact=True)
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
    try:
        exp = _state(q)  # the uncut salvage's result is the reference
        nxt = q.stats().next_seq
    finally:
        q.close()
    support.rmtree(d)
    _cut_every_step(image, exp, nxt)


def _cut_every_step(image, exp, nxt, check=None):
    steps = 0
    for k in range(1, 200):  # bounded: the salvage takes far fewer steps
        d = support.tmpdir()
        for n, b in image:
            support.write_file(d + "/" + n, b)
        cut = _CutAt(k)
        cut.arm()
        try:
            q = ddq.Queue(
                d, clock=support.FakeClock(T0), storage=cut, on_corrupt="salvage", **OPTS
            )
            q.close()
            steps = k - 1
            support.rmtree(d)
            break  # the salvage completed before the k-th step
        except (ddq.IOFailure, OSError):
            pass
        if check is not None:
            check(d)
        q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
        try:
            got = _state(q)
            assert sorted(got) == sorted(exp), (k, sorted(got), sorted(exp))
            for s, t in got.items():
                assert t[4] == exp[s][4], (k, s)
                rep = getattr(q, "salvage_report", None)  # set when this open salvaged
                assert t == exp[s] or (rep is not None and s in rep["reset"]), (k, s, t, exp[s])
            assert q.stats().next_seq >= nxt
            assert q.enqueue(b"after") >= nxt
        finally:
            q.close()
        _aside_ok(d, image)
        support.rmtree(d)  # a RAM disk holds a few of these only
    assert steps > 10, steps


def test_salvage_on_open_of_a_damaged_marker_cut_at_every_step():
    # EVIDENCE-OF: K10
    # Only queue.format is damaged (64 bytes where it must be empty) and the manifest is valid:
    # the segments go aside before the marker is made good, so no cut leaves a directory that
    # opens half-salvaged (an unpublished salvage.intent behind a queue that opens; found by
    # the 10x torture, salvcut 534). The next open finishes the salvage.
    d = support.tmpdir()
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    for i in range(6):
        q.enqueue(b"m%d" % i)
    q.claim(30000)
    q.compact()  # a valid manifest (generation 1)
    q.close()
    support.write_file(d + "/queue.format", b"\0" * 64)
    image = _files(d)
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
    try:
        exp, nxt = _state(q), q.stats().next_seq
        assert q.stats().salvaged == 1
    finally:
        q.close()
    support.rmtree(d)
    _cut_every_step(image, exp, nxt, _refused_while_unpublished)


def _refused_while_unpublished(d):
    # An unpublished salvage (its intent names a generation above the manifest's): a plain
    # open must refuse the directory, never open it half-salvaged [K10].
    if "salvage.intent" in support.listdir_sorted(d):
        man = support.read_file(d + "/queue.manifest")
        t = support.read_file(d + "/salvage.intent")[12:-1]  # (torn: empty)
        if t and ddq.decode_manifest(man)[0] < int(t):
            support.raises(ddq.Corrupt, ddq.Queue, d, clock=support.FakeClock(T0), **OPTS)


def test_salvage_on_open_without_room_goes_beside():
    # EVIDENCE-OF: K11
    # 16 items survive but the queue is opened with max_items 12: no room in place, so the
    # salvage goes into <path>.salvaged, the directory is left as it was and Corrupt names it.
    d, truth, nxt, exp, lost, reset, image = _damaged()
    small = dict(OPTS, max_items=12)
    e = support.raises(
        ddq.Corrupt, ddq.Queue, d, clock=support.FakeClock(T0), on_corrupt="salvage", **small
    )
    assert d + ".salvaged" in str(e), str(e)
    assert _files(d) == image
    q = ddq.Queue(d + ".salvaged", clock=support.FakeClock(T0), **OPTS)
    try:
        assert _state(q) == exp and q.stats().next_seq >= nxt
    finally:
        q.close()
    # a second try does not overwrite it
    e = support.raises(
        ddq.Corrupt, ddq.Queue, d, clock=support.FakeClock(T0), on_corrupt="salvage", **small
    )
    assert "exists" in str(e), str(e)
    assert _files(d) == image


def test_salvage_on_open_outbox():
    # EVIDENCE-OF: K9 K12
    # The message layer passes on_corrupt through; its stats() reports the salvage, and the
    # intact messages are delivered.
    import ddq_outbox

    d = support.tmpdir() + "/ob"
    ob = ddq_outbox.Outbox(d, clock=support.FakeClock(T0), seed=7, **OPTS)
    for i in range(12):
        ob.put("t/%d" % i, b"m%02d" % i)
    ob.close()
    log = _log(d)
    i = [k for k, r in enumerate(log) if r[2] == T_DATA and r[3] == 6][0]
    _flip(d + "/" + log[i][0], log[i][1] + 60)  # inside the envelope: the CRC fails
    support.raises(ddq.Corrupt, ddq_outbox.Outbox, d, clock=support.FakeClock(T0), **OPTS)
    ob = ddq_outbox.Outbox(d, clock=support.FakeClock(T0), seed=7, on_corrupt="salvage", **OPTS)
    try:
        st = ob.stats()
        assert st["salvaged"] == 1 and st["salvage_lost"] == 1, st
        got = []
        for _ in range(20):  # bounded
            m = ob.get()
            if m is None:
                break
            got.append(m.topic)
            ob.ack(m)
        assert got == ["t/%d" % k for k in range(12) if k != 5], got
    finally:
        ob.close()


def test_salvage_on_recover():
    # EVIDENCE-OF: K9
    # recover() on an open queue salvages too (damage found after the open), and the queue
    # goes on delivering; with the default it raises Corrupt and stays fail-stopped.
    for mode in ("raise", "salvage"):
        d = support.tmpdir() + "/q"
        truth, nxt = _build(d)
        log = _log(d)
        q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt=mode, **OPTS)
        try:
            i = [k for k, r in enumerate(log) if r[2] == T_DATA and r[3] == 10][0]
            assert log[i][0] != log[-1][0]  # not the segment open for appending
            _flip(d + "/" + log[i][0], log[i][1] + 43)
            if mode == "raise":
                support.raises(ddq.Corrupt, q.recover)
                assert q.stats().failed and q.stats().salvaged == 0
                continue
            q.recover()
            st = q.stats()
            assert st.salvaged == 1 and st.salvage_lost == 1 and not st.failed
            assert 10 not in _state(q) and q.enqueue(b"after") >= nxt
        finally:
            q.close()


def _other_generation():
    # Generation 1 (a compaction) holds 9 intact items; a valid manifest names generation 7,
    # whose segments are all missing (a card that lost the new generation's writes).
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    for s in range(1, 11):
        q.enqueue(_pay(s))
    q.claim_seq(1, 1000)
    q.ack(1)
    q.claim_seq(3, 1000)
    q.quarantine(3, b"bad three")
    q.compact()
    q.claim_seq(5, 60000)
    truth = _state(q)
    nxt = q.stats().next_seq
    q.close()
    assert q.stats().generation == 1 and len(truth) == 9
    support.write_file(d + "/queue.manifest", ddq.encode_manifest(7, nxt, 2, 9, 100))
    return d, truth, nxt, _files(d)


def test_salvage_keeps_a_generation_the_manifest_does_not_select():
    # EVIDENCE-OF: K2 K3 K10
    # Salvage reads every generation in the directory: the selected one first, the others for
    # the items it does not hold (their state may be stale: reset, unless quarantined).
    d, truth, nxt, image = _other_generation()
    support.raises(ddq.Corrupt, ddq.Queue, d, clock=support.FakeClock(T0), **OPTS)
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert _files(d) == image
    assert rep["status"] == "salvaged_with_loss" and rep["kept"] == 9, rep
    assert rep["generations_read"] == [7, 1], rep["generations_read"]
    unq = sorted(s for s in truth if truth[s][0] != "quarantined")
    assert rep["reset"] == unq and rep["generation"] == 8 and rep["next_seq"] >= nxt, rep
    exp = {}
    for s, t in truth.items():
        exp[s] = t if t[0] == "quarantined" else ("available", t[1], 0, 0, t[4], None)
    _check_out(out, exp, nxt)
    # in place: the same items, and the generation-1 segment kept aside, not deleted
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **OPTS)
    try:
        assert _state(q) == exp, (_state(q), exp)
        rep = q.salvage_report
        assert rep["reset"] == unq and rep["kept"] == 9
        assert [n for n in rep["aside"] if n.endswith(".log")], rep["aside"]
        assert q.stats().next_seq >= nxt
    finally:
        q.close()
    _aside_ok(d, image)


def _short_predecessor():
    # SPEC F7's "ends early" shape, which the release before R23 wrote itself: segment 1 ends at
    # 496 B after a rotation for a 600 B record a cut lost (W3: an empty segment 2, its record
    # never durable); reopened, a 10 B item went into segment 2, whose first record would have
    # fitted in 1. Recovery now removes the empty segment first (R23), so the shape is made from
    # ddq's own bytes: the 10 B item's record moved from the end of segment 1 into segment 2.
    o = {"segment_bytes": 1024, "max_payload_bytes": 900, "max_items": 64, "max_segments": 32}
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=support.FakeClock(T0), **o)
    q.enqueue(b"a" * 452)
    q.enqueue(b"b" * 452)
    q.enqueue(b"c" * 400)
    q.claim_seq(2, 60000)
    q.close()
    assert [len(support.read_file(d + "/" + n)) for n in _segments(d)] == [1000, 496]
    support.write_file(d + "/" + ddq.segment_name(0, 2), b"")
    q = ddq.Queue(d, clock=support.FakeClock(T0), **o)
    q.enqueue(b"d" * 10)
    truth = _state(q)
    q.close()
    assert [len(support.read_file(d + "/" + n)) for n in _segments(d)] == [1000, 554]  # [R23]
    one = support.read_file(d + "/" + ddq.segment_name(0, 1))
    support.write_file(d + "/" + ddq.segment_name(0, 1), one[:496])
    support.write_file(d + "/" + ddq.segment_name(0, 2), one[496:])
    return d, o, truth


def test_salvage_short_predecessor_is_not_damage():
    # EVIDENCE-OF: K2 K7
    # Nothing damaged: salvage resets nothing and calls it clean, in a new directory and in place.
    d, o, truth = _short_predecessor()
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **o)
    assert rep["status"] == "clean" and rep["damaged"] == [] and rep["reset"] == [], rep
    q = ddq.Queue(out, clock=support.FakeClock(T0), **o)
    try:
        assert _state(q) == truth
    finally:
        q.close()
    q = ddq.Queue(d, clock=support.FakeClock(T0), on_corrupt="salvage", **o)
    try:
        assert _state(q) == truth
        rep = getattr(q, "salvage_report", None)  # (none when recovery opens it as it is)
        assert rep is None or (rep["reset"] == [] and rep["status"] == "clean"), rep
    finally:
        q.close()
    # a writer reopened with a larger segment_bytes: its segment outgrows the earlier ones
    d = support.tmpdir() + "/q2"
    q = ddq.Queue(d, clock=support.FakeClock(T0), **OPTS)
    for s in range(1, 13):
        q.enqueue(_pay(s))
    q.claim_seq(3, 60000)
    q.close()
    big = dict(OPTS, segment_bytes=4096)
    q = ddq.Queue(d, clock=support.FakeClock(T0), **big)
    for s in range(13, 60):
        q.enqueue(_pay(s))
    truth = _state(q)
    q.close()
    out = support.tmpdir() + "/out2"
    rep = ddq_salvage.salvage(d, out, **big)
    assert rep["status"] == "clean" and rep["reset"] == [], rep
    q = ddq.Queue(out, clock=support.FakeClock(T0), **big)
    try:
        assert _state(q) == truth
    finally:
        q.close()


def test_salvage_seq_gap_resets_what_came_before():
    # EVIDENCE-OF: K2 K3 K6
    # A middle segment cut at a record boundary is no damage by its shape (F7), but the DATA it
    # lost leaves a gap where R5 makes seqs contiguous: the records before it may be lost too.
    def damage(d, log):
        n = _segments(d)[1]
        mine = [k for k, r in enumerate(log) if r[0] == n]
        datas = [k for k in mine if log[k][2] == T_DATA]
        assert datas and datas[-1] != mine[0]
        cut = log[datas[-1]][1]
        b = support.read_file(d + "/" + n)
        support.write_file(d + "/" + n, b[:cut])
        return set(k for k in mine if log[k][1] >= cut)

    rep, _ = _salvage_case(damage)
    assert rep["damaged"] == [] and rep["lost_count"] >= 1, rep


def test_salvage_resync_is_linear():
    # EVIDENCE-OF: K2
    import salvage_craft

    # Resynchronisation reads each byte a bounded number of times, whatever the segment holds:
    # counted as bytes read through the storage seam (no timing), at 16 and 64 KiB.
    reads = []
    for frames in (False, True):
        for size in (16384, 65536):
            d = support.tmpdir()
            support.write_file(
                d + "/" + ddq.segment_name(0, 0),
                salvage_craft.segment("frames" if frames else "headers", size),
            )
            # a next segment: the crafted one is not the log's end (no torn-tail reading, R11)
            support.write_file(
                d + "/" + ddq.segment_name(0, 1),
                ddq_salvage.encode_record(T_DATA, 2, 0, b"second"),
            )
            fs = salvage_craft.Counting()
            o = dict(OPTS, segment_bytes=size, max_payload_bytes=size - 48)
            rep = ddq_salvage.salvage(d, support.tmpdir() + "/out", storage=fs, **o)
            assert rep["status"] == "salvaged_with_loss" and rep["kept"] == 2, rep
            assert rep["damaged"] == [[ddq.segment_name(0, 0), 53, size]], rep["damaged"]
            assert fs.n <= 6 * size, (frames, size, fs.n)
            reads.append(fs.n)
    assert reads[1] <= 5 * reads[0] and reads[3] <= 5 * reads[2], reads
