# Independent test-side codec of the DDQ format: written from docs/SPEC.md, never from port/ddq.py.
# The one codec the tests use (the torture harness, tests/host/cwriter.py's directories,
# test_interop's reader): records §3 (layout §3.1, CRC §3.2, validity §3.3), record types §4,
# STATE payload §4.1, manifest §5, names §6. It builds bad images with valid CRCs and decodes what
# ddq wrote, so a mistake in ddq shows as a disagreement. host/ddqhost/fsck is the users'
# independent reader; this one is for tests only. Subset Python (CPython and MicroPython).
# Its record rules (read_records) re-implement ddq.check_record's on purpose, for cross-checking:
# a second reading of SPEC §3.3 catches a mistake the port's one check would share everywhere.
import struct
from binascii import crc32

MAGIC = b"DQG1"
COMMIT = b"CMIT"
MMAGIC = b"DDQM"
HDR = "<4sHHQQIIII"  # magic version type seq arg payload_len record_length crc reserved
T_DATA = 1
T_CLAIM = 2
T_ACK = 3
T_RETRY = 4
T_QUARANTINE = 5
T_STATE = 6
S_AVAILABLE = 1  # STATE payload states (SPEC §4.1); 3 (ACKED) is never stored
S_CLAIMED = 2
S_QUARANTINED = 4
STATE_FMT = "<IIQQ"  # state attempts lease_until_ms not_before_ms (SPEC §4.1)
MAN_FMT = "<4sHHQQIIQ"  # magic version size generation next_seq segs items end_offset (SPEC §5)
MANIFEST = "queue.manifest"
MARKER = "queue.format"
LOCK = "queue.lock"


def seg_name(gen, idx):
    if gen == 0:
        return "segment-%020d.log" % idx
    return "generation-%020d-segment-%020d.log" % (gen, idx)


def _digits(s):
    # ASCII digits only (SPEC N4): str.isdigit() takes other scripts' digits on CPython.
    for c in s:
        if c < "0" or c > "9":
            return False
    return True


def parse_seg_name(name):
    """(generation, index) for a segment name, else None."""
    if name.startswith("segment-") and name.endswith(".log") and len(name) == 32:
        d = name[8:28]
        if _digits(d):
            return (0, int(d))
    if name.startswith("generation-") and name.endswith(".log") and len(name) == 64:
        g = name[11:31]
        d = name[40:60]
        if name[31:40] == "-segment-" and _digits(g) and _digits(d) and int(g) != 0:
            return (int(g), int(d))
    return None


def record_crc(rec):
    mv = memoryview(rec)
    c = crc32(mv[4:32])
    c = crc32(mv[36:40], c)
    return crc32(mv[40 : len(rec) - 8], c) & 0xFFFFFFFF


def encode_record(
    rtype,
    seq,
    arg=0,
    payload=b"",
    version=1,
    reserved=0,
    plen=None,
    rlen=None,
    crc=None,
    commit=COMMIT,
    tail_len=None,
    magic=MAGIC,
):
    """One record; every field can be overridden (bad images). The CRC is recomputed unless
    given."""
    p = bytes(payload)
    if plen is None:
        plen = len(p)
    if rlen is None:
        rlen = 48 + len(p)
    rec = bytearray(48 + len(p))
    struct.pack_into(HDR, rec, 0, magic, version, rtype, seq, arg, plen, rlen, 0, reserved)
    rec[40 : 40 + len(p)] = p
    rec[40 + len(p) : 44 + len(p)] = commit
    struct.pack_into("<I", rec, 44 + len(p), rlen if tail_len is None else tail_len)
    if crc is None:
        crc = record_crc(rec)
    struct.pack_into("<I", rec, 32, crc)
    return bytes(rec)


def state_record(seq, state, attempts, lease_until_ms, not_before_ms):
    """A STATE record (SPEC §4.1)."""
    return encode_record(
        T_STATE, seq, 0, struct.pack(STATE_FMT, state, attempts, lease_until_ms, not_before_ms)
    )


def decode_records(data):
    """[(offset, type, seq, arg, payload)] of the well-formed records at the start of data, and the
    offset where parsing stopped."""
    out = []
    off = 0
    n = len(data)
    while n - off >= 48:
        magic, ver, rtype, seq, arg, plen, rlen, crc, res = struct.unpack_from(HDR, data, off)
        if magic != MAGIC or rlen != 48 + plen or off + rlen > n:
            break
        rec = data[off : off + rlen]
        if record_crc(rec) != crc or rec[rlen - 8 : rlen - 4] != COMMIT:
            break
        out.append((off, rtype, seq, arg, bytes(rec[40 : 40 + plen])))
        off += rlen
    return out, off


def read_records(data):
    """[(type, seq, arg, payload)] of a segment that must be valid to its last byte (every rule of
    SPEC §3.3 that needs no options: F2, F3, F5); ValueError at the first byte that is not."""
    recs, end = decode_records(data)
    if end != len(data):
        raise ValueError("no valid record at offset %d of %d" % (end, len(data)))
    out = []
    for off, rtype, seq, arg, payload in recs:
        magic, ver, _t, _s, _a, _p, rlen, _c, res = struct.unpack_from(HDR, data, off)
        tail = struct.unpack_from("<I", data, off + rlen - 4)[0]
        if ver != 1 or res != 0 or not 1 <= rtype <= 6 or tail != rlen:
            raise ValueError("invalid record at offset %d" % off)
        out.append((rtype, seq, arg, payload))
    return out


def encode_manifest(
    gen,
    next_seq,
    seg_count,
    item_count,
    end_offset,
    version=1,
    size=48,
    reserved=0,
    crc=None,
    magic=MMAGIC,
):
    m = bytearray(48)
    struct.pack_into(
        MAN_FMT, m, 0, magic, version, size, gen, next_seq, seg_count, item_count, end_offset
    )
    if crc is None:
        crc = crc32(memoryview(m)[0:40]) & 0xFFFFFFFF
    struct.pack_into("<II", m, 40, crc, reserved)
    return bytes(m)


def decode_manifest(m):
    """(gen, next_seq, seg_count, item_count, end_offset) or None when invalid."""
    if len(m) != 48:
        return None
    magic, ver, size, gen, nxt, segs, items, end = struct.unpack_from(MAN_FMT, m, 0)
    crc, res = struct.unpack_from("<II", m, 40)
    if magic != MMAGIC or ver != 1 or size != 48 or res != 0:
        return None
    if crc != crc32(memoryview(m)[0:40]) & 0xFFFFFFFF:
        return None
    return (gen, nxt, segs, items, end)
