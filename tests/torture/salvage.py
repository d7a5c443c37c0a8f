"""Part 5: salvage (port/ddq_salvage.py, SPEC section 15) over the bad images of part 3.

Each distinct mutated image of a seeded base (mutate.all_mutations) is written to a real
directory, salvaged into a new one, and the result opened with ddq and read by the independent
reader (ddqhost.fsck). Judged against the base (what the workload left, opened with ddq):

  intact  a DATA record of a live (not acked) base item whose bytes are unchanged at the same
          segment name and offset in the image
  kept    of those, the ones the result holds (the target: all of them)
  wrong   a result item whose payload is not the one enqueued with its seq, or whose state is
          not the base's although salvage did not list it as reset (target 0)
  reused  the result's next_seq below what the image still shows: the highest seq of any record
          intact in it + 1, and the manifest's next_seq when the manifest is intact (target 0)
  reset   items salvage brought back available (counted, allowed: possible duplicates)
  (a segment cut at a record boundary is no damage by its shape, F7/K2: the states of the items
  whose records it removed are not judged, their presence and payloads are)
  behind  the result's next_seq below the base's because every record and manifest that held
          the higher seqs was destroyed (unknowable; counted, not a failure)

Forged images (records or a manifest re-encoded with valid CRCs: rec:*, manifest:field=value,
truncate-undetectable) are counted apart: no checksum can tell them from real ones.
"""

import hashlib
import os
import shutil
import sys
import tempfile

import mutate
import tmodel

import ddqfmt as F
import shared

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "host"))

CLOCK = 1767225600000
LIMITS = ("segment_bytes", "max_payload_bytes", "max_items", "max_segments")


def _write(path, files):
    os.mkdir(path)
    for n, b in files.items():
        with open(os.path.join(path, n), "wb") as f:
            f.write(b)


def _view(ddq, path, opts):
    q = ddq.Queue(path, clock=lambda: CLOCK, **opts)
    try:
        return shared.live_items(q, b""), q.stats().next_seq
    finally:
        q.close()


def _forged(desc):
    return (
        desc.startswith("rec:")
        or desc.startswith("truncate-undetectable")
        or (desc.startswith("manifest:") and "=" in desc)
    )


def _tail_cut(base, files):
    """True when the image is the base log cut at a record boundary at its end (the last segment
    shortened, later ones gone, nothing else changed): a crash earlier looks the same, so no
    reader can tell which records followed (counted apart, like part 3's undetectable cuts)."""
    bsegs = sorted((F.parse_seg_name(n), n) for n in base if F.parse_seg_name(n) is not None)
    isegs = sorted((F.parse_seg_name(n), n) for n in files if F.parse_seg_name(n) is not None)
    other = [n for n in set(base) | set(files) if F.parse_seg_name(n) is None and n != F.LOCK]
    if any(base.get(n) != files.get(n) for n in other) or not isegs or len(isegs) > len(bsegs):
        return False
    if [n for _, n in isegs] != [n for _, n in bsegs[: len(isegs)]]:
        return False
    for _, n in isegs[:-1]:
        if files[n] != base[n]:
            return False
    last = isegs[-1][1]
    b, i = base[last], files[last]
    if b[: len(i)] != i or (len(i) == len(b) and len(isegs) == len(bsegs)):
        return False
    recs, end = F.decode_records(b)
    return len(i) in [r[0] for r in recs] + [end]


def _cut_about(base, files):
    """The seqs of the records a cut of one segment at a record boundary removed (else empty).
    A segment shorter than F7 allows is no damage (ddq's own writes reach it: a rotation whose
    record a power cut lost, then appends after the reopen; another segment_bytes), so a reader
    sees those records only when their loss leaves a trace (a seq gap, R5; an R6/R7 transition):
    the states of their items are not judged."""
    diff = [n for n in set(base) | set(files) if base.get(n) != files.get(n)]
    if (
        len(diff) != 1
        or diff[0] not in files
        or diff[0] not in base
        or F.parse_seg_name(diff[0]) is None
    ):
        return set()
    b, i = base[diff[0]], files[diff[0]]
    if len(i) >= len(b) or b[: len(i)] != i:
        return set()
    recs, _end = F.decode_records(b)
    if len(i) not in [r[0] for r in recs]:
        return set()
    return set(r[2] for r in recs if r[0] >= len(i))


