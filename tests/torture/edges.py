"""Parts 1c and 6: a queue ddq wrote must keep opening after more writes (docs/RELIABILITY.md).

  continued states (part 1c, from crash.Judge): a crash state recovered by the judged open is
      written on by a seeded continuation (rotations with small and large records, claims, acks,
      retries, compactions, staged builds through reclaim_step, reopens, some with a larger
      segment_bytes), closed, reopened with plain options and compared with the model.
  ENOSPC points (part 6, run_enospc): a workload on a MemFS whose k-th mutating call (append,
      create, rename, sync, sync_dir, truncate, mkdir; the manifest's writes among them) fails
      with ENOSPC, the disk staying full for writes and creates until freed. Each point is judged
      as the process left it and as a power cut right then leaves it under the POSIX (all unsynced
      data lost; directory ops only through sync_dir), LittleFS and FAT models: reopened while full
      (IOFailure allowed), then with the space freed (must open to the state before or after the
      op that failed), continued, closed and reopened (must equal the model).
A plain open refused after only ddq's own writes, cuts and ENOSPC counts as `bricked` (must be 0).
"""

import memfs
import tmodel

ENOSPC = 28
LEASE = tmodel.LEASE_MS
LIVE = ("available", "claimed", "quarantined")


def model_of(state):
    """{seq: (state, attempts, payload)} of a recovered_state tuple, acked items left out."""
    return {t[0]: (t[1], t[2], t[5]) for t in state if t[1] != "acked"}


def view(q):
    return model_of(tmodel.recovered_state(q))


