#!/usr/bin/env python3
"""Who writes the queue's state: each port/ module's writes to the private attributes of
`ddq.Queue` and of the objects it holds (`_log`: ddq._Log, `_ix`: ddq._Index, and the owned
objects of OWNED), read from the AST (ARCHITECTURE.md "State has owners"; issue 37 item 1).

The modules read are the queue's: ddq.py and the parts its one table `_PARTS` names (the message
layer and the other add-ons have classes of their own). A write is an assignment, augmented
assignment, `del` or `setattr(x, "name", ...)` whose target is `<expr>._name`, _name an attribute
the Queue class body annotates (its state; not the methods attached at run time), or a field of
the writer or the index: `<expr>._log.f`, `<expr>._ix.f`, or `x.f` where x is a local bound to
one of them or a parameter annotated with its class (counted as "_log.f", "_ix.f"). An owned
object's field (OWNED: `_rm`, ddq_reclaim.Reclaim) is written the same ways, or as `self.f` in
its class's methods.

    python3 tools/state_owners.py            # check against tools/state_owners.json
    python3 tools/state_owners.py --report   # every attribute and the modules that write it
    python3 tools/state_owners.py --write    # record today's pairs (after they shrank)

Two checks. Ownership, per object: a field of an owned object written by a module that is
not its owner fails, whatever the baseline says. The rest is a ratchet while the state moves to
its owners (one writer an attribute): it fails on a (module, attribute) pair that
tools/state_owners.json does not list (a new cross-module write), and says how many listed
pairs are gone (the owned objects' fields are not in it: their owner writes them). The last
line is always `state: N attributes, M (module, attribute) pairs, K modules writing; owned: ...`
(each owned object, its owner and its fields). Standard library only.
"""

import argparse
import ast
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = os.path.join(REPO, "port")
BASE = os.path.join(REPO, "tools", "state_owners.json")
# Objects of the queue whose fields have one owner: Queue attribute -> (class, owner module,
# the modules that build it: recovery makes the writer from the disk, as the owner would).
OWNED = {
    "_rm": ("Reclaim", "ddq_reclaim", ()),  # the reclamation state (reclaim_step > 0)
    "_o": ("Options", "ddq_recover", ()),  # the options, set at open by init
    "_log": ("_Log", "ddq", ("ddq_recover", "ddq_index")),  # the writer
    "_ix": ("_Index", "ddq", ("ddq_recover", "ddq_index")),  # the index and its counts
}
HELD = ("_log", "_ix") + tuple(OWNED)  # objects of the queue whose fields count as its state
CLASSES = {"_Log": "_log", "_Index": "_ix"}  # class -> the attribute that holds it
CLASSES.update({c: a for a, (c, _m, _b) in OWNED.items()})


def queue_state(path):
    """The private attribute names the Queue class body of ddq.py annotates (its state)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Queue":
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    n = st.target.id
                    if n.startswith("_") and not n.startswith("__"):
                        ann = ast.unparse(st.annotation)
                        if "Callable" not in ann:  # a method attached at run time
                            out.add(n)
    return out


def rooms(path):
    """ddq and the modules of ddq.py's `_PARTS` literal."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "_PARTS"
            and isinstance(node.value, ast.Dict)
        ):
            return ["ddq"] + [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    return ["ddq"]


def key(target, state, alias):
    """The state name a store to target writes, or None (alias: local name -> held object)."""
    if not isinstance(target, ast.Attribute):
        return None
    if target.attr in state:
        return target.attr
    v = target.value
    if isinstance(v, ast.Attribute) and v.attr in HELD:
        return "%s.%s" % (v.attr, target.attr)
    if isinstance(v, ast.Name) and v.id in alias:
        return "%s.%s" % (alias[v.id], target.attr)
    return None


def aliases(fn):
    """{local name: held attribute} of a function: names bound to `<expr>._log`, `._ix`, ... (also
    in a tuple assignment) or parameters annotated with their classes (CLASSES)."""
    out = {}
    for a in fn.args.args + fn.args.kwonlyargs:
        if a.annotation is not None:
            t = ast.unparse(a.annotation).strip("\"'").split(".")[-1]
            if t in CLASSES:
                out[a.arg] = CLASSES[t]
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                pairs = []
                if isinstance(t, ast.Name):
                    pairs = [(t, node.value)]
                elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(t.elts, node.value.elts))
                for n, v in pairs:
                    if isinstance(n, ast.Name) and isinstance(v, ast.Attribute) and v.attr in HELD:
                        out[n.id] = v.attr
    return out