def run_seed(ddq, seed, nops, limit=None, max_fail=5, fsck_every=1):
    import ddq_salvage
    from ddqhost import fsck

    base, wl, _acceptable = mutate.build_base(ddq, seed, nops)
    opts = {k: wl.opts[k] for k in LIMITS}
    # Resurrected items (an ACK lost) may exceed the writer's max_items: salvage with room.
    sopts = dict(opts, max_items=1000, max_segments=256)
    root = tempfile.mkdtemp(
        prefix="ddq-salvage-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    res = {
        "seed": seed,
        "images": 0,
        "forged": 0,
        "intact": 0,
        "kept": 0,
        "wrong": 0,
        "reused": 0,
        "reset": 0,
        "behind": 0,
        "nothing_usable": 0,
        "clean": 0,
        "with_loss": 0,
        "unexpected": 0,
        "forged_wrong": 0,
        "ddq_opens": 0,
        "undetectable_cut": 0,
        "fail": [],
    }

    def fail(cat, desc, detail):
        where = {"seed": seed, "nops": nops, "mutation": desc}
        tmodel.tally(res, [(cat, detail)], max_fail, where)

    try:
        bdir = os.path.join(root, "base")
        _write(bdir, {n: b for n, b in base.items() if n != F.LOCK})
        live, base_next = _view(ddq, bdir, wl.opts)
        shutil.rmtree(bdir)
        cands = []  # (name, off, record bytes, seq, is DATA of a live item)
        for n in base:
            if F.parse_seg_name(n) is None:
                continue
            recs, _end = F.decode_records(base[n])
            for off, typ, seq, _arg, pay in recs:
                rlen = 48 + len(pay)
                cands.append(
                    (n, off, base[n][off : off + rlen], seq, typ == F.T_DATA and seq in live)
                )
        seen = set()
        for k, (desc, files) in enumerate(mutate.all_mutations(base, wl.old_indexes)):
            if limit is not None and k >= limit:
                break
            h = hashlib.blake2b(digest_size=12)
            for n in sorted(files):
                h.update(n.encode() + b"\0%d\0" % len(files[n]))
                h.update(files[n])
            h = h.digest()
            if h in seen:
                continue
            seen.add(h)
            res["images"] += 1
            forged = _forged(desc)
            if forged:
                res["forged"] += 1
            cut = _tail_cut(base, files)
            if cut:
                res["undetectable_cut"] += 1
            about = _cut_about(base, files)
            src = os.path.join(root, "src")
            out = os.path.join(root, "out")
            for p in (src, out):
                if os.path.exists(p):
                    shutil.rmtree(p)
            _write(src, {n: b for n, b in files.items() if n != F.LOCK})
            intact = []
            floor = 1
            for n, off, rb, seq, is_live in cands:
                if files.get(n, b"")[off : off + len(rb)] == rb:
                    floor = max(floor, seq + 1)
                    if is_live:
                        intact.append(seq)
            if F.MANIFEST in base and files.get(F.MANIFEST) == base[F.MANIFEST]:
                floor = max(floor, F.decode_manifest(base[F.MANIFEST])[1])
            # the reference state: what ddq itself opens the image to (a torn-looking tail is cut
            # as a crash's, R10/R11), else the base
            ref = live
            cp = os.path.join(root, "cp")
            if os.path.exists(cp):
                shutil.rmtree(cp)
            shutil.copytree(src, cp)
            try:
                ref = _view(ddq, cp, wl.opts)[0]
                res["ddq_opens"] += 1
            except Exception:
                pass
            try:
                rep = ddq_salvage.salvage(src, out, **sopts)
            except Exception as e:
                fail("unexpected", desc, "salvage raised %s: %s" % (type(e).__name__, e))
                continue
            st = rep["status"]
            res[
                {"clean": "clean", "salvaged_with_loss": "with_loss"}.get(st, "nothing_usable")
            ] += 1
            if st == "nothing_usable":
                if intact and not forged:
                    res["intact"] += len(intact)
                    fail(
                        "unexpected",
                        desc,
                        "nothing_usable with %d intact DATA records" % len(intact),
                    )
                continue
            try:
                got, nxt = _view(ddq, out, sopts)
            except Exception as e:
                fail(
                    "unexpected", desc, "the result does not open: %s: %s" % (type(e).__name__, e)
                )
                continue
            if fsck_every and res["images"] % fsck_every == 0:
                r = fsck.scan(out, dict(sopts))
                if r.verdict != 0:
                    fail("unexpected", desc, "fsck: " + fsck.render_verify(r)[-300:])
            if forged:
                for s, t in got.items():
                    if wl.payloads.get(s) != t[4]:
                        res["forged_wrong"] += 1
                continue
            res["intact"] += len(intact)
            missed = [s for s in intact if s not in got]
            res["kept"] += len(intact) - len(missed)
            if missed:
                fail(
                    "unexpected", desc, "intact DATA not salvaged: %r (report %r)" % (missed, rep)
                )
            reset = set(rep["reset"]) | set(rep["quarantined_uncertain"])
            res["reset"] += len(reset)
            for s, t in got.items():
                if wl.payloads.get(s) != t[4]:
                    fail(
                        "wrong",
                        desc,
                        "seq %d: payload %r, enqueued %r" % (s, t[4], wl.payloads.get(s)),
                    )
                elif (
                    ref.get(s) != t
                    and live.get(s) != t
                    and s not in reset
                    and not cut
                    and s not in about
                ):
                    # a reset item is AVAILABLE; an uncertain quarantine stays QUARANTINED
                    fail(
                        "wrong",
                        desc,
                        "seq %d: state %r, reference %r, not reset" % (s, t[:4], ref.get(s)),
                    )
            if nxt < floor:
                fail("reused", desc, "next_seq %d < %d the image still shows" % (nxt, floor))
            if nxt < base_next:
                res["behind"] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res


