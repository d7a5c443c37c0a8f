# Every corrupt-record case of SPEC §3.3, through both of ddq's readers of a record: Queue.read()
# (check_record, port/ddq.py) and an open (recovery's replay, port/ddq_recover.py, which inlines
# check_record's rules for speed, DESIGN §7). A DATA record of a live item is damaged in place in
# a segment that is not the last one (so no case can be a torn tail, SPEC §12 [R10][R11]); read()
# and the next open must both refuse it as Corrupt, for the same reason where both apply §3.3's
# rules. Shared suite: CPython and MicroPython over POSIX, LittleFS and FAT.
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
