"""Part 9 (run_ci.py "flash"): power cuts on raw NOR flash (port/ddq_flash.py, SPEC §16 Y1-Y6).

Subset Python: runs on CPython and on the MicroPython unix port alike.

    python tests/torture/flash_cuts.py SEED COUNT NOPS [EVERY] [-v]   # seeds SEED..SEED+COUNT-1
    micropython tests/torture/flash_cuts.py SEED COUNT NOPS [EVERY]   # (from the repo root)

prints "RESULT <json>" last (the sums over the seeds; -v prints each failure).

One seeded workload (enqueue, claim then ack/retry/quarantine, compact, close and reopen, and a
side file renamed back and forth, so that a rename past a file's two name slots copies it and
programs commit bytes: Y2) runs on a FlashStorage over tests/blockdev.py's NORBlockDev with the
seed's geometry (MODES: the rp2's 4096-byte blocks with 256-byte page programs, write-once units
of 8, 16 or 32 bytes, 1024-byte blocks; a 64- or 512-byte write buffer: 64 splits most DDQ
records over two frames). Every program and erase of it is logged, then replayed on a fresh
device; at every EVERY-th event (1: all of them; the offset rotates with the seed) the image
before it is cut there twice:

  torn      the device's own cut (NORBlockDev cut_at): a program leaves any subset of its bits
            cleared, an erase leaves the block in any state (per byte: erased, as it was, random)
  complete  the program or erase done, power lost before it returned

Each cut state (flash_cut_states counts them) is mounted on a copy and judged by a fresh queue:
opened (recovery), judged, written on (5 operations of the same mix: enqueue, claim, ack,
retry, quarantine, compact, a reopen), closed, reopened and judged again, then drained with a
healed clock (leases and retry delays past) and judged a last time. Every 8th state first gets
a second cut 1-9 events into the recovery and 4 operations after it (depth2). Counts:

  lost         a returned enqueue, not acked, is missing or reads other bytes (also the side file)
  resurrected  a returned ack (or quarantine) undone
  reused_seq   an enqueue after the cut returns a seq at or below one returned before
  bricked      an open raised (the region or the queue does not open)
  stuck        after the drain, an item is still available or claimed, or a returned enqueue
               reached no end (acked or quarantined)
  unexpected   anything else raised in the continuation, or the harness itself broke
"""

import json
import sys

try:  # CPython: paths from this file; MicroPython's unix port runs from the repository root
    import os.path

    _HERE = os.path.dirname(os.path.abspath(__file__))
    _ROOT = os.path.abspath(os.path.join(_HERE, "..", ".."))
except ImportError:
    _ROOT = "."
sys.path.insert(0, _ROOT + "/port")
sys.path.append(_ROOT + "/tests")

import blockdev  # noqa: E402
import ddq  # noqa: E402
import ddq_flash  # noqa: E402
from shared import Xorshift32  # noqa: E402

T0 = 1767225600000
# (block size, blocks, page, unit, buf, segment_bytes, start) by seed % len(MODES); start 1: the
# region is blocks 1..24 of a 26-block device, whose first and last blocks must stay erased
MODES = (
    (4096, 24, 256, 1, 512, 5000, 0),  # rp2: whole 256-byte pages
    (4096, 24, 0, 16, 64, 5000, 0),  # write-once 16-byte units, records torn over two frames
    (1024, 24, 0, 1, 64, 700, 1),  # byte-programmable NOR, small blocks: frames split over blocks
    (4096, 24, 256, 1, 64, 3500, 0),
    (1024, 24, 0, 8, 512, 700, 1),
    (4096, 24, 0, 32, 512, 5000, 0),
)
KINDS = ("header", "name", "delete", "commit", "frame", "erase")
BAD = ("lost", "resurrected", "reused_seq", "bricked", "stuck", "unexpected")
SIDE = ("side/a", "side/b")


def Rng(seed):
    """xorshift32 (tests/shared.py) from the seed, mixed: the same draws on both interpreters."""
    return Xorshift32((seed * 2654435761 + 12345) & 0xFFFFFFFF)


class Clock:
    def __init__(self):
        self.ms = T0

    def __call__(self):
        return self.ms


class LogDev(blockdev.NORBlockDev):
    """The recording device: every program and erase, with how much of the history had
    returned when it started."""

    def __init__(self, bs, n, unit, page, hist):
        blockdev.NORBlockDev.__init__(self, bs, n, None, unit, 1, page)
        self.log = []
        self.hist = hist

    def program(self, a, buf):
        self.log.append((a, bytes(buf), self.hist.mark()))
        return blockdev.NORBlockDev.program(self, a, buf)

    def erase(self, a):
        self.log.append((a, None, self.hist.mark()))
        return blockdev.NORBlockDev.erase(self, a)