# -- part 5b: power cuts during an in-place salvage (Queue(..., on_corrupt="salvage"), SPEC K9-K12)
#
# Each bad image of a seed that ddq reports Corrupt is opened on a recording MemFS with
# on_corrupt="salvage" (the uncut salvage, judged like part 5: every intact DATA of a live item
# kept, payloads right, next_seq not behind the image). For a sample of them the salvage's log
# of creates, writes, syncs, renames and removes is replayed step by step (crash.Sim), and after
# every step each crash state under the POSIX, LittleFS and FAT models (FAT: a rename over a file
# is remove + rename) is opened again with on_corrupt="salvage" and judged against the uncut one:
#
#   (inplace_reset counts the items the uncut salvages brought back available: possible duplicates)
#   cut_lost    an item the uncut salvage kept is missing after the cut and reopen (target 0)
#   cut_wrong   an item whose payload is not the one enqueued with its seq (target 0)
#   cut_reused  next_seq, or a probe enqueue's seq, below the uncut salvage's next_seq (target 0)
#   cut_aside   a file the uncut salvage kept aside (salvaged-<tag>-<name>) is not kept, byte
#               for byte, after the cut and reopen: damage deleted (target 0)
#   unexpected  the reopen raises, or a plain reopen after it is not clean
#
# A sample of the reopens is cut again at every step (depth 2, LittleFS and POSIX views).

QPATH = "/q"


def _mem_open(ddq, memfs, files, dirs, opts, record=False, mode="salvage"):
    fs = memfs.MemFS(files, dirs, record=record, budget=400000)
    q = ddq.Queue(QPATH, storage=fs, clock=lambda: CLOCK, on_corrupt=mode, **opts)
    return fs, q


def _items(q):
    out = {}
    for i in q.items():
        if i.state != "acked":
            out[i.seq] = bytes(q.read(i.seq))
    return out


def _aside_of(files):
    # {original name: bytes} of what salvage kept aside (salvaged-<tag>-<name>).
    out = {}
    pre = QPATH + "/salvaged-"
    for p, b in files.items():
        if p.startswith(pre):
            rest = p[len(pre) :]
            out[rest[rest.index("-") + 1 :]] = b
    return out


