"""Part 1: syscall-level crash states (CPython only).

A workload runs once on a recording MemFS. Its log of creates, writes, syncs, closes, renames,
removes, mkdirs and sync_dirs is replayed step by step; after every step k the legal on-disk states
of a crash at that point are materialised under a file-system model, deduplicated by content hash,
and each distinct one is opened with ddq and judged by tmodel.check against the op in flight.

File-system models (docs/RELIABILITY.md "Persistence models"):
  posix  - directory entries (create, rename, remove, mkdir) persist only through sync_dir, in
           order (any prefix of the unsynced ones survives: model d); file data persists through
           sync: A all unsynced data lost (model a), V all of it landed, T the last unsynced write
           torn at every byte (model b), R any subset of a file's unsynced writes landed, holes
           read as zeros, with or without the size grown to the end (model c).
  lfs    - LittleFS: create/rename/remove atomic and durable at once; data and truncation durable
           at sync or close; nothing torn.
  fat    - FAT: like lfs for data, directory ops durable, but rename over an existing file is
           remove + rename: one more state where only the source is left.

Tail cuts (SPEC R12, R21, R22): on MicroPython-like storage (odd seeds) a recovery that finds a
torn tail stages the valid prefix as <segment>.reserve and renames it over the segment. Every
judged state holding such a leftover (or an older ddq's <segment>.cut) is a cut state: besides
ddq's verdict, tests/libddqmodel.py (what libddq 9eb47a95 refuses and ignores) must refuse it or
see ddq's seqs (libddq_disagree, must be 0). Recoveries that cut are cut again at every step (depth
2, posix A/V, lfs and fat, so FAT's "segment removed, copy not renamed" is reached) every
CUT_DEPTH2-th time, besides the general depth-2 sampling.
"""

import hashlib

import edges
import memfs
import tmodel

import libddqmodel

MAX_SUBSETS = 64
CUT_DEPTH2 = 3


def _leftover(files, path):
    """The name of a staged tail cut in directory path, if the state holds one."""
    for p in files:
        if p[: len(path) + 1] == path + "/":
            n = p[len(path) + 1 :]
            for suf in (".reserve", ".cut"):
                if n.endswith(suf) and libddqmodel.ddqfmt.parse_seg_name(n[: -len(suf)]):
                    return n
    return None


def _cuts(log):
    """True when a recovery log stages a tail cut."""
    for e in log:
        if e[0] == "create" and (e[1].endswith(".reserve") or e[1].endswith(".cut")):
            return True
    return False


def _parent(p):
    i = p.rfind("/")
    return p[:i] if i > 0 else "/"


def _apply_dirop(names, dirs, op):
    k = op[0]
    if k == "create":
        names[op[1]] = op[2]
    elif k == "rename":
        ino = names.pop(op[1], None)
        if ino is None:
            ino = op[3]
        names[op[2]] = ino
    elif k == "remove":
        names.pop(op[1], None)
    elif k == "mkdir":
        dirs.add(op[1])


def _opdir(op):
    return _parent(op[1]) if op[0] != "rename" else _parent(op[2])


