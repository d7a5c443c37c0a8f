#!/usr/bin/env python3
"""Fail on any import cycle among the port's modules and the host package (ARCHITECTURE.md: the
parts import the core, the core names the parts only in its one table).

Modules: each port/NAME.py is the module NAME; each file of host/ddqhost is named by its package
path (host/ddqhost/fsck/index.py is ddqhost.fsck.index, an __init__.py its package). Edges, read
from the AST of each file: `import X`, `from X import a` (X, and X.a where that is a module),
relative imports resolved in their package, `__import__("X")` with a string literal (and
ddq_outbox's loader of its add-ons, `_addon("X")`), and in a
part `_part("X")` (ddq.py's loader: X a module of its table `_PARTS`, or a name one of them
gives), and in a part the use of a name the table gives as `self.NAME`, `q.NAME` or `ddq.NAME`
(Queue's and the module's `__getattr__` load its module through `_part`: a load is an import);
imports inside `if TYPE_CHECKING:` count too (a reader and mypy follow them). Not edges:
ddq.py naming a module of its one table (its loads, `_part`, import a name found there, never
a literal; its type-only import of a part's types names a module of that table too), and the
same for any other port module with a `_PARTS` table of its own (ddq_mqtt's: ddq_tls and
ddq_clients, loaded by its module `__getattr__`).

    python3 tools/check_imports.py                    # the repository's port/ and host/ddqhost
    python3 tools/check_imports.py --port D --host D  # other trees (tests/cpython uses it)

A second check on the same table: `_PARTS` gives public names only (Queue methods and module
attributes: `Queue.__getattr__` attaches to the class what the table gives). A part's private
functions are called through their module, `_part("ddq_compact").index_update(q)` (an edge to
ddq_compact, as above), never attached to Queue (issue 37 item 1); a `_`-prefixed name in the
table is reported as `attached: ...`.

Prints each cycle as `cycle: a -> b -> a` and exits 1 if there is one or if the table gives a
private name; the last line is always `imports: N modules, M edges, K cycles`. Standard library
only.
"""

import argparse
import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Cycles allowed, each the set of modules of one cycle, with its reason:
KNOWN: list[set[str]] = [
    # An open with on_corrupt="salvage" hands recovery's Corrupt to ddq_salvage.in_place [K9],
    # which repairs the directory and recovers it again (q.recover(), salvage off: one level),
    # reading the manifest by ddq.decode_manifest: recovery and salvage call each other by
    # design, each loaded by the other only on that path.
    {"ddq_recover", "ddq_salvage"},
]


def modules(port, host):
    """{module name: (path, package name or "")} for the .py files of both trees."""
    out = {}
    if port and os.path.isdir(port):
        for f in sorted(os.listdir(port)):
            if f.endswith(".py"):
                out[f[:-3]] = (os.path.join(port, f), "")
    if host and os.path.isdir(host):
        top = os.path.basename(os.path.normpath(host))
        for root, dirs, files in os.walk(host):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(root, host)
            pkg = top if rel == "." else top + "." + rel.replace(os.sep, ".")
            for f in sorted(files):
                if f.endswith(".py"):
                    name = pkg if f == "__init__.py" else pkg + "." + f[:-3]
                    out[name] = (os.path.join(root, f), pkg)
    return out


def table(path):
    """{name: module} of the `_PARTS = {...}` literal of the file at path (ddq.py): each module
    under its own name and under every name its string gives; empty without one."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_PARTS" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            for k, v in zip(node.value.keys, node.value.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                    out[k.value] = k.value
                    for name in str(v.value).replace("-", " ").split():
                        out[name] = k.value
    return out


def attached(path):
    """[(name, module)] of the `_`-prefixed names the `_PARTS` literal of ddq.py gives: each would
    be attached to Queue as a private method by its `__getattr__` (none may be)."""
    return sorted((n, m) for n, m in table(path).items() if n.startswith("_") and n != m)


def _imported(tree, pkg, lazy=()):
    """The module names a file imports at run time (dotted, before resolution); lazy: the names
    ddq.py's table gives, whose use as `self.NAME`, `q.NAME` or `ddq.NAME` loads the module that
    gives it (Queue's and the module's __getattr__ call _part), counted as `_part:NAME`."""
    names = []

    def walk(node):
        for child in ast.iter_child_nodes(node):
            walk_one(child)

    def walk_one(node):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".") if pkg else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(parts + ([base] if base else []))
            if base:
                names.append(base)
                names.extend(base + "." + a.name for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))
            and getattr(node.func, "id", getattr(node.func, "attr", ""))
            in ("__import__", "_addon", "_part")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            f = getattr(node.func, "id", getattr(node.func, "attr", ""))
            names.append(("_part:" if f == "_part" else "") + node.args[0].value)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in lazy
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "q", "ddq")
        ):
            names.append("_part:" + node.attr)
        walk(node)

    walk(tree)
    return names


def graph(mods):
    """{module: set of modules it imports}, edges to modules of mods only."""
    g = {}
    parts_of = {}
    if "ddq" in mods and not mods["ddq"][1]:
        parts_of = table(mods["ddq"][0])
    for name, (path, pkg) in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges = set()
        lazy = () if name not in parts_of else [n for n in parts_of if n not in mods]
        for imp in _imported(tree, pkg, lazy):  # (an __init__'s relative base: its own package)
            if imp.startswith("_part:"):  # a part loading another through ddq.py's table
                if name == "ddq":
                    continue
                imp = parts_of.get(imp[6:], "")
            parts = imp.split(".")
            for k in range(len(parts), 0, -1):  # the longest prefix that is one of ours
                cand = ".".join(parts[:k])
                if cand in mods:
                    if cand != name:
                        edges.add(cand)
                    break
        if name == "ddq" and not pkg:
            edges -= set(parts_of)  # the core names its parts in its table only
        elif not pkg:
            edges -= set(table(path).values())  # as does any port module with a _PARTS table
        g[name] = edges
    return g


def cycles(g):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _path(g, comp):
    # One cycle through the component, for the message: a -> b -> ... -> a.
    start, seen, at = comp[0], [comp[0]], comp[0]
    for _ in range(len(comp)):
        nxt = [w for w in sorted(g[at]) if w in comp]
        if start in nxt and len(seen) > 1:
            break
        nxt = [w for w in nxt if w not in seen] or nxt
        at = nxt[0]
        if at == start:
            break
        seen.append(at)
    return " -> ".join(seen + [start])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", default=os.path.join(REPO, "port"))
    ap.add_argument("--host", default=os.path.join(REPO, "host", "ddqhost"))
    args = ap.parse_args(argv)
    mods = modules(args.port, args.host)
    g = graph(mods)
    bad = [c for c in cycles(g) if set(c) not in KNOWN]
    for c in bad:
        print("cycle: " + _path(g, c))
    private = attached(mods["ddq"][0]) if "ddq" in mods and not mods["ddq"][1] else []
    for n, m in private:
        print(
            "attached: ddq.py's _PARTS gives %s (%s): a part's private function is called through"
            ' its module, _part("%s").NAME(q, ...), not attached to Queue' % (n, m, m)
        )
    print(
        "imports: %d modules, %d edges, %d cycles"
        % (len(mods), sum(len(e) for e in g.values()), len(bad))
    )
    return 1 if bad or private else 0


if __name__ == "__main__":
    sys.exit(main())
