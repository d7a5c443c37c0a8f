# Every corrupt-record case of SPEC §3.3, through both of ddq's readers of a record: Queue.read()
# (check_record, port/ddq.py) and an open (recovery's replay, port/ddq_recover.py, which inlines
# check_record's rules for speed, DESIGN §7). A DATA record of a live item is damaged in place in
# a segment that is not the last one (so no case can be a torn tail, SPEC §12 [R10][R11]); read()
# and the next open must both refuse it as Corrupt, for the same reason where both apply §3.3's
# rules. Shared suite: CPython and MicroPython over POSIX, LittleFS and FAT.
import os

import ddq
import ddqfmt
import support

T0 = 1767225600000
SEG = 256  # two 88-byte DATA records a segment: the third starts segment 1
MAXP = 64
PAY = b"p" * 40
D = ddqfmt.T_DATA


def _opts():
    return {
        "segment_bytes": SEG,
        "max_payload_bytes": MAXP,
        "index_bytes": 0,  # every open replays the whole log (an index would skip the record)
        "clock": support.FakeClock(T0),
    }


def _reason(e):
    # "<rule> at <segment> offset <n>[ (seq <s>)]": the rule, as both readers word it.
    return str(e.args[0]).split(" at ")[0]


# (case, the record that replaces seq 1's DATA (or a length to cut segment 0 to), the reason
# read() gives, the reason the open gives)
CASES = (
    ("magic", ddqfmt.encode_record(D, 1, 0, PAY, magic=b"DQG2"), "bad record header", None),
    ("version", ddqfmt.encode_record(D, 1, 0, PAY, version=2), "bad record header", None),
    ("reserved", ddqfmt.encode_record(D, 1, 0, PAY, reserved=1), "bad record header", None),
    ("type 0", ddqfmt.encode_record(0, 1, 0, PAY), "bad record header", None),
    ("type 7", ddqfmt.encode_record(7, 1, 0, PAY), "bad record header", None),
    (
        "payload over max",
        ddqfmt.encode_record(D, 1, 0, PAY, plen=MAXP + 1),
        "payload over max_payload_bytes",
        None,
    ),
    ("length != 48 + P", ddqfmt.encode_record(D, 1, 0, PAY, rlen=96), "bad record length", None),
    ("P != length - 48", ddqfmt.encode_record(D, 1, 0, PAY, plen=39), "bad record length", None),
    ("commit word", ddqfmt.encode_record(D, 1, 0, PAY, commit=b"CMIX"), "bad commit footer", None),
    (
        "trailing length",
        ddqfmt.encode_record(D, 1, 0, PAY, tail_len=87),
        "bad commit footer",
        None,
    ),
    ("crc field", ddqfmt.encode_record(D, 1, 0, PAY, crc=1), "crc mismatch", None),
    ("payload byte", b"flip", "crc mismatch", None),
    ("seq 0", ddqfmt.encode_record(D, 0, 0, PAY), "record field rule broken", None),
    ("DATA arg", ddqfmt.encode_record(D, 1, 5, PAY), "record field rule broken", None),
    ("short header", 20, "short record", None),
    # Framing: recovery finds a record's end before it applies §3.3, so it names the frame.
    (
        "length over segment_bytes",
        ddqfmt.encode_record(D, 1, 0, PAY, rlen=SEG + 8),
        "bad record length",
        "bad record header",
    ),
    ("short record", 50, "short record", "truncated record"),
    # A valid record of another item: read() finds the wrong record, the replay an order break.
    (
        "another seq",
        ddqfmt.encode_record(D, 7, 0, PAY),
        "record is not the expected one",
        "DATA sequence out of order",
    ),
    (
        "seq 2**64-1",
        ddqfmt.encode_record(D, 0xFFFFFFFFFFFFFFFF, 0, PAY),
        "record is not the expected one",
        "DATA sequence out of order",
    ),
)