class Sim:
    """Replays a MemFS log, keeping the volatile view and the durable views side by side."""

    def __init__(self, files=None, dirs=()):
        self.names = {}
        self.dirs = set(["/"]) | set(dirs)
        self.dur_names = {}
        self.dur_dirs = set(self.dirs)
        self.pend_dir = []
        self.vol = {}
        self.dur_sync = {}
        self.dur_close = {}
        self.pend_w = {}
        n = 0  # the same inode numbers MemFS(files) hands out
        for p in files or {}:
            n += 1
            self.names[p] = n
            self.dur_names[p] = n
            b = bytes(files[p])
            self.vol[n] = bytearray(b)
            self.dur_sync[n] = b
            self.dur_close[n] = b
            self.pend_w[n] = []
        self.last = None

    def apply(self, e):
        k = e[0]
        self.last = e
        if k == "create":
            ino = e[2]
            self.names[e[1]] = ino
            self.vol[ino] = bytearray()
            self.dur_sync[ino] = b""
            self.dur_close[ino] = b""
            self.pend_w[ino] = []
            self.pend_dir.append(e)
        elif k == "trunc":
            self.vol[e[1]] = bytearray()
            self.pend_w[e[1]].append(("T",))
        elif k == "truncate":
            del self.vol[e[1]][e[2] :]
            self.pend_w[e[1]].append(("T",))
        elif k == "write":
            self.vol[e[1]].extend(e[3])
            self.pend_w[e[1]].append((e[2], e[3]))
        elif k == "sync":
            b = bytes(self.vol[e[1]])
            self.dur_sync[e[1]] = b
            self.dur_close[e[1]] = b
            self.pend_w[e[1]] = []
        elif k == "close":
            self.dur_close[e[1]] = bytes(self.vol[e[1]])
        elif k == "rename":
            self.names.pop(e[1], None)
            self.names[e[2]] = e[3]
            self.pend_dir.append(e)
        elif k == "remove":
            self.names.pop(e[1], None)
            self.pend_dir.append(e)
        elif k == "mkdir":
            self.dirs.add(e[1])
            self.pend_dir.append(e)
        elif k == "sync_dir":
            keep = []
            for op in self.pend_dir:
                if _opdir(op) == e[1]:
                    _apply_dirop(self.dur_names, self.dur_dirs, op)
                else:
                    keep.append(op)
            self.pend_dir = keep

    # -- materialisation --
    @staticmethod
    def _files(names, dirs, content, override=None):
        out = {}
        for p in names:
            if _parent(p) in dirs:
                ino = names[p]
                if override is not None and ino in override:
                    out[p] = override[ino]
                else:
                    out[p] = (
                        content[ino]
                        if not isinstance(content[ino], bytearray)
                        else bytes(content[ino])
                    )
        return out

    def states(self, model):
        """Yield (variant, files, dirs, holes) for a crash right now."""
        if model == "posix":
            yield from self._posix()
        else:
            names = self.names
            yield ("dur", self._files(names, self.dirs, self.dur_close), self.dirs, False)
            e = self.last
            if model == "fat" and e is not None and e[0] == "rename" and e[4] is not None:
                n2 = dict(names)
                del n2[e[2]]
                n2[e[1]] = e[3]
                yield (
                    "fat-rename-split",
                    self._files(n2, self.dirs, self.dur_close),
                    self.dirs,
                    False,
                )

    def _posix(self):
        dirvars = []
        names = dict(self.dur_names)
        dirs = set(self.dur_dirs)
        dirvars.append((dict(names), set(dirs)))
        for op in self.pend_dir:
            _apply_dirop(names, dirs, op)
            dirvars.append((dict(names), set(dirs)))
        for j, (n, d) in enumerate(dirvars):
            yield ("A/d%d" % j, self._files(n, d, self.dur_sync), d, False)
            yield ("V/d%d" % j, self._files(n, d, self.vol), d, False)
        e = self.last
        if e is None or e[0] != "write":
            return
        ino, off, data = e[1], e[2], e[3]
        if not self.pend_w[ino]:
            return
        base = bytes(self.vol[ino][:off])
        ends = [dirvars[0], dirvars[-1]] if len(dirvars) > 1 else [dirvars[0]]
        for t in range(len(data)):
            ov = {ino: base + data[:t]}
            for j, (n, d) in enumerate(ends):
                yield ("T%d/d%d" % (t, j), self._files(n, d, self.vol, ov), d, False)
        # model c: subsets of this file's unsynced writes (holes read as zeros)
        pend = [w for w in self.pend_w[ino]]
        if len(pend) < 2 or any(w[0] == "T" for w in pend):
            return
        n = len(pend)
        dur = self.dur_sync[ino]
        full = (1 << n) - 1
        masks = (
            list(range(1, full))
            if n <= 6
            else [
                m
                for m in (
                    [((1 << i) - 1) for i in range(1, n)] + [full & ~(1 << i) for i in range(n)]
                )
            ]
        )
        names, dirs = dirvars[-1]
        for m in masks[:MAX_SUBSETS]:
            end = len(dur)
            for i in range(n):
                if m >> i & 1:
                    end = max(end, pend[i][0] + len(pend[i][1]))
            for grow in (False, True):
                size = len(self.vol[ino]) if grow else end
                b = bytearray(size)
                b[: len(dur)] = dur
                for i in range(n):
                    if m >> i & 1:
                        o, w = pend[i]
                        b[o : o + len(w)] = w
                # a zero tail (a prefix landed, size grown) is torn [S5/R11] and must recover;
                # only a hole before landed data is mid-log damage that Corrupt may report
                holes = not (m & (m + 1) == 0)
                yield (
                    "R%x%s" % (m, "+" if grow else ""),
                    self._files(names, dirs, self.vol, {ino: bytes(b)}),
                    dirs,
                    holes,
                )


