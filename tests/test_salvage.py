# Salvage (port/ddq_salvage.py, SPEC §15): a damaged queue directory is read without change
# and every intact item goes into a new one. Shared suite: CPython and MicroPython over POSIX,
# LittleFS and FAT. The expectations come from a small independent model of the log (_model):
# the records a damage destroys are listed from the undamaged bytes first.
import struct

import ddq
import ddq_salvage
import support

T0 = 1767225600000
OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 64, "max_segments": 32}
T_DATA, T_CLAIM, T_ACK, T_RETRY, T_QUAR, T_STATE = 1, 2, 3, 4, 5, 6


def _pay(s):
    return b"item-%02d-" % s + b"x" * (s % 7)


def _build(d, compact=False):
    # Items in every state, control records spread over the segments (generation 0 unless
    # compact): 1 5 17 acked, 2 6 retried, 3 16 quarantined, 4 15 claimed, the rest available.
    clock = support.FakeClock(T0)
    q = ddq.Queue(d, clock=clock, **OPTS)
    for s in range(1, 13):
        q.enqueue(_pay(s))
    q.claim_seq(1, 1000)
    q.ack(1)
    q.claim_seq(2, 1000)
    q.retry(2, 5000)
    q.claim_seq(3, 1000)
    q.quarantine(3, b"bad three")
    q.claim_seq(4, 60000)
    for s in range(13, 21):
        q.enqueue(_pay(s))
    q.claim_seq(5, 1000)
    q.ack(5)
    q.claim_seq(6, 1000)
    q.retry(6, 0)
    q.claim_seq(15, 60000)
    q.claim_seq(16, 1000)
    q.quarantine(16, b"bad sixteen")
    q.claim_seq(17, 1000)
    q.ack(17)
    if compact:
        q.compact()
        q.claim_seq(18, 1000)
        q.ack(18)
        q.enqueue(_pay(21))
    truth = _state(q)
    nxt = q.stats().next_seq
    q.close()
    return truth, nxt


def _state(q):
    out = {}
    for i in q.items():
        if i.state == "acked":
            continue
        r = q.reason(i.seq) if i.state == "quarantined" else None
        out[i.seq] = (i.state, i.attempts, i.lease_until_ms, i.not_before_ms, bytes(q.read(i.seq)), r)
    return out


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
    assert rep["status"] == "salvaged_with_loss" and rep["damaged"] == [[n, len(b), len(b) + 100]], rep
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
