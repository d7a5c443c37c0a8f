"""Part 4: injected faults (CPython only).

A seeded workload runs once on MemFS to learn the method of every storage call. Then, for every
fault kind and every call index where that kind applies, the workload is run again with the fault
injected at that call, transient (that call only) or persistent (that call and every later call of
the same method, until the harness clears it). After the faulted operation the harness checks:

- write/sync faults: the operation did not report success, and the instance is fail-stopped
  (enqueue/claim raise ddq.IOFailure, stats().failed) until recover();
- recover() (fault still active when persistent, then cleared) restores a state the history allows
  (tmodel.check with the faulted op in flight); a failed open leaves no lock behind;
- no file handle stays open after close(); a crash right after the fault (durable views of the
  log, posix and LittleFS) also recovers to an allowed state.
"""

import crash
import memfs
import tmodel

import ddqfmt


def initial(seed, path="/q"):
    """Every third seed starts from a log with a torn tail, so the first recovery cuts it
    (truncate, or copy + rename) and those calls get faults too."""
    if seed % 3:
        return None, {}
    rec = ddqfmt.encode_record(ddqfmt.T_DATA, 1, 0, b"seed")
    return {path + "/" + ddqfmt.seg_name(0, 0): rec + b"DQG1torn-tail"}, {1: b"seed"}


EIO = 5
ENOSPC = 28

# kind -> (method, errno, how); how: "before" (nothing done), "half" (half the data written),
# "after" (the operation done, then the error), "partial" (FAT rename: dst removed, src kept)
KINDS = {
    "write_eio": ("write", EIO, "before"),
    "write_enospc": ("write", ENOSPC, "before"),
    "write_short_eio": ("write", EIO, "half"),
    "write_short_enospc": ("write", ENOSPC, "half"),
    "sync_eio": ("sync", EIO, "before"),
    "sync_enospc": ("sync", ENOSPC, "before"),
    "read_eio": ("read_into", EIO, "before"),
    "open_eio": ("open", EIO, "before"),
    "open_create_enospc": ("open", ENOSPC, "create"),
    "rename_eio": ("rename", EIO, "before"),
    "rename_partial": ("rename", EIO, "partial"),
    "rename_after_eio": ("rename", EIO, "after"),
    "remove_eio": ("remove", EIO, "before"),
    "listdir_eio": ("listdir", EIO, "before"),
    "mkdir_eio": ("mkdir", EIO, "before"),
    "sync_dir_eio": ("sync_dir", EIO, "before"),
    "close_eio": ("close", EIO, "after"),
    "size_eio": ("size", EIO, "before"),
    "kind_eio": ("kind", EIO, "before"),
    "truncate_eio": ("truncate", EIO, "before"),
}
STRICT = ("write", "sync")  # a failure here must fail the call and fail-stop the instance


