"""ddq torture harness entry point (`make torture-ci`; `--full` is `make torture`, 10x more).

Runs the four parts as subprocess tasks, two at a time (2 cores):
  1. crash states (CPython, tests/torture/crash.py)
  2. power cuts (MicroPython, mp_powercut.py)
  3. bad images (CPython + Hypothesis, MicroPython)      4. injected faults (CPython, tfaults.py)
  3b. forged/altered HMAC-signed messages (CPython, forge.py): forged records tried and accepted
  1g. crash states of durable-on-return group writes (CPython, group.py): returned puts/acks lost
  5. salvage (CPython, salvage.py): ddq_salvage over part 3's bad images; intact DATA kept,
      wrong, reused
  5b. salvage in place (CPython, salvage.py run_cuts): Queue(on_corrupt="salvage") over the same
      images, and a power cut at every step of a sample of those salvages (POSIX, LittleFS, FAT
      models)
  1c. continued states (edges.py, inside parts 1 and 2): every 5th judged crash state (every 10th
      MicroPython cut) recovered, written on (rotations, claims, acks, retries, compactions, staged
      builds, a reopen, a larger segment_bytes), closed and reopened: continued_states
  6. ENOSPC (CPython, edges.py run_enospc): a full disk at every mutating call of a workload,
      judged as left and after a power cut (POSIX, LittleFS, FAT), reopened full, freed, continued
      and reopened: enospc_points; the first task also runs the natural reproduction
      (docs/RELIABILITY.md part 6)
  7. liveness (CPython, liveness.py): seeded runs of the message layer at its limits (a board
      profile's hold rule, a full queue, TTLs, Rejected, dropped connections, resets, clock jumps,
      power cuts and reboots), then a healed network for a bounded number of pump rounds: every
      admitted message delivered, dead-lettered or dropped and counted; `stuck` must be 0
  9. raw flash (flash_cuts.py, CPython and MicroPython): ddq_flash.FlashStorage on the NOR model,
      a cut at every program and erase of seeded workloads (a torn and a completed draw each),
      recovered, written on, reopened and drained: flash_cut_states; flash_stuck must be 0
A plain open refused after only ddq's own writes, cuts and ENOSPC is `bricked` (must be 0).
then prints ONE scoreboard line computed from what ran, checks the targets, and exits non-zero on
any invariant failure or missed target, printing the first failure's reproduction.

  --full         10x the CI plan          --jobs N      parallel tasks (default 2)
  --smoke        a tiny plan (seconds)
  --write-docs   refresh the generated part of docs/RELIABILITY.md
  --only PARTS   e.g. --only crash,fault  --impl standin   run the harness on its stand-in queue
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PY = sys.executable
MP = os.path.join(ROOT, ".venv", "bin", "micropython")
TARGETS = {
    "crash_states": 200000,
    "lfs_cuts": 30000,
    "fat_cuts": 10000,
    "bad_images": 100000,
    "fault_kinds": 16,
    "index_opens": 10000,
    "hmac_forged": 10000,
    "salvage_images": 10000,
    "salvage_inplace_images": 10000,
    "salvage_cut_states": 10000,
    "continued_states": 50000,
    "enospc_points": 5000,
    "liveness_runs": 10000,
    "flash_cut_states": 100000,
    "flash_kinds": 6,  # header, name slot, deleted mark, commit mark, frame, erase (not scaled)
}
LIVE_RUNS = 500  # liveness runs per task (about 10 s of one core)
SYNCS = ("always", "ack", "always", "none", "outbox")  # outbox: ddq_outbox.Outbox group commit
# index_bytes per crash seed (k % 3): ddq's default (1 MiB: never reached, never written), 0 (the
# index off), 1 (every close + reopen and save_index step writes queue.index; every judged state
# is also opened with index_bytes=0 and must agree; 48 operations, not 60: each state costs about
# twice as much). Periods 3 and 5: every sync mode gets all three.
CRASH_INDEX = ("-", "0", "1")
# raw flash (part 9): tasks of FLASH_SEEDS seeds, FLASH_NOPS operations a seed (about 3,600 cut
# states and 15 s of one core a task on CPython); MicroPython tasks of 6 seeds (each geometry
# once) x 24 operations (about 1,200 states, 8 s). CI: 104,194 states (each seed's count is
# deterministic: the same on both interpreters)
FLASH_TASKS, FLASH_SEEDS, FLASH_NOPS, FLASH_MP_TASKS = 29, 6, 60, 2


# The counts a salvage task reports, summed into the scoreboard as salvage_<name>.
SALVAGE_COUNTS = (
    "images",
    "intact",
    "kept",
    "wrong",
    "reused",
    "reset",
    "behind",
    "forged",
    "undetectable_cut",
)


def plan(scale, smoke=False):
    """[(part, label, argv, timeout_s)]: the CI plan at scale 1, --full at 10."""
    t = []

    def add(part, label, argv, timeout=900):
        t.append((part, label, argv, timeout))

    def add_smoke(part, label, argv):
        add(part, label, argv, 120)

    if smoke:
        add_smoke("crash", "crash 101", [PY, "worker.py", "crash", "101", "12", "always", "-"])
        add_smoke("crash", "crash 102", [PY, "worker.py", "crash", "102", "12", "ack", "-"])
        add_smoke("crash", "crash 103 ix", [PY, "worker.py", "crash", "103", "16", "always", "1"])
        add_smoke("fault", "fault 7", [PY, "worker.py", "fault", "7", "10", "3"])
        add_smoke("bad", "bad 11", [PY, "worker.py", "bad", "11", "10", "-"])
        add_smoke("bad", "bad 12 ix", [PY, "worker.py", "bad", "12", "10", "1"])
        add_smoke("hypo", "hypo 11", [PY, "worker.py", "hypo", "11", "10", "50"])
        add_smoke("hypo", "hypo 12 ix", [PY, "worker.py", "hypo", "12", "16", "50", "1"])
        add_smoke("mp", "lfs snap 3", [MP, "mp_powercut.py", "lfs", "snap", "3", "12"])
        add_smoke("mp", "fat snap 3", [MP, "mp_powercut.py", "fat", "snap", "3", "12"])
        add_smoke(
            "mp",
            "lfs snap 4 ix",
            [MP, "mp_powercut.py", "lfs", "snap", "4", "24", "1", "0", "index=1"],
        )
        add_smoke("mp", "lfs raise 3", [MP, "mp_powercut.py", "lfs", "raise", "3", "8", "3"])
        add_smoke("mpbad", "mpbad 11", [MP, "mp_badimg.py", "11", "10", "200"])
        add_smoke("forge", "forge 11", [PY, "worker.py", "forge", "11", "500"])
        add_smoke("group", "group 11", [PY, "worker.py", "group", "11", "3"])
        add_smoke("salvage", "salvage 11", [PY, "worker.py", "salvage", "11", "10"])
        add_smoke("salvcut", "salvcut 11", [PY, "worker.py", "salvagecut", "11", "10", "400"])
        add_smoke("hold", "hold 11", [PY, "hold.py", "11", "30"])
        add_smoke("enospc", "enospc 1200", [PY, "worker.py", "enospc", "1200", "20"])
        add_smoke("live", "live 1", [PY, "liveness.py", "1", "40"])
        add_smoke("flash", "flash 3", [PY, "flash_cuts.py", "3", "1", "16", "2"])
        add_smoke("flash", "flash mp 4", [MP, "flash_cuts.py", "4", "1", "10", "3"])
        return t
    n_crash = 30 * scale
    for k in range(n_crash):
        seed = 100 + k
        ix = CRASH_INDEX[k % len(CRASH_INDEX)]
        add(
            "crash",
            "crash %d%s" % (seed, " ix" if ix == "1" else ""),
            [
                PY,
                "worker.py",
                "crash",
                str(seed),
                "48" if ix == "1" else "60",
                SYNCS[k % len(SYNCS)],
                ix,
            ],
        )
    for k in range(18 * scale):  # a full disk at every mutating call (~350 points a seed, ~2 s)
        seed = 1200 + k
        add(
            "enospc",
            "enospc %d" % seed,
            [PY, "worker.py", "enospc", str(seed), str(40 + (k * 11) % 31)],
        )
    for k in range(4 * scale):  # 300: torn start (truncate faults), 301: creates its directory
        seed = 300 + k
        add("fault", "fault %d" % seed, [PY, "worker.py", "fault", str(seed), "36", "1"])
    for k in range(24 * scale):  # one in six with index_bytes=1: queue.index mutated too
        seed = 500 + k
        nops = 10 + (k * 7) % 36
        ix = "1" if k % 6 == 3 else "-"  # mpbad below takes the same rule
        add(
            "bad",
            "bad %d%s" % (seed, " ix" if ix == "1" else ""),
            [PY, "worker.py", "bad", str(seed), str(nops), ix],
        )
    for k in range(2 * scale):
        add("hypo", "hypo %d" % (500 + k), [PY, "worker.py", "hypo", str(500 + k), "30", "600"])
    for k in range(scale):
        add(
            "hypo",
            "hypo %d ix" % (503 + 6 * k),
            [PY, "worker.py", "hypo", str(503 + 6 * k), "31", "600", "1"],
        )
    for k in range(2 * scale):  # forged/altered signed messages: 2 x 6000 (about a second each)
        add("forge", "forge %d" % (700 + k), [PY, "worker.py", "forge", str(700 + k), "6000"])
    for k in range(
        4 * scale
    ):  # ddq_group: 4 asyncio tasks (or threads) x 6 puts, some acked, ~3 s each
        argv = [PY, "worker.py", "group", str(800 + k), "6"] + (["threads"] if k % 2 else [])
        add("group", "group %d%s" % (800 + k, " threads" if k % 2 else ""), argv)
    for k in range(4 * scale):  # salvage over the bad images of the "bad" seeds (about 5,000 each)
        seed = 500 + k
        add(
            "salvage",
            "salvage %d" % seed,
            [PY, "worker.py", "salvage", str(seed), str(10 + (k * 7) % 36)],
        )
    for k in range(
        4 * scale
    ):  # in place over the same images; every (5 x nops)-th one cut at every step
        seed, nops = 500 + k, 10 + (k * 7) % 36
        add(
            "salvcut",
            "salvcut %d" % seed,
            [PY, "worker.py", "salvagecut", str(seed), str(nops), str(5 * nops)],
        )
    for k in range(10000 * scale // LIVE_RUNS):  # liveness (liveness.py): runs SEED.. in a task
        seed = 1 + k * LIVE_RUNS
        add("live", "live %d" % seed, [PY, "liveness.py", str(seed), str(LIVE_RUNS)])
    for k in range(
        4 * scale
    ):  # the hold rule at its limit (hold.py, SPEC 10.1): cut states + drains
        add("hold", "hold %d" % (1200 + k), [PY, "hold.py", str(1200 + k), "60"])
    for k in range(
        2 * scale
    ):  # the same seeds, sizes and index_bytes as "bad": the base images must hash the same
        ix = "1" if k % 6 == 3 else "-"
        add(
            "mpbad",
            "mpbad %d%s" % (500 + k, " ix" if ix == "1" else ""),
            [MP, "mp_badimg.py", str(500 + k), str(10 + (k * 7) % 36), "4000", ix],
        )
    # power cuts: snap (drop + torn at every device op) and live raise/errno re-runs (a cut at
    # every device op of the workload too: stride 1)
    for k in range(32 * scale):
        seed = 1000 + k
        add("mp", "lfs snap %d" % seed, [MP, "mp_powercut.py", "lfs", "snap", str(seed), "160"])
    for k in range(9 * scale):
        seed = 3000 + k
        add("mp", "fat snap %d" % seed, [MP, "mp_powercut.py", "fat", "snap", str(seed), "100"])
    # the same with index_bytes=1: cuts inside queue.index writes (close + reopen, save_index);
    # on FAT the rename over queue.index is remove + rename
    for k in range(2 * scale):
        seed = 1100 + k
        add(
            "mp",
            "lfs snap %d ix" % seed,
            [MP, "mp_powercut.py", "lfs", "snap", str(seed), "160", "1", "0", "index=1"],
        )
    for k in range(scale):
        seed = 3100 + k
        add(
            "mp",
            "fat snap %d ix" % seed,
            [MP, "mp_powercut.py", "fat", "snap", str(seed), "100", "1", "0", "index=1"],
        )
        seed = 910 + k
        add(
            "mp",
            "lfs errno %d ix" % seed,
            [MP, "mp_powercut.py", "lfs", "errno", str(seed), "40", "1", "0", "index=1"],
        )
        add(
            "mp",
            "fat raise %d ix" % seed,
            [MP, "mp_powercut.py", "fat", "raise", str(seed), "30", "1", "0", "index=1"],
        )
    for k in range(2 * scale):
        seed = 900 + k
        for mode in ("raise", "errno"):
            add(
                "mp",
                "lfs %s %d" % (mode, seed),
                [MP, "mp_powercut.py", "lfs", mode, str(seed), "40", "1", "0"],
            )
            add(
                "mp",
                "fat %s %d" % (mode, seed),
                [MP, "mp_powercut.py", "fat", mode, str(seed), "30", "1", "0"],
            )
    # raw flash (flash_cuts.py): FLASH_SEEDS seeds a task, one of each geometry (MODES), a cut
    # at every program and erase; MicroPython runs the same seeds' harness on a few of its own
    for k in range(FLASH_TASKS * scale):
        seed = 2000 + FLASH_SEEDS * k
        add(
            "flash",
            "flash %d" % seed,
            [PY, "flash_cuts.py", str(seed), str(FLASH_SEEDS), str(FLASH_NOPS), "1"],
        )
    for k in range(FLASH_MP_TASKS * scale):
        seed = 9000 + 6 * k
        add("flash", "flash mp %d" % seed, [MP, "flash_cuts.py", str(seed), "6", "24", "1"])
    return t


def run_task(task, tmp, impl):
    part, label, argv, timeout = task
    argv = list(argv)
    if argv[0] == MP:
        argv[1:1] = ["-X", "heapsize=16M"]
        argv[3] = os.path.join("tests", "torture", argv[3])
        if impl == "standin":
            argv.append("standin")
        cwd = ROOT
    else:
        argv[1] = os.path.join(HERE, argv[1])
        cwd = ROOT
    hashfile = None
    if part in ("crash", "bad"):
        hashfile = os.path.join(tmp, label.replace(" ", "-") + ".hashes")
        argv.append(hashfile)
    env = dict(os.environ)
    if impl == "standin":
        env["DDQ_TORTURE_IMPL"] = "standin"
    t0 = time.time()
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (
            (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""),
            "timeout",
            -9,
        )
    res = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    return {
        "part": part,
        "label": label,
        "argv": argv,
        "rc": rc,
        "res": res,
        "err": err[-2000:],
        "secs": time.time() - t0,
        "hashfile": hashfile,
    }


def _read_hashes(d, into):
    # the state hashes a crash or bad-image task wrote (one a line), into a set
    with open(d["hashfile"]) as fh:
        into.update(line.strip() for line in fh)


def aggregate(done):
    sb = {
        "crash_states": 0,
        "lfs_cuts": 0,
        "fat_cuts": 0,
        "bad_images": 0,
        "fault_kinds": 0,
        "fault_points": 0,
        "lost": 0,
        "resurrected": 0,
        "reused_seq": 0,
        "unexpected": 0,
        "index_opens": 0,
        "index_mismatch": 0,
        "hmac_forged": 0,
        "hmac_forged_accepted": 0,
        "group_states": 0,
        "group_returned_lost": 0,
        "salvage_images": 0,
        "salvage_intact": 0,
        "salvage_kept": 0,
        "salvage_wrong": 0,
        "salvage_reused": 0,
        "salvage_reset": 0,
        "salvage_behind": 0,
        "salvage_forged": 0,
        "salvage_undetectable_cut": 0,
        "salvage_inplace_images": 0,
        "salvage_inplace_intact": 0,
        "salvage_inplace_kept": 0,
        "salvage_inplace_reset": 0,
        "salvage_cut_images": 0,
        "salvage_cut_states": 0,
        "salvage_cut_lost": 0,
        "salvage_cut_wrong": 0,
        "salvage_cut_reused": 0,
        "salvage_cut_aside": 0,
        "salvage_cut_fat_split": 0,
        "cut_states": 0,
        "libddq_refused": 0,
        "libddq_disagree": 0,
        "libddq_rotations": 0,
        "hold_states": 0,
        "hold_stranded": 0,
        "continued_states": 0,
        "enospc_points": 0,
        "bricked": 0,
        "liveness_runs": 0,
        "stuck": 0,
        "liveness_raised": 0,
        "phantom": 0,
        "flash_cut_states": 0,
        "flash_kinds": 0,
        "flash_stuck": 0,
    }
    extra = {
        "crash_checked": 0,
        "depth2_states": 0,
        "corrupt_reported": 0,
        "by_model": {},
        "lfs": {"drop": 0, "torn": 0, "raise": 0, "errno": 0},
        "fat": {"drop": 0, "torn": 0, "raise": 0, "errno": 0},
        "bad_corrupt": 0,
        "bad_clean": 0,
        "bad_forged": 0,
        "hypothesis": 0,
        "mp_bad_images": 0,
        "fault_by_kind": {},
        "harness_errors": 0,
        "base_sha": {},
        "mount_fail": 0,
        # recovery index (SPEC 12.1): per part, [states compared, of them opened through the
        # index]; bad images also count a damaged/stale index accepted to another state
        "index": {"crash": [0, 0], "mp": [0, 0], "bad": [0, 0], "hypo": [0, 0]},
        "forged_index": 0,
        "index_write_cuts": 0,
        "hmac_control_accepted": 0,
        "hmac_by_kind": {},
        "hmac_encrypted_forged": 0,
        "continued": {"crash": 0, "mp-lfs": 0, "mp-fat": 0},
        "enospc_states": 0,
        "enospc_by_view": {},
        "enospc_full_refused": 0,
        "natural": [0, 0],
        "liveness": {
            "by_cause": {},
            "admitted": 0,
            "delivered": 0,
            "dead": 0,
            "cuts": 0,
            "reboots": 0,
            "fulls": 0,
            "rounds_max": 0,
            "bound_max": 0,
            "batch": 0,
            "windowed": 0,
        },
        # raw flash (part 9): states by interpreter, cut events sampled by kind, judged states
        # by geometry, the judgements' own counts (lost .. unexpected of this part only)
        "flash": {
            "cpython": 0,
            "micropython": 0,
            "events": 0,
            "sampled": 0,
            "depth2": 0,
            "depth2_cut": 0,
            "drained": 0,
            "kinds": {},
            "modes": {},
            "bad": {},
        },
    }
    failures = []
    crash_hashes, bad_hashes = set(), set()
    for d in done:
        r = d["res"]
        if r is None or d["rc"] != 0:
            extra["harness_errors"] += 1
            sb["unexpected"] += 1
            failures.append(
                {
                    "task": d["label"],
                    "category": "harness",
                    "detail": "exit %s: %s" % (d["rc"], d["err"][-800:]),
                    "repro": " ".join(d["argv"]),
                }
            )
            continue
        for k in ("lost", "resurrected", "reused_seq", "unexpected", "bricked"):
            sb[k] += r.get(k, 0)
        if d["part"] == "salvage":  # its own counters; unexpected (above) counts its errors
            sb["unexpected"] += r.get("wrong", 0) + r.get("reused", 0)
        if d["part"] == "salvcut":
            sb["unexpected"] += r.get("inplace_wrong", 0) + r.get("inplace_reused", 0)
        # an index open that differs from the full replay: crash states and power cuts
        # (index_mismatch) and bad images (forged_index: a damaged or stale index accepted)
        sb["index_mismatch"] += r.get("index_mismatch", 0) + r.get("forged_index", 0)
        extra["forged_index"] += r.get("forged_index", 0)
        extra["index_write_cuts"] += r.get("index_write_cuts", 0)
        if d["part"] in extra["index"]:
            extra["index"][d["part"]][0] += r.get("index_compared", 0)
            extra["index"][d["part"]][1] += r.get("index_opens", 0)
            sb["index_opens"] += r.get("index_opens", 0)
        for f in r.get("fail", []):
            if f.get("category") == "info":
                continue  # FAT cut images blamed on FatFs: counted in extra, not failures
            f = dict(f)
            f["task"] = d["label"]
            f["repro"] = "cd %s && %s" % (
                ROOT,
                " ".join(a for a in d["argv"] if a != d["hashfile"]),
            )
            if d["part"] == "live":  # one run: its own seed
                f["repro"] = "cd %s && %s tests/torture/liveness.py %d 1 -v" % (
                    ROOT,
                    PY,
                    f["seed"],
                )
            if d["part"] == "flash" and "seed" in f:  # one seed, each failure printed
                a = list(d["argv"])
                a[-4:-2] = [str(f["seed"]), "1"]
                f["repro"] = "cd %s && %s -v" % (ROOT, " ".join(a))
            failures.append(f)
        part = d["part"]
        if part == "crash" or part == "mp":
            sb["continued_states"] += r.get("continued", 0)
            where = "crash" if part == "crash" else "mp-" + r["fs"]
            extra["continued"][where] = extra["continued"].get(where, 0) + r.get("continued", 0)
        if part == "enospc":
            sb["enospc_points"] += r["points"]
            extra["enospc_states"] += r["states"]
            extra["enospc_full_refused"] += r["full_refused"]
            for k, v in r["by_model"].items():
                extra["enospc_by_view"][k] = extra["enospc_by_view"].get(k, 0) + v
            if "natural_seeds" in r:
                extra["natural"][0] += r["natural_seeds"]
                extra["natural"][1] += r["natural_bricked"]
        if part == "crash":
            _read_hashes(d, crash_hashes)
            for key, k in (
                ("crash_checked", "checked"),
                ("depth2_states", "depth2"),
                ("corrupt_reported", "reported"),
            ):
                extra[key] += r[k]
            # tail cuts (SPEC R21/R22): states holding a staged cut; libddq (modelled) refuses or
            # agrees; lost rotations libddq wrote into before ddq recovered (F7, V3)
            for k in ("cut_states", "libddq_refused", "libddq_disagree", "libddq_rotations"):
                sb[k] += r.get(k, 0)
            for m, v in r["by_model"].items():
                extra["by_model"][m] = extra["by_model"].get(m, 0) + v
        elif part == "bad":
            _read_hashes(d, bad_hashes)
            for k in ("corrupt", "clean", "forged"):
                extra["bad_" + k] += r[k]
            extra["bad_relabel"] = extra.get("bad_relabel", 0) + r.get("relabel", 0)
            extra["bad_undetectable_cut"] = extra.get("bad_undetectable_cut", 0) + r.get(
                "undetectable_cut", 0
            )
            extra["base_sha"].setdefault(r["seed"], {})["cpython"] = r.get("base_sha256")
        elif part == "hypo":
            extra["hypothesis"] += r["examples"]
        elif part == "mpbad":
            extra["mp_bad_images"] += r["images"]
            extra["mp_forged"] = extra.get("mp_forged", 0) + r["forged"]
            extra["base_sha"].setdefault(r["seed"], {})["micropython"] = r.get("base_sha256")
        elif part == "forge":
            sb["hmac_forged"] += r["forged"]
            sb["hmac_forged_accepted"] += r["accepted"]
            extra["hmac_control_accepted"] += r["control_accepted"]
            extra["hmac_encrypted_forged"] += r.get("encrypted_forged", 0)  # of hmac_forged (E23)
            for k, v in r["by_kind"].items():
                extra["hmac_by_kind"][k] = extra["hmac_by_kind"].get(k, 0) + v
        elif part == "salvage":
            for k in SALVAGE_COUNTS:
                sb["salvage_" + k] += r[k]
        elif part == "salvcut":
            for k in ("images", "intact", "kept", "reset"):
                sb["salvage_inplace_" + k] += r["inplace_" + k]
            sb["salvage_cut_images"] += r["cut_images"]
            sb["salvage_cut_fat_split"] += r["fat_split"]
            sb["salvage_cut_states"] += r["cut_states"] + r["cut_depth2"]
            for k in ("lost", "wrong", "reused", "aside"):
                sb["salvage_cut_" + k] += r["cut_" + k]
        elif part == "hold":  # its stranded items are also counted in unexpected
            sb["hold_states"] += r["states"]
            sb["hold_stranded"] += r["stranded"]
        elif part == "live":
            sb["liveness_runs"] += r["runs"]
            sb["stuck"] += r["stuck"]
            sb["liveness_raised"] += r["raised"]
            sb["phantom"] += r["phantom"]
            lv = extra["liveness"]
            for k, v in r["by_cause"].items():
                lv["by_cause"][k] = lv["by_cause"].get(k, 0) + v
            for k in ("admitted", "delivered", "dead", "cuts", "reboots", "fulls", "batch"):
                lv[k] += r[k]
            lv["windowed"] += r["windowed"]
            for k in ("rounds_max", "bound_max"):
                lv[k] = max(lv[k], r[k])
            lv["cpu_s"] = lv.get("cpu_s", 0) + r.get("cpu_s", 0)
        elif part == "flash":
            fl = extra["flash"]
            sb["flash_cut_states"] += r["flash_cut_states"]
            sb["flash_stuck"] += r["stuck"]
            fl["micropython" if d["argv"][0] == MP else "cpython"] += r["flash_cut_states"]
            for k in ("events", "sampled", "depth2", "depth2_cut", "drained"):
                fl[k] += r[k]
            for key in ("kinds", "modes"):
                for k, v in r[key].items():
                    fl[key][k] = fl[key].get(k, 0) + v
            for k in ("lost", "resurrected", "reused_seq", "bricked", "stuck", "unexpected"):
                fl["bad"][k] = fl["bad"].get(k, 0) + r[k]
        elif part == "group":
            sb["group_states"] += r["states"]
            sb["group_returned_lost"] += r["returned_lost"]
        elif part == "fault":
            sb["fault_points"] += r["points"]
            for k, v in r["kinds"].items():
                extra["fault_by_kind"][k] = extra["fault_by_kind"].get(k, 0) + v
        elif part == "mp":
            fs = r["fs"]
            extra["mount_fail"] += r.get("mount_fail", 0)
            extra["fat_damaged"] = extra.get("fat_damaged", 0) + r.get("fat_damaged", 0)
            extra["fat_fs_damage"] = extra.get("fat_fs_damage", 0) + r.get("fat_fs_damage", 0)
            if r["mode"] == "snap":
                extra[fs]["torn"] += r["torn"]
                extra[fs]["drop"] += r["cuts"] - r["torn"]
            else:
                extra[fs][r["mode"]] += r["cuts"]
            sb[fs + "_cuts"] += r["cuts"]
    sb["crash_states"] = len(crash_hashes)
    sb["bad_images"] = len(bad_hashes)
    sb["fault_kinds"] = len(extra["fault_by_kind"])
    sb["flash_kinds"] = len(extra["flash"]["kinds"])
    return sb, extra, failures


def scoreboard_line(sb, extra):
    keys = (
        "crash_states",
        "lfs_cuts",
        "fat_cuts",
        "bad_images",
        "fault_kinds",
        "fault_points",
        "lost",
        "resurrected",
        "reused_seq",
        "unexpected",
        "index_opens",
        "index_mismatch",
    )
    s = "torture: " + " ".join("%s=%d" % (k, sb[k]) for k in keys)
    # parts 1c and 6 (docs/RELIABILITY.md): recovered states written on and reopened; a full disk
    # at every write point; refused opens
    s += " continued_states=%d enospc_points=%d bricked=%d" % (
        sb["continued_states"],
        sb["enospc_points"],
        sb["bricked"],
    )
    # part 8 (docs/RELIABILITY.md): liveness runs, runs where an admitted message reached no end
    # within the bound, runs where a call raised what the docs do not allow, phantom deliveries
    s += " liveness_runs=%d stuck=%d liveness_raised=%d phantom=%d" % (
        sb["liveness_runs"],
        sb["stuck"],
        sb["liveness_raised"],
        sb["phantom"],
    )
    s += (
        " (depth2=%d corrupt_reported=%d hypothesis=%d mp_bad_images=%d forged_accepted=%d "
        "forged_index_accepted=%d"
        % (
            extra["depth2_states"],
            extra["corrupt_reported"],
            extra["hypothesis"],
            extra["mp_bad_images"],
            extra["bad_forged"],
            extra["forged_index"],
        )
    )
    # with an HMAC key (SPEC E22): forged/altered signed messages tried, and returned by get()
    s += " hmac_forged=%d hmac_forged_accepted=%d" % (
        sb["hmac_forged"],
        sb["hmac_forged_accepted"],
    )
    # durable-on-return group writes (SPEC G3): crash states judged, returned puts/acks lost
    s += " group_states=%d group_returned_lost=%d" % (
        sb["group_states"],
        sb["group_returned_lost"],
    )
    # tail cuts (SPEC R21/R22): crash states holding a staged cut, refused by libddq, or read
    # otherwise; lost rotations libddq (no R23) wrote into, which ddq must open (F7, V3)
    s += " cut_states=%d libddq_refused=%d libddq_rotations=%d libddq_disagree=%d" % (
        sb["cut_states"],
        sb["libddq_refused"],
        sb["libddq_rotations"],
        sb["libddq_disagree"],
    )
    s += " hold_states=%d hold_stranded=%d" % (sb["hold_states"], sb["hold_stranded"])  # SPEC H5
    # part 9 (docs/RELIABILITY.md): raw-flash cut states judged, program/erase kinds cut, items
    # that reached no end after the drain (SPEC Y5)
    s += " flash_cut_states=%d flash_kinds=%d flash_stuck=%d)" % (
        sb["flash_cut_states"],
        sb["flash_kinds"],
        sb["flash_stuck"],
    )
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--impl", default="ddq")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", default="", help="also write the aggregate as JSON here")
    a = ap.parse_args()
    tasks = plan(10 if a.full else 1, a.smoke)
    if a.only:
        parts = a.only.split(",")
        tasks = [
            t
            for t in tasks
            if t[0] in parts or (t[0] in ("hypo", "mpbad", "forge") and "bad" in parts)
        ]
    # longest first so the two workers finish together
    weight = {
        "crash": 3,
        "mp": 2,
        "fault": 2,
        "bad": 1,
        "hypo": 1,
        "mpbad": 0,
        "forge": 0,
        "group": 1,
        "salvage": 1,
        "salvcut": 1,
        "hold": 1,
        "enospc": 1,
        "live": 1,
        "flash": 1,
    }
    tasks.sort(key=lambda t: -weight[t[0]])
    t0 = time.time()
    done = []
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="ddq-torture-") as tmp:

        def one(task):
            d = run_task(task, tmp, a.impl)
            with lock:
                done.append(d)
                r = d["res"] or {}
                bad = sum(
                    r.get(k, 0)
                    for k in (
                        "lost",
                        "resurrected",
                        "reused_seq",
                        "unexpected",
                        "index_mismatch",
                        "bricked",
                        "forged_index",
                        "returned_lost",
                        "libddq_disagree",
                    )
                    + (("accepted",) if d["part"] == "forge" else ())
                    + (("stuck", "raised", "phantom") if d["part"] == "live" else ())
                    + (("stuck",) if d["part"] == "flash" else ())
                    + (("wrong", "reused") if d["part"] == "salvage" else ())
                    + (
                        (
                            "inplace_wrong",
                            "inplace_reused",
                            "cut_lost",
                            "cut_wrong",
                            "cut_reused",
                            "cut_aside",
                        )
                        if d["part"] == "salvcut"
                        else ()
                    )
                )
                print(
                    "  %-16s %6.1fs%s"
                    % (
                        d["label"],
                        d["secs"],
                        "" if d["rc"] == 0 and not bad else "  FAILURES=%d rc=%s" % (bad, d["rc"]),
                    ),
                    flush=True,
                )
            return d

        with ThreadPoolExecutor(max_workers=a.jobs) as ex:
            list(ex.map(one, tasks))
        sb, extra, failures = aggregate(done)
    wall = time.time() - t0
    for seed, v in sorted(extra["base_sha"].items()):
        if "cpython" in v and "micropython" in v and v["cpython"] != v["micropython"]:
            sb["unexpected"] += 1
            failures.append(
                {
                    "category": "unexpected",
                    "detail": "seed %s: the base image differs between "
                    "CPython and MicroPython (byte compatibility)" % seed,
                }
            )
    line = scoreboard_line(sb, extra)
    print(line)
    if any(t[0] == "salvcut" for t in tasks):
        print(
            "salvage in place: "
            + " ".join(
                "salvage_%s=%d" % (k, sb["salvage_" + k])
                for k in (
                    "inplace_images",
                    "inplace_intact",
                    "inplace_kept",
                    "inplace_reset",
                    "cut_images",
                    "cut_states",
                    "cut_fat_split",
                    "cut_lost",
                    "cut_wrong",
                    "cut_reused",
                    "cut_aside",
                )
            )
        )
    if any(t[0] == "salvage" for t in tasks):
        print(
            "salvage: "
            + " ".join("salvage_%s=%d" % (k, sb["salvage_" + k]) for k in SALVAGE_COUNTS)
        )
    if any(t[0] == "flash" for t in tasks):
        fl = extra["flash"]
        print(
            "flash: flash_cut_states=%d (cpython %d, micropython %d) events=%d sampled=%d "
            "depth2=%d (cut %d) drained=%d kinds=%s bad=%s"
            % (
                sb["flash_cut_states"],
                fl["cpython"],
                fl["micropython"],
                fl["events"],
                fl["sampled"],
                fl["depth2"],
                fl["depth2_cut"],
                fl["drained"],
                json.dumps(fl["kinds"], sort_keys=True),
                json.dumps(fl["bad"], sort_keys=True),
            )
        )
    if any(t[0] == "live" for t in tasks):
        from reliability_doc import LIVENESS_COUNTS

        lv = extra["liveness"]
        print(
            "liveness: runs=%d stuck=%d raised=%d phantom=%d by_cause=%s %s batch=%d windowed=%d "
            "rounds_max=%d bound_max=%d cpu=%.0f s"
            % (
                sb["liveness_runs"],
                sb["stuck"],
                sb["liveness_raised"],
                sb["phantom"],
                json.dumps(lv["by_cause"], sort_keys=True),
                " ".join("%s=%d" % (k, lv[k]) for k in LIVENESS_COUNTS),
                lv["batch"],
                lv["windowed"],
                lv["rounds_max"],
                lv["bound_max"],
                lv.get("cpu_s", 0),
            )
        )
    print("wall %.0f s, %d tasks, jobs %d" % (wall, len(tasks), a.jobs))
    ok = (
        sb["lost"]
        == sb["resurrected"]
        == sb["reused_seq"]
        == sb["unexpected"]
        == sb["index_mismatch"]
        == 0
        and sb["bricked"] == 0
        and sb["stuck"] == sb["liveness_raised"] == sb["phantom"] == 0
        and sb["flash_stuck"] == 0
        and sb["hmac_forged_accepted"] == 0
        and sb["group_returned_lost"] == 0
        and sb["libddq_disagree"] == 0
        and sb["salvage_kept"] == sb["salvage_intact"]
        and sb["salvage_wrong"] == sb["salvage_reused"] == 0
        and sb["salvage_inplace_kept"] == sb["salvage_inplace_intact"]
        and sb["salvage_cut_lost"]
        == sb["salvage_cut_wrong"]
        == sb["salvage_cut_reused"]
        == sb["salvage_cut_aside"]
        == 0
    )
    missed = []
    if not (a.smoke or a.only):
        scale = 10 if a.full else 1
        for k, v in TARGETS.items():
            want = v if k in ("fault_kinds", "flash_kinds") else v * scale
            if sb[k] < want:
                missed.append("%s=%d < %d" % (k, sb[k], want))
    if missed:
        print("torture: targets missed: " + ", ".join(missed))
    if failures:
        print("torture: first failure (of %d shown; reproduce with the command):" % len(failures))
        print(json.dumps(failures[0], indent=1))
        for f in failures[1:6]:
            print("  also: " + json.dumps(f)[:400])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(
                {
                    "scoreboard": sb,
                    "extra": extra,
                    "failures": failures[:50],
                    "wall": wall,
                    "line": line,
                    "full": a.full,
                },
                fh,
                indent=1,
                sort_keys=True,
            )
    if a.write_docs:
        import reliability_doc

        reliability_doc.write(
            os.path.join(ROOT, "docs", "RELIABILITY.md"), line, sb, extra, wall, a.full
        )
    if not ok or missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
