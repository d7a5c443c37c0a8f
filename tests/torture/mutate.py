# mutate: bad images for part 3. Subset Python: CPython enumerates every mutation (and Hypothesis
# draws more); MicroPython replays seeded random ones with the same code.
#
# A base image is the directory a seeded workload leaves on MemFS. A mutated copy is opened with
# ddq under a storage-call budget; the only acceptable outcomes are ddq.Corrupt, or a clean open
# whose state is one the workload actually passed through (a valid prefix: a torn tail, a cut at a
# record boundary, a lost last segment), with every payload byte-identical.
import struct

import memfs
import tmodel

import ddqfmt as F

U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF
BUDGET = 200000  # storage calls per open: a corrupt length must not make recovery spin
INDEX = "queue.index"


def base_sha256(files):
    """The hex sha256 of a base image (name, NUL, bytes; sorted): CPython's and MicroPython's must
    agree. queue.index is left out: the order of its live entries follows the writer's dict
    iteration, which SPEC 12.1 X2 does not fix (an index is a cache; X4 checks it, not its
    bytes)."""
    import binascii
    import hashlib

    h = hashlib.sha256()
    for n in sorted(files):
        if n != INDEX:
            h.update(n.encode())
            h.update(b"\0")
            h.update(files[n])
    return binascii.hexlify(h.digest()).decode()


def build_base(ddq, seed, nops, path="/q", index=None):
    """The directory a seeded workload leaves. index: index_bytes (tmodel.params); with it every
    queue.index the run wrote is kept as wl.old_indexes (oldest first, the final one excluded)."""
    memfs.MemFS.Locked = ddq.Locked
    fs = memfs.MemFS(dirs=(path,))
    opts = tmodel.params(seed, None, index)
    wl = tmodel.Workload(ddq, path, lambda: fs, seed, nops, opts=opts)
    olds = []

    def keep(i):
        ino = fs.names.get(path + "/" + INDEX)
        if ino is not None and bytes(fs.data[ino]) not in olds:
            olds.append(bytes(fs.data[ino]))
        return False

    try:
        wl.run(stop=keep if index else None)
    finally:
        wl.close()
    files, dirs = fs.snapshot()
    final = files.get(path + "/" + INDEX)
    wl.old_indexes = [b for b in olds if b != final]
    pre = path + "/"
    out = {}
    for p in files:
        if p.startswith(pre):
            out[p[len(pre) :]] = files[p]
    acceptable = []
    for s in wl.snaps[1:]:
        for t in (s, tmodel.compacted(s)):
            if t not in acceptable:
                acceptable.append(t)
    return out, wl, acceptable


def _set(files, name, data):
    f = dict(files)
    if data is None:
        f.pop(name, None)
    else:
        f[name] = bytes(data)
    return f


def _segments(files):
    segs = []
    for n in files:
        g = F.parse_seg_name(n)
        if g is not None:
            segs.append((g[0], g[1], n))
    segs.sort()
    return segs


def _rerecord(rec, seq=None, rtype=None, arg=None, plen=None, rlen=None):
    """Re-encode a record with some header fields changed and a VALID crc."""
    magic, ver, t, s, a, pl, rl, crc, res = struct.unpack_from(F.HDR, rec, 0)
    payload = rec[40 : 40 + pl]
    return F.encode_record(
        t if rtype is None else rtype,
        s if seq is None else seq,
        a if arg is None else arg,
        payload,
        plen=plen,
        rlen=rlen,
    )


def record_mutations(files):
    """Valid-CRC records with wrong fields: extreme lengths, out-of-order and bad sequences,
    changed types and args."""
    for _g, _idx, name in _segments(files):
        data = files[name]
        recs, end = F.decode_records(data)
        for j in range(len(recs)):
            off, t, seq, arg, pl = recs[j]
            rec = data[off : off + 48 + len(pl)]

            def put(new, what, name=name, data=data, off=off, rec=rec):
                return (
                    "rec:%s %s@%d" % (what, name, off),
                    _set(files, name, data[:off] + new + data[off + len(rec) :]),
                )

            for v in (0, 1, 47, 49, len(pl) + 1, 0x7FFFFFFF, U32):
                yield put(_rerecord(rec, plen=v), "plen=%d" % v)
                yield put(_rerecord(rec, rlen=v), "rlen=%d" % v)
            for v in (0, 1, seq - 1, seq + 1, seq + 1000, U64 - 1, U64):
                if 0 <= v <= U64 and v != seq:
                    yield put(_rerecord(rec, seq=v), "seq=%d" % v)
            for v in range(0, 8):
                if v != t:
                    yield put(_rerecord(rec, rtype=v), "type=%d" % v)
            for v in (0, 1, U64):
                if v != arg:
                    yield put(_rerecord(rec, arg=v), "arg=%d" % v)
            if j + 1 < len(recs):  # swap two neighbours (each keeps a valid crc)
                o2 = recs[j + 1][0]
                r2 = data[o2 : o2 + 48 + len(recs[j + 1][4])]
                yield (
                    "rec:swap %s@%d" % (name, off),
                    _set(files, name, data[:off] + r2 + rec + data[o2 + len(r2) :]),
                )
            yield ("rec:dup %s@%d" % (name, off), _set(files, name, data[:off] + rec + data[off:]))
            yield (
                "rec:drop %s@%d" % (name, off),
                _set(files, name, data[:off] + data[off + len(rec) :]),
            )


