"""ddq_reclaim: staged reclamation for ddq.Queue(reclaim_step=s), loaded only when s > 0.

Generation g+1 is built a few records per write instead of in the one call that needs the
space: the items not acked at P0 (the end of g when the build starts) in their state at P0,
then g's records after P0 verbatim; the manifest rename publishes it. A queue with
reclaim_step=0 (the default, C DDQ's inline compaction) never imports this module.

    import ddq
    q = ddq.Queue("outbox", reclaim_step=32)   # imports ddq_reclaim
    q.enqueue(b"reading")                      # a build advances by at most 32 records a call

Format: see docs/SPEC.md §11 [C13]; design: docs/DESIGN.md §12.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import struct

import ddq
from ddq import const  # the const shim, once (ddq compat)

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any, Optional

# ============================================================================ staged reclamation
# ddq's values that a step reads, by group (ddq.py's format section names each): a MicroPython
# const folds in its own module only (tests/host/test_host_index.py holds them equal to ddq's).
_REC_FMT = "<IHHQQIIII"  # a record's header and the sizes of one (SPEC §3.1 [F1], §3.4)
_REC_MAGIC = const(0x31475144)
_HDR = const(40)
_MIN_REC = const(48)
_STATE_REC = const(72)
_T_DATA = const(1)  # the types a step copies into g+1 or applies to it (SPEC §4 [F10])
_T_CLAIM = const(2)
_T_ACK = const(3)
_T_RETRY = const(4)
_T_QUAR = const(5)
_T_STATE = const(6)
_AVAILABLE = const(1)  # the states a step carries into g+1 (SPEC §4.1 [F11])
_CLAIMED = const(2)
_ACKED = const(3)
_QUARANTINED = const(4)
_EIO = const(5)  # the errno of a step's failed read
_CH = const(256)  # ddq._Index's chunk: items per chunk (ddq.py)
_LV_I = const(0)  # a live entry's fields (ddq._Index.live), as a step moves them
_LV_ATT = const(1)
_LV_LEASE = const(2)
_LV_NB = const(3)
# Work bound of one step unit: it passes at most _SKIP items acked at P0 and reads at most _SKIP
# record headers of g looking for the next item's DATA, then copies that item (DATA, STATE,
# reason: two record reads, three appends) or one record of g's tail (C13).
_SKIP = const(8)


class Build:
    """A generation g+1 staged over many calls (DESIGN §12)."""

    # CPython only, as ddq_outbox.Message's: mpy-cross -O3 (a board's code) compiles no byte of an
    # `if __debug__:` block (a .mpy loads the tuple even under `if not _MP:`: 192 B)
    if __debug__:
        __slots__ = (
            "log",
            "ix",
            "i",
            "n0",
            "next0",
            "cow",
            "plan",
            "snap",
            "tk",
            "to",
            "rk",
            "rp",
            "rh",
            "rhk",
        )

    def __init__(self, gen: int, tc: str, n0: int, next0: int, tk: int, to: int) -> None:
        self.log = ddq._Log(gen)
        self.ix = ddq._Index(tc)
        self.i = 0  # the next item of g to copy
        self.n0 = n0  # the items of g at P0
        self.next0 = next0  # next_seq at P0: the manifest's
        # seq -> (state, attempts, lease, not_before, reason) at P0 of an item that changed
        # before it was copied (copy on write)
        self.cow: "dict[int, Any]" = {}
        self.plan: "Optional[list[int]]" = [0, 0]  # the admission plan of the copy (§5)
        self.snap: "Optional[list[int]]" = None  # the snapshot's segments, end, items
        self.tk, self.to = tk, to  # where the copy of g's tail stands (P0 at first)
        self.rk = self.rp = 0  # the snapshot scan: the next record header of g to read
        self.rh: "Any" = None  # g's segment rhk open for reading, within one call only
        self.rhk = -1


def _reader(q: "ddq.Queue", b: Build, old: "ddq._Log", k: int) -> "Any":
    # g's segment k open for reading; one handle a call (closed by _close before the call's
    # own record), so it never outlives a sync of g.
    if b.rhk != k:
        _close(q, b)
        b.rh = q._o.fs.open(q._path(ddq.segment_name(old.gen, k)), "rb")
        b.rhk = k
    return b.rh


def _close(q: "ddq.Queue", b: Build) -> None:
    h, b.rh, b.rhk = b.rh, None, -1
    if h is not None:
        q._o.fs.close(h)


def _scan(q: "ddq.Queue", b: Build, old: "ddq._Log", seq: int, ln: int) -> "Any":
    # The payload of seq's DATA record, read forward from the scan's place in g (items are in
    # seq order there); None after _SKIP other records (the caller counts a unit).
    for _ in range(_SKIP):
        k, pos = b.rk, b.rp
        if pos >= old.sizes[k]:
            if k + 1 >= len(old.sizes):
                raise ddq._err("Corrupt", "DATA record of seq %d not found", seq)
            b.rk, b.rp = k + 1, 0
            continue
        h = _reader(q, b, old, k)
        if q._read_exact(h, pos, q._o.mv_hdr) != _HDR:
            raise OSError(_EIO, "short read in " + ddq.segment_name(old.gen, k))
        m, _v, typ, s, _a, plen, rlen, _c, _r = struct.unpack_from(_REC_FMT, q._o.rec, 0)
        if m != _REC_MAGIC or rlen < _MIN_REC:
            raise ddq._err("Corrupt", "bad record in %s at %d", ddq.segment_name(old.gen, k), pos)
        b.rp = pos + rlen
        if typ == _T_DATA:
            if s == seq:
                return q._read_record(old, k, pos, _T_DATA, seq, ln, h)
            if s > seq:
                raise ddq._err("Corrupt", "DATA record of seq %d not found", seq)
    return None


def _tail(q: "ddq.Queue", b: Build, old: "ddq._Log", k: int, pos: int) -> None:
    # One record of g after P0, appended verbatim to the staged generation and applied to
    # its index with the replay's rules (R5-R7).
    new, nix = b.log, b.ix
    h = _reader(q, b, old, k)
    if q._read_exact(h, pos, q._o.mv_hdr) != _HDR:
        raise OSError(_EIO, "short read in " + ddq.segment_name(old.gen, k))
    _m, _v, typ, seq, arg, plen, rlen, _c, _r = struct.unpack_from(_REC_FMT, q._o.rec, 0)
    pay = q._read_record(old, k, pos, typ, seq, plen, h)
    off = q._append(new, typ, seq, arg, pay if plen else None, True)
    b.to = pos + rlen
    if typ == _T_DATA:
        nix.add(seq, len(new.sizes) - 1, plen)
        p = b.plan
        if p is not None and not (
            q._place(p, _MIN_REC + plen)
            and q._place(p, _STATE_REC)
            and q._place(p, _MIN_REC + q.reason_budget)
        ):
            b.plan = None
        return
    j = nix.find(seq)
    if j < 0 or typ == _T_STATE:
        raise ddq._err("Corrupt", "record of seq %d does not follow the snapshot", seq)
    a, _l, nb = nix.history(seq)
    if typ == _T_CLAIM:
        nix.put(j, _CLAIMED)
        nix.set_history(j, a, arg, nb)
    elif typ == _T_RETRY:
        nix.put(j, _AVAILABLE)
        nix.set_history(j, a + 1, 0, arg)
    else:
        nix.put(j, _ACKED if typ == _T_ACK else _QUARANTINED)
        nix.set_history(j, a, 0, nb)
        if typ == _T_QUAR:
            nix.reasons[seq] = [len(new.sizes) - 1, off, plen]


# ============================================================================ reclamation state
class Reclaim:
    """The reclamation state of a queue with reclaim_step > 0 (Queue._rm; None otherwise),
    written by this module alone: the staged build, its start rule, the deletion of a replaced
    generation and the shadow of the inline one. Its methods are the queue's calls into staged
    reclamation (q._rm.NAME(q, ...): ddq.py, ddq_compact, ddq_recover) and the steps they take
    (DESIGN §12) [C13][C14]."""

    def __init__(self, units: int) -> None:
        self.units = units  # reclaim_step: records (step units) a build does per call
        self.bld: "Optional[Build]" = None  # g+1 staged over many calls
        self.bnext = 0  # start no build before this many acked items (after a useless one)
        self.dead: "list[int]" = []  # [generation, next index, count]: old segments to delete
        # [segments, last offset, bytes, items] of the generation C DDQ's inline compaction
        # would hold now: admission answers on it (admission parity, below) [C14]
        self.sh: "Optional[list[int]]" = None
        self.nw = 0  # writes (calls that append a record), for the start rule
        self.rr = [0, -1, 0]  # start rule: writes and slack at the last look, slack a write ×16

    def start(self, q: "ddq.Queue") -> None:
        # P0 is the end of g now: the snapshot holds every item not acked at P0 in its state at
        # P0, the records after P0 follow it verbatim (DESIGN §12) [C13].
        self.dead = []  # (clean below deletes what is left of an older generation)
        # (ddq_compact: sync, manifest, marker, clean; a failure fail-stops)
        ddq._part("ddq_compact").prepare_format(q)
        log = q._log
        b = Build(log.gen + 1, q._o.tc, q._ix.n, q._log.next, len(log.sizes) - 1, log.off)
        self.bld = b
        try:
            q._new_segment(b.log, True)
        except OSError as e:  # as an inline compaction: fail-stop [C7][R20]
            self.drop(q)
            q._fail()
            raise ddq._io_failure(e, "compaction")

    def due(self, q: "ddq.Queue", n: int) -> bool:
        # Start staging g+1 as late as admission allows: when its room left (A5's slack, on g) is
        # about what the calls of the build will use. The build takes a unit per pending item (and
        # per _SKIP acked ones), s units a call, and the tail grows by at most a record a call, so
        # it ends after about units ÷ (s - 1) calls; each uses the slack a call has used lately
        # (its record, and the control reserve of a new pending item), measured from one enqueue to
        # the next and followed at once when it rises; a quarter more for margin. Later than that
        # and admission or the segment limit forces a whole copy; earlier and a generation absorbs
        # less before its copy (DESIGN §12) [C13].
        ix = q._ix
        if self.bld is not None or q._slack < 0 or not ix.acked or ix.acked < self.bnext:
            return (
                False  # room unknown, or nothing (or too little since a useless build) to reclaim
            )
        last, writes, slack = self.rr, self.nw, q._slack
        if 0 <= last[1] and last[0] < writes and slack <= last[1]:
            d = (last[1] - slack) * 16 // (writes - last[0])
            last[2] = d if d > last[2] else (last[2] * 7 + d) // 8
        last[0], last[1] = writes, slack
        if self.dead:
            return False  # g-1's segments are still going, 4 a call: then start (bounded work)
        s = self.units
        units = ix.avail + ix.claimed + ix.quar + ix.acked // _SKIP
        calls = units // (s - 1 if s > 1 else 1) + 8
        per = last[2] * 5 // 64  # (×16 fixed point, + 1/4)
        return slack < calls * (per if per > _MIN_REC + n else _MIN_REC + n)

    def write(self, q: "ddq.Queue", total: int, typ: int) -> None:
        # Before each record Queue._write appends: counted for the start rule (due), a step of the
        # build (a publish moves the record to g+1) or of the old generation's deletion, and the
        # shadow of what the inline generation does with it [C13][C14].
        self.nw += 1
        if self.bld is not None:
            self.step(q)
        elif self.dead:
            self.unlink(q)
        if self.sh is not None:
            self.shadow(q, total, typ)

    def cow(self, q: "ddq.Queue", i: int) -> None:
        # Item i changes state while a build runs: an item not copied yet keeps its state at P0 for
        # the copy [C13].
        b, ix = self.bld, q._ix
        if b is not None and b.i <= i < b.n0:
            s = ix.seq(i)
            if s not in b.cow:
                a, le, n = ix.history(s)
                b.cow[s] = (ix.state(i), a, le, n, ix.reasons.get(s))

    def finish(self, q: "ddq.Queue") -> None:
        # At close: the staged generation dropped, what is left of a replaced one deleted.
        self.drop(q)
        for _ in range(1 << 20):
            if not self.dead:
                break
            self.unlink(q)

    def drop(self, q: "ddq.Queue", whole: bool = False) -> None:
        # Abandon a staged generation; files left behind are deleted at open (R16) or by the
        # next compaction's clean. whole: a whole compaction follows, whose clean deletes what is
        # left of a replaced generation too.
        if whole:
            self.dead = []
        b, self.bld = self.bld, None
        if b is None:
            return
        fs = q._o.fs
        for h in (b.rh, b.log.h):  # each closed whatever the other's close raised (no handle left)
            if h is not None:
                try:
                    fs.close(h)
                except OSError:
                    pass
        b.rh, b.rhk, b.log.h = None, -1, None
        try:
            for k in range(len(b.log.sizes)):
                fs.remove(q._path(ddq.segment_name(b.log.gen, k)))
            if b.log.sizes:
                fs.sync_dir(q._o.dir)
        except OSError:
            pass

    def step(self, q: "ddq.Queue") -> None:
        """Do at most reclaim_step units of the build: a unit copies the next item of the snapshot
        (after reading at most _SKIP record headers of g to find its DATA) or one record of g's
        tail; publish g+1 when the tail is all copied [C13]. An error abandons the build (g is
        untouched) and fail-stops."""
        b, old, ix = self.bld, q._log, q._ix
        if b is None:
            return
        new, nix = b.log, b.ix
        cm = ddq._part("ddq_compact")  # its copy_item: one table lookup a step, not an item
        try:
            for _ in range(self.units):
                if b.i < b.n0:  # the snapshot, in the states at P0
                    i = b.i
                    for _ in range(_SKIP):  # items acked at P0 are left out, _SKIP a unit
                        seq = ix.seq(i)
                        c = b.cow.get(seq)
                        if c is None:
                            s = ix.state(i)
                            a, lease, nb = ix.history(seq)
                            reason = ix.reasons.get(seq)
                        else:
                            s, a, lease, nb, reason = c
                        if s != _ACKED:
                            break  # (acked at P0: not copied; the copy's index counts its own)
                        i += 1
                        b.i = i
                        if i >= b.n0:
                            break
                    if s == _ACKED:
                        continue
                    ln = ix.length(i)
                    data = _scan(q, b, old, seq, ln)
                    if data is None:
                        continue  # (_SKIP headers read: the scan goes on in the next unit)
                    b.i = i + 1
                    b.plan = cm.copy_item(
                        q, old, new, nix, i, seq, ln, s, a, lease, nb, reason, b.plan, data
                    )
                    continue
                if b.snap is None:  # the manifest's boundary [R8]
                    b.snap = [len(new.sizes), new.off, nix.n]
                k, pos = b.tk, b.to
                last = len(old.sizes) - 1
                if k >= last and pos >= old.off:
                    _close(q, b)
                    self._publish(q)
                    return
                if pos >= old.sizes[k]:
                    b.tk, b.to = k + 1, 0
                    continue
                if k == last and pos >= old.synced:
                    _close(q, b)  # (a handle opened before the sync may not see the new bytes)
                    q._sync_h()  # a fresh reader sees synced bytes only [D7]
                _tail(q, b, old, k, pos)
            _close(q, b)
        except ddq.Limit:  # the copy needs more segments than allowed: no benefit now
            self.drop(q)
            self.bnext = q._ix.acked + self.units
        except BaseException as e:  # as an inline compaction: fail-stop [C7][R20]
            self.drop(q)
            q._fail()
            if isinstance(e, OSError):
                raise ddq._io_failure(e, "compaction")
            raise

    def _publish(self, q: "ddq.Queue") -> None:
        # The commit point is the manifest rename, as for any compaction [C5]; the manifest
        # names the snapshot, the copied tail follows it.
        b, old, fs = self.bld, q._log, q._o.fs
        if b is None or b.snap is None:
            return
        new, nix = b.log, b.ix
        if sum(new.sizes) >= sum(old.sizes):  # no benefit: g stays, as for compact() [C8]
            self.drop(q)
            self.bnext = q._ix.acked + self.units
            return
        fs.sync(new.h)
        new.synced = new.off
        new.dirty = False
        fs.sync_dir(q._o.dir)
        published = [False]
        try:
            ddq._part("ddq_compact").publish(
                q, new.gen, b.next0, b.snap[0], b.snap[2], b.snap[1], published
            )
        except BaseException as e:
            if not published[0]:
                raise  # (the caller abandons the build)
            self.bld = None
            try:
                fs.close(new.h)  # kept on disk, not adopted: recover() reopens it
            except OSError:
                pass
            q._fail()  # an uncertain publication: recover before writing again [C7]
            if isinstance(e, OSError):
                raise ddq._io_failure(e, "compaction")
            raise
        self.bld = None
        gen, segs = old.gen, len(old.sizes)
        cm = ddq._part("ddq_compact")
        cm.adopt(q, new, nix, b.plan)  # the writer takes g+1, and the index with it [C6]
        # The swept claims stay RAM-only where the new generation holds them claimed (T2).
        for s in list(q._swept):
            j = nix.find(s)
            le = nix.live.get(s)
            if j >= 0 and le is not None and nix.state(j) == _CLAIMED:
                nix.put(j, _AVAILABLE)
                le[_LV_LEASE] = 0
            else:
                del q._swept[s]
        # g's segments go a few a call (unlink); a cut leaves them to recovery (R16).
        self.dead = [gen, 0, segs]
        cm.index_update(q)

    def unlink(self, q: "ddq.Queue") -> None:
        # Delete up to 4 segments of a replaced generation [C13]; errors leave them to the next
        # clean (compaction, recovery: R16).
        d, fs = self.dead, q._o.fs
        try:
            for _ in range(4):
                if d[1] >= d[2]:
                    self.dead = []
                    fs.sync_dir(q._o.dir)
                    return
                p = q._path(ddq.segment_name(d[0], d[1]))
                d[1] += 1
                if fs.kind(p) == 1:
                    fs.remove(p)
        except OSError:
            self.dead = []

    # ------------------------------------------------------------------ admission parity
    # The staged generation is laid out differently from the one C DDQ's inline compaction
    # leaves (the carried tail, a copy made earlier), and admission depends on where the current
    # generation's log ends (A3, A5). So a staged queue keeps sh, the [segments, last offset,
    # bytes, items] of the generation the inline mode would hold, advanced by every record and
    # compacted (in RAM: its layout only) exactly where the inline mode compacts; admission
    # answers on it, so accept/reject are C DDQ's call for call (DESIGN §12) [C13].
    def mirror(self, q: "ddq.Queue") -> None:
        # g is what C DDQ's queue holds now: at open, after compact() and purge(). Under the hold
        # rule (window > 0) admission is H2's, which depends on the contents only: no shadow [H8].
        if q._o.win:
            return
        log = q._log
        self.sh = [len(log.sizes), log.off, sum(log.sizes), q._ix.n]

    def fresh(self, q: "ddq.Queue", reserve: int, required: int) -> None:
        """The inline compaction of the shadow generation, in RAM: the layout of a copy of every
        unacked item (C4: DATA, a STATE unless AVAILABLE without history, its reason), next-fit; or
        Full as C8/C11 with the shadow unchanged. O(items), no I/O [C13]."""
        sh, ix = self.sh, q._ix
        if sh is None:
            return
        if required and sh[3] <= ix.avail + ix.claimed + ix.quar:
            raise ddq._err("Full", "max_items reached and nothing is acked")
        # The indexes of the AVAILABLE items with history (each gets a STATE) and of the reasons:
        # small tables, so the pass over the column reads no seq.
        st = {}
        for e in ix.live.values():
            if e[_LV_ATT] or e[_LV_LEASE] or e[_LV_NB]:
                st[e[_LV_I]] = 1
        rs = {}
        for sq, reason in ix.reasons.items():
            j = ix.find(sq)
            if j >= 0:
                rs[j] = _MIN_REC + reason[2]
        # Next-fit (A2) on local ints: this is the one O(items) pass, no calls per record.
        k = o = total = n = i = 0
        seg, w, cnt = q._o.seg_bytes, q._o.max_segs, ix.n
        for c in range(len(ix.col)):  # per chunk: its states, its base length and lengths over it
            ch, cl, lv = ix.col[c], ix.cl[c], ix.lv[c]
            for j in range(_CH):
                if i >= cnt:
                    break
                s = (ch[j >> 2] >> ((j & 3) << 1) & 3) + 1
                if s != _ACKED:
                    n += 1
                    x = _MIN_REC + cl + (0 if lv is None else lv[j])  # its DATA
                    y = _STATE_REC if s != _AVAILABLE or (st and i in st) else 0  # a STATE [C4]
                    z = rs[i] if rs and i in rs else 0  # its reason
                    total += x + y + z
                    for _ in range(3):  # each record in turn, next-fit (no tuple: no allocation)
                        if x:
                            if k == 0 or o + x > seg:
                                if k >= w:
                                    raise ddq._err("Full", "the copy does not fit max_segments")
                                k += 1
                                o = 0
                            o += x
                        x, y = y, z
                        z = 0
                i += 1
        if k == 0:
            k = 1  # the copy's first segment exists even when empty
        if total >= sh[2] or n > q._o.max_items - required or (k >= w and o + reserve > seg):
            raise ddq._err("Full", "compaction: no benefit")
        sh[0], sh[1], sh[2], sh[3] = k, o, total, n

    def admit(self, q: "ddq.Queue", n: int) -> None:
        # enqueue's admission (A1-A6) for a staged queue: C DDQ's answer on the shadow generation,
        # compacting it where C DDQ's enqueue compacts. Then g must hold the item and the records
        # that drain every pending item (A8), else g is compacted whole now, as inline. That check
        # leaves out A5's STATE share: a whole copy of g can exceed the shadow by a STATE in place
        # of a CLAIM (24 B) per item, inside the 72 B A5 reserved for it (DESIGN §12) [C13].
        sh, mx = self.sh, q._o.max_items
        if sh is None:
            return
        adm = q._adm  # ddq_admit: a staged queue with window > 0 admits by ddq_hold [H8]
        if not adm.admit(q, n, sh) or sh[3] >= mx:
            self.fresh(q, _MIN_REC + n, 1 if sh[3] >= mx else 0)
            if not adm.admit(q, n, sh):
                raise ddq._err("Full", "admission reserve exhausted")
        if sh[3] >= mx:
            raise ddq._err("Full", "max_items reached")
        if not adm.admit(q, n, None, True) or q._ix.n >= mx:
            ddq._part("ddq_compact").compact_now(q, _MIN_REC + n, 1 if q._ix.n >= mx else 0)
            if not adm.admit(q, n, None, True) or q._ix.n >= mx:
                raise ddq._err("Full", "admission reserve exhausted")

    def shadow(self, q: "ddq.Queue", total: int, typ: int) -> None:
        # A record the shadow generation takes: the segment limit compacts it first as _write
        # compacts g inline (Limit when that gives no room), then next-fit placement [C13].
        sh = self.sh
        if sh is None:
            return
        if sh[1] > 0 and sh[1] + total > q._o.seg_bytes and sh[0] >= q._o.max_segs:
            try:
                self.fresh(q, total, 0)
            except ddq.Full:
                raise ddq._err("Limit", "segment limit reached and compaction gave no room")
        q._place(sh, total)
        sh[2] += total
        if typ == _T_DATA:
            sh[3] += 1