def state_hash(files, dirs):
    h = hashlib.blake2b(digest_size=12)
    for p in sorted(files):
        h.update(p.encode())
        h.update(b"\0%d\0" % len(files[p]))
        h.update(files[p])
    for d in sorted(dirs):
        h.update(b"D" + d.encode() + b"\0")
    return h.digest()


# -- judging one state --------------------------------------------------------------------------


def _is_repair(log):
    # close() writing queue.index (create the tmp, write it, rename it over queue.index) is not a
    # repair: with index_bytes=1 almost every recovered queue does it. Removing a leftover tmp is.
    ix = set()
    for e in log:
        k = e[0]
        if k == "create" and e[1].endswith("/queue.index.tmp"):
            ix.add(e[2])
            continue
        if k in ("write", "trunc") and e[1] in ix:
            continue
        if k == "rename" and e[1].endswith("/queue.index.tmp"):
            continue
        if k in ("write", "trunc", "rename", "remove", "mkdir"):
            return True
        if k == "create" and not e[1].endswith("queue.lock"):
            return True
    return False


def has_index(files):
    for p in files:
        if p.endswith("/queue.index"):
            return True
    return False


def corrupt_names_place(msg):
    """A Corrupt report must name the file (segment or manifest) and an offset."""
    m = str(msg)
    has_file = ("segment" in m) or ("manifest" in m) or (".log" in m) or ("queue.format" in m)
    has_off = any(c.isdigit() for c in m) and ("offset" in m or "@" in m or "at " in m)
    return has_file and has_off


