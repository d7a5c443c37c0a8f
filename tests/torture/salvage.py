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

import ddqfmt as F

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
        out = {}
        for i in q.items():
            if i.state == "acked":
                continue
            r = bytes(q.reason(i.seq)) if i.state == "quarantined" else b""
            out[i.seq] = (i.state, i.attempts, i.lease_until_ms, i.not_before_ms, bytes(q.read(i.seq)), r)
        return out, q.stats().next_seq
    finally:
        q.close()


def _forged(desc):
    return desc.startswith("rec:") or desc.startswith("truncate-undetectable") or \
        (desc.startswith("manifest:") and "=" in desc)


def _tail_cut(base, files):
    """True when the image is the base log cut at a record boundary at its end (the last segment
    shortened, later ones gone, nothing else changed): a crash earlier looks the same, so no
    reader can tell which records followed (counted apart, like part 3's undetectable cuts)."""
    bsegs = sorted((F.parse_seg_name(n), n) for n in base if F.parse_seg_name(n) is not None)
    isegs = sorted((F.parse_seg_name(n), n) for n in files if F.parse_seg_name(n) is not None)
    other = [n for n in set(base) | set(files) if F.parse_seg_name(n) is None and n != F.LOCK]
    if any(base.get(n) != files.get(n) for n in other) or not isegs or len(isegs) > len(bsegs):
        return False
    if [n for _, n in isegs] != [n for _, n in bsegs[:len(isegs)]]:
        return False
    for _, n in isegs[:-1]:
        if files[n] != base[n]:
            return False
    last = isegs[-1][1]
    b, i = base[last], files[last]
    if b[:len(i)] != i or (len(i) == len(b) and len(isegs) == len(bsegs)):
        return False
    recs, end = F.decode_records(b)
    return len(i) in [r[0] for r in recs] + [end]


def run_seed(ddq, seed, nops, limit=None, max_fail=5, fsck_every=1):
    import ddq_salvage
    from ddqhost import fsck

    base, wl, _acceptable = mutate.build_base(ddq, seed, nops)
    opts = {k: wl.opts[k] for k in LIMITS}
    # Resurrected items (an ACK lost) may exceed the writer's max_items: salvage with room.
    sopts = dict(opts, max_items=1000, max_segments=256)
    root = tempfile.mkdtemp(prefix="ddq-salvage-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    res = {"seed": seed, "images": 0, "forged": 0, "intact": 0, "kept": 0, "wrong": 0, "reused": 0,
           "reset": 0, "behind": 0, "nothing_usable": 0, "clean": 0, "with_loss": 0, "unexpected": 0,
           "forged_wrong": 0, "ddq_opens": 0, "undetectable_cut": 0, "fail": []}

    def fail(cat, desc, detail):
        res[cat] += 1
        if len(res["fail"]) < max_fail:
            res["fail"].append({"seed": seed, "nops": nops, "mutation": desc, "category": cat,
                                "detail": detail[:400]})

    try:
        bdir = os.path.join(root, "base")
        _write(bdir, {n: b for n, b in base.items() if n != F.LOCK})
        live, base_next = _view(ddq, bdir, wl.opts)
        shutil.rmtree(bdir)
        cands = []   # (name, off, record bytes, seq, is DATA of a live item)
        for n in base:
            if F.parse_seg_name(n) is None:
                continue
            recs, _end = F.decode_records(base[n])
            for off, typ, seq, _arg, pay in recs:
                rlen = 48 + len(pay)
                cands.append((n, off, base[n][off:off + rlen], seq, typ == F.T_DATA and seq in live))
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
            src = os.path.join(root, "src")
            out = os.path.join(root, "out")
            for p in (src, out):
                if os.path.exists(p):
                    shutil.rmtree(p)
            _write(src, {n: b for n, b in files.items() if n != F.LOCK})
            intact = []
            floor = 1
            for n, off, rb, seq, is_live in cands:
                if files.get(n, b"")[off:off + len(rb)] == rb:
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
            res[{"clean": "clean", "salvaged_with_loss": "with_loss"}.get(st, "nothing_usable")] += 1
            if st == "nothing_usable":
                if intact and not forged:
                    res["intact"] += len(intact)
                    fail("unexpected", desc, "nothing_usable with %d intact DATA records" % len(intact))
                continue
            try:
                got, nxt = _view(ddq, out, sopts)
            except Exception as e:
                fail("unexpected", desc, "the result does not open: %s: %s" % (type(e).__name__, e))
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
                fail("unexpected", desc, "intact DATA not salvaged: %r (report %r)" % (missed, rep))
            reset = set(rep["reset"]) | set(rep["quarantined_uncertain"])
            res["reset"] += len(reset)
            for s, t in got.items():
                if wl.payloads.get(s) != t[4]:
                    fail("wrong", desc, "seq %d: payload %r, enqueued %r" % (s, t[4], wl.payloads.get(s)))
                elif ref.get(s) != t and live.get(s) != t and s not in reset and not cut:
                    # a reset item is AVAILABLE; an uncertain quarantine stays QUARANTINED
                    fail("wrong", desc, "seq %d: state %r, reference %r, not reset" % (s, t[:4], ref.get(s)))
            if nxt < floor:
                fail("reused", desc, "next_seq %d < %d the image still shows" % (nxt, floor))
            if nxt < base_next:
                res["behind"] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res