def _judge_cut(ddq, memfs, files, dirs, opts, ref, ref_next, ref_aside, payloads, plain=False):
    """[(category, detail)] for one crash state of an in-place salvage."""
    try:
        fs, q = _mem_open(ddq, memfs, files, dirs, opts, record=True)
    except Exception as e:
        return [("unexpected", "reopen raised %s: %s" % (type(e).__name__, e))], None
    bad = []
    opened = len(fs.log)  # the reopen's own steps (its salvage, if any): what depth 2 cuts
    resumed = q.stats().salvaged
    try:
        got = _items(q)
        nxt = q.stats().next_seq
        for s in ref:
            if s not in got:
                bad.append(("cut_lost", "seq %d kept by the uncut salvage is missing" % s))
        for s, p in got.items():
            if payloads.get(s) != p:
                bad.append(
                    ("cut_wrong", "seq %d: payload %r, enqueued %r" % (s, p, payloads.get(s)))
                )
        if nxt < ref_next:
            bad.append(("cut_reused", "next_seq %d < %d" % (nxt, ref_next)))
        else:
            try:
                seq = q.enqueue(b"probe")
                if seq < ref_next:
                    bad.append(("cut_reused", "probe enqueue got seq %d < %d" % (seq, ref_next)))
            except ddq.Full:
                pass
    finally:
        q.close()
    now, ndirs = fs.snapshot()
    kept = _aside_of(now)
    for n, b in ref_aside.items():
        if kept.get(n) != b:
            bad.append(("cut_aside", "%s not kept aside as it was" % n))
    if plain and not bad:
        try:
            q2 = ddq.Queue(QPATH, storage=memfs.MemFS(now, ndirs), clock=lambda: CLOCK, **opts)
            q2.close()
        except Exception as e:
            bad.append(
                (
                    "unexpected",
                    "a plain reopen after the salvage raised %s: %s" % (type(e).__name__, e),
                )
            )
    return bad, (fs.log[:opened] if resumed else [])


def _torn_ok(variant):
    # POSIX torn writes: a few cut points per write (every byte would multiply the states by
    # the record length: a salvage writes whole records only, so these stand for all of them)
    if variant[0] != "T":
        return True
    t = int(variant[1 : variant.index("/")])
    return t in (0, 1, 8, 40, 47) or t % 97 == 5