class Judge:
    """Opens crash states with ddq and judges them against a workload's history."""

    def __init__(self, ddq, wl, depth2=1, probe_every=16):
        self.ddq = ddq
        self.wl = wl
        self.depth2 = depth2
        self.probe_every = probe_every
        self.idem_every = 4
        self.n = 0
        self.can_truncate = False
        self.depth2_states = 0
        self.reported = 0
        self.repairs = 0
        # index_bytes=1 workloads: every distinct state holding a queue.index is opened through it
        # (the judged open) and again with index_bytes=0; the two must agree exactly (SPEC 12.1
        # X4, X5); every 16th comparison also runs the same operations on both (probe_view)
        self.index_cmp = bool(wl.opts.get("index_bytes"))
        self.index_compared = 0
        self.index_opens = 0  # compared states where the index was adopted (index_used)
        self.index_probe_every = 16
        self.index_mismatch = 0
        self.index_done = (
            set()
        )  # state hashes compared (the comparison does not depend on the op in flight)
        self.cut_states = 0  # judged states holding a staged cut (R21, R22)
        self.libddq_refused = 0  # of them, refused by the libddq model
        self.cut_repairs = 0  # recoveries that staged a cut
        self.cut_done = set()
        # issue 35 item 10: a lost rotation (an empty last segment past the boundary) that libddq
        # (modelled; no R23) opens before ddq recovers, writing its next record (a DATA or a
        # CLAIM) into that segment: ddq must open what it leaves with libddq's items (V3), go on
        # writing and reopen; a refusal or other items is libddq_disagree
        self.libddq_rotations = 0
        self.rot_done = set()
        # part 1c (tests/torture/edges.py): every cont_every-th judged state is recovered,
        # written on, closed and reopened; a refused open is `bricked`
        self.cont_every = 0
        self.continued = 0
        self.bricked = 0
        self.model = None  # the file-system model of the state being judged
        self.cont_by_model = {}

    def _libddq(self, files, seqs, h=None):
        """A cut state: libddq (modelled) refuses it or sees ddq's seqs. Returns [(category,
        detail)]."""
        path = self.wl.path
        name = _leftover(files, path)
        if name is None:
            return []
        h = h if h is not None else state_hash(files, set())
        if h in self.cut_done:
            return []
        self.cut_done.add(h)
        self.cut_states += 1
        rel = {}
        for p in files:
            if p[: len(path) + 1] == path + "/" and "/" not in p[len(path) + 1 :]:
                rel[p[len(path) + 1 :]] = files[p]
        v = libddqmodel.view(rel)
        if v[0] == "corrupt":
            self.libddq_refused += 1
            return []
        if v[1] != list(seqs):
            return [
                (
                    "libddq_disagree",
                    "with %s present libddq opens seqs %r, ddq %r" % (name, v[1], list(seqs)),
                )
            ]
        return []

    def _libddq_rotation(self, files, dirs, state1, h):
        """A lost rotation, written into by libddq: ddq opens it, goes on, reopens."""
        path = self.wl.path
        if h in self.rot_done:
            return []
        rel = {}
        for p in files:
            if p[: len(path) + 1] == path + "/" and "/" not in p[len(path) + 1 :]:
                rel[p[len(path) + 1 :]] = files[p]
        v = libddqmodel.view(rel)
        if v[0] != "ok":
            return []
        for n in v[3]:
            if v[3][n] is None:
                rel.pop(n, None)
            else:
                rel[n] = v[3][n]
        F = libddqmodel.ddqfmt
        gen, segs = 0, 0
        if F.MANIFEST in rel:
            m = F.decode_manifest(rel[F.MANIFEST])
            gen, segs = m[0], m[2]
        ids = sorted(
            F.parse_seg_name(n)[1] for n in rel if (F.parse_seg_name(n) or (-1,))[0] == gen
        )
        if len(ids) < 2 or ids[-1] < segs or rel[F.seg_name(gen, ids[-1])]:
            return []
        self.rot_done.add(h)
        av = [t for t in state1 if t[1] == "available"]
        full = len(state1) >= self.wl.opts["max_items"]
        if full and not av:
            return []  # libddq's enqueue: FULL (no compaction modelled), nothing to claim
        self.libddq_rotations += 1
        want = list(state1)
        sb = self.wl.opts["segment_bytes"]
        lease = tmodel.CLOCK0 + 10**6
        if (self.libddq_rotations % 2 or full) and av:
            t = av[0]
            w = libddqmodel.place(rel, F.T_CLAIM, t[0], lease, b"", sb)
            want[want.index(t)] = (t[0], "claimed", t[2], lease, t[4], t[5], t[6])
        else:
            p = b"libddq %d" % v[2]
            w = libddqmodel.place(rel, F.T_DATA, v[2], 0, p, sb)
            want.append((v[2], "available", 0, 0, 0, p, b""))
        f2 = dict(files)
        for n in v[3]:
            if v[3][n] is None:
                f2.pop(path + "/" + n, None)
            else:
                f2[path + "/" + n] = v[3][n]
        f2[path + "/" + w[0]] = w[1]
        try:
            fs, q = self._open(f2, dirs)
        except Exception as e:
            return [
                (
                    "libddq_disagree",
                    "after a lost rotation libddq wrote %s; ddq: %s: %s"
                    % (w[0], type(e).__name__, e),
                )
            ]
        try:
            got = tmodel.recovered_state(q)
        finally:
            q.close()
        if got != tuple(want):
            return [
                (
                    "libddq_disagree",
                    "after a lost rotation libddq wrote %s: ddq %r, libddq %r"
                    % (w[0], tmodel._short(got), tmodel._short(tuple(want))),
                )
            ]
        bad = edges.continue_state(
            self.ddq,
            fs,
            path,
            self.wl.opts,
            got,
            self.wl.seed * 7919 + self.libddq_rotations,
            tmodel.Clock(tmodel.CLOCK0 + 1000 * (len(self.wl.ops) + 40)),
        )
        self.bricked += sum(1 for b in bad if b[0] == "bricked")
        return bad

    def _open(self, files, dirs, record=False, index=None):
        fs = memfs.MemFS(files, dirs, record=record, budget=500000, can_truncate=self.can_truncate)
        clock = tmodel.Clock(tmodel.CLOCK0 + 1000 * (len(self.wl.ops) + 10))
        kw = tmodel.queue_opts(self.wl.opts)
        if index is not None:
            kw["index_bytes"] = index
        q = self.ddq.Queue(self.wl.path, storage=fs, clock=clock, **kw)
        return fs, q

    def _full_replay(self, files, dirs, probe):
        """Open with index_bytes=0: ("err", type, message) or ("ok", index_view, probe_view)."""
        try:
            fs, q = self._open(files, dirs, index=0)
        except Exception as e:
            return ("err", type(e).__name__, str(e))
        try:
            return ("ok", tmodel.index_view(q), tmodel.probe_view(self.ddq, q) if probe else None)
        except Exception as e:
            return ("err", type(e).__name__, "after open: %s" % e)
        finally:
            q.close()

    def _index_compare(self, files, dirs, got):
        """got: what the judged open (through queue.index) gave, as _full_replay returns it, with
        the probe still to run. Returns [(category, detail)]."""
        self.index_compared += 1
        probe = self.index_compared % self.index_probe_every == 0 and got[0] == "ok"
        want = self._full_replay(files, dirs, probe)
        if got[0] == "err" or want[0] == "err":
            if got != want:
                self.index_mismatch += 1
                return [("index_mismatch", "index open %r, full replay %r" % (got[:3], want[:3]))]
            return []
        if got[1] != want[1]:
            self.index_mismatch += 1
            return [
                (
                    "index_mismatch",
                    "index open and full replay differ: " + tmodel.index_diff(got[1], want[1]),
                )
            ]
        if probe:
            try:
                fs, q = self._open(files, dirs, index=1)
                try:
                    p = tmodel.probe_view(self.ddq, q)
                finally:
                    q.close()
            except Exception as e:
                p = ("raised", type(e).__name__, str(e))
            if p != want[2]:
                self.index_mismatch += 1
                return [
                    (
                        "index_mismatch",
                        "the same operations after an index open and a full replay "
                        "answer differently: %r vs %r" % (p, want[2]),
                    )
                ]
        return []

    def judge(self, files, dirs, i, holes, h=None):
        ddq = self.ddq
        wl = self.wl
        self.n += 1
        allowed, returned = wl.allowed(i)
        sync = wl.opts.get("sync")
        ixc = self.index_cmp and (h is None or h not in self.index_done) and has_index(files)
        if ixc and h is not None:
            self.index_done.add(h)
        try:
            fs, q = self._open(files, dirs, record=True)
        except ddq.Corrupt as e:
            bad = (
                self._index_compare(files, dirs, ("err", type(e).__name__, str(e))) if ixc else []
            )
            if holes:
                self.reported += 1
                if not corrupt_names_place(e):
                    return bad + [
                        ("unexpected", "Corrupt message names no segment/offset: %s" % e)
                    ]
                return bad
            return bad + [("unexpected", "Corrupt on a legal crash state: %s" % e)]
        except ddq.Locked as e:
            return [("unexpected", "lock blocks recovery after a crash: %s" % e)]
        except Exception as e:
            return [("unexpected", "open raised %s: %s" % (type(e).__name__, e))]
        bad = []
        got = None
        try:
            bad += tmodel.check(q, allowed, returned, sync)
            state1 = tmodel.recovered_state(q)
            nxt1 = q.stats().next_seq
            if ixc:
                got = ("ok", tmodel.index_view(q, state1), None)
                if q.index_used:
                    self.index_opens += 1
        except Exception as e:
            bad.append(("unexpected", "checking raised %s: %s" % (type(e).__name__, e)))
            state1 = None
        finally:
            q.close()
        if fs.open_count():
            bad.append(("unexpected", "%d file handles left open after close()" % fs.open_count()))
        if got is not None:
            bad += self._index_compare(files, dirs, got)
        if state1 is not None:
            bad += self._libddq(files, [t[0] for t in state1], h)
            if not bad and not holes:
                bad += self._libddq_rotation(files, dirs, state1, h)
        if bad or state1 is None:
            return bad
        if self.cont_every and self.n % self.cont_every == 0:
            bad += self._continue(fs, state1)
            if bad:
                return bad
        rec_log = list(fs.log)
        repaired = _is_repair(rec_log)
        if repaired:
            self.repairs += 1
        cut = False
        if _cuts(rec_log):
            self.cut_repairs += 1
            cut = self.cut_repairs % CUT_DEPTH2 == 1 % CUT_DEPTH2
        meta1 = tmodel.meta_of(state1)
        idem = repaired and self.repairs % self.idem_every == 1 % self.idem_every
        probe = self.n % self.probe_every == 0
        if idem or probe:
            try:
                clock = tmodel.Clock(tmodel.CLOCK0 + 1000 * (len(wl.ops) + 20))
                q = ddq.Queue(wl.path, storage=fs, clock=clock, **tmodel.queue_opts(wl.opts))
                try:
                    s2 = tmodel.meta_state(q)
                    if s2 != meta1:
                        bad.append(
                            ("unexpected", "recovery not idempotent: %r then %r" % (meta1, s2))
                        )
                    if probe:
                        try:
                            seq = q.enqueue(b"probe")
                            hi = max([returned, nxt1 - 1] + [t[0] for t in state1])
                            if seq <= hi:
                                bad.append(
                                    (
                                        "reused_seq",
                                        "probe enqueue got seq %d, highest seen %d" % (seq, hi),
                                    )
                                )
                        except ddq.Full:
                            pass
                finally:
                    q.close()
            except Exception as e:
                bad.append(
                    ("unexpected", "reopen after recovery raised %s: %s" % (type(e).__name__, e))
                )
        if (
            repaired
            and not bad
            and (cut or self.depth2 and self.repairs % self.depth2 == 1 % self.depth2)
        ):
            bad += self._depth2(files, dirs, rec_log, meta1)
        return bad

    def _continue(self, fs, state1):
        """Part 1c: go on writing where the recovery left the directory, then reopen."""
        f2, d2 = fs.snapshot()
        cfs = memfs.MemFS(f2, d2, can_truncate=self.can_truncate)
        clock = tmodel.Clock(tmodel.CLOCK0 + 1000 * (len(self.wl.ops) + 30))
        self.continued += 1
        self.cont_by_model[self.model] = self.cont_by_model.get(self.model, 0) + 1
        bad = edges.continue_state(
            self.ddq,
            cfs,
            self.wl.path,
            self.wl.opts,
            state1,
            self.wl.seed * 104729 + self.n,
            clock,
            grow=self.continued % 4 == 0,
        )
        self.bricked += sum(1 for b in bad if b[0] == "bricked")
        return bad

    def _depth2(self, files, dirs, rec_log, state1):
        """Cut the recovery itself at every step (posix A/V and lfs views) and recover again: the
        result must be the state the uncut recovery produced."""
        sim = Sim(files, dirs)
        seen = set()
        bad = []
        ix = set()
        for e in rec_log:
            sim.apply(e)
            # close() writing queue.index.tmp: a cut between its writes leaves a partial tmp, which
            # recovery ignores and removes; the live workloads' crash states cut each write already
            if e[0] == "create" and e[1].endswith("/queue.index.tmp"):
                ix.add(e[2])
            elif e[0] == "write" and e[1] in ix:
                continue
            for model in ("posix", "lfs", "fat"):
                for variant, f2, d2, holes in sim.states(model):
                    if holes or variant[0] == "T":
                        continue
                    h = state_hash(f2, d2)
                    if h in seen:
                        continue
                    seen.add(h)
                    self.depth2_states += 1
                    try:
                        fs, q = self._open(f2, d2)
                    except Exception as ex:
                        bad.append(
                            (
                                "unexpected",
                                "recovery cut at %s (%s) then reopened: %s %s"
                                % (e[0], variant, type(ex).__name__, ex),
                            )
                        )
                        return bad
                    try:
                        s2 = tmodel.meta_state(q)
                    finally:
                        q.close()
                    bad += self._libddq(f2, [t[0] for t in s2], h)
                    if s2 != state1:
                        bad.append(
                            (
                                "unexpected",
                                "recovery cut at %s (%s) recovers %r, uncut %r"
                                % (e[0], variant, tmodel._short(s2), tmodel._short(state1)),
                            )
                        )
                        return bad
        return bad


