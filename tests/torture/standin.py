# standin: a tiny queue with ddq's API and storage seam, used only to test the torture harness
# itself (before port/ddq.py existed, and in the smoke test that proves the checker catches a
# planted bug). One log file of DDQ-format records; compaction rewrites it through log.tmp +
# rename. Not a ddq implementation: no segments, no manifest, payloads kept in RAM. Subset Python.
import os
import struct

import ddqfmt as F

# The API's errors are ddq's own (codes: docs/SPEC.md §7.2): a stand-in for the queue, not for
# them.
from ddq import BadState, Corrupt, Error, Full, InvalidArgument, IOFailure, Locked, NotFound  # noqa: F401

__version__ = "0.0-standin"
BUGS = {}  # e.g. {"no_sync": True}: planted bugs for the harness self-test


class _Obj:
    def __init__(self, **kw):
        for k in kw:
            setattr(self, k, kw[k])


class PosixStorage:
    def open(self, path, mode):
        return open(path, mode)

    def write(self, f, buf):
        f.write(buf)

    def read_into(self, f, off, buf):
        f.seek(off)
        return f.readinto(buf) or 0

    def sync(self, f):
        f.flush()
        if hasattr(os, "fsync"):
            os.fsync(f.fileno())

    def close(self, f):
        f.close()

    def size(self, p):
        return os.stat(p)[6]

    def kind(self, p):
        try:
            return 2 if os.stat(p)[0] & 0x4000 else 1
        except OSError:
            return 0

    def listdir(self, p):
        return os.listdir(p)

    def mkdir(self, p):
        os.mkdir(p)

    def rename(self, a, b):
        os.rename(a, b)

    def remove(self, p):
        os.remove(p)

    def sync_dir(self, p):
        pass

    def lock(self, p):
        return p

    def unlock(self, t):
        pass