def run_cuts(
    ddq, seed, nops, every=40, depth2_every=25, max_fail=5, models=("posix", "lfs", "fat")
):
    import crash
    import memfs

    memfs.MemFS.Locked = ddq.Locked
    base, wl, _acceptable = mutate.build_base(ddq, seed, nops)
    opts = {k: wl.opts[k] for k in LIMITS}
    sopts = dict(opts, max_items=1000, max_segments=256)
    res = {
        "seed": seed,
        "cut_images": 0,
        "inplace_images": 0,
        "inplace_intact": 0,
        "inplace_kept": 0,
        "inplace_wrong": 0,
        "inplace_reused": 0,
        "inplace_reset": 0,
        "cut_states": 0,
        "cut_depth2": 0,
        "cut_lost": 0,
        "cut_wrong": 0,
        "cut_reused": 0,
        "cut_aside": 0,
        "opens_clean": 0,
        "not_salvaged": 0,
        "unexpected": 0,
        "fat_split": 0,
        "fail": [],
    }

    def fail(cat, desc, detail, extra=None):
        res[cat] += 1
        if len(res["fail"]) < max_fail:
            f = {
                "seed": seed,
                "nops": nops,
                "mutation": desc,
                "category": cat,
                "detail": detail[:400],
            }
            f.update(extra or {})
            res["fail"].append(f)

    cands = []
    for n in base:
        if F.parse_seg_name(n) is None:
            continue
        recs, _end = F.decode_records(base[n])
        for off, typ, seq, _arg, pay in recs:
            cands.append((n, off, base[n][off : off + 48 + len(pay)], seq, typ == F.T_DATA))
    live = set()
    fs0 = memfs.MemFS({QPATH + "/" + n: b for n, b in base.items()}, (QPATH,))
    q0 = ddq.Queue(QPATH, storage=fs0, clock=lambda: CLOCK, **wl.opts)
    try:
        live = set(i.seq for i in q0.items() if i.state != "acked")
    finally:
        q0.close()
    seen = set()
    k_img = 0
    for desc, img in mutate.all_mutations(base, wl.old_indexes):
        if _forged(desc):
            continue
        files = {QPATH + "/" + n: b for n, b in img.items()}
        h = crash.state_hash(files, [QPATH])
        if h in seen:
            continue
        seen.add(h)
        # only images ddq itself refuses are salvaged in place
        try:
            _f, q = _mem_open(ddq, memfs, files, (QPATH,), sopts, mode="raise")
            q.close()
            res["opens_clean"] += 1
            continue
        except ddq.Corrupt:
            pass
        except Exception:
            res["not_salvaged"] += 1
            continue
        floor = 1
        intact = []
        for n, off, rb, seq, is_data in cands:
            if img.get(n, b"")[off : off + len(rb)] == rb:
                floor = max(floor, seq + 1)
                if is_data and seq in live:
                    intact.append(seq)
        if F.MANIFEST in base and img.get(F.MANIFEST) == base[F.MANIFEST]:
            floor = max(floor, F.decode_manifest(base[F.MANIFEST])[1])
        try:
            fs, q = _mem_open(ddq, memfs, files, (QPATH,), sopts, record=True)
        except ddq.Corrupt as e:
            res["not_salvaged"] += 1  # nothing usable (K7), or no room (K11)
            if intact and ".salvaged" not in str(e):
                fail(
                    "unexpected",
                    desc,
                    "salvage in place refused %d intact DATA records: %s" % (len(intact), e),
                )
            continue
        except Exception as e:
            fail("unexpected", desc, "salvage in place raised %s: %s" % (type(e).__name__, e))
            continue
        try:
            ref = _items(q)
            ref_next = q.stats().next_seq
            salv = q.stats().salvaged
            res["inplace_reset"] += len(getattr(q, "salvage_report", {"reset": ()})["reset"])
        finally:
            q.close()
        if salv != 1:
            fail("unexpected", desc, "Corrupt on a plain open, but no salvage counted")
            continue
        res["inplace_images"] += 1
        res["inplace_intact"] += len(intact)
        missed = [s for s in intact if s not in ref]
        res["inplace_kept"] += len(intact) - len(missed)
        if missed:
            fail("unexpected", desc, "intact DATA not salvaged in place: %r" % missed)
        for s, p in ref.items():
            if wl.payloads.get(s) != p:
                fail("inplace_wrong", desc, "seq %d: payload %r" % (s, p))
        if ref_next < floor:
            fail(
                "inplace_reused",
                desc,
                "next_seq %d < %d the image still shows" % (ref_next, floor),
            )
        log = list(fs.log)
        ref_aside = _aside_of(fs.snapshot()[0])
        k_img += 1
        if k_img % every:
            continue
        # the cut part: every step of the salvage's log, every model
        res["cut_images"] += 1
        sim = crash.Sim(files, (QPATH,))
        done = set()
        n_judged = 0

        def judge(f, d, plain=False, against=(ref, ref_next, ref_aside, wl.payloads)):
            # a cut state against this image's reference: items, next_seq, what went aside
            return _judge_cut(ddq, memfs, f, d, sopts, *against, plain=plain)

        def unseen(f, d, done=done):
            # a state not judged yet for this image (by content hash); now it is
            h = crash.state_hash(f, d)
            if h in done:
                return False
            done.add(h)
            return True

        for k in range(len(log) + 1):
            if k:
                sim.apply(log[k - 1])
            for model in models:
                for variant, f2, d2, _holes in sim.states(model):
                    if not _torn_ok(variant) or not unseen(f2, d2):
                        continue
                    res["cut_states"] += 1
                    res["fat_split"] += variant == "fat-rename-split"
                    n_judged += 1
                    bad, rlog = judge(f2, d2, n_judged % 8 == 1)
                    where = {
                        "step": k,
                        "of": len(log),
                        "model": model,
                        "variant": variant,
                        "op": repr(log[k - 1])[:100] if k else None,
                    }
                    for cat, detail in bad:
                        fail(cat, desc, detail, where)
                    if bad or rlog is None or n_judged % depth2_every:
                        continue
                    # depth 2: the resumed salvage cut again at every step
                    sim2 = crash.Sim(f2, d2)
                    for e in rlog:
                        sim2.apply(e)
                        for m2 in ("lfs", "posix"):
                            for v2, f3, d3, _h in sim2.states(m2):
                                if v2[0] in "TR" or not unseen(f3, d3):
                                    continue
                                res["cut_depth2"] += 1
                                bad2, _ = judge(f3, d3)
                                for cat, detail in bad2:
                                    fail(
                                        cat,
                                        desc,
                                        "depth 2 (%s after %s): %s" % (v2, repr(e)[:60], detail),
                                        where,
                                    )
    return res
