"""Torture part 8: liveness of the message layer at its limits (docs/RELIABILITY.md part 8).

    python tests/torture/liveness.py SEED RUNS [-v]     prints "RESULT <json>"

RUNS seeded runs (seeds SEED .. SEED+RUNS-1), each small and in memory (memfs.MemFS): an
ddq_outbox.Outbox, or for one seed in four a ddq_batch.BatchOutbox, opened with a board
profile's hold rule (boards/*.json: window and evidence_bytes; a BatchOutbox the profile's
batch_window and batch_evidence_bytes, as ddq_app opens it) over a small queue (4-7 segments of
512-1024 B), sync "always", "ack" or group commit (sync_every / sync_interval_ms), a fake wall
clock and fake ticks, max_attempts 2-4, TTLs, expired quarantine|drop, capacity
reject|drop_oldest, ordered or not, a plain send or a windowed sender (publish/poll, E25).

Chaos (6-14 rounds): puts (bursts of short-TTL messages too, and topics an MQTT broker refuses by
closing the connection), outages during which puts go on until Full, pump rounds against a
broker that is down (False, None or OSError), flaky, or up, and that answers chosen messages for
ever with a dropped connection (OSError), `Rejected`, a hang past the lease, or a reset of the
device (a power cut inside send); wall-clock jumps both ways (up to a day) and tick jumps; power
cuts between rounds (abandon without close; reopen from what the storage durably holds: the
POSIX model's "all unsynced lost" or LittleFS's "durable at sync and close", crash.Sim) and
clean reboots.

Heal: the network is up for every message but the chosen ones, the wall clock is set to the
latest time it showed, and each round moves it (and the ticks) on by lease_ms + max_retry_ms + 1
(every lease lapsed, every backoff passed), then pumps once (budget B = 8). The bound on those
rounds: ceil(P / B) + 2·A·(F + 1) + 2, P = messages (a BatchOutbox's readings, those of its
open batch too) pending when the heal starts, F = those the broker fails for ever, A =
max_attempts (each failing message is dead-lettered after A attempts; a reset costs up to two
rounds an attempt: the reboot, then the lapsed claim's backoff; the F + 1: a message nacked with
a failing one in the same window, and a round to settle).

Then checks: the outbox holds nothing pending; every admitted message (put returned; under
group commit or in a BatchOutbox's open batch, only what a power cut left in the queue) was
delivered (send returned True / the window's poll confirmed it), is a dead letter
(dead_letters(), a batch item's readings decoded), or vanished with a counted drop (the drops
not otherwise explained are at most the sum of the counters dropped, expired, rejected and
unpublishable, plus the other classes of dead_dropped_by_reason, over every open); an open
batch the queue refuses at the end with nothing pending (Full: dead letters fill it) is not
stuck; a windowed failure="stop" run pumps at a window of one after a failed round, as `ddq
replay` does (E26); nothing delivered was never put; put raised nothing but Full
(and InvalidArgument for a refused topic), pump/get/tick/stats/dead_letters nothing at all.
Counts: stuck (runs where an admitted message reached no end within the bound), raised (runs
where a call raised what the docs do not allow), phantom (a delivery of something never put).
The first failures keep their seed: `python tests/torture/liveness.py SEED 1 -v` replays one.
"""

import errno
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "port"))
sys.path.append(os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "host"))  # ddqhost.replay: `ddq replay`'s Outbox (E26)

import crash  # noqa: E402
import memfs  # noqa: E402
import tmodel  # noqa: E402

import ddq  # noqa: E402
import ddq_batch  # noqa: E402
import ddq_outbox  # noqa: E402
from ddqhost import replay  # noqa: E402

BUDGET = 8  # messages one heal pump may send
CLOCK0 = tmodel.CLOCK0
BAD_TOPICS = ("a\x01b", "a\nb", "a\x7fb", "a\x85b", "a\uffffb")  # mosquitto closes on these
DAY = 86400000


def profiles():
    """The board profiles with a hold rule: (name, window, evidence, batch_window, batch_ev)."""
    out = []
    d = os.path.join(ROOT, "boards")
    for n in sorted(os.listdir(d)):
        if n.endswith(".json"):
            with open(os.path.join(d, n)) as f:
                p = json.load(f)
            if p.get("window"):
                w, e = p["window"], p.get("evidence_bytes", 1024)
                out.append(
                    (p["board"], w, e, p.get("batch_window", w), p.get("batch_evidence_bytes", e))
                )
    return out