def _verdicts(k, new):
    d = support.tmpdir() + "/v%d" % k
    q = ddq.Queue(d, **_opts())
    for _ in range(3):
        q.enqueue(PAY)
    c = q.claim(30000)  # seq 1: a live entry, which caches its DATA offset at the first read
    assert c.seq == 1 and q.read(1) == PAY
    seg = d + "/" + ddqfmt.seg_name(0, 0)
    img = support.read_file(seg)
    names = [n for n in support.listdir_sorted(d) if n.startswith("segment-")]
    assert len(img) == 176 and len(names) == 2, names
    if isinstance(new, int):
        img = img[0:new]
    elif new == b"flip":
        b = bytearray(img)
        b[45] ^= 1
        img = bytes(b)
    else:
        assert len(new) == 88
        img = new + img[88:]
    support.write_file(seg, img)
    e = support.raises(ddq.Corrupt, q.read, 1)
    r1 = _reason(e)
    q.close()
    e = support.raises(ddq.Corrupt, ddq.Queue, d, **_opts())
    return r1, _reason(e)


def test_every_corrupt_record_case_gets_one_verdict_from_read_and_open():
    # EVIDENCE-OF: F2 F3 F4 F5 F6 F10 R5 R19
    for k in range(len(CASES)):
        name, new, want_read, want_open = CASES[k]
        got = _verdicts(k, new)
        want = (want_read, want_read if want_open is None else want_open)
        assert got == want, (name, got, want)
    print("cases", len(CASES))


# ---- check_record and recovery's inlined copy of it, over generated records
# Recovery applies check_record's rules inline on MicroPython (one call per record costs the
# replay's speed there: DESIGN §13); this holds the copy equal to check_record over generated
# records: every record type, valid and damaged (a byte flipped anywhere, with the stored CRC and
# with a recomputed one, so the damage reaches the field rules; fields overridden; a seeded
# random set). Each record is segment 0 of a queue whose segment 1 is empty (never a torn tail):
# the open must refuse it for check_record's reason, or pass it on to the replay rules.
RULES = (
    "bad record header",
    "payload over max_payload_bytes",
    "bad record length",
    "bad commit footer",
    "crc mismatch",
    "record field rule broken",
)


def _with_crc(rec):
    # the record with its crc field made right for its bytes (a damage that reaches the rules)
    b = bytearray(rec)
    c = ddqfmt.record_crc(b)
    for k in range(4):
        b[32 + k] = c >> (8 * k) & 255
    return bytes(b)


# the bytes flipped in each base record: every header field, the payload's first byte, the
# footer (from the end: commit word, trailing length)
FLIPS = (0, 3, 4, 5, 6, 7, 8, 15, 16, 23, 24, 27, 28, 31, 32, 36, 39, 40, -8, -5, -4, -1)