class Queue:
    def __init__(
        self,
        path,
        segment_bytes=4194304,
        max_payload_bytes=1048576,
        max_items=100000,
        max_segments=1024,
        clock=None,
        storage=None,
        sync="always",
        index_bytes=0,
    ):
        self.path = path
        self.index_used = False  # no recovery index: every open replays the whole log
        self.s = storage if storage is not None else PosixStorage()
        self.clock = clock
        self.max_items = max_items
        self.max_payload = max_payload_bytes
        self.sync_mode = sync
        self.f = None
        self.failed = True
        if self.s.kind(path) == 0:
            self.s.mkdir(path)
            if not BUGS.get("no_sync_dir"):
                self.s.sync_dir(path[: path.rfind("/")] or "/")
        self.tok = self.s.lock(path + "/queue.lock")
        try:
            self.recover()
        except BaseException:
            self.close()
            raise

    def _p(self, n):
        return self.path + "/" + n

    def recover(self):
        if self.f is not None:
            f = self.f
            self.f = None
            self.s.close(f)
        self.failed = True
        self.its = {}
        self.next_seq = 1
        if self.s.kind(self._p("log.tmp")):
            self.s.remove(self._p("log.tmp"))
        data = b""
        if self.s.kind(self._p("log")):
            h = self.s.open(self._p("log"), "rb")
            try:
                buf = bytearray(self.s.size(self._p("log")))
                n = self.s.read_into(h, 0, buf) if buf else 0
                data = bytes(buf[:n])
            finally:
                self.s.close(h)
        recs, end = F.decode_records(data)
        if end < len(data):
            left = len(data) - end
            rlen = struct.unpack_from("<I", data, end + 28)[0] if left >= 48 else 0
            if left >= 48 and data[end : end + 4] == F.MAGIC and rlen <= left:
                raise Corrupt("log: bad record at offset %d" % end)
            if left >= 48 and data[end : end + 4] != F.MAGIC:
                raise Corrupt("log: bad magic at offset %d" % end)
        self.hwm = 1
        for off, t, seq, arg, pl in recs:
            self._apply(t, seq, arg, pl, off)
        self.next_seq = max(self.next_seq, self.hwm)
        if end < len(data) or not self.s.kind(self._p("log")):
            self._rewrite(data[:end])
        self.f = self.s.open(self._p("log"), "ab")
        self.failed = False

    def _apply(self, t, seq, arg, pl, off):
        it = self.its.get(seq)
        if t == F.T_DATA:
            if seq < self.next_seq:
                raise Corrupt("log: sequence %d out of order at offset %d" % (seq, off))
            self.its[seq] = ["available", 0, 0, 0, pl, b""]
            self.next_seq = seq + 1
        elif t == F.T_STATE and arg == 1:
            self.hwm = seq
        elif it is None:
            raise Corrupt("log: unknown seq %d at offset %d" % (seq, off))
        elif t == F.T_STATE:
            code, it[1], it[2], it[3] = struct.unpack("<IIQQ", pl)
            it[0] = ("available", "available", "claimed", "acked", "quarantined")[code]
        elif t == F.T_CLAIM:
            it[0] = "claimed"
            it[2] = arg
        elif t == F.T_ACK:
            it[0] = "acked"
            it[2] = 0
        elif t == F.T_RETRY:
            it[0] = "available"
            it[1] += 1
            it[2] = 0
            it[3] = arg
        elif t == F.T_QUARANTINE:
            it[0] = "quarantined"
            it[2] = 0
            it[5] = pl

    def _rewrite(self, content):
        tmp = self._p("log.tmp")
        h = self.s.open(tmp, "wb")
        try:
            if content:
                self.s.write(h, content)
            self.s.sync(h)
        finally:
            self.s.close(h)
        self.s.rename(tmp, self._p("log"))
        self.s.sync_dir(self.path)

    def _append(self, rec, sync=True):
        if self.failed:
            raise IOFailure("fail-stop: recover() first")
        try:
            self.s.write(self.f, rec)
            if sync and not BUGS.get("no_sync"):
                self.s.sync(self.f)
        except OSError as e:
            self.failed = True
            raise IOFailure("write failed: %r" % (e,))

    def enqueue(self, payload):
        if self.failed:
            raise IOFailure("fail-stop")
        if len(payload) > self.max_payload:
            raise Error("too large")
        if len(self.its) >= self.max_items:
            self.compact()
            if len(self.its) >= self.max_items:
                raise Full("full")
        seq = self.next_seq
        self._append(F.encode_record(F.T_DATA, seq, 0, payload))
        self.its[seq] = ["available", 0, 0, 0, bytes(payload), b""]
        self.next_seq = seq + 1
        return seq

    def _claim(self, lease_ms, ordered):
        if self.failed:
            raise IOFailure("fail-stop")
        now = self.clock()
        for seq in sorted(self.its):
            it = self.its[seq]
            if it[0] == "available" and it[3] <= now:
                self._append(
                    F.encode_record(F.T_CLAIM, seq, now + lease_ms), self.sync_mode != "ack"
                )
                it[0] = "claimed"
                it[2] = now + lease_ms
                return _Obj(seq=seq, attempts=it[1], payload_len=len(it[4]), lease_until_ms=it[2])
            if ordered and it[0] in ("available", "claimed"):
                return None
        return None

    def claim(self, lease_ms):
        return self._claim(lease_ms, False)

    def claim_ordered(self, lease_ms):
        return self._claim(lease_ms, True)

    def _get(self, seq):
        if self.failed:
            raise IOFailure("fail-stop")
        it = self.its.get(seq)
        if it is None:
            raise NotFound("seq %d" % seq)
        return it

    def read(self, seq):
        return self._get(seq)[4]

    def reason(self, seq):
        return self._get(seq)[5]

    def ack(self, seq):
        it = self._get(seq)
        if it[0] == "acked":
            return False
        if it[0] != "claimed":
            raise BadState("not claimed")
        self._append(F.encode_record(F.T_ACK, seq, 0))
        it[0] = "acked"
        it[2] = 0
        return True

    def retry(self, seq, delay_ms):
        it = self._get(seq)
        if it[0] != "claimed":
            raise BadState("not claimed")
        nb = self.clock() + delay_ms
        self._append(F.encode_record(F.T_RETRY, seq, nb))
        it[0] = "available"
        it[1] += 1
        it[2] = 0
        it[3] = nb

    def quarantine(self, seq, reason=b""):
        it = self._get(seq)
        if it[0] == "quarantined":
            return False
        if it[0] != "claimed":
            raise BadState("not claimed")
        self._append(F.encode_record(F.T_QUARANTINE, seq, 0, reason))
        it[0] = "quarantined"
        it[2] = 0
        it[5] = bytes(reason)
        return True

    def compact(self):
        if self.failed:
            raise IOFailure("fail-stop")
        out = [F.encode_record(F.T_STATE, self.next_seq, 1)]
        for seq in sorted(self.its):
            it = self.its[seq]
            if it[0] == "acked":
                continue
            out.append(F.encode_record(F.T_DATA, seq, 0, it[4]))
            code = ("available", "claimed", "acked", "quarantined").index(it[0]) + 1
            if code != 1 or it[1] or it[3]:
                out.append(
                    F.encode_record(
                        F.T_STATE, seq, 0, struct.pack("<IIQQ", code, it[1], it[2], it[3])
                    )
                )
            if it[0] == "quarantined":
                out.append(F.encode_record(F.T_QUARANTINE, seq, 0, it[5]))
        try:
            f = self.f
            self.f = None
            self.s.close(f)
            self._rewrite(b"".join(out))
            self.f = self.s.open(self._p("log"), "ab")
        except OSError as e:
            self.failed = True
            raise IOFailure("compaction failed: %r" % (e,))
        for seq in [s for s in self.its if self.its[s][0] == "acked"]:
            del self.its[seq]

    def sync(self):
        if self.failed:
            raise IOFailure("fail-stop")
        self._append(b"", True)

    def save_index(self):
        self.sync()

    def items(self):
        for seq in sorted(self.its):
            it = self.its[seq]
            yield _Obj(
                seq=seq,
                state=it[0],
                attempts=it[1],
                lease_until_ms=it[2],
                not_before_ms=it[3],
                payload_len=len(it[4]),
            )

    def stats(self):
        c = {"available": 0, "claimed": 0, "acked": 0, "quarantined": 0}
        for s in self.its:
            c[self.its[s][0]] += 1
        return _Obj(
            total_items=len(self.its),
            available_items=c["available"],
            claimed_items=c["claimed"],
            acknowledged_items=c["acked"],
            quarantined_items=c["quarantined"],
            next_seq=self.next_seq,
            failed=self.failed,
            generation=0,
            segment_count=1,
            stored_bytes=0,
            recovered_tail_bytes=0,
        )

    def close(self):
        try:
            if self.f is not None:
                f = self.f
                self.f = None
                self.s.close(f)
        finally:
            if self.tok is not None:
                t = self.tok
                self.tok = None
                self.s.unlock(t)
