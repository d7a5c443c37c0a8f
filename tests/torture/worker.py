"""One CPython torture task; run_ci.py starts these as subprocesses (two at a time).

    python tests/torture/worker.py crash SEED NOPS SYNC INDEX HASHFILE
                                                             part 1 (SYNC:
                                                             always|ack|none|outbox|-; INDEX:
                                                             index_bytes, - for ddq's default)
    python tests/torture/worker.py fault SEED NOPS STRIDE          part 4
    python tests/torture/worker.py enospc SEED NOPS                part 6: ENOSPC at every
                                                                   mutating call (edges.py)
    python tests/torture/worker.py bad SEED NOPS INDEX HASHFILE    part 3, exhaustive
    python tests/torture/worker.py hypo SEED NOPS EXAMPLES [INDEX] part 3, Hypothesis
    python tests/torture/worker.py base SEED NOPS [INDEX]          sha256 of a base image
    python tests/torture/worker.py forge SEED N                    part 3b: N forged/altered
                                                                   signed messages (forge.py)
    python tests/torture/worker.py salvage SEED NOPS               part 5: salvage over part 3's
                                                                   bad images (salvage.py)
    python tests/torture/worker.py salvagecut SEED NOPS EVERY      part 5b: in-place salvage
                                                                   (on_corrupt="salvage") over the
                                                                   same images, a power cut at
                                                                   every step of every EVERY-th one
    python tests/torture/worker.py group SEED PER [threads]        part 1g: durable-on-return
                                                                   group writes (group.py); asyncio
                                                                   tasks, or real threads

Prints "RESULT <json>" last. DDQ_TORTURE_IMPL=standin tests the harness on
tests/torture/standin.py.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "port"))
sys.path.append(os.path.join(HERE, ".."))  # tests/ddqfmt.py


def load_ddq():
    if os.environ.get("DDQ_TORTURE_IMPL") == "standin":
        import standin as ddq

        bugs = os.environ.get("DDQ_TORTURE_BUGS", "")
        for b in bugs.split(","):
            if b:
                ddq.BUGS[b] = True
        return ddq
    import ddq

    return ddq


def main(argv):
    ddq = load_ddq()
    kind = argv[0]
    seed, nops = int(argv[1]), int(argv[2])
    if kind == "crash":
        import crash

        sync = None if argv[3] == "-" else argv[3]
        index = _index(argv, 4)
        hashes = set()
        # depth 2 on every 12th repair; every 24th with the index (its recovery logs are longer)
        # part 1c: every 5th judged state also continued (edges.continue_state)
        res = crash.run_seed(
            ddq,
            seed,
            nops,
            sync=sync,
            hashes=hashes,
            index=index,
            depth2=int(os.environ.get("DDQ_TORTURE_DEPTH2", "24" if index else "12")),
            cont_every=int(os.environ.get("DDQ_TORTURE_CONT", "5")),
        )
        with open(argv[5], "w") as f:
            for h in hashes:
                f.write(h.hex() + "\n")
    elif kind == "enospc":
        import edges

        res = edges.run_enospc(ddq, seed, nops)
        if seed % 100 == 0:  # the first task also runs part 6's natural reproduction
            nat = edges.natural(ddq)
            res["natural_seeds"], res["natural_bricked"] = nat["seeds"], nat["bricked"]
            res["bricked"] += nat["bricked"]
            res["lost"] += nat["lost"]
            res["fail"] += [
                {"seed": seed, "category": "bricked", "detail": f} for f in nat["fail"][:3]
            ]
    elif kind == "fault":
        import tfaults as faults

        res = faults.run_seed(ddq, seed, nops, stride=int(argv[3]))
    elif kind == "bad":
        import badimg

        hashes = set()
        index = _index(argv, 3)
        res = badimg.run_seed(ddq, seed, nops, hashes=hashes, index=index)
        with open(argv[4], "w") as f:
            for h in hashes:
                f.write(h.hex() + "\n")
        res["base_sha256"] = base_sha(ddq, seed, nops, index)
    elif kind == "hypo":
        import badimg

        res = badimg.hypothesis_run(ddq, seed, nops, int(argv[3]), index=_index(argv, 4))
    elif kind == "forge":
        import forge

        res = forge.run_seed(ddq, seed, nops)
    elif kind == "group":
        import group

        import ddq_group

        res = group.run_seed(
            ddq, ddq_group, seed, per=nops, threads=len(argv) > 3 and argv[3] == "threads"
        )
    elif kind == "salvage":
        import salvage

        res = salvage.run_seed(ddq, seed, nops)
    elif kind == "salvagecut":
        import salvage

        res = salvage.run_cuts(ddq, seed, nops, every=int(argv[3]))
    elif kind == "base":
        res = {"base_sha256": base_sha(ddq, seed, nops, _index(argv, 3))}
    else:
        raise SystemExit("unknown task " + kind)
    print("RESULT " + json.dumps(res))


def _index(argv, i):
    """index_bytes from argv[i]: "-" or missing means ddq's default (tmodel.params)."""
    return None if len(argv) <= i or argv[i] == "-" else int(argv[i])


def base_sha(ddq, seed, nops, index=None):
    import mutate

    base, wl, acc = mutate.build_base(ddq, seed, nops, index=index)
    return mutate.base_sha256(base)


if __name__ == "__main__":
    main(sys.argv[1:])