def manifest_mutations(files):
    m = files.get(F.MANIFEST)
    if m is None or F.decode_manifest(m) is None:
        return
    gen, nxt, segs, items, end = F.decode_manifest(m)
    fields = [gen, nxt, segs, items, end]
    names = ("generation", "next_seq", "segment_count", "item_count", "end_offset")
    for i in range(5):
        cands = [0, 1, fields[i] - 1, fields[i] + 1, fields[i] + 48, U32]
        if i in (0, 1, 4):
            cands.append(U64)
        for v in cands:
            if v < 0 or v == fields[i] or (i in (2, 3) and v > U32):
                continue
            f2 = list(fields)
            f2[i] = v
            yield (
                "manifest:%s=%d" % (names[i], v),
                _set(files, F.MANIFEST, F.encode_manifest(*f2)),
            )
    for what, kw in (
        ("version", {"version": 2}),
        ("size", {"size": 47}),
        ("reserved", {"reserved": 1}),
        ("crc", {"crc": 0}),
        ("magic", {"magic": b"DDQX"}),
    ):
        yield ("manifest:%s" % what, _set(files, F.MANIFEST, F.encode_manifest(*fields, **kw)))
    yield ("manifest:short", _set(files, F.MANIFEST, m[:47]))
    yield ("manifest:long", _set(files, F.MANIFEST, m + b"\0"))


def file_mutations(files):
    segs = _segments(files)
    for g, idx, name in segs:
        yield ("seg:delete %s" % name, _set(files, name, None))
        yield (
            "seg:dup-as-next %s" % name,
            _set(files, F.seg_name(g, len([s for s in segs if s[0] == g])), files[name]),
        )
        for _g2, _idx2, name2 in segs:
            if name2 != name:
                f = _set(files, name, files[name2])
                yield ("seg:swap %s %s" % (name, name2), _set(f, name2, files[name]))
                yield ("seg:copy %s over %s" % (name, name2), _set(files, name2, files[name]))
        yield (
            "seg:rename-gen+1 %s" % name,
            _set(_set(files, name, None), F.seg_name(g + 1, idx), files[name]),
        )
    for n in (F.MANIFEST, F.MARKER):
        if n in files:
            yield ("file:delete %s" % n, _set(files, n, None))
    if F.MARKER in files:
        yield ("file:marker-nonempty", _set(files, F.MARKER, b"x"))
    for junk in (b"", b"\0" * 48, b"garbage!" * 6):
        yield ("file:stray tmp %d" % len(junk), _set(files, "queue.manifest.tmp", junk))
        if segs:
            yield ("file:stray cut %d" % len(junk), _set(files, segs[-1][2] + ".cut", junk))


def _boundary_cuts(files, name):
    """Cuts of a non-last segment at a record boundary that leave a directory some sequence of
    writers would have written (F7's reader rule): one that keeps a record, and, when both
    segments are inside a snapshot (one compaction wrote them), where this end + the next
    segment's first record is above every segment before this one (each open may bring another
    segment_bytes that holds every segment there is, R15, and options are not on disk, M8).
    Past a snapshot any such cut is one: libddq (no R23) appends after a lost rotation to the
    empty segment it left (V3). Such an image is a valid directory of another history:
    indistinguishable."""
    g = F.parse_seg_name(name)
    if g is None:
        return ()
    nxt = F.seg_name(g[0], g[1] + 1)
    if nxt not in files:
        return ()
    recs, end = F.decode_records(files[nxt])
    if not recs:
        return ()
    first = 48 + len(recs[0][4])
    m = F.decode_manifest(files[F.MANIFEST]) if F.MANIFEST in files else None
    inside = g[0] != 0 and m is not None and m[0] == g[0] and g[1] + 1 < m[2]
    before = [
        len(files[n])
        for n in files
        if F.parse_seg_name(n) is not None
        and F.parse_seg_name(n)[0] == g[0]
        and F.parse_seg_name(n)[1] < g[1]
    ]
    out = []
    recs, end = F.decode_records(files[name])
    for b in [r[0] for r in recs] + [end]:
        if 0 < b < len(files[name]) and (not inside or max(before + [0]) < b + first):
            out.append(b)
    return out