def writes(path, state):
    """{state name: [line, ...]} of the writes in the file at path."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = {}

    def add(k, node):
        if k:
            out.setdefault(k, []).append(node.lineno)

    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    own = {}  # a method of an owned object's class: its first parameter is that object
    for c in ast.walk(tree):
        if isinstance(c, ast.ClassDef) and c.name in CLASSES and CLASSES[c.name] in OWNED:
            for f in c.body:
                if isinstance(f, ast.FunctionDef) and f.args.args:
                    own[id(f)] = (f.args.args[0].arg, CLASSES[c.name])
    seen = set()
    for fn in fns + [tree]:
        alias = aliases(fn) if fn is not tree else {}
        if id(fn) in own:
            alias[own[id(fn)][0]] = own[id(fn)][1]
        for node in ast.walk(fn):
            if id(node) in seen or node is fn:
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn is tree:
                continue
            seen.add(id(node))
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                if node.args[1].value in state:
                    add(node.args[1].value, node)
                continue
            for t in targets:
                for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                    add(key(el, state, alias), node)
    return out


def scan(port):
    state = queue_state(os.path.join(port, "ddq.py"))
    pairs = {}
    for m in sorted(rooms(os.path.join(port, "ddq.py"))):
        path = os.path.join(port, m + ".py")
        if os.path.exists(path):
            for k, lines in writes(path, state).items():
                pairs[(m, k)] = lines
    return state, pairs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", action="store_true", help="list every attribute and its writers")
    ap.add_argument("--write", action="store_true", help="record today's pairs as the baseline")
    ap.add_argument("--port", default=PORT)
    ap.add_argument("--base", default=BASE)
    a = ap.parse_args(argv)
    state, every = scan(a.port)

    def owned(k):  # the owned object whose field k is, or None (k "_rm": the Queue attribute)
        return k.split(".")[0] if "." in k and k.split(".")[0] in OWNED else None

    pairs = {p: v for p, v in every.items() if not owned(p[1])}
    bad = []  # an owned object's field written by a module that neither owns nor builds it
    fields = {o: set() for o in OWNED}
    for (m, k), lines in sorted(every.items()):
        o = owned(k)
        if o:
            fields[o].add(k)
            if m != OWNED[o][1] and m not in OWNED[o][2]:
                bad.append((m, k, lines[0]))
    mods = sorted({m for m, _ in pairs})
    summary = "state: %d attributes, %d (module, attribute) pairs, %d modules writing" % (
        len(state),
        len(pairs),
        len(mods),
    )

    def by(o):  # "ddq" or "ddq (built by ddq_recover, ddq_index)"
        b = OWNED[o][2]
        return OWNED[o][1] + (" (built by %s)" % ", ".join(b) if b else "")

    summary += "; owned: " + ", ".join(
        "%s by %s (%d fields)" % (o, by(o), len(fields[o])) for o in OWNED
    )
    for m, k, line in bad:
        print(
            "not its owner: %s writes %s (line %d): %s's fields are written by %s alone"
            % (m, k, line, k.split(".")[0], by(k.split(".")[0]))
        )
    if a.report:
        by = {}
        for (m, k), lines in every.items():
            by.setdefault(k, []).append("%s(%d)" % (m, len(lines)))
        for k in sorted(by):
            print("%-16s %s" % (k, " ".join(sorted(by[k]))))
        print(summary)
        return 1 if bad else 0
    now = sorted("%s %s" % p for p in pairs)
    if a.write:
        with open(a.base, "w") as f:
            json.dump({"pairs": now}, f, indent=1)
            f.write("\n")
        print(summary)
        return 1 if bad else 0
    try:
        with open(a.base) as f:
            base = set(json.load(f)["pairs"])
    except (OSError, ValueError, KeyError) as e:
        print("state_owners: cannot read %s: %s" % (a.base, e))
        return 1
    new = [p for p in now if p not in base]
    gone = len(base - set(now))
    for p in new:
        m, k = p.split(" ")
        print(
            "new write: %s writes %s (line %d): a module writes only the state it owns"
            % (m, k, pairs[(m, k)][0])
        )
    if gone:
        print("%d listed pairs are gone: record them with tools/state_owners.py --write" % gone)
    print(summary)
    return 1 if new or bad else 0


if __name__ == "__main__":
    sys.exit(main())
