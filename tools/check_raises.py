#!/usr/bin/env python3
"""Fail where a queue module makes a ddq error other than by `_err` (issue 37 item 4: one way
to raise, greppable by class name).

Queue modules: port/ddq.py and each module of its `_PARTS` table. In them a ddq error (a name of
ddq.py's `_ERRORS`) is made only by `_err("Class", msg, *args)` (or `ddq._err(...)`), its first
argument a string literal naming a class of `_ERRORS`. Reported: a call of an error class by
name (`Corrupt(...)`, `ddq.Corrupt(...)`), a call of what `_E(...)` returns (`_E("X")(...)`,
outside `_err` itself), an import of an error class from ddq (it makes the class at import),
and an `_err` whose class is not a literal of `_ERRORS`. `_E("X")` alone stays (except clauses,
isinstance, ddq's module __getattr__). The add-ons (message layer, adapters) are not checked:
their classes are their own API.

    python3 tools/check_raises.py             # the repository's port/
    python3 tools/check_raises.py --port D    # another tree (tests/cpython uses it)

Prints each finding as `path:line: what` and exits 1 if there is one; the last line is always
`raises: N modules, M _err calls, K findings`. Standard library only.
"""

import argparse
import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _literal(tree, name):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return None


def _is_err(f):
    return (isinstance(f, ast.Name) and f.id == "_err") or (
        isinstance(f, ast.Attribute)
        and f.attr == "_err"
        and isinstance(f.value, ast.Name)
        and f.value.id == "ddq"
    )


def check(port):
    """(findings as "path:line: what", modules checked, _err calls)."""
    core = os.path.join(port, "ddq.py")
    with open(core, encoding="utf-8") as f:
        tree = ast.parse(f.read(), core)
    errors = set((_literal(tree, "_ERRORS") or ())[0::2])
    parts = _literal(tree, "_PARTS") or {}
    out, mods, calls = [], 0, 0
    for name in ["ddq"] + sorted(parts):
        path = os.path.join(port, name + ".py")
        if not os.path.exists(path):
            continue
        mods += 1
        with open(path, encoding="utf-8") as f:
            t = ast.parse(f.read(), path)
        rel = os.path.relpath(path, os.path.dirname(port))
        inside = set()  # the nodes of ddq.py's own _err, where _E(name)(...) is the one maker
        for node in ast.walk(t):
            if isinstance(node, ast.FunctionDef) and node.name == "_err" and name == "ddq":
                inside.update(id(n) for n in ast.walk(node))
        for node in ast.walk(t):
            where = "%s:%d: " % (rel, getattr(node, "lineno", 0))
            if isinstance(node, ast.ImportFrom) and node.module == "ddq":
                for a in node.names:
                    if a.name in errors:
                        out.append(where + "imports %s from ddq (use _err)" % a.name)
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if _is_err(f):
                calls += 1
                a0 = node.args[0] if node.args else None
                if not (isinstance(a0, ast.Constant) and a0.value in errors):
                    out.append(where + "_err's class is not a literal name of _ERRORS")
            elif isinstance(f, ast.Name) and f.id in errors:
                out.append(where + "%s(...) (use _err(%r, ...))" % (f.id, f.id))
            elif (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id == "ddq"
                and f.attr in errors
            ):
                out.append(where + "ddq.%s(...) (use ddq._err(%r, ...))" % (f.attr, f.attr))
            elif (
                isinstance(f, ast.Call)
                and isinstance(f.func, ast.Name)
                and f.func.id == "_E"
                and id(node) not in inside
            ):
                out.append(where + "_E(...)(...) (use _err)")
    return out, mods, calls


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", default=os.path.join(REPO, "port"))
    args = ap.parse_args(argv)
    out, mods, calls = check(args.port)
    for line in out:
        print(line)
    print("raises: %d modules, %d _err calls, %d findings" % (mods, calls, len(out)))
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