def byte_mutations(files, runs=True):
    """Bit flips at every bit, truncation at every byte, 0x00/0xFF tails, byte runs."""
    for name in sorted(files):
        if name == F.LOCK:
            continue
        data = files[name]
        n = len(data)
        for i in range(n * 8):
            b = bytearray(data)
            b[i >> 3] ^= 1 << (i & 7)
            yield ("flip %s bit %d" % (name, i), _set(files, name, b))
        undetectable = _boundary_cuts(files, name)
        for cut in range(n):
            kind = "truncate-undetectable" if cut in undetectable else "truncate"
            yield ("%s %s at %d" % (kind, name, cut), _set(files, name, data[:cut]))
        for off in range(0, n, 16):
            for fill in (0, 255):
                yield (
                    "fill %s from %d with %02x" % (name, off, fill),
                    _set(files, name, data[:off] + bytes([fill]) * (n - off)),
                )
        for fill in (0, 255):
            yield (
                "grow %s by 64 x %02x" % (name, fill),
                _set(files, name, data + bytes([fill]) * 64),
            )
        if runs:
            r = tmodel.Rng(n)
            for off in range(0, n, 11):
                for ln in (4, 16, 48):
                    for fill in (0, 255, -1):
                        b = bytearray(data)
                        for k in range(off, min(n, off + ln)):
                            b[k] = fill if fill >= 0 else r.u32() & 255
                        yield ("run %s %d+%d %d" % (name, off, ln, fill), _set(files, name, b))


def index_mutations(files, olds):
    """queue.index swapped for every older one the same run wrote (a stale index: same or older
    generation, a shorter prefix), deleted, and the tmp left beside it."""
    if INDEX not in files:
        return
    for k in range(len(olds)):
        yield ("index:old %d of %d" % (k, len(olds)), _set(files, INDEX, olds[k]))
        yield ("index:old %d as tmp" % k, _set(files, INDEX + ".tmp", olds[k]))
    yield ("index:delete", _set(files, INDEX, None))
    yield ("index:moved to tmp", _set(_set(files, INDEX, None), INDEX + ".tmp", files[INDEX]))


def all_mutations(files, olds=()):
    for g in (
        byte_mutations(files),
        record_mutations(files),
        manifest_mutations(files),
        file_mutations(files),
        index_mutations(files, olds),
    ):
        for m in g:
            yield m


def random_mutation(rng, files):
    """One seeded random mutation (MicroPython replay; Hypothesis does the CPython draws)."""
    names = sorted(n for n in files if n != F.LOCK)
    name = names[rng.below(len(names))]
    data = files[name]
    n = len(data)
    k = rng.below(6)
    if k == 0 and n:
        i = rng.below(n * 8)
        b = bytearray(data)
        b[i >> 3] ^= 1 << (i & 7)
        return ("flip %s bit %d" % (name, i), _set(files, name, b))
    if k == 1 and n:
        c = rng.below(n)
        # labelled as the exhaustive cuts are: a boundary cut a smaller segment_bytes explains (T9)
        kind = "truncate-undetectable" if c in _boundary_cuts(files, name) else "truncate"
        return ("%s %s at %d" % (kind, name, c), _set(files, name, data[:c]))
    if k == 2 and n:
        off = rng.below(n)
        ln = 1 + rng.below(48)
        b = bytearray(data)
        for j in range(off, min(n, off + ln)):
            b[j] = rng.u32() & 255
        return ("run %s %d+%d" % (name, off, ln), _set(files, name, b))
    if k == 3:
        fill = (0, 255)[rng.below(2)]
        off = rng.below(n + 1)
        return (
            "fill %s from %d %02x" % (name, off, fill),
            _set(files, name, data[:off] + bytes([fill]) * (n - off + 16)),
        )
    gens = [record_mutations, manifest_mutations, file_mutations][rng.below(3)]
    ms = list(gens(files))
    if not ms:
        return ("none", files)
    return ms[rng.below(len(ms))]