def drive(ddq, q, model, rng, n, hi, mx):
    """n seeded operations on q, mirrored in model ({seq: [state, attempts, payload]}); mx: the
    largest payload. Returns the highest seq the queue has given; raises AssertionError on a
    wrong answer."""
    for _ in range(n):
        k = rng.below(12)
        if k < 5:
            size = 1 + rng.below(8) if rng.below(2) else max(1, mx // 2 + rng.below(mx // 2 + 1))
            p = rng.bytes(size)
            try:
                seq = q.enqueue(p)
            except (ddq.Full, ddq.Limit):
                continue
            if seq <= hi:
                raise AssertionError("reused_seq: enqueue gave %d, highest before %d" % (seq, hi))
            hi = seq
            model[seq] = ["available", 0, p]
        elif k < 7:
            c = q.claim(LEASE)
            if c is not None:
                m = model.get(c.seq)
                if m is None or m[0] != "available":
                    raise AssertionError("claim gave seq %d, the model has %r" % (c.seq, m))
                m[0] = "claimed"
        elif k < 10:
            cl = sorted(s for s in model if model[s][0] == "claimed")
            if not cl:
                continue
            s = cl[rng.below(len(cl))]
            if k < 9:
                q.ack(s)
                del model[s]
            else:
                q.retry(s, 0)
                model[s][0] = "available"
                model[s][1] += 1
        else:
            q.compact()
    return hi


def same(model, got):
    want = {s: (v[0], v[1], v[2]) for s, v in model.items()}
    if want == got:
        return None
    lost = sorted(s for s in want if s not in got)
    extra = sorted(s for s in got if s not in want)
    cat = "lost" if lost else ("resurrected" if extra else "unexpected")
    diff = sorted(s for s in want if s in got and want[s] != got[s])
    return (
        cat,
        "model and queue differ: lost %r, extra %r, changed %r" % (lost[:5], extra[:5], diff[:5]),
    )


def continue_state(ddq, fs, path, opts, state, seed, clock, grow=False):
    """Continue writing on a recovered directory (fs) from its recovered state, close, reopen
    and compare. Returns [(category, detail)]; a refused open is `bricked`."""
    model = {s: list(v) for s, v in model_of(state).items()}
    hi = max([0] + [t[0] for t in state])
    kw = tmodel.queue_opts(opts)
    rng = tmodel.Rng(seed)
    for rnd in range(2):
        if grow and rnd == 1:  # a later open with a larger segment_bytes (R15 allows it, F7 holds)
            kw = dict(kw)
            kw["segment_bytes"] = kw["segment_bytes"] * 2
            kw["max_payload_bytes"] = kw.get("max_payload_bytes", 64) * 2
        try:
            q = ddq.Queue(path, storage=fs, clock=clock, **kw)
        except Exception as e:
            return [
                ("bricked", "open %d of the continuation: %s: %s" % (rnd, type(e).__name__, e))
            ]
        try:
            hi = max(hi, q.stats().next_seq - 1)
            hi = drive(ddq, q, model, rng, 6 + rng.below(8), hi, kw.get("max_payload_bytes", 64))
        except AssertionError as e:
            msg = str(e)
            return [("reused_seq" if msg.startswith("reused_seq") else "unexpected", msg)]
        except Exception as e:
            return [("unexpected", "continuation raised %s: %s" % (type(e).__name__, e))]
        finally:
            try:
                q.close()
            except Exception:
                pass
    try:
        q = ddq.Queue(path, storage=fs, clock=clock, **kw)
    except Exception as e:
        return [("bricked", "reopen after the continuation: %s: %s" % (type(e).__name__, e))]
    try:
        d = same(model, view(q))
    finally:
        q.close()
    return [d] if d else []


class FullFS(memfs.MemFS):
    """MemFS whose `at`-th mutating call fails with ENOSPC (a write first lands a prefix); from
    then on, until `full` is cleared, every write and create fails the same way (nothing lands).
    Removes, renames, syncs and reads keep working after the first failure."""

    MUT = ("create", "write", "sync", "rename", "sync_dir", "truncate", "mkdir", "remove")

    def __init__(self, at=-1, cut=0, **kw):
        memfs.MemFS.__init__(self, **kw)
        self.at = at
        self.cut = cut
        self.mut = 0
        self.full = False
        self.fired = 0

    def _point(self, name):
        self.mut += 1
        if self.mut == self.at:
            self.full = True
            self.fired += 1
            return True
        return False

    def _err(self):
        return OSError(ENOSPC, "no space left on device")

    def open(self, path, mode):
        if mode != "rb" and path not in self.names:
            if self._point("create") or self.full:
                self._tick("open")
                raise self._err()
        return memfs.MemFS.open(self, path, mode)

    def write(self, handle, buf):
        if self._point("write"):
            if self.cut and len(buf) > 1:
                memfs.MemFS.write(self, handle, bytes(buf)[: self.cut % len(buf)])
            raise self._err()
        if self.full:
            self._tick("write")
            raise self._err()
        return memfs.MemFS.write(self, handle, buf)

    def remove(self, path):
        self.mut += 1  # frees space: never fails, but counts as a point (the numbering stays)
        return memfs.MemFS.remove(self, path)


# the other mutating calls: the fault at the chosen point, else as MemFS
memfs.with_failing(FullFS, "_point", "sync rename sync_dir truncate mkdir")


def enospc_opts(seed):
    opts = tmodel.params(seed, "always")
    r = tmodel.Rng(seed ^ 0xF011)
    if r.below(3) == 0:
        opts["index_bytes"] = 1
    return opts


def _workload(ddq, fs, path, opts, seed, nops, clock, hi0):
    """Run the seeded workload until it ends or fails with IOFailure. Returns (model before the
    failing op, the op's name, its target seq or None, hi, IOFailure seen)."""
    model = {}
    rng = tmodel.Rng(seed)
    hi = hi0
    try:
        q = ddq.Queue(path, storage=fs, clock=clock, **tmodel.queue_opts(opts))
    except ddq.IOFailure:
        return model, "open", None, hi, True
    try:
        for _ in range(nops):
            before = {s: list(v) for s, v in model.items()}
            try:
                hi = drive(ddq, q, model, rng, 1, hi, opts.get("max_payload_bytes", 64))
            except ddq.IOFailure:
                return before, "op", None, hi, True
        return model, None, None, hi, False
    finally:
        try:
            q.close()
        except ddq.IOFailure:
            pass


def _allowed(before, got):
    """The failed op changed at most one item, by one of ddq's transitions (or added a new one)."""
    want = {s: (v[0], v[1], v[2]) for s, v in before.items()}
    if got == want:
        return None
    diff = [s for s in set(want) | set(got) if want.get(s) != got.get(s)]
    if len(diff) == 1:
        s = diff[0]
        a, b = want.get(s), got.get(s)
        if (
            a is None
            and b is not None
            and b[0] == "available"
            and b[1] == 0
            and s > max([0] + list(want))
        ):
            return None  # the enqueue in flight landed
        if a is not None and b is None and a[0] == "claimed":
            return None  # the ack in flight landed
        if (
            a is not None
            and b is not None
            and a[2] == b[2]
            and (
                (a[0], b[0], b[1])
                in (("available", "claimed", a[1]), ("claimed", "available", a[1] + 1))
            )
        ):
            return None  # the claim or retry in flight landed
    lost = sorted(s for s in want if s not in got)
    return (
        "lost" if lost else "unexpected",
        "after ENOSPC: model %r, queue %r" % (sorted(want.items())[:4], sorted(got.items())[:4]),
    )


def _views(fs, crash_mod, pre):
    """(model, files, dirs): the process's own view, then a power cut right now (POSIX: unsynced
    data and directory ops lost; LittleFS; FAT) from the recorded log."""
    files, dirs = fs.snapshot()
    yield ("live", files, set(dirs) | set(pre))
    sim = crash_mod.Sim(dirs=pre)
    for e in fs.log:
        sim.apply(e)
    for model in ("posix", "lfs", "fat"):
        for variant, f2, d2, holes in sim.states(model):
            if holes or variant[0] in "TR" or (model == "posix" and variant != "A/d0"):
                continue
            yield (model, f2, d2)


def run_enospc(ddq, seed, nops, stride=1, max_fail=5, path="/q"):
    import crash

    memfs.MemFS.Locked = ddq.Locked
    can_truncate = seed % 2 == 0
    opts = enospc_opts(seed)
    pre = (path,)
    res = {
        "seed": seed,
        "points": 0,
        "states": 0,
        "by_model": {},
        "full_opens": 0,
        "full_refused": 0,
        "continued": 0,
        "bricked": 0,
        "lost": 0,
        "resurrected": 0,
        "reused_seq": 0,
        "unexpected": 0,
        "fail": [],
    }
    ref = FullFS(dirs=pre, record=True, can_truncate=can_truncate)
    _workload(ddq, ref, path, opts, seed, nops, tmodel.Clock(), 0)
    total = ref.mut
    seen = set()

    def bad(cat, detail, at, where):
        point = {"seed": seed, "point": at, "of": total, "view": where}
        tmodel.tally(res, [(cat, detail)], max_fail, point, 500)

    for at in range(1, total + 1, stride):
        fs = FullFS(at=at, cut=at * 7 + 3, dirs=pre, record=True, can_truncate=can_truncate)
        clock = tmodel.Clock()
        before, _what, _t, hi, _failed = _workload(ddq, fs, path, opts, seed, nops, clock, 0)
        if not fs.fired:
            continue
        res["points"] += 1
        for where, files, dirs in _views(fs, crash, pre):
            h = crash.state_hash(files, dirs)
            if (h, where == "live") in seen:
                continue
            seen.add((h, where == "live"))
            res["states"] += 1
            res["by_model"][where] = res["by_model"].get(where, 0) + 1
            kw = tmodel.queue_opts(opts)
            # still full: the open may need room (an R12 copy, the lock file): IOFailure only
            full = FullFS(files=files, dirs=dirs, can_truncate=can_truncate)
            full.full = True
            res["full_opens"] += 1
            try:
                ddq.Queue(path, storage=full, clock=clock, **kw).close()
            except ddq.IOFailure:
                res["full_refused"] += 1
            except Exception as e:
                bad("bricked", "open on the full disk: %s: %s" % (type(e).__name__, e), at, where)
                continue
            f2, d2 = full.snapshot()
            fs2 = memfs.MemFS(f2, set(d2) | set(dirs), can_truncate=can_truncate)
            try:
                q = ddq.Queue(path, storage=fs2, clock=clock, **kw)
            except Exception as e:
                bad(
                    "bricked",
                    "open with the space freed: %s: %s" % (type(e).__name__, e),
                    at,
                    where,
                )
                continue
            try:
                state = tmodel.recovered_state(q)
                hi2 = max(hi, q.stats().next_seq - 1)
            finally:
                q.close()
            # sync=always: every returned op is durable in every view; the op in flight may or
            # may not have landed
            d = _allowed(before, model_of(state))
            if d is not None:
                bad(d[0], d[1], at, where)
                continue
            if hi2 < max([0] + [t[0] for t in state]):
                bad("reused_seq", "next_seq below a recovered seq", at, where)
                continue
            res["continued"] += 1
            for cat, detail in continue_state(
                ddq, fs2, path, opts, state, seed * 7919 + at, clock, grow=at % 5 == 0
            ):
                bad(cat, detail, at, where)
    return res


def natural(ddq, seeds=24, cap=256 * 1024, path="/q"):
    """Issue 25's natural reproduction: fill a small disk (random 1..1,500 B payloads,
    segment_bytes 8192) until IOFailure, reopen, free the space, enqueue 5 more, close, reopen.
    Returns {"seeds", "bricked", "lost", "fail"}; before R23 most seeds were bricked."""
    memfs.MemFS.Locked = ddq.Locked
    out = {"seeds": 0, "bricked": 0, "lost": 0, "fail": []}
    opts = {
        "segment_bytes": 8192,
        "max_payload_bytes": 1500,
        "max_items": 4096,
        "max_segments": 256,
    }
    for seed in range(1, seeds + 1):
        fs = _Capped(cap, dirs=(path,), can_truncate=seed % 2 == 0)
        clock = tmodel.Clock()
        rng = tmodel.Rng(seed)
        q = ddq.Queue(path, storage=fs, clock=clock, **opts)
        done = 0
        for _ in range(4096):
            try:
                q.enqueue(rng.bytes(1 + rng.below(1500)))
                done += 1
                if seed % 3 == 0 and rng.below(4) == 0:  # acks mixed in
                    c = q.claim(LEASE)
                    if c is not None:
                        q.ack(c.seq)
                        done -= 1
            except ddq.IOFailure:
                break
        try:
            q.close()
        except ddq.IOFailure:
            pass
        out["seeds"] += 1
        try:
            ddq.Queue(path, storage=fs, clock=clock, **opts).close()
        except ddq.IOFailure:
            pass
        except Exception as e:
            out["bricked"] += 1
            out["fail"].append("seed %d full reopen: %s" % (seed, e))
            continue
        fs.cap = 0
        try:
            q = ddq.Queue(path, storage=fs, clock=clock, **opts)
            n = _live(q)
            for _ in range(5):
                q.enqueue(rng.bytes(1 + rng.below(1500)))
            q.close()
            q = ddq.Queue(path, storage=fs, clock=clock, **opts)
            m = _live(q)
            q.close()
        except Exception as e:
            out["bricked"] += 1
            out["fail"].append("seed %d: %s: %s" % (seed, type(e).__name__, e))
            continue
        if n < done or m != n + 5:
            out["lost"] += 1
            out["fail"].append(
                "seed %d: %d returned, %d after the full reopen, %d at the end"
                % (seed, done, n, m)
            )
    return out


def _live(q):
    return sum(1 for it in q.items() if it.state != "acked")


class _Capped(memfs.MemFS):
    """MemFS of `cap` bytes in 4 KiB blocks, as a small tmpfs (cap 0: unlimited)."""

    def __init__(self, cap, **kw):
        memfs.MemFS.__init__(self, **kw)
        self.cap = cap

    def _free(self):
        used = sum((len(self.data[i]) + 4095) // 4096 for i in self.names.values())
        return self.cap // 4096 - used

    def write(self, handle, buf):
        if self.cap:
            d = self.data[self._h(handle)[0]]
            room = ((len(d) + 4095) // 4096 + self._free()) * 4096 - len(d)
            if room < len(buf):
                if room > 0:
                    memfs.MemFS.write(self, handle, bytes(buf)[:room])
                raise OSError(ENOSPC, "no space left on device")
        return memfs.MemFS.write(self, handle, buf)
