"""A small slice of each torture part, so plain `pytest` exercises the harness (< 60 s).

The full counts come from tests/torture/run_ci.py; these only prove each part runs end to end,
judges ddq, and still catches a planted bug in its stand-in queue (a checker that never fails
would pass every slice too).
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "port"))
sys.path.append(os.path.join(ROOT, "tests"))  # tests/ddqfmt.py

import badimg  # noqa: E402
import crash  # noqa: E402
import flash_cuts  # noqa: E402
import liveness  # noqa: E402
import standin  # noqa: E402
import tfaults as faults  # noqa: E402  (tests/faults.py is the shared suite's)

import ddq  # noqa: E402
import ddq_flash  # noqa: E402

MP = os.path.join(ROOT, ".venv", "bin", "micropython")
BAD = ("lost", "resurrected", "reused_seq", "unexpected")


def _clean(res):
    return {k: res[k] for k in BAD if res.get(k)}, res.get("fail", [])[:2]


@pytest.mark.parametrize("seed,sync", [(2, "always"), (6, "ack")])
def test_crash_states_slice(seed, sync):
    res = crash.run_seed(ddq, seed, 14, sync=sync, depth2=4)
    assert res["states"] > 200, res
    assert not _clean(res)[0], _clean(res)


def test_crash_states_through_the_index_slice():
    # index_bytes=1: close + reopen and save_index write queue.index inside the workload; every
    # judged state holding one is opened through it and with index_bytes=0, which must agree
    res = crash.run_seed(ddq, 3, 16, sync="always", index=1, depth2=4)
    assert res["index_compared"] > 100 and res["index_opens"] > 20, res
    assert not _clean(res)[0] and not res["index_mismatch"], (_clean(res), res["index_mismatch"])


def test_fault_injection_slice():
    res = faults.run_seed(ddq, 8, 12, stride=4)
    assert res["points"] > 50 and len(res["kinds"]) >= 12, res
    assert not _clean(res)[0], _clean(res)


def test_bad_images_slice():
    res = badimg.run_seed(ddq, 13, 16, limit=4000)
    assert res["images"] > 1000 and res["corrupt"] > 0, res
    assert not _clean(res)[0], _clean(res)
    hyp = badimg.hypothesis_run(ddq, 13, 16, 60)
    assert hyp["examples"] == 60 and not hyp["unexpected"], hyp


def test_bad_index_images_slice():
    res = badimg.run_seed(ddq, 12, 10, limit=3000, index=1)
    assert res["index_compared"] > 1000 and res["index_opens"] > 0, res
    assert not _clean(res)[0] and not res["forged_index"], _clean(res)
    hyp = badimg.hypothesis_run(ddq, 12, 16, 60, index=1)
    assert hyp["index_compared"] == 60 and not hyp["unexpected"] and not hyp["forged_index"], hyp


def test_harness_catches_an_index_that_skips_its_check():
    # A planted bug: adopt queue.index without the crc32 of the covered bytes [X4]. A damaged
    # covered segment then opens to the indexed state where the full replay reports the damage.
    import mutate

    base, wl, _ = mutate.build_base(ddq, 12, 10, index=1)
    seg = sorted(n for n in base if n.endswith(".log"))[0]
    files = dict(base)
    # the first record's first payload byte (its header is one the X10 cross-checks read back)
    files[seg] = base[seg][:40] + bytes([base[seg][40] ^ 1]) + base[seg][41:]
    assert mutate.judge_index(ddq, files, wl.opts)[1] is None
    import ddq_index

    real = ddq_index.prefix_ok
    ddq_index.prefix_ok = lambda q, gen, ck: True
    try:
        used, diff = mutate.judge_index(ddq, files, wl.opts)
    finally:
        ddq_index.prefix_ok = real
    assert diff is not None, (used, diff)  # (the damage shows only when a payload is read, R19)


def _mp(script, *args):
    assert os.path.exists(MP), "no .venv/bin/micropython: make venv"
    p = subprocess.run(
        [MP, "-X", "heapsize=16M", os.path.join("tests", "torture", script)] + list(args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stderr[-2000:]
    return json.loads(lines[-1][7:])


@pytest.mark.parametrize(
    "fs,mode,nops", [("lfs", "snap", "16"), ("fat", "snap", "16"), ("lfs", "errno", "8")]
)
def test_power_cut_slice(fs, mode, nops):
    res = _mp("mp_powercut.py", fs, mode, "3", nops, "2" if mode != "snap" else "1")
    assert res["cuts"] > 10, res
    assert not _clean(res)[0], _clean(res)


def test_power_cut_through_the_index_slice():
    res = _mp("mp_powercut.py", "lfs", "snap", "4", "24", "1", "0", "index=1")
    assert res["index_compared"] > 10 and res["index_write_cuts"] > 0, res
    assert not _clean(res)[0] and not res["index_mismatch"], _clean(res)


def test_bad_images_on_micropython_slice():
    res = _mp("mp_badimg.py", "13", "16", "300")
    assert res["images"] == 300 and res["corrupt"] > 0, res
    assert not _clean(res)[0], _clean(res)
    assert res["base_sha256"] == _base_sha(13, 16), "CPython and MicroPython wrote different bytes"


def _base_sha(seed, nops):
    import worker

    return worker.base_sha(ddq, seed, nops)


def test_harness_catches_planted_bugs():
    # The stand-in without its fsync: acknowledged enqueues vanish in crash states.
    standin.BUGS["no_sync"] = True
    try:
        res = crash.run_seed(standin, 2, 10, models=("posix",), depth2=0)
    finally:
        standin.BUGS.clear()
    assert res["lost"] > 0, res
    # The stand-in drops its tmp at recovery: under FAT's remove + rename the log vanishes.
    res = crash.run_seed(standin, 2, 40, models=("fat",), depth2=0)
    assert res["lost"] + res["reused_seq"] > 0, res


def test_forged_signed_messages_slice(monkeypatch):
    # EVIDENCE-OF: E22 E21 E23
    import forge

    import ddq_outbox

    res = forge.run_seed(ddq, 5, 400)
    assert res["forged"] >= 400 and res["accepted"] == 0 and res["unexpected"] == 0, res
    assert len(res["by_kind"]) == len(forge.KINDS) and res["control_accepted"] > 0, res
    assert res["encrypted_forged"] > 100, res  # forgeries of encrypted envelopes too (E23)
    # a planted bug: get() that ignores the key is caught (forged_accepted > 0)
    real = ddq_outbox._decode
    monkeypatch.setattr(
        ddq_outbox, "_decode", lambda d, v, k, p, c=None, n=False: real(d, v, None, None)
    )
    res = forge.run_seed(ddq, 5, 200)
    assert res["accepted"] > 0, res


@pytest.mark.parametrize("threads", [False, True])
def test_group_crash_states_slice(threads):
    # EVIDENCE-OF: G3
    import group

    import ddq_group

    res = group.run_seed(ddq, ddq_group, 11, per=3, threads=threads)
    assert res["states"] > 500 and res["puts"] >= 6, res
    assert res["returned_lost"] == 0 and res["unexpected"] == 0, res["fail"][:2]


def test_group_checker_catches_a_group_that_returns_before_syncing():
    import group

    import ddq_group

    class NoSync:
        def __init__(self, q):
            self.q = q

        def __getattr__(self, name):
            return getattr(self.q, name)

        def sync(self):  # the planted bug: nothing is synced, callers are told durable
            return 0

    class Planted:
        class Group(ddq_group.Group):
            def __init__(self, q, **kw):
                super().__init__(NoSync(q), **kw)

    res = group.run_seed(ddq, Planted, 11, per=3)
    assert res["returned_lost"] > 0, res


def test_salvage_slice():
    # Part 5 (salvage.py): ddq_salvage over bad images keeps every intact DATA record, with no
    # wrong payload or unreset state and no next_seq below what the image shows.
    import salvage

    res = salvage.run_seed(ddq, 11, 10, limit=600)
    assert res["images"] > 300 and res["intact"] > 0, res
    assert (
        res["kept"] == res["intact"] and res["wrong"] == res["reused"] == res["unexpected"] == 0
    ), res["fail"][:2]


def test_salvage_checker_catches_a_wrong_state(monkeypatch):
    # A salvage that forgets its resets must be caught (the checker is not vacuous).
    import salvage

    import ddq_salvage

    real = ddq_salvage.salvage

    def forgetful(src, dst, **kw):
        rep = real(src, dst, **kw)
        rep["reset"] = []
        rep["quarantined_uncertain"] = []
        return rep

    monkeypatch.setattr(ddq_salvage, "salvage", forgetful)
    res = salvage.run_seed(ddq, 11, 10)
    assert res["wrong"] > 0, res


def test_salvage_in_place_cut_slice():
    # Part 5b (salvage.py run_cuts): Queue(on_corrupt="salvage") over bad images keeps every
    # intact DATA record; a power cut at any step of a sample of those salvages, reopened with
    # on_corrupt="salvage", loses no item the uncut salvage kept and deletes no damage kept aside.
    import salvage

    # (seed 17: a sample with FAT rename splits; seed 11's base is a staged queue with
    # reclaim_step=1 whose admission now answers in RAM at the limit (SPEC C14), so its base
    # directory has fewer compactions and this sample no FAT split)
    res = salvage.run_cuts(ddq, 17, 10, every=400)
    assert res["inplace_images"] > 1000 and res["cut_images"] > 3 and res["cut_states"] > 200, res
    assert res["inplace_kept"] == res["inplace_intact"] > 0, res
    assert res["fat_split"] > 0, res
    for k in (
        "cut_lost",
        "cut_wrong",
        "cut_reused",
        "cut_aside",
        "inplace_wrong",
        "inplace_reused",
        "unexpected",
    ):
        assert res[k] == 0, (k, res["fail"][:2])


def test_salvage_in_place_checker_catches_a_late_marker(monkeypatch):
    # A salvage that makes queue.format only after moving the segments aside (so a cut between
    # leaves a legacy directory without segments: an empty queue) must be caught.
    import salvage

    import ddq_salvage

    put, stage = ddq_salvage._put, ddq_salvage._stage

    def late_put(fs, d, name, data):
        if name != "queue.format":
            put(fs, d, name, data)

    def late_stage(sc, d, *a):
        if sc.fs.kind(d + "/queue.format") == 0:
            put(sc.fs, d, "queue.format", b"")
        return stage(sc, d, *a)

    monkeypatch.setattr(ddq_salvage, "_put", late_put)
    monkeypatch.setattr(ddq_salvage, "_stage", late_stage)
    res = salvage.run_cuts(
        ddq, 500, 10, every=200, depth2_every=1000000
    )  # generation 0, no marker
    assert res["cut_lost"] > 0, res


def test_continued_states_slice():
    # part 1c (docs/RELIABILITY.md): recovered crash states written on, closed and reopened
    res = crash.run_seed(ddq, 5, 14, sync="ack", depth2=0, cont_every=2)
    assert res["continued"] > 100, res
    assert not _clean(res)[0] and not res["bricked"], (_clean(res), res["bricked"])


def test_enospc_slice():
    # part 6 (docs/RELIABILITY.md): a full disk at every mutating call, then freed, continued,
    # reopened
    import edges

    res = edges.run_enospc(ddq, 4, 14)
    assert res["points"] > 50 and res["continued"] > 20, res
    assert not _clean(res)[0] and not res["bricked"], (_clean(res), res["bricked"])
    nat = edges.natural(ddq, seeds=3)
    assert nat["seeds"] == 3 and not nat["bricked"] and not nat["lost"], nat


def test_continuation_catches_a_kept_lost_rotation():
    # A storage that silently keeps an empty segment ddq removes (as ddq before R23 kept it):
    # the continuation fails, either writing into it (the reopen refused: bricked) or
    # rotating onto its name (EEXIST: unexpected).
    import edges
    import memfs
    import tmodel

    class KeepEmpty(memfs.MemFS):
        def remove(self, path):
            if path.endswith(".log") and self.size(path) == 0:
                return
            memfs.MemFS.remove(self, path)

    memfs.MemFS.Locked = ddq.Locked
    opts = {
        "segment_bytes": 1024,
        "max_payload_bytes": 900,
        "max_items": 64,
        "max_segments": 16,
        "sync": "always",
    }
    fs = KeepEmpty(dirs=("/q",))
    q = ddq.Queue("/q", storage=fs, clock=tmodel.Clock(), **tmodel.queue_opts(opts))
    for n in (452, 452, 400):
        q.enqueue(b"a" * n)
    q.close()
    fs.close(fs.open("/q/segment-00000000000000000002.log", "ab"))
    q = ddq.Queue("/q", storage=fs, clock=tmodel.Clock(), **tmodel.queue_opts(opts))
    state = tmodel.recovered_state(q)
    q.close()
    bad = []
    for seed in range(1, 20):
        f2, d2 = fs.snapshot()
        bad += edges.continue_state(
            ddq, KeepEmpty(f2, d2), "/q", opts, state, seed, tmodel.Clock()
        )
    assert any(b[0] in ("bricked", "unexpected") for b in bad), bad


FAT_BEHIND_MARKER = """
import os, struct, sys, vfs
sys.path[:0] = ['tests', 'tests/torture']
from blockdev import RAMBlockDev
import fatcheck
bd = RAMBlockDev(512, 256)
vfs.VfsFat.mkfs(bd)
vfs.mount(vfs.VfsFat(bd), '/f')
os.mkdir('/f/q')
open('/f/q/queue.format', 'wb').close()
vfs.umount('/f')
img = bd.data
clean = fatcheck.check(img)
bps, spc, rsv, nfats, nroot, tot16, media, fatsz = struct.unpack_from('<HBHBHHBH', img, 11)
root = (rsv + nfats * fatsz) * bps
data0 = rsv + nfats * fatsz + (nroot * 32 + bps - 1) // bps
for off in range(root, root + nroot * 32, 32):
    if img[off:off + 11] == b'Q          ':
        c = struct.unpack_from('<H', img, off + 26)[0]