def libddq_run(ddq, seed, opts, nops=160, path="/q", max_fail=5):
    """libddq's own writes and lost rotations (issue 35 item 10; SPEC F7, V3): the libddq model
    (tests/libddqmodel.py, no R23) enqueues (payloads of 0 .. max_payload_bytes), claims, acks
    and retries; a third of its rotations lose their record to a power cut (the new segment
    stays empty) and it reopens and writes its next record there. After each write that follows
    a lost rotation ddq opens the directory: it must see libddq's items in their states and
    attempts (libddq_disagree), and every 4th time go on writing and reopen (bricked)."""
    F = libddqmodel.ddqfmt
    rng = tmodel.Rng(seed * 31 + 7)
    sb, mx = opts["segment_bytes"], opts["max_payload_bytes"]
    kw = {"segment_bytes": sb, "max_payload_bytes": mx, "max_items": 4096, "max_segments": 4096}
    res = {"libddq_rotations": 0, "libddq_disagree": 0, "bricked": 0, "fail": []}
    files = {}
    model = {}  # seq: [state, attempts, payload]
    nxt = 1
    lost = False

    def bad(cat, detail):
        res[cat] += 1
        if len(res["fail"]) < max_fail:
            res["fail"].append(
                {"seed": seed, "where": "libddq run", "category": cat, "detail": detail[:600]}
            )

    for _ in range(nops):
        k = rng.below(8)
        cl = sorted(s for s in model if model[s][0] == "claimed")
        av = sorted(s for s in model if model[s][0] == "available")
        if k < 4 or (k < 6 and not av) or (k >= 6 and not cl):
            p = rng.bytes(rng.below(mx + 1))
            rec = (F.T_DATA, nxt, 0, p)
        elif k < 6:
            rec = (F.T_CLAIM, av[0], tmodel.CLOCK0 + 10**7 + 3600000, b"")  # not lapsed
        elif k == 6:
            rec = (F.T_ACK, cl[0], 0, b"")
        else:
            rec = (F.T_RETRY, cl[0], 0, b"")
        w = libddqmodel.place(files, rec[0], rec[1], rec[2], rec[3], sb, lose=rng.below(3) == 0)
        if w is not None and not w[1]:  # the rotation's record lost: a power cut, then a reopen
            files[w[0]] = b""
            v = libddqmodel.view(files)
            if v[0] != "ok":
                bad("libddq_disagree", "libddq refuses its own lost rotation: %s" % v[4])
                return res
            lost = True
            continue
        if w is None:
            w = libddqmodel.place(files, rec[0], rec[1], rec[2], rec[3], sb)
        files[w[0]] = w[1]
        t, s = rec[0], rec[1]
        if t == F.T_DATA:
            model[s] = ["available", 0, rec[3]]
            nxt += 1
        elif t == F.T_CLAIM:
            model[s][0] = "claimed"
        elif t == F.T_ACK:
            model[s][0] = "acked"
        else:
            model[s][0] = "available"
            model[s][1] += 1
        if not lost:
            continue
        lost = False
        res["libddq_rotations"] += 1
        full = {}
        for n in files:
            full[path + "/" + n] = files[n]
        fs = memfs.MemFS(full, (path,))
        clock = tmodel.Clock(tmodel.CLOCK0 + 10**7)
        try:
            q = ddq.Queue(path, storage=fs, clock=clock, **kw)
        except Exception as e:
            bad(
                "libddq_disagree", "ddq refuses libddq's directory: %s: %s" % (type(e).__name__, e)
            )
            return res
        try:
            got = {}
            for it in q.items():
                got[it.seq] = [it.state, it.attempts, bytes(q.read(it.seq))]
        finally:
            q.close()
        if got != model:
            bad("libddq_disagree", "ddq reads %r, libddq wrote %r" % (got, model))
            return res
        if res["libddq_rotations"] % 4 == 1:
            f2, d2 = fs.snapshot()
            st = tuple(
                (s, model[s][0], model[s][1], 0, 0, model[s][2], b"") for s in sorted(model)
            )
            for b in edges.continue_state(
                ddq, memfs.MemFS(f2, d2), path, kw, st, seed + nxt, clock
            ):
                bad(b[0] if b[0] in res else "libddq_disagree", b[1])
    return res