class Hist:
    """What returned: enqueues (seq -> payload, in order), acks, quarantines; the side file's
    (name, bytes) after each side step, and the one a cut may have stopped in (side_next)."""

    def __init__(self):
        self.enq = []
        self.pay = {}
        self.acks = []
        self.quar = []
        self.sides = []
        self.side = (None, None)
        self.side_next = None

    def mark(self):
        return (len(self.enq), len(self.acks), len(self.quar), len(self.sides))

    def upto(self, m):
        h = Hist()
        h.enq = self.enq[0 : m[0]]
        for s in h.enq:
            h.pay[s] = self.pay[s]
        h.acks = self.acks[0 : m[1]]
        h.quar = self.quar[0 : m[2]]
        if m[3]:
            h.side = self.sides[m[3] - 1]
        if m[3] < len(self.sides):
            h.side_next = self.sides[m[3]]
        return h


class Judged(Exception):
    def __init__(self, cat, detail):
        Exception.__init__(self, cat)
        self.cat = cat
        self.detail = detail


def storage(dev, mode):
    return ddq_flash.FlashStorage(
        dev, mode[6], mode[1], buf=mode[4], page=dev.page or 1, unit=dev.unit
    )


def opts(mode):
    return {
        "segment_bytes": mode[5],
        "max_payload_bytes": 300,
        "max_items": 60,
        "max_segments": 6,
    }


def side_step(st, h, rnd):
    """The side file: appended to, or renamed to the other name (a second rename copies it)."""
    name, data = h.side
    if name is None:
        name, data = SIDE[0], b""
    if data and rnd.below(2):
        new = SIDE[1] if name == SIDE[0] else SIDE[0]
        st.rename(name, new)
        name = new
    else:
        more = b"s%d;" % len(data)
        f = st.open(name, "ab")
        st.write(f, more)
        st.sync(f)
        st.close(f)
        data += more
    h.side = (name, data)
    h.side_next = None
    h.sides.append(h.side)


def ops(q, box, h, rnd, clock, n, reopen, side=True):
    """n seeded operations on q (box[0]: its storage); returns q (a reopen makes a new one and
    sets box[0]). Appends what returned to h; raises Judged on a reused seq."""
    for i in range(n):
        r = rnd.below(100)
        if r < 45:
            p = (b"%d." % (i + 1000 * len(h.enq)) * 40)[0 : 1 + rnd.below(200)]
            try:
                s = q.enqueue(p)
            except ddq.Full:
                s = -1
            if s >= 0:
                top = max(h.enq) if h.enq else -1
                if s <= top:
                    raise Judged("reused_seq", "enqueue returned %d after %d" % (s, top))
                h.enq.append(s)
                h.pay[s] = p
        elif r < 78:
            c = q.claim(1000)
            if c is not None:
                x = rnd.below(10)
                if x < 6:
                    if q.ack(c.seq):
                        h.acks.append(c.seq)
                elif x < 8:
                    q.retry(c.seq, rnd.below(3) * 500)
                else:
                    if q.quarantine(c.seq, b"why"):
                        h.quar.append(c.seq)
        elif r < 86:
            q.compact()
        elif r < 94:
            if side:
                side_step(box[0], h, rnd)
        else:
            q = reopen(q)
        clock.ms += 10 + rnd.below(400)
    return q


def check(q, st, h, where, adopt=False, read=True):
    """Judge q (and the side file on st) against h; returns {seq: state}. adopt (the first
    look after a cut): the interrupted call's outcome, done or not, becomes part of h. read:
    every pending item's payload too."""
    live = {}
    for it in q.items():
        live[it.seq] = it.state
    acked = {}
    for s in h.acks:
        acked[s] = 1
    for s in h.enq:
        if s in acked:
            continue
        if s not in live:
            raise Judged("lost", "%s: seq %d missing" % (where, s))
        if read and live[s] != "acked" and q.read(s) != h.pay[s]:
            raise Judged("lost", "%s: seq %d reads other bytes" % (where, s))
    for s in h.acks:
        if live.get(s, "acked") != "acked":
            raise Judged("resurrected", "%s: acked seq %d is %s" % (where, s, live[s]))
    for s in h.quar:
        if live.get(s, "acked") not in ("acked", "quarantined"):
            raise Judged("resurrected", "%s: quarantined seq %d is %s" % (where, s, live[s]))
    got = read_side(st)
    ok = [h.side]
    if h.side_next is not None:
        ok.append(h.side_next)
    if h.side[0] is None:  # a cut between the create and its first frame: an empty file
        ok.append((SIDE[0], b""))
    if got not in ok:
        raise Judged("lost", "%s: side file %r, want one of %r" % (where, got, ok))
    if adopt:
        h.side, h.side_next = got, None
        for s in live:
            if s not in h.pay:  # an interrupted enqueue that is there
                h.enq.append(s)
                h.pay[s] = q.read(s) if live[s] != "acked" else b""
            if live[s] == "acked" and s not in acked:
                h.acks.append(s)
            if live[s] == "quarantined" and s not in h.quar:
                h.quar.append(s)
    return live