def _open_view(ddq, files, opts, path, index):
    """Open files with index_bytes=index: ("err", type, message) or ("ok", index_view)."""
    full = {}
    for n in files:
        full[path + "/" + n] = files[n]
    fs = memfs.MemFS(full, (path,), budget=BUDGET)
    kw = dict(opts)
    kw["index_bytes"] = index
    try:
        q = ddq.Queue(path, storage=fs, clock=tmodel.Clock(tmodel.CLOCK0 + 10**7), **kw)
    except Exception as e:
        return ("err", tmodel.exc_name(e), str(e))
    try:
        return ("ok", tmodel.index_view(q), q.index_used)
    except Exception as e:
        return ("err", tmodel.exc_name(e), "after open: " + str(e))
    finally:
        q.close()


def judge_index(ddq, files, opts, path="/q", got=None):
    """An image holding queue.index, opened through it (index_bytes=1; got: that open's view, as
    judge(view=...) leaves it) and with index_bytes=0: the same error or the identical state
    (SPEC 12.1 X4: a damaged, stale or forged index is ignored). Returns (index_used, None) or
    (index_used, how they differ)."""
    if INDEX not in files:
        return False, None
    if not got:
        got = _open_view(ddq, files, opts, path, 1)
    want = _open_view(ddq, files, opts, path, 0)
    used = got[0] == "ok" and got[2]
    if got[0] != want[0] or (got[0] == "err" and got != want):
        return used, "index open %r, full replay %r" % (
            got[:3] if got[0] == "err" else "ok",
            want[:3] if want[0] == "err" else "ok",
        )
    if got[0] == "ok" and got[1] != want[1]:
        return used, "index open and full replay differ: " + tmodel.index_diff(got[1], want[1])
    return used, None


def judge(ddq, base, files, acceptable, opts, path="/q", payloads=None, forged=False, view=None):
    """Open a mutated image. Returns (outcome, [(category, detail)]); outcome is "corrupt",
    "clean", "forged" or "error".

    forged: the mutation re-encoded whole records with VALID crcs (rec:...). A checksummed log
    cannot tell such a record from a real one, so a clean open to another state is counted as
    "forged" (not a failure) as long as no payload is wrong."""
    full = {}
    for n in files:
        full[path + "/" + n] = files[n]
    fs = memfs.MemFS(full, (path,), budget=BUDGET)
    clock = tmodel.Clock(tmodel.CLOCK0 + 10**7)
    try:
        q = ddq.Queue(path, storage=fs, clock=clock, **opts)
    except ddq.Corrupt as e:
        if view is not None:  # what judge_index compares with the index_bytes=0 open
            view.append(("err", "Corrupt", str(e)))
        if fs.open_count():
            return "error", [("unexpected", "Corrupt left %d handles open" % fs.open_count())]
        return "corrupt", []
    except memfs.BudgetExceeded:
        return "error", [("unexpected", "recovery exceeded %d storage calls" % BUDGET)]
    except Exception as e:
        return "error", [("unexpected", "open raised %s: %s" % (type(e).__name__, e))]
    try:
        try:
            st = tmodel.recovered_state(q)
        except ddq.Corrupt as e:
            if view is not None:
                view.append(("err", "Corrupt", "after open: " + str(e)))
            return "corrupt", []
        if view is not None:
            view.append(("ok", tmodel.index_view(q, st), q.index_used))
        if st in acceptable:
            return "clean", []
        if opts.get("reclaim_step"):
            # A staged generation (SPEC C13) drops the items acked when it started, not those
            # acked since: a prefix of its tail shows the non-acked items of a state the
            # workload had and some of that state's acked ones (tmodel.check's "partial").
            c, racked = tmodel.compacted(st), [t for t in st if t[1] == "acked"]
            if any(tmodel.compacted(a) == c and all(t in a for t in racked) for a in acceptable):
                return "clean", []
        if forged and payloads is not None:
            # A valid-CRC DATA record whose seq was moved into a gap of a snapshot prefix (gaps
            # are legal there, R7) carries its payload to another seq: no checksum can tell.
            wrong = [t[0] for t in st if payloads.get(t[0]) != t[5]]
            return ("forged-relabel" if wrong else "forged"), []
        return "error", [
            (
                "unexpected",
                "clean open to a state the workload never had: %r" % (tmodel._short(st),),
            )
        ]
    except Exception as e:
        return "error", [("unexpected", "reading raised %s: %s" % (type(e).__name__, e))]
    finally:
        q.close()