PROFILES = profiles()


class Hung(BaseException):
    """Raised by the watchdog: one run used HANG_S seconds of CPU (runs use 10-300 ms): a call
    that never returns. CPU time (ITIMER_PROF), so a loaded machine does not trip it; a
    BaseException, so that no `except Exception` swallows it."""


HANG_S = float(os.environ.get("DDQ_LIVENESS_HANG_S", "3"))


def _alarm(signum, frame):
    raise Hung()


class PowerCut(BaseException):
    """Raised by the broker model: the device resets while this message is being sent (a
    BaseException: pump must not catch it as a failed send)."""


class Ticks:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t & 0x3FFFFFFF

    def advance(self, ms):
        self.t += ms


def ident(payload):
    b = bytes(payload)
    i = b.find(b"|")
    return int(b[:i]) if i > 0 else -1


class Broker:
    """The far end: down (not now), flaky, or up; chosen ids fail for ever."""

    def __init__(self, run):
        self.run = run
        self.up = True
        self.flaky = 0  # percent of sends that fail with a dropped connection while up
        self.fail = {}  # id -> "drop" | "reject" | "hang" | "reset"
        self.delivered = set()
        self.sends = 0

    def verdict(self, m):
        # None: delivered; else what happens: "down", "drop", "reject", "hang", "reset"
        i = ident(m.payload)
        if not self.up:
            return "down"
        f = self.fail.get(i)
        if f is None and m.topic in BAD_TOPICS:
            f = "drop"
        if f is not None:
            return f
        if self.flaky and self.run.rng.below(100) < self.flaky:
            return "drop"
        return None

    def send(self, m):  # an E17 send
        self.sends += 1
        v = self.verdict(m)
        if v is None:
            self.delivered.add(ident(m.payload))
            return True
        if v == "down":
            k = self.run.rng.below(3)
            if k == 2:
                raise OSError(errno.ECONNREFUSED, "down")
            return None if k else False
        if v == "drop":
            raise OSError(errno.ECONNRESET, "connection closed by the broker")
        if v == "reject":
            raise ddq_outbox.Rejected("broker refuses it")
        if v == "hang":
            self.run.clock.advance(self.run.lease + 1)  # past the lease, then a timeout
            raise OSError(errno.ETIMEDOUT, "no PUBACK")
        raise PowerCut()


class Window:
    """A windowed sender (E25) over the same broker: publish, poll, inflight_max."""

    def __init__(self, broker, w):
        self.b, self.inflight_max, self.timeout_ms = broker, w, 5000
        self.fl = []  # [(seq, verdict, id)] in publish order
        self.closed = False

    def publish(self, m, dup=False):
        self.b.sends += 1
        v = self.b.verdict(m)
        if v == "down":
            self.fl, self.closed = [], False
            raise OSError(errno.ECONNREFUSED, "down")
        if v == "reject":
            raise ddq_outbox.Rejected("broker refuses it")
        if v == "reset":
            raise PowerCut()
        self.fl = [f for f in self.fl if f[0] != m.seq] + [(m.seq, v, ident(m.payload))]

    def poll(self, timeout_ms):
        if self.closed:
            self.closed = False
            raise OSError(errno.ECONNRESET, "connection closed by the broker")
        out = []
        for seq, v, i in self.fl:
            if v == "drop":  # PUBACKs before it arrive; then the connection closes
                self.fl = []
                if out:
                    self.closed = True
                    return out  # the next poll sees the close
                raise OSError(errno.ECONNRESET, "connection closed by the broker")
            if v == "hang":
                continue
            out.append(seq)
            self.b.delivered.add(i)
        hung = [f for f in self.fl if f[1] == "hang"]
        if hung:
            self.b.run.clock.advance(timeout_ms)
        self.fl = hung
        return out

    def forget(self, seq):
        self.fl = [f for f in self.fl if f[0] != seq]


