"""One CPython torture task; run_ci.py starts these as subprocesses (two at a time).

    python tests/torture/worker.py crash SEED NOPS SYNC HASHFILE   part 1 (SYNC: always|ack|none|-)
    python tests/torture/worker.py fault SEED NOPS STRIDE          part 4
    python tests/torture/worker.py bad SEED NOPS HASHFILE          part 3, exhaustive
    python tests/torture/worker.py hypo SEED NOPS EXAMPLES         part 3, Hypothesis
    python tests/torture/worker.py base SEED NOPS                  sha256 of a base image

Prints "RESULT <json>" last. DDQ_TORTURE_IMPL=standin tests the harness on tests/torture/standin.py.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "port"))


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
        hashes = set()
        res = crash.run_seed(ddq, seed, nops, sync=sync, hashes=hashes,
                             depth2=int(os.environ.get("DDQ_TORTURE_DEPTH2", "12")))
        with open(argv[4], "w") as f:
            for h in hashes:
                f.write(h.hex() + "\n")
    elif kind == "fault":
        import tfaults as faults
        res = faults.run_seed(ddq, seed, nops, stride=int(argv[3]))
    elif kind == "bad":
        import badimg
        hashes = set()
        res = badimg.run_seed(ddq, seed, nops, hashes=hashes)
        with open(argv[3], "w") as f:
            for h in hashes:
                f.write(h.hex() + "\n")
        res["base_sha256"] = base_sha(ddq, seed, nops)
    elif kind == "hypo":
        import badimg
        res = badimg.hypothesis_run(ddq, seed, nops, int(argv[3]))
    elif kind == "base":
        res = {"base_sha256": base_sha(ddq, seed, nops)}
    else:
        raise SystemExit("unknown task " + kind)
    print("RESULT " + json.dumps(res))


def base_sha(ddq, seed, nops):
    import hashlib

    import mutate
    base, wl, acc = mutate.build_base(ddq, seed, nops)
    h = hashlib.sha256()
    for n in sorted(base):
        h.update(n.encode() + b"\0")
        h.update(base[n])
    return h.hexdigest()


if __name__ == "__main__":
    main(sys.argv[1:])