def _generated(maxp):
    # one record at a time (a generator: a board's 140 KiB heap holds no list of them)
    E, S = ddqfmt.encode_record, ddqfmt.state_record
    C, A, R = ddqfmt.T_CLAIM, ddqfmt.T_ACK, ddqfmt.T_RETRY
    Q, ST = ddqfmt.T_QUARANTINE, ddqfmt.T_STATE
    big = 0xFFFFFFFFFFFFFFFF
    bases = (
        E(D, 1, 0, b""),
        E(D, 1, 0, b"x" * maxp),
        E(D, big, 0, b"ab"),
        E(C, 1, T0 + 30000),
        E(C, 1, big),
        E(A, 1),
        E(R, 1, 0),
        E(R, 1, T0),
        E(Q, 1, 0, b""),
        E(Q, 1, 0, b"why"),
        S(1, 1, 0, 0, 0),
        S(1, 2, 3, T0, 7),
    )
    for rec in bases:
        yield rec
    # fields overridden, the CRC right: each rule of §3.3 and §4 on its own
    for t, seq, arg, pay in (
        (D, 0, 0, b"x"),
        (D, 1, 1, b"x"),
        (D, 1, 0, b"y" * (maxp + 1)),
        (C, 1, 0, b""),
        (C, 1, 5, b"x"),
        (A, 1, 1, b""),
        (A, 1, 0, b"x"),
        (R, 1, 0, b"x"),
        (Q, 1, 1, b""),
        (Q, 1, 0, b"r" * (maxp + 1)),
        (ST, 1, 0, bytes(23)),
        (ST, 1, 1, bytes(24)),
        (ST, 1, 0, bytes(25)),
        (0, 1, 0, b""),
        (7, 1, 0, b""),
        (0xFFFF, 1, 0, b""),
    ):
        yield E(t, seq, arg, pay)
    for k in (
        {"version": 0},
        {"version": 2},
        {"reserved": 1},
        {"reserved": 1 << 24},
        {"magic": b"DQG2"},
        {"commit": b"CMIX"},
        {"tail_len": 48},
        {"plen": 2},
        {"plen": 0},
        {"rlen": 47},
        {"rlen": 50},
        {"rlen": SEG + 1},
        {"rlen": 0xFFFFFFFF},
        {"crc": 0},
    ):
        yield E(D, 1, 0, b"x", **k)
    # each base with one byte flipped, in every field, the footer and the payload
    for rec in bases:
        n = len(rec)
        for at in FLIPS:
            at = at if at >= 0 else n + at
            if at >= n:
                continue
            b = bytearray(rec)
            b[at] ^= 1 if at != 6 else 6  # (type 1 ^ 6 = 7: out of range)
            yield bytes(b)
            if not 32 <= at < 36:
                yield _with_crc(b)
    # a seeded random set: up to three bytes anywhere, the CRC right or not
    x = 12345
    for k in range(60):
        b = bytearray(bases[k % len(bases)])
        for _ in range(1 + k % 3):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            b[x % len(b)] ^= 1 + (x >> 8) % 255
        yield _with_crc(b) if k & 1 else bytes(b)


def _check_verdict(rec, maxp):
    try:
        ddq.check_record(memoryview(rec), 0, SEG, maxp)
    except ddq.Corrupt as e:
        return _reason(e)
    return "ok"


def _open_verdict(d, rec, maxp):
    for n in support.listdir_sorted(d):
        if n != "queue.lock":
            os.remove(d + "/" + n)
    support.write_file(d + "/" + ddqfmt.seg_name(0, 0), rec)
    support.write_file(d + "/" + ddqfmt.seg_name(0, 1), b"")
    o = _opts()
    o["max_payload_bytes"] = maxp
    try:
        ddq.Queue(d, **o).close()
    except ddq.Corrupt as e:
        r = _reason(e)
        # past check_record: the replay's own rules (order, transitions), not a verdict on it
        return r if r in RULES or r == "truncated record" else "ok"
    return "ok"


def test_generated_records_get_check_records_verdict_at_open():
    # EVIDENCE-OF: F2 F3 F4 F5 F6 F10 F11
    d = support.tmpdir()
    # A board (a heap under 1 MiB: an open there takes ~0.7 s) checks every 11th record; the
    # unix port, the 32-bit port and CPython check them all.
    heap = support.heap_size()
    step = 11 if heap is not None and heap < 1 << 20 else 1
    n = k = 0
    for maxp in (MAXP, 16):  # 16: a STATE record's 24 bytes over max_payload_bytes (F4)
        for rec in _generated(maxp):
            k += 1
            if k % step:
                continue
            if n % 50 == 49:
                print("records", n + 1)  # (a board's runner waits for output)
            want = _check_verdict(rec, maxp)
            got = _open_verdict(d, rec, maxp)
            rlen = rec[28] | rec[29] << 8 | rec[30] << 16 | rec[31] << 24
            framed = rec[0:4] == b"DQG1" and rec[4] == 1 and rec[5] == 0
            if framed and (rlen < 48 or rlen > SEG):
                # framing: recovery finds a record's end before it applies §3.3 [R10]
                assert got == "bad record header", (rec, got, want)
                assert want in ("bad record header", "bad record length"), (rec, want)
            elif framed and rlen > len(rec):  # its end lies past the file's [R10]
                assert got == "truncated record" and want != "ok", (rec, got, want)
            else:
                assert got == want, (rec, got, want)
            n += 1
    print("records", n)