class Run:
    def __init__(self, seed, verbose=False):
        self.seed, self.verbose = seed, verbose
        r = self.rng = tmodel.Rng(seed ^ 0x11FE)
        self.batch = r.below(4) == 0
        prof = PROFILES[r.below(len(PROFILES))]
        self.profile = prof[0]
        w, ev = (prof[3], prof[4]) if self.batch else (prof[1], prof[2])
        self.sync = ("always", "ack", "every", "interval")[r.below(4)]
        self.model = ("posix", "lfs")[r.below(2)]
        # A small queue sized around the profile's reserve (H2: 72·window + evidence_bytes
        # besides the data): room for about 4-16 messages of 60-110 B beyond it.
        seg = (512, 768, 1024)[r.below(3)]
        room = 72 * w + ev + 170 + 85 * (4 + r.below(13))
        self.qopts = {
            "segment_bytes": seg,
            "max_payload_bytes": 200,
            "max_items": 1000,
            "max_segments": max(3, -(-room // (seg - 170))),
            "window": w,
            "evidence_bytes": ev,
        }
        if r.below(2):
            self.qopts["reclaim_step"] = 16
        if self.sync in ("always", "ack"):
            self.qopts["sync"] = self.sync
        self.lease = (5000, 30000)[r.below(2)]
        self.max_retry = (10000, 60000, 300000)[r.below(3)]
        self.attempts = 2 + r.below(3)
        self.obopts = {
            "lease_ms": self.lease,
            "min_retry_ms": 1000,
            "max_retry_ms": self.max_retry,
            "max_attempts": self.attempts,
            "expired": ("quarantine", "drop")[r.below(2)],
            "capacity": ("reject", "drop_oldest")[r.below(4) == 0],
            "ordered": r.below(4) == 0,
            "seed": seed & 0xFFFFFFFF,
        }
        if r.below(8) == 0:
            # `ddq replay`'s failure rule (E26): a failed send is retried at once, the round
            # ends; issue 35 #2: a connection drop must still count toward max_attempts
            self.obopts["failure"] = "stop"
        if self.sync == "every":
            self.obopts["sync_every"] = 2 + r.below(8)
        elif self.sync == "interval":
            self.obopts["sync_interval_ms"] = 1000 + r.below(4000)
        if self.batch:
            self.obopts["batch_ms"] = 5000
            self.obopts["batch_bytes"] = 160
        self.windowed = r.below(4) == 0
        self.clock = tmodel.Clock(CLOCK0)
        self.ticks = Ticks(7 << 20)
        self.max_seen = CLOCK0
        self.broker = Broker(self)
        self.window = 4 + r.below(13) if self.windowed else 1
        self.sender = Window(self.broker, self.window) if self.windowed else self.broker.send
        self.files, self.dirs = {}, ["/q"]
        self.next_id = 1
        self.put_ok = {}  # id -> seq its put returned (0: a reading in the open batch)
        self.admitted = set()
        self.counted = 0  # dropped + expired + rejected + unpublishable, over every open
        self.opens = 0
        self.cuts = self.reboots = self.fulls = 0
        self.raised = []  # (where, exception text)
        self.log = []

    # -- the storage and the outbox's lifetime --
    def open(self):
        memfs.MemFS.Locked = ddq.Locked
        self.fs = memfs.MemFS(self.files, self.dirs, record=True, can_truncate=self.seed & 1)
        cls = ddq_batch.BatchOutbox if self.batch else ddq_outbox.Outbox
        if "failure" in self.obopts:  # `ddq replay`'s failure rule is its Outbox's (E26)
            cls = replay.outbox_class(cls)
        self.ob = cls(
            "/q",
            clock=self.clock,
            ticks=self.ticks,
            storage=self.fs,
            **dict(self.obopts, **self.qopts),
        )
        self.opens += 1

    def scan(self):
        """The ids of every message the queue holds unacked (batch items: their readings)."""
        q, out = self.ob.queue, set()
        for it in q.items():
            if it.state != "acked":
                out.update(self.ids_of(q.read(it.seq)))
        return out

    def ids_of(self, raw):
        try:
            m = ddq_outbox.decode_envelope(raw)
        except ddq_outbox.BadEnvelope:
            return []
        if m.key in (ddq_batch.KEY, ddq_batch.KEY_B):
            return [ident(r.payload) for r in ddq_batch.entries(m)]
        return [ident(m.payload)]

    def leave(self):
        c = self.ob.counters
        self.counted += c["dropped"] + c["expired"] + c["rejected"] + c["unpublishable"]
        # dead letters dropped for want of room (E32), of the classes not counted above
        # (max_attempts, corrupt, unauthenticated): stats()["dead_dropped_by_reason"]
        for k, v in self.ob._lost.items():
            if k not in ("expired", "rejected", "unpublishable"):
                self.counted += v

    def cut(self):
        # A power cut: abandon the outbox without close; reopen from what was durable.
        self.leave()
        sim = crash.Sim(self.files, self.dirs)
        for e in self.fs.log:
            sim.apply(e)
        if self.model == "posix":
            names, dirs = sim.dur_names, sim.dur_dirs
            self.files = crash.Sim._files(names, dirs, sim.dur_sync)
        else:
            dirs = sim.dirs
            self.files = crash.Sim._files(sim.names, dirs, sim.dur_close)
        self.dirs = sorted(d for d in dirs if d != "/")
        self.cuts += 1
        self.open()
        if self.batch or self.sync not in ("always", "ack"):
            # A put that was not durable may vanish (group commit: seq > durable_seq; a
            # BatchOutbox's open batch, or a batch written after the last sync): forgotten
            # unless the queue still holds it. One whose seq was durable stays admitted.
            held = self.scan()
            self.admitted = set(
                i
                for i in self.admitted
                if i in held
                or i in self.broker.delivered
                or (not self.batch and self.put_ok.get(i, 0) <= self.durable_at)
            )
            self.admitted.update(held)

    def reboot(self):
        self.leave()
        try:
            self.ob.close()
        except Exception as e:
            self.raised.append(("close", repr(e)))
        self.files, dirs = self.fs.snapshot()
        self.dirs = list(dirs) or ["/q"]
        self.reboots += 1
        self.open()

    # -- the application --
    def put(self, topic, ttl):
        i = self.next_id
        self.next_id += 1
        payload = b"%d|" % i + b"x" * self.rng.below(40)
        try:
            s = self.ob.put(topic, payload, ttl_ms=ttl)
        except ddq.Full:
            self.fulls += 1
            return False
        except ddq.InvalidArgument:
            if topic in BAD_TOPICS:
                return True  # refused at put: never admitted (an allowed fix of issue 35 #2)
            raise
        self.put_ok[i] = s
        if self.batch:  # the ids in the open batch (torture only: _open is its RAM)
            o = self.ob._open
            if o is None:
                self.open_ids = []
            elif o is not self.open_obj or s:
                self.open_ids = [i]
            else:
                self.open_ids.append(i)
            self.open_obj = o
        if topic in BAD_TOPICS:
            self.topic_bad[i] = True
        if not self.batch:
            self.admitted.add(i)
        return True

    def topic(self):
        r = self.rng.below(40)
        return BAD_TOPICS[r % len(BAD_TOPICS)] if r < 2 else ("s/t", "s/h")[r & 1]

    def step_clock(self):
        r = self.rng.below(20)
        if r == 0:
            d = (3600000, DAY)[self.rng.below(2)]  # a jump forward
        elif r == 1:
            d = -(3600000, DAY, 60000)[self.rng.below(3)]  # a jump back
        else:
            d = self.rng.below(2 * self.lease)
        self.clock.advance(d)
        self.max_seen = max(self.max_seen, self.clock.t)
        r = self.rng.below(16)
        self.ticks.advance(
            (1 << 29) + self.rng.below(1000) if r == 0 else self.rng.below(3 * self.lease)
        )

    def pump(self, budget):
        ob = self.ob
        f0 = ob.counters["failed"]
        try:
            ob.pump(self.sender, budget)
        except PowerCut:
            self.durable_at = self.ob.durable_seq
            self.cut()
        except Exception as e:
            self.raised.append(("pump", "%s: %s" % (type(e).__name__, e)))
        self.max_seen = max(self.max_seen, self.clock.t)
        if self.windowed and self.obopts.get("failure") == "stop":
            # `ddq replay`'s rule (E26): a round that failed is followed by rounds at a window
            # of one (a loss then pins one message: its attempt, E10) until one does not fail
            self.sender.inflight_max = 1 if ob.counters["failed"] > f0 else self.window

    def chaos(self):
        r = self.rng
        for _rnd in range(3 + r.below(6)):
            self.step_clock()
            k = r.below(10)
            if k < 2:  # an outage: puts until Full
                self.broker.up = False
                for _ in range(40):
                    if not self.put(self.topic(), 0 if r.below(3) else 60000):
                        break
            elif k < 4:  # a burst of short-TTL messages (they expire together)
                for _ in range(8 + r.below(16)):
                    self.put("s/t", 1000 + r.below(5000))
            else:
                for _ in range(r.below(7)):
                    self.put(self.topic(), 0 if r.below(4) else 1000 + r.below(120000))
            # some messages the broker fails for ever
            for _ in range(r.below(3)):
                if self.next_id > 1:
                    i = 1 + r.below(self.next_id - 1)
                    self.broker.fail[i] = ("drop", "reject", "hang", "reset")[r.below(4)]
            k = r.below(10)
            self.broker.up = k >= 3
            self.broker.flaky = 30 if k in (3, 4) else 0
            self.pump(1 + r.below(16))
            k = r.below(8)
            if k == 0:
                self.durable_at = self.ob.durable_seq
                self.cut()
            elif k == 1:
                self.reboot()

    def pending(self):
        n = self.ob.qsize()
        if self.batch and self.ob._open is not None:  # torture only: the open batch in RAM
            n += 1
        return n

    def heal(self):
        self.broker.up, self.broker.flaky = True, 0
        self.clock.t = self.max_seen
        # P counts messages (a BatchOutbox's readings: each is its own Message, B4)
        held = self.scan()
        P = len(held) + (self.ob._open[8] if self.batch and self.ob._open else 0)
        # the failing ones among the pending (BatchOutbox: items counted by their readings; a
        # batch written since the last power cut is admitted now, and its readings, and those
        # of the open batch, count in F too)
        if self.batch:
            self.admitted.update(held)
            if self.ob._open is not None and self.ob._open is self.open_obj:
                held.update(self.open_ids)
        F = len([i for i in self.admitted | held if i in self.broker.fail or i in self.topic_bad])
        self.bound = -(-P // BUDGET) + 2 * self.attempts * (F + 1) + 2
        step = self.lease + self.max_retry + 1
        self.rounds = 0
        for _ in range(self.bound):
            self.rounds += 1
            self.clock.advance(step)
            self.max_seen = self.clock.t
            self.ticks.advance(step)
            self.pump(BUDGET)
            if not self.pending():
                break

    def check(self):
        bad = []
        ob = self.ob
        try:
            st = ob.stats()
            dead = ob.dead_letters()
        except Exception as e:
            self.raised.append(("stats", repr(e)))
            return [("raised", "stats/dead_letters raised %r" % e)]
        ended = set(self.broker.delivered)
        self.dead = len(dead)
        for m in dead:
            if m.key in (ddq_batch.KEY, ddq_batch.KEY_B):
                ended.update(ident(r.payload) for r in ddq_batch.entries(m))
            else:
                ended.add(ident(m.payload))
        pend = self.pending()
        if pend == 1 and self.batch and not st["pending"]:
            # The open batch was never admitted (B1, B3: durable once written). The queue holds
            # nothing pending, so if it still refuses the batch (Full: dead letters kept by the
            # hold rule fill it until an operator purges them, SPEC H4), put says so (Full): not
            # stuck, as an Outbox.put that raised Full is not.
            try:
                ob.flush()
            except ddq.Full:
                pend, self.open_full = 0, 1
            pend = pend and self.pending()
        if pend or st["pending"]:
            left = []
            for it in ob.queue.items():
                if it.state in ("available", "claimed"):
                    ids = self.ids_of(ob.queue.read(it.seq))
                    left.append((it.seq, it.state, it.attempts, ids))
                    for i in ids:
                        k = self.broker.fail.get(i, "topic" if i in self.topic_bad else None)
                        self.left_kinds.add(k or "ok")
            bad.append(
                (
                    "stuck",
                    "%d pending after %d rounds (bound %d): %r"
                    % (pend, self.rounds, self.bound, left[:6]),
                )
            )
        gone = sorted(i for i in self.admitted if i not in ended)
        self.leave()
        if len(gone) > self.counted:
            bad.append(
                (
                    "stuck",
                    "%d admitted messages neither delivered, dead-lettered nor counted "
                    "(counted drops %d): %r" % (len(gone), self.counted, gone[:8]),
                )
            )
        phantom = sorted(i for i in self.broker.delivered if i not in self.put_ok)
        if phantom:
            bad.append(("phantom", "delivered but never put: %r" % phantom[:8]))
        if self.raised:
            bad.append(("raised", "%d unexpected: %r" % (len(self.raised), self.raised[:3])))
        return bad

    def setup(self):
        self.topic_bad = {}  # ids put with a topic the broker closes the connection on
        self.left_kinds = set()  # what the broker does to the messages left pending (check)
        self.durable_at = 0  # durable_seq at the last power cut
        self.open_ids, self.open_obj = [], None  # the open batch's ids, and its list
        self.open_full = 0  # 1: the open batch is left unwritten, the queue Full of dead letters
        self.open()

    def go(self):
        self.setup()
        self.chaos()
        self.heal()
        return self.check()

    def describe(self):
        return {
            "seed": self.seed,
            "kind": "BatchOutbox" if self.batch else "Outbox",
            "profile": self.profile,
            "sync": self.sync,
            "model": self.model,
            "windowed": self.windowed,
            "queue": self.qopts,
            "outbox": self.obopts,
            "left_pending": sorted(k or "" for k in self.left_kinds),
        }


def cause(bad, run):
    """A short class of a failed run, for the counts by cause."""
    text = " ".join(d for _c, d in bad)
    if "hung:" in text:
        return "hung"
    if "('pump', 'Full" in text:
        return "pump_full"
    if "('close', \"Full" in text:
        return "close_full"
    if "Limit" in text:
        return "pump_limit"
    if any(c == "raised" for c, _d in bad):
        return "raised_other"
    kinds = run.left_kinds  # what the broker does to the messages left pending
    if run.obopts.get("failure") == "stop" and kinds & set(("drop", "topic", "hang")):
        return "stop_no_max_attempts"
    if "reset" in kinds and run.sync != "always":
        return "reset_sync_%s" % run.sync
    return "stuck_other"


def run_seeds(seed0, n, verbose=False, max_fail=5):
    res = tmodel.counters(
        "runs stuck raised phantom admitted delivered dead counted_drops cuts reboots fulls "
        "rounds rounds_max bound_max batch windowed open_full",
        seed=seed0,
    )
    res["by_cause"] = {}
    signal.signal(signal.SIGPROF, _alarm)
    for seed in range(seed0, seed0 + n):
        run = Run(seed, verbose)
        signal.setitimer(signal.ITIMER_PROF, HANG_S)
        try:
            try:
                bad = run.go()
            finally:  # (a Hung after go() returned, before this, is still caught below)
                signal.setitimer(signal.ITIMER_PROF, 0)
        except Hung:
            import traceback

            tb = [f for f in traceback.extract_tb(sys.exc_info()[2]) if f.name != "_alarm"]
            where = ["%s:%d %s" % (os.path.basename(f.filename), f.lineno, f.name) for f in tb]
            bad = [
                ("stuck", "hung: a call did not return in %g s of CPU: %s" % (HANG_S, where[-4:]))
            ]
            run.rounds = getattr(run, "rounds", 0)
            run.bound = getattr(run, "bound", 0)
        except Exception as e:  # the harness's own error, or a call outside pump that raised
            import traceback

            bad = [("raised", "run raised %s: %s" % (type(e).__name__, e))]
            if verbose:
                traceback.print_exc()
            run.rounds = getattr(run, "rounds", 0)
            run.bound = getattr(run, "bound", 0)
        res["runs"] += 1
        res["batch"] += run.batch
        res["windowed"] += run.windowed
        res["admitted"] += len(run.admitted)
        res["delivered"] += len(run.broker.delivered)
        res["cuts"] += run.cuts
        res["reboots"] += run.reboots
        res["fulls"] += run.fulls
        res["dead"] += getattr(run, "dead", 0)
        res["counted_drops"] += run.counted
        res["open_full"] += getattr(run, "open_full", 0)
        res["rounds"] += run.rounds
        res["rounds_max"] = max(res["rounds_max"], run.rounds)
        res["bound_max"] = max(res["bound_max"], run.bound)
        cats = set(c for c, _d in bad)
        for c in ("stuck", "raised", "phantom"):
            if c in cats:
                res[c] += 1
        if bad:
            k = cause(bad, run)
            res["by_cause"][k] = res["by_cause"].get(k, 0) + 1
            if len(res["fail"]) < max_fail:
                rec = run.describe()
                rec["category"] = sorted(cats)[0]
                rec["cause"] = k
                rec["detail"] = " | ".join(d for _c, d in bad)[:600]
                res["fail"].append(rec)
        if verbose:
            print(json.dumps(run.describe()), bad)
    return res


def main(argv):
    import time

    seed, n = int(argv[0]), int(argv[1])
    t = time.process_time()
    res = run_seeds(seed, n, "-v" in argv)
    res["cpu_s"] = round(time.process_time() - t, 2)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main(sys.argv[1:])
