#!/usr/bin/env python3
"""Fail on a function in port/ over 150 lines that docs/DESIGN.md §13 does not allow (issue 37:
no function in port/ over 150 lines except the scanners listed there with their reason).

A function's length is its lines from `def` to its last line (`ast`'s lineno .. end_lineno;
decorators not counted), nested functions and methods included, each by its qualified name
(`Class.method`, `outer.inner`). The allowance is DESIGN §13's paragraph that starts with
"**Functions over 150 lines**": each entry reads `` `name` (port/file.py, at most N lines: ``
followed by its reason. Reported: a function over 150 lines not listed, a listed one longer than
its N (the figure in the docs is kept true), and a listed one that is gone or no longer over 150
lines (its entry is removed).

    python3 tools/long_functions.py                      # the repository's port/ and DESIGN.md
    python3 tools/long_functions.py --port D --design F  # another tree (tests/cpython uses it)

Prints each finding as `path:line: what` and exits 1 if there is one; the last line is always
`long functions: N files, M over 150 lines (K allowed), F findings`. Standard library only.
"""

import argparse
import ast
import glob
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 150
HEAD = "**Functions over 150 lines**"
ENTRY = re.compile(r"`([A-Za-z_][\w.]*)` \((port/[\w.]+\.py), at most (\d+) lines")


def allowance(design):
    """{(path, qualified name): N} from DESIGN's paragraph that starts with HEAD."""
    with open(design, encoding="utf-8") as f:
        text = f.read()
    i = text.find("\n" + HEAD)
    if i < 0:
        return {}
    j = text.find("\n\n", i + 1)
    para = " ".join(text[i : j if j >= 0 else len(text)].split())
    return {(m.group(2), m.group(1)): int(m.group(3)) for m in ENTRY.finditer(para)}


def functions(path):
    """(qualified name, first line, lines) of each function in path."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def check(port, design):
    """(findings as "path:line: what", files, functions over LIMIT, of them allowed)."""
    allow = allowance(design)
    out, files, long_, allowed = [], 0, 0, 0
    seen = set()
    for path in sorted(glob.glob(os.path.join(port, "*.py"))):
        files += 1
        rel = "port/" + os.path.basename(path)
        for name, line, n in functions(path):
            key = (rel, name)
            seen.add(key)
            cap = allow.get(key)
            where = "%s:%d: %s, %d lines" % (rel, line, name, n)
            if n > LIMIT:
                long_ += 1
                if cap is None:
                    out.append(where + ": over %d and not listed in DESIGN §13" % LIMIT)
                elif n > cap:
                    out.append(where + ": DESIGN §13 allows it at most %d" % cap)
                else:
                    allowed += 1
            elif cap is not None:
                out.append(where + ": listed in DESIGN §13 but not over %d (drop it)" % LIMIT)
    for rel, name in sorted(set(allow) - seen):
        out.append("%s:0: %s: listed in DESIGN §13 but not found" % (rel, name))
    return out, files, long_, allowed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", default=os.path.join(REPO, "port"))
    ap.add_argument("--design", default=os.path.join(REPO, "docs", "DESIGN.md"))
    args = ap.parse_args(argv)
    out, files, long_, allowed = check(args.port, args.design)
    for line in out:
        print(line)
    print(
        "long functions: %d files, %d over %d lines (%d allowed), %d findings"
        % (files, long_, LIMIT, allowed, len(out))
    )
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