def read_side(st):
    out = (None, None)
    for n in SIDE:
        if st.kind(n) == 1:
            if out[0] is not None:
                raise Judged("resurrected", "both side names exist")
            b = bytearray(st.size(n))
            f = st.open(n, "rb")
            st.read_into(f, 0, b)
            st.close(f)
            out = (n, bytes(b))
    return out


def classify(mode, img, a, buf):
    """The kind of a program or erase: header, name, delete, commit, frame, erase."""
    if buf is None:
        return "erase"
    bs, u = mode[0], mode[3]
    p = 0
    while p < len(buf) and buf[p] == 0xFF:  # (page programs: 0xFF around the bytes)
        p += 1
    off = (a + p) % bs
    od = 20 if u == 1 else -(-20 // u) * u
    oc = od + max(u, 4)
    on = oc + max(u, 4)
    oh = on + 2 * 128
    if off < od:
        return "header"
    b0 = a - a % bs
    first = img[b0 + 12 : b0 + 16] == b"\x00\x00\x00\x00"  # index 0 in its file
    if not first or off >= oh:
        return "frame"
    return "delete" if off < oc else "commit" if off < on else "name"


class Run:
    def __init__(self, seed, nops, verbose=False):
        self.seed = seed
        self.nops = nops
        self.mode = MODES[seed % len(MODES)]
        self.opts = opts(self.mode)
        self.verbose = verbose
        self.res = {
            "seed": seed,
            "mode": "bs%d x%d page%d unit%d buf%d start%d" % (self.mode[0:5] + self.mode[6:7]),
            "flash_cut_states": 0,
            "events": 0,
            "sampled": 0,
            "depth2": 0,
            "depth2_cut": 0,
            "lost": 0,
            "resurrected": 0,
            "reused_seq": 0,
            "bricked": 0,
            "stuck": 0,
            "unexpected": 0,
            "drained": 0,
            "kinds": {},
            "fail": [],
        }

    def dev(self, data, seed=1):
        m = self.mode
        return blockdev.NORBlockDev(m[0], m[1] + 2 * m[6], data, m[3], seed, m[2])

    def queue(self, st, clock):
        return ddq.Queue("q", storage=st, clock=clock, **self.opts)

    def record(self):
        """The seed's workload on a logging device: (log, history)."""
        m = self.mode
        h = Hist()
        dev = LogDev(m[0], m[1] + 2 * m[6], m[3], m[2], h)
        clock = Clock()
        rnd = Rng(self.seed)
        box = [storage(dev, m)]

        def reopen(q):
            q.close()
            box[0] = storage(dev, m)
            return self.queue(box[0], clock)

        q = self.queue(box[0], clock)
        q = ops(q, box, h, rnd, clock, self.nops, reopen)
        q.close()
        return dev.log, h

    def judge(self, data, h, k, draw):
        """One cut state: recover, judge, write on, reopen, judge, drain, judge."""
        m = self.mode
        where = "seed %d event %d %s" % (self.seed, k, draw)
        clock = Clock()
        clock.ms = T0 + 10000000 * (k + 1)  # after everything the run did
        rnd = Rng(self.seed * 7919 + k * 2 + (draw == "torn"))
        depth2 = self.res["flash_cut_states"] % 8 == 3
        if depth2:  # a second cut a few events into the recovery and what follows it
            self.res["depth2"] += 1
            d = self.dev(bytearray(data), k + 17)
            d.cut_at = 1 + (k + len(draw)) % 9
            q = None
            try:
                st = storage(d, m)
                q = self.queue(st, clock)
                check(q, st, h, where + " (second cut pending)", True)
                ops(q, [st], h, rnd, clock, 4, lambda q: q, False).close()
            except (OSError, ddq.Error) as e:
                if not d.off:  # (no cut came: the open, or what followed it, failed)
                    raise Judged("bricked" if q is None else "unexpected", "%s: %r" % (where, e))
            if d.off:
                self.res["depth2_cut"] += 1
            data = d.data
            where += " +cut %d" % d.cut_at
        dev = self.dev(bytearray(data), 3)
        box = [None]

        def reopen(q):
            q.close()
            box[0] = st2 = storage(dev, m)
            try:
                return self.queue(st2, clock)
            except (OSError, ddq.Error) as e:
                raise Judged("bricked", "%s, reopened: %r" % (where, e))

        try:
            box[0] = st = storage(dev, m)
            q = self.queue(st, clock)
        except (OSError, ddq.Error) as e:
            raise Judged("bricked", "%s: %r" % (where, e))
        try:
            check(q, st, h, where, True)
            q = ops(q, box, h, rnd, clock, 5, reopen)
            check(q, box[0], h, where + ", written on", False, False)  # (read after the reopen)
        except (OSError, ddq.Error) as e:
            q.close()
            raise Judged("unexpected", "%s, written on: %r" % (where, e))
        q = reopen(q)
        st = box[0]
        check(q, st, h, where + ", closed and reopened")
        clock.ms += 100000  # healed: every lease and retry delay past
        n = 0
        while n < 200:
            c = q.claim(1000)
            if c is None:
                break
            if q.ack(c.seq):
                h.acks.append(c.seq)
            n += 1
        self.res["drained"] += n
        live = check(q, st, h, where + ", drained")
        ended = {}
        for s in h.acks + h.quar:
            ended[s] = 1
        for s in live:
            if live[s] in ("available", "claimed"):
                q.close()
                raise Judged("stuck", "%s: seq %d %s after the drain" % (where, s, live[s]))
        for s in h.enq:
            if s not in ended and live.get(s) not in ("acked", "quarantined", None):
                q.close()
                raise Judged("stuck", "%s: seq %d reached no end" % (where, s))
        q.close()
        a, e = m[0] * m[6], m[0] * (m[1] + m[6])  # the region's bytes; the rest reads erased
        if dev.data[0:a].rstrip(b"\xff") or dev.data[e:].rstrip(b"\xff"):
            raise Judged("unexpected", "%s: a write outside the region" % where)

    def one(self, data, h, k, draw):
        try:
            self.judge(data, h, k, draw)
        except Exception as e:  # Judged, or anything else the judge raised: unexpected
            cat, detail = "unexpected", "seed %d event %d %s: %r" % (self.seed, k, draw, e)
            if isinstance(e, Judged):
                cat, detail = e.cat, e.detail
            self.res[cat] += 1
            if len(self.res["fail"]) < 5:
                self.res["fail"].append({"category": cat, "detail": detail, "seed": self.seed})
            if self.verbose:
                print(cat, detail)
        self.res["flash_cut_states"] += 1

    def run(self, every):
        log, hist = self.record()
        self.res["events"] = len(log)
        rep = self.dev(None)
        kinds = self.res["kinds"]
        off = self.seed % every
        for k in range(len(log)):
            a, buf, mark = log[k]
            kind = classify(self.mode, rep.data, a, buf)
            pick = k % every == off or kind not in kinds  # every EVERY-th, and each kind's first
            if pick:
                kinds[kind] = kinds.get(kind, 0) + 1
                self.res["sampled"] += 1
                cut = self.dev(bytearray(rep.data), self.seed * 1000003 + k)
                cut.cut_at = 1
                try:
                    if buf is None:
                        cut.erase(a)
                    else:
                        cut.program(a, buf)
                except OSError:
                    pass
                if not cut.off:
                    raise Judged("unexpected", "event %d: the cut never came" % k)
                self.one(cut.data, hist.upto(mark), k, "torn")
            if buf is None:
                rep.erase(a)
            else:
                rep.program(a, buf)
            if pick:
                self.one(bytes(rep.data), hist.upto(mark), k, "complete")
        return self.res


SUMS = ("flash_cut_states", "events", "sampled", "depth2", "depth2_cut", "drained") + BAD


def main(argv):
    verbose = "-v" in argv
    argv = [x for x in argv if x != "-v"]
    first, count, nops = int(argv[0]), int(argv[1]), int(argv[2])
    every = int(argv[3]) if len(argv) > 3 else 1
    out = {"seeds": [first, first + count], "modes": {}, "kinds": {}, "fail": []}
    for k in SUMS:
        out[k] = 0
    for seed in range(first, first + count):
        try:
            res = Run(seed, nops, verbose).run(every)
        except Judged as e:  # the harness itself (a cut that never came)
            res = {"unexpected": 1, "fail": [{"category": e.cat, "detail": e.detail}]}
        for k in SUMS:
            out[k] += res.get(k, 0)
        for k, v in res.get("kinds", {}).items():
            out["kinds"][k] = out["kinds"].get(k, 0) + v
        if "mode" in res:
            m = res["mode"]
            out["modes"][m] = out["modes"].get(m, 0) + res["flash_cut_states"]
        for f in res["fail"]:
            f["seed"] = seed
            if len(out["fail"]) < 10:
                out["fail"].append(f)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
