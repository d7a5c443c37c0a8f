"""Power cuts on raw NOR flash (issue 36; port/ddq_flash.py, SPEC §16 Y5): CPython.

For each seed, a random workload (enqueue, claim then ack/retry/quarantine, compact, close and
reopen; segment rotations and new generations follow) runs on a FlashStorage over the NOR model
of tests/blockdev.py, with the seed's program granularity (bytes; 256-byte pages; write-once
units of 8, 16 or 32 bytes) and write buffer. It is cut at every program and every erase in
turn, each cut twice (two draws of which bits the cut program cleared, or what state the cut
erase left). Each cut state is reopened with a second cut a few programs into the recovery
and what follows it, then reopened again and judged:

  lost         an enqueue that returned, not acked, is missing (or its payload unreadable)
  resurrected  an ack that returned is undone
  reused_seq   an enqueue after the reopen returns a seq at or below one already seen
  bricked      the reopen raised (the region does not open)

then written on (one more enqueue) and reopened once more, judged the same way.

    python tests/torture/flash_cuts.py [FIRST_SEED [LAST_SEED]]   # prints one JSON line
"""

import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(ROOT, "port"), os.path.join(ROOT, "tests")]

import blockdev  # noqa: E402
import ddq  # noqa: E402
import ddq_flash  # noqa: E402

T0 = 1767225600000
OPTS = {"segment_bytes": 700, "max_payload_bytes": 200, "max_items": 100, "max_segments": 8}
BS, BLOCKS = 1024, 20
MODES = ((0, 1), (0, 16), (256, 1), (0, 8), (0, 1), (0, 32))  # (page, unit) by seed % 6


class Clock:
    def __init__(self):
        self.ms = T0

    def __call__(self):
        return self.ms


class Judged(Exception):
    pass


def _dev(page, unit, data=None, seed=1):
    return blockdev.NORBlockDev(BS, BLOCKS, data, unit, seed, page)


def _reopen(dev, seed):
    return _dev(dev.page, dev.unit, bytearray(dev.data), seed)


def _storage(dev, buf=512):
    return ddq_flash.FlashStorage(dev, buf=buf, page=dev.page or 1, unit=dev.unit)


def workload(dev, done, seed, buf):
    """Runs seed's workload; returns when done, or raises at the cut. done: [enqueued, acked]."""
    rnd = random.Random(seed)
    clock = Clock()
    q = ddq.Queue("q", storage=_storage(dev, buf), clock=clock, **OPTS)
    try:
        for i in range(60):
            r = rnd.random()
            if r < 0.5:
                try:
                    done[0].append(q.enqueue(b"%d." % i * rnd.randint(1, 40)))
                except ddq.Full:
                    pass
            elif r < 0.8:
                c = q.claim(1000)
                if c is not None:
                    x = rnd.random()
                    if x < 0.6:
                        q.ack(c.seq)
                        done[1].append(c.seq)
                    elif x < 0.8:
                        q.retry(c.seq, 0)
                    else:
                        q.quarantine(c.seq, b"why")
            elif r < 0.9:
                q.compact()
            else:
                q.close()
                q = ddq.Queue("q", storage=_storage(dev, buf), clock=clock, **OPTS)
            clock.ms += 10
    finally:
        q.close()


def judge(dev, done, tag):
    """Opens the queue on dev, judges it against done, enqueues once more (added to done)."""
    try:
        q = ddq.Queue("q", storage=_storage(dev), clock=Clock(), **OPTS)
    except (OSError, ddq.Error) as e:
        if dev.off:
            raise
        raise Judged("bricked %s: %r" % (tag, e))
    try:
        live = {}
        for it in q.items():
            live[it.seq] = it.state
        for s in done[0]:
            if s not in live and s not in done[1]:
                raise Judged("lost %s: seq %d" % (tag, s))
            if s in live and live[s] != "acked":
                q.read(s)
        for s in done[1]:
            if live.get(s, "acked") != "acked":
                raise Judged("resurrected %s: seq %d" % (tag, s))
        top = max(done[0] + list(live) + [0])
        try:
            n = q.enqueue(b"after")
        except ddq.Full:
            return
        if n <= top:
            raise Judged("reused_seq %s: %d after %d" % (tag, n, top))
        done[0].append(n)
    finally:
        q.close()


def run_seed(seed):
    page, unit = MODES[seed % len(MODES)]
    buf = 64 if seed % 2 else 512  # 64: most records take two frames (torn DDQ records)
    dev = _dev(page, unit)
    workload(dev, [[], []], seed, buf)
    states = 0
    for k in range(1, dev.events + 1):
        for draw in (k, 7 * k + 1):
            d = _dev(page, unit, seed=draw)
            d.cut_at = k
            done = [[], []]
            try:
                workload(d, done, seed, buf)
            except (OSError, ddq.Error):
                pass
            if not d.off:
                raise Judged("cut %d of seed %d never came" % (k, seed))
            d2 = _reopen(d, draw + 5)
            d2.cut_at = 1 + draw % 9  # a second cut, in the recovery or what follows it
            tag = "seed %d cut %d draw %d" % (seed, k, draw)
            try:
                judge(d2, done, tag + " (second cut pending)")
            except (OSError, ddq.Error):
                if not d2.off:
                    raise
            d3 = _reopen(d2, 3)
            judge(d3, done, tag)
            judge(_reopen(d3, 4), done, tag + ", reopened")
            states += 1
    return states


def main(argv):
    first = int(argv[0]) if argv else 0
    last = int(argv[1]) if len(argv) > 1 else first + 4
    states = 0
    for seed in range(first, last):
        try:
            states += run_seed(seed)
        except Judged as e:
            print(json.dumps({"flash_cut_states": states, "failure": str(e)}))
            return 1
    print(json.dumps({"flash_cut_states": states, "seeds": [first, last], "failure": None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
