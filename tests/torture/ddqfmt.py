# ddqfmt: an independent encoder/decoder of the DDQ on-disk format, written from
# shared/reference/ddq-c-format.md §3, §4, §6 (NOT from port/ddq.py), so that the torture harness can
# build bad images with valid CRCs and check what ddq recovers. Subset Python (both interpreters).
import struct
from binascii import crc32

MAGIC = b"DQG1"
COMMIT = b"CMIT"
MMAGIC = b"DDQM"
HDR = "<4sHHQQIIII"      # magic version type seq arg payload_len record_length crc reserved
T_DATA = 1
T_CLAIM = 2
T_ACK = 3
T_RETRY = 4
T_QUARANTINE = 5
T_STATE = 6
MANIFEST = "queue.manifest"
MARKER = "queue.format"
LOCK = "queue.lock"


def seg_name(gen, idx):
    if gen == 0:
        return "segment-%020d.log" % idx
    return "generation-%020d-segment-%020d.log" % (gen, idx)


def parse_seg_name(name):
    """(generation, index) for a segment name, else None."""
    if name.startswith("segment-") and name.endswith(".log") and len(name) == 32:
        d = name[8:28]
        if d.isdigit():
            return (0, int(d))
    if name.startswith("generation-") and name.endswith(".log") and len(name) == 64:
        g = name[11:31]
        d = name[40:60]
        if name[31:40] == "-segment-" and g.isdigit() and d.isdigit() and int(g) != 0:
            return (int(g), int(d))
    return None


def record_crc(rec):
    mv = memoryview(rec)
    c = crc32(mv[4:32])
    c = crc32(mv[36:40], c)
    return crc32(mv[40:len(rec) - 8], c) & 0xFFFFFFFF


def encode_record(rtype, seq, arg, payload=b"", version=1, reserved=0, plen=None, rlen=None,
                  crc=None, commit=COMMIT, tail_len=None, magic=MAGIC):
    """One record; every field can be overridden (bad images). The CRC is recomputed unless given."""
    p = bytes(payload)
    if plen is None:
        plen = len(p)
    if rlen is None:
        rlen = 48 + len(p)
    rec = bytearray(48 + len(p))
    struct.pack_into(HDR, rec, 0, magic, version, rtype, seq, arg, plen, rlen, 0, reserved)
    rec[40:40 + len(p)] = p
    rec[40 + len(p):44 + len(p)] = commit
    struct.pack_into("<I", rec, 44 + len(p), rlen if tail_len is None else tail_len)
    if crc is None:
        crc = record_crc(rec)
    struct.pack_into("<I", rec, 32, crc)
    return bytes(rec)


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
        rec = data[off:off + rlen]
        if record_crc(rec) != crc or rec[rlen - 8:rlen - 4] != COMMIT:
            break
        out.append((off, rtype, seq, arg, bytes(rec[40:40 + plen])))
        off += rlen
    return out, off


def encode_manifest(gen, next_seq, seg_count, item_count, end_offset, version=1, size=48,
                    reserved=0, crc=None, magic=MMAGIC):
    m = bytearray(48)
    struct.pack_into("<4sHHQQIIQ", m, 0, magic, version, size, gen, next_seq, seg_count, item_count,
                     end_offset)
    if crc is None:
        crc = crc32(memoryview(m)[0:40]) & 0xFFFFFFFF
    struct.pack_into("<II", m, 40, crc, reserved)
    return bytes(m)


def decode_manifest(m):
    """(gen, next_seq, seg_count, item_count, end_offset) or None when invalid."""
    if len(m) != 48:
        return None
    magic, ver, size, gen, nxt, segs, items, end = struct.unpack_from("<4sHHQQIIQ", m, 0)
    crc, res = struct.unpack_from("<II", m, 40)
    if magic != MMAGIC or ver != 1 or size != 48 or res != 0:
        return None
    if crc != crc32(memoryview(m)[0:40]) & 0xFFFFFFFF:
        return None
    return (gen, nxt, segs, items, end)
