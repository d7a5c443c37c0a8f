# Part 3 on MicroPython: replay seeded random mutations (mutate.random_mutation) of a base image
# built by the same seeded workload, open each on MemFS under a storage-call budget, judge it.
#   micropython tests/torture/mp_badimg.py SEED NOPS COUNT [INDEX]
# INDEX: index_bytes as the CPython `bad` task of the same seed takes it (- for ddq's default).
# Prints the base image's sha256 too: CPython builds the same base, so the hashes must agree
# (the two interpreters write byte-identical logs; mutate.base_sha256 says why queue.index is left
# out).
import json
import sys

sys.path.insert(0, "tests/torture")
sys.path.insert(0, "port")
sys.path.append("tests")  # tests/ddqfmt.py
import mutate
import tmodel

if "standin" in sys.argv:
    import standin as ddq
else:
    import ddq


def main():
    seed = int(sys.argv[1])
    nops = int(sys.argv[2])
    count = int(sys.argv[3])
    index = None if len(sys.argv) <= 4 or sys.argv[4] in ("-", "standin") else int(sys.argv[4])
    base, wl, acceptable = mutate.build_base(ddq, seed, nops, index=index)
    res = tmodel.counters(
        "images corrupt clean forged unexpected lost resurrected reused_seq",
        seed=seed,
        base_sha256=mutate.base_sha256(base),
    )
    rng = tmodel.Rng(seed * 7919 + 1)
    for i in range(count):
        desc, files = mutate.random_mutation(rng, base)
        outcome, bad = mutate.judge(
            ddq,
            base,
            files,
            acceptable,
            wl.opts,
            payloads=wl.payloads,
            forged=desc.startswith("rec:") or desc.startswith("truncate-undetectable"),
        )
        res["images"] += 1
        if outcome == "forged-relabel":
            outcome = "forged"
        if outcome in ("corrupt", "clean", "forged"):
            res[outcome] += 1
        where = {"seed": seed, "nops": nops, "mutation": desc, "index": i}
        tmodel.tally(res, bad, 4, where, 300)
    print("RESULT " + json.dumps(res))


main()
