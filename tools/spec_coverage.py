#!/usr/bin/env python3
"""List the requirement ids of docs/SPEC.md and docs/OUTBOX.md that no test cites, and test
citations neither defines.

An id is *defined* where docs/SPEC.md (the format) or docs/OUTBOX.md (the message layer's
behaviour) writes it in brackets: `[R10]` (a letter, then digits); an id defined in both is an
error. Cross-references are written without brackets and do not count. A test *cites* ids
on a line containing `EVIDENCE-OF:` anywhere under tests/ (any text file): the ids are the
whitespace- or comma-separated tokens after the colon, up to the first token that is not
an id, so `# EVIDENCE-OF: F3, R7 (torn tail)` cites F3 and R7.

    python3 tools/spec_coverage.py            # report; exit 0
    python3 tools/spec_coverage.py --strict   # exit 1 if an id is cited by no test, or a test
                                              # cites an id no doc defines
    python3 tools/spec_coverage.py -v         # also list, per cited id, where it is cited

The last line is always `spec coverage: N of M ids cited`. Standard library only.
"""

import argparse
import os
import re
import sys

ID = re.compile(r"^[A-Z][0-9]+$")
DEFINED = re.compile(r"\[([A-Z][0-9]+)\]")
MARK = "EVIDENCE-OF:"
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}


def id_key(i):
    return (i[0], int(i[1:]))


DOCS = ("SPEC.md", "OUTBOX.md")  # under docs/; SPEC must exist, OUTBOX may not (yet)


def defined_ids(spec_path, ids=None, twice=None):
    """{id: "file:line"} of the ids spec_path defines, added to ids; ids it defines again go
    into twice."""
    ids = {} if ids is None else ids
    name = os.path.basename(spec_path)
    seen = set()
    with open(spec_path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for m in DEFINED.finditer(line):
                i = m.group(1)
                if i in ids and i not in seen and twice is not None:
                    twice.append("%s (%s, %s:%d)" % (i, ids[i], name, n))
                seen.add(i)
                ids.setdefault(i, "%s:%d" % (name, n))
    return ids


def cited_ids(tests_dir, root):
    cites = {}
    bad = []
    for dirpath, dirnames, filenames in os.walk(tests_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                with open(path, encoding="utf-8") as f:
                    lines = f.readlines()
            except (UnicodeDecodeError, OSError):
                continue  # binary fixtures and unreadable files cite nothing
            rel = os.path.relpath(path, root)
            for n, line in enumerate(lines, 1):
                k = line.find(MARK)
                if k < 0:
                    continue
                got = 0
                for tok in re.split(r"[\s,]+", line[k + len(MARK) :].strip()):
                    if not ID.match(tok):
                        break
                    cites.setdefault(tok, []).append("%s:%d" % (rel, n))
                    got += 1
                if not got:
                    bad.append("%s:%d" % (rel, n))
    return cites, bad


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="repository root")
    ap.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when an id is cited by no test, a test cites an id that no doc "
        "defines, or a doc redefines one",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="list where each id is cited")
    a = ap.parse_args(argv)
    spec = os.path.join(a.root, "docs", "SPEC.md")
    if not os.path.exists(spec):
        print("spec_coverage: %s does not exist" % spec, file=sys.stderr)
        print("spec coverage: 0 of 0 ids cited")
        return 1 if a.strict else 0
    defined, twice = {}, []
    for name in DOCS:
        p = os.path.join(a.root, "docs", name)
        if os.path.exists(p):
            defined_ids(p, defined, twice)
    cites, bad = cited_ids(os.path.join(a.root, "tests"), a.root)

    uncovered = sorted((i for i in defined if i not in cites), key=id_key)
    undefined = sorted((i for i in cites if i not in defined), key=id_key)
    if uncovered:
        print("defined in docs/SPEC.md or docs/OUTBOX.md, cited by no test (%d):" % len(uncovered))
        line = " "
        for i in uncovered:
            if len(line) + len(i) > 96:
                print(line)
                line = " "
            line += " " + i
        print(line)
    if undefined:
        print(
            "cited by tests, not defined in docs/SPEC.md or docs/OUTBOX.md (%d):" % len(undefined)
        )
        for i in undefined:
            print("  %-5s %s" % (i, " ".join(cites[i])))
    if twice:
        print("defined twice (%d):" % len(twice))
        for t in twice:
            print("  " + t)
    if bad:
        print("EVIDENCE-OF lines without an id (%d):" % len(bad))
        for b in bad:
            print("  " + b)
    if a.verbose:
        print("citations:")
        for i in sorted(cites, key=id_key):
            print("  %-5s %s" % (i, " ".join(cites[i])))
    covered = len(defined) - len(uncovered)
    print("spec coverage: %d of %d ids cited" % (covered, len(defined)))
    return 1 if a.strict and (uncovered or undefined or twice) else 0


if __name__ == "__main__":
    sys.exit(main())