def run_seed(
    ddq,
    seed,
    nops,
    models=("posix", "lfs", "fat"),
    sync=None,
    hashes=None,
    depth2=1,
    max_fail=5,
    path="/q",
    index=None,
    cont_every=0,
):
    """Run one workload and judge every crash state under every model. Returns a result dict."""
    memfs.MemFS.Locked = ddq.Locked
    can_truncate = seed % 2 == 0  # even seeds: CPython-like storage; odd: MicroPython-like
    # Most seeds start from an existing, durable queue directory; seeds = 1 mod 4 let ddq create
    # it.
    pre = () if seed % 4 == 1 else (path,)
    fs = memfs.MemFS(dirs=pre, record=True, can_truncate=can_truncate)
    outbox = sync == "outbox"
    opts = tmodel.params(seed, "none" if sync == "outbox" else sync, index)
    if outbox:
        opts["outbox_every"] = 3  # group commit: sync after every 3 records put
    if opts.get("reclaim_step"):
        # A staged queue (SPEC C13, C14) answers admission on the shadow in RAM where the inline
        # mode copies the queue again and again at its limit, so its log has about a third of the
        # storage operations: twice the operations keep its cut points (builds, publishes) many.
        nops *= 2
    wl = tmodel.Workload(ddq, path, lambda: fs, seed, nops, opts=opts, pos=lambda: len(fs.log))
    res = {
        "seed": seed,
        "sync": "outbox" if outbox else opts["sync"],
        "truncate": can_truncate,
        "log": 0,
        "states": 0,
        "checked": 0,
        "fail": [],
        "lost": 0,
        "resurrected": 0,
        "reused_seq": 0,
        "unexpected": 0,
        "reported": 0,
        "depth2": 0,
        "cut_states": 0,
        "libddq_refused": 0,
        "libddq_disagree": 0,
        "libddq_rotations": 0,
        "by_model": {},
        "index": opts.get("index_bytes"),
        "index_compared": 0,
        "index_opens": 0,
        "index_mismatch": 0,
        "continued": 0,
        "bricked": 0,
        "cont_by_model": {},
    }
    try:
        wl.run()
    finally:
        wl.close()
    for u in wl.unexpected:
        res[u[0] if u[0] in res else "unexpected"] += 1
        if len(res["fail"]) < max_fail:
            res["fail"].append(
                {"seed": seed, "where": "live run", "category": u[0], "detail": u[1]}
            )
    if fs.open_count():
        res["unexpected"] += 1
        res["fail"].append(
            {
                "seed": seed,
                "where": "live run",
                "category": "unexpected",
                "detail": "%d handles open after close()" % fs.open_count(),
            }
        )
    log = fs.log
    res["log"] = len(log)
    judge = Judge(ddq, wl, depth2=depth2)
    judge.can_truncate = can_truncate
    judge.cont_every = cont_every
    seen = hashes if hashes is not None else set()
    checked = set()
    sim = Sim(dirs=pre)
    for k in range(len(log) + 1):
        if k:
            sim.apply(log[k - 1])
        i = wl.inflight(k)
        for model in models:
            for variant, files, dirs, holes in sim.states(model):
                h = state_hash(files, dirs)
                if h not in seen:
                    seen.add(h)
                    res["states"] += 1
                    res["by_model"][model] = res["by_model"].get(model, 0) + 1
                key = (h, i, holes)
                if key in checked:
                    continue
                checked.add(key)
                res["checked"] += 1
                judge.model = model
                bad = judge.judge(files, dirs, i, holes, h)
                for cat, detail in bad:
                    res[cat] += 1
                    if len(res["fail"]) < max_fail:
                        op = wl.ops[i] if i is not None else None
                        res["fail"].append(
                            {
                                "seed": seed,
                                "sync": opts["sync"],
                                "crash_after_step": k,
                                "storage_op": repr(log[k - 1])[:120] if k else None,
                                "model": model,
                                "variant": variant,
                                "op_in_flight": repr(op)[:100],
                                "op_index": i,
                                "category": cat,
                                "detail": detail[:600],
                            }
                        )
    res["reported"] = judge.reported
    res["depth2"] = judge.depth2_states
    res["cut_states"] = judge.cut_states
    res["libddq_refused"] = judge.libddq_refused
    res["libddq_rotations"] = judge.libddq_rotations
    lr = libddq_run(ddq, seed, opts)
    for k in ("libddq_rotations", "libddq_disagree", "bricked"):
        res[k] += lr[k]
    res["fail"] += lr["fail"][: max(0, max_fail - len(res["fail"]))]
    res["index_compared"] = judge.index_compared
    res["index_opens"] = judge.index_opens
    res["continued"] = judge.continued
    res["cont_by_model"] = judge.cont_by_model
    return res