class FaultFS(memfs.MemFS):
    """MemFS that injects one fault kind at call index `at` (1-based, as self.calls counts)."""

    def __init__(self, kind=None, at=-1, persistent=False, **kw):
        memfs.MemFS.__init__(self, **kw)
        self.kind_ = kind
        self.method = KINDS[kind][0] if kind else None
        self.at = at
        self.persistent = persistent
        self.fired = 0
        self.fired_in = None
        self.active = True

    def _hit(self, name, extra=None):
        if not self.active or name != self.method:
            return False
        if KINDS[self.kind_][2] == "create" and extra == "rb":
            return False
        n = self.calls + 1  # this call's index once _tick runs
        if n == self.at or (self.persistent and self.fired and n > self.at):
            self.fired += 1
            return True
        return False

    def _err(self):
        return OSError(KINDS[self.kind_][1], "injected " + self.kind_)

    def open(self, path, mode):
        if self._hit("open", mode):
            self._tick("open")
            raise self._err()
        return memfs.MemFS.open(self, path, mode)

    def write(self, handle, buf):
        if self._hit("write"):
            how = KINDS[self.kind_][2]
            if how == "half" and len(buf) > 1:
                memfs.MemFS.write(self, handle, bytes(buf)[: len(buf) // 2])
            else:
                self._tick("write")
            raise self._err()
        return memfs.MemFS.write(self, handle, buf)

    def read_into(self, handle, offset, buf):
        if self._hit("read_into"):
            self._tick("read_into")
            raise self._err()
        return memfs.MemFS.read_into(self, handle, offset, buf)

    def sync(self, handle):
        if self._hit("sync"):
            self._tick("sync")
            raise self._err()
        return memfs.MemFS.sync(self, handle)

    def close(self, handle):
        if self._hit("close"):
            memfs.MemFS.close(self, handle)  # POSIX: the descriptor is gone even when close fails
            raise self._err()
        return memfs.MemFS.close(self, handle)

    def rename(self, src, dst):
        if self._hit("rename"):
            how = KINDS[self.kind_][2]
            if how == "after":
                memfs.MemFS.rename(self, src, dst)
            else:
                self._tick("rename")
                if how == "partial" and dst in self.names and src in self.names:
                    self.calls -= 1
                    memfs.MemFS.remove(self, dst)
            raise self._err()
        return memfs.MemFS.rename(self, src, dst)


# the calls whose fault is plain: raised at the chosen call, else as MemFS
memfs.with_failing(FaultFS, "_hit", "remove listdir mkdir sync_dir size kind truncate")


def reference(ddq, seed, nops, path="/q"):
    memfs.MemFS.Locked = ddq.Locked
    can_truncate = seed % 2 == 0
    files, payloads = initial(seed, path)
    pre = () if seed % 4 == 1 and not files else (path,)
    fs = memfs.MemFS(files=files, dirs=pre, record=True, can_truncate=can_truncate)
    fs.trace = []
    opts = tmodel.params(seed)
    wl = tmodel.Workload(ddq, path, lambda: fs, seed, nops, opts=opts, pos=lambda: fs.calls)
    wl.payloads.update(payloads)
    try:
        wl.run()
    finally:
        wl.close()
    return wl, fs, pre, can_truncate


def _judge(ddq, q, wl, i, bad, where):
    allowed, returned = wl.allowed(i)
    for cat, detail in tmodel.check(q, allowed, returned, wl.opts.get("sync")):
        bad.append((cat, "%s: %s" % (where, detail)))


def run_point(ddq, ref, kind, at, persistent, path="/q"):
    """One fault run. Returns (fired, [(category, detail)])."""
    wl_ref, fs_ref, pre, can_truncate = ref
    files, payloads = initial(wl_ref.seed, path)
    fs = FaultFS(
        kind, at, persistent, files=files, dirs=pre, record=True, can_truncate=can_truncate
    )
    wl = tmodel.Workload(
        ddq, path, lambda: fs, wl_ref.seed, wl_ref.nops, opts=wl_ref.opts, pos=lambda: fs.calls
    )
    wl.payloads.update(payloads)
    bad = []
    opened_err = None
    try:
        wl.run(stop=lambda i: fs.fired > 0)
    except (ddq.Error, OSError) as e:
        opened_err = e  # the initial open failed
    except Exception as e:
        bad.append(("unexpected", "workload raised %s: %s" % (type(e).__name__, e)))
    if not fs.fired:
        try:
            wl.close()
        except Exception:
            pass
        return False, bad
    if opened_err is not None or not wl.ops:
        f = 0
        name, arg, out = ("open", None, ("err", type(opened_err).__name__))
    else:
        f = len(wl.ops) - 1  # the op in flight when the fault fired
        name, arg, out = wl.ops[f]
        if name != wl_ref.ops[f][0]:
            bad.append(("unexpected", "fault run diverged from the reference before the fault"))
            return True, bad
    method = KINDS[kind][0]
    q = wl.q
    if name == "reopen" and out[0] == "err":
        q = None  # close() of the old instance failed (it is closed) or the new open failed
    strict = method in STRICT and name not in ("read",)
    if strict and out[0] == "ok" and name not in ("open",):
        bad.append(
            ("unexpected", "%s(%r) reported success after an injected %s" % (name, arg, kind))
        )
    if strict and q is not None and name not in ("reopen",):
        if not q.stats().failed:
            bad.append(("unexpected", "not fail-stopped after %s in %s" % (kind, name)))
        for probe in (lambda: q.enqueue(b"x"), lambda: q.claim(1000), lambda: q.ack(1)):
            try:
                probe()
                bad.append(("unexpected", "a call succeeded while fail-stopped after %s" % kind))
                break
            except ddq.IOFailure:
                pass
            except ddq.Error as e:
                bad.append(
                    ("unexpected", "fail-stopped call raised %s, not IOFailure" % type(e).__name__)
                )
                break
    # recover: first with a persistent fault still active (may fail), then with it cleared
    if q is not None and persistent:
        try:
            q.recover()
        except ddq.Error:
            pass
        except Exception as e:
            bad.append(
                (
                    "unexpected",
                    "recover() under a persistent fault raised %s: %s" % (type(e).__name__, e),
                )
            )
    fs.active = False
    if q is None:
        try:
            wl.open()
            q = wl.q
        except ddq.Locked as e:
            bad.append(("unexpected", "a failed open left the lock held: %s" % e))
        except Exception as e:
            bad.append(
                (
                    "unexpected",
                    "open after the fault cleared raised %s: %s" % (type(e).__name__, e),
                )
            )
    else:
        try:
            q.recover()
        except Exception as e:
            bad.append(
                (
                    "unexpected",
                    "recover() after the fault cleared raised %s: %s" % (type(e).__name__, e),
                )
            )
            q = None
    if q is not None:
        try:
            _judge(ddq, q, wl_ref, f, bad, "after recover()")
        except Exception as e:
            bad.append(("unexpected", "checking raised %s: %s" % (type(e).__name__, e)))
        try:
            q.close()
        except Exception as e:
            bad.append(("unexpected", "close() raised %s: %s" % (type(e).__name__, e)))
    wl.q = None
    if fs.open_count():
        bad.append(
            (
                "unexpected",
                "%d file handles left open after the fault (%s)" % (fs.open_count(), kind),
            )
        )
    # a power cut right after the fault (and the recovery): the durable views must recover too
    sim = crash.Sim(files=files, dirs=pre)
    for e in fs.log:
        sim.apply(e)
    for model in ("posix", "lfs"):
        for variant, files, dirs, _holes in sim.states(model):
            if variant[0] not in "Ad" and model == "posix":
                continue
            fs2 = memfs.MemFS(files, dirs, can_truncate=can_truncate)
            try:
                q2 = ddq.Queue(
                    path, storage=fs2, clock=tmodel.Clock(tmodel.CLOCK0 + 10**6), **wl_ref.opts
                )
            except Exception as e:
                bad.append(
                    (
                        "unexpected",
                        "crash after %s (%s %s): open raised %s: %s"
                        % (kind, model, variant, type(e).__name__, e),
                    )
                )
                continue
            try:
                _judge(ddq, q2, wl_ref, f, bad, "crash after the fault, %s %s" % (model, variant))
            finally:
                q2.close()
    return True, bad


def run_seed(ddq, seed, nops, kinds=None, stride=1, max_fail=5):
    ref = reference(ddq, seed, nops)
    wl_ref, fs_ref = ref[0], ref[1]
    trace = fs_ref.trace
    res = {
        "seed": seed,
        "calls": len(trace),
        "points": 0,
        "kinds": {},
        "lost": 0,
        "resurrected": 0,
        "reused_seq": 0,
        "unexpected": 0,
        "fail": [],
    }
    for u in wl_ref.unexpected:
        res["unexpected"] += 1
        res["fail"].append({"seed": seed, "where": "reference run", "detail": u[1]})
    for kind in kinds or sorted(KINDS):
        method = KINDS[kind][0]
        idx = [n + 1 for n in range(len(trace)) if trace[n] == method]
        for j, at in enumerate(idx):
            if j % stride:
                continue
            for persistent in (False, True):
                fired, bad = run_point(ddq, ref, kind, at, persistent)
                if not fired:
                    continue
                res["points"] += 1
                res["kinds"][kind] = res["kinds"].get(kind, 0) + 1
                where = {"seed": seed, "kind": kind, "call_index": at, "persistent": persistent}
                tmodel.tally(res, bad, max_fail, where, 500)
    return res