q = (data0 + (c - 2) * spc) * bps
n = 0
while img[q + 32 * n] != 0:
    n += 1
img[q + 32 * (n + 2):q + 32 * (n + 3)] = b'X' * 32   # stale bytes two slots behind the end marker
damaged = fatcheck.check(img)
vfs.mount(vfs.VfsFat(bd), '/f')
name = 'generation-00000000000000000001-segment-00000000000000000000.log'
f = open('/f/q/' + name, 'wb')
f.write(b'x' * 100)
f.close()
print('RESULT', repr(clean) + '|' + repr(damaged) + '|' + repr(name in os.listdir('/f/q')))
"""


def test_fatcheck_calls_entries_behind_the_end_marker_damaged():
    # RELIABILITY part 2, FAT attribution: FatFs places a new entry behind stale bytes past a
    # directory's end marker, where no listing finds it (the file vanishes); fatcheck must call
    # such an image damaged, and a freshly made one clean.
    p = subprocess.run(
        [MP, "-X", "heapsize=4M", "-c", FAT_BEHIND_MARKER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and line, p.stdout + p.stderr
    clean, damaged, listed = line[-1].split(" ", 1)[1].split("|")
    assert clean == "None", line
    assert "end marker" in damaged, line
    assert listed == "False", line  # FatFs really lost the file it created


def test_liveness_slice():
    # RELIABILITY part 8 (issue 35): seeded runs of the message layer at its limits (a profile's
    # hold rule, outages until Full, TTL bursts, Rejected, dropped connections, resets, clock
    # jumps, power cuts), then a healed network for a bounded number of pump rounds: every
    # admitted message delivered, dead-lettered or dropped and counted. Fails on 3daacd4 (pump
    # raises Full once the evidence budget is used; a reset's lost CLAIM under sync="ack" or
    # group commit never counts an attempt; failure="stop" retries a dropped connection for
    # ever; BatchOutbox's flush loops for ever after the clock went back); passes since those
    # are fixed (seeds 1-10,000: stuck 0, RELIABILITY part 8).
    res = liveness.run_seeds(1, 24)
    assert res["runs"] == 24 and res["admitted"] > 200 and res["delivered"] > 50, res
    assert res["stuck"] == res["raised"] == res["phantom"] == 0, (res["by_cause"], res["fail"][:2])


def _plain_run():
    # a seed whose run is a plain Outbox, sync="always", a plain send, backoff on failure
    for seed in range(1, 200):
        run = liveness.Run(seed)
        o = run.obopts
        if run.sync == "always" and not (run.batch or run.windowed or "failure" in o):
            return run
    raise AssertionError("no plain seed")


def test_liveness_catches_a_message_that_never_ends_and_a_phantom():
    # The checker can fail: with max_attempts=0 a message the broker drops for ever is never
    # dead-lettered (stuck), and a delivery of an id never put is a phantom.
    run = _plain_run()
    run.attempts = run.obopts["max_attempts"] = 0
    run.setup()
    for _ in range(5):
        assert run.put("s/t", 0)
    run.broker.fail[3] = "drop"
    run.heal()
    run.broker.delivered.add(10**6)
    cats = sorted(set(c for c, _d in run.check()))
    assert cats == ["phantom", "stuck"], run.check()
    # and the same run without the planted faults ends clean
    run = _plain_run()
    run.setup()
    for _ in range(5):
        assert run.put("s/t", 0)
    run.broker.fail[3] = "drop"
    run.heal()
    assert run.check() == [] and run.rounds <= run.bound, run.check()


def test_flash_cuts_slice():
    # RELIABILITY part 9 (issue 36, SPEC Y5): raw flash. Seed 3 (the rp2's 4096-byte blocks and
    # 256-byte pages, a 64-byte buffer: DDQ records torn over two frames), a cut at every 2nd
    # program/erase and at each kind's first, torn and completed; each state recovered, written
    # on, reopened and drained.
    res = flash_cuts.Run(3, 16).run(2)
    assert res["flash_cut_states"] > 60 and len(res["kinds"]) >= 5, res
    assert not any(res[k] for k in flash_cuts.BAD), res["fail"]


def test_flash_cuts_on_micropython_slice():
    res = _mp("flash_cuts.py", "4", "1", "10", "3")  # write-once 8-byte units
    assert res["flash_cut_states"] > 20, res
    assert not any(res[k] for k in flash_cuts.BAD), res["fail"]


def test_flash_harness_catches_a_sync_that_programs_nothing(monkeypatch):
    # A planted bug: sync() leaves the frame in the write buffer, so an enqueue or ack returns
    # before its record is on flash; a cut then loses it (and undoes a returned ack).
    monkeypatch.setattr(ddq_flash.FlashStorage, "sync", lambda self, f: None)
    res = flash_cuts.Run(2, 16).run(3)
    assert res["lost"] > 0 and res["resurrected"] > 0, res
