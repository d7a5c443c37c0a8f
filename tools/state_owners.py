#!/usr/bin/env python3
"""Who writes the queue's state: each port/ module's writes to the private attributes of
`ddq.Queue` and of the objects it holds (`_log`: ddq._Log, `_ix`: ddq._Index, and the owned
objects of OWNED), read from the AST, checked against the owners this file names
(ARCHITECTURE.md "State has owners"; issue 37 item 1).

The modules read are the queue's: ddq.py and the parts its one table `_PARTS` names (the message
layer and the other add-ons have classes of their own). A write is an assignment, augmented
assignment, `del` or `setattr(x, "name", ...)` whose target is `<expr>._name`, _name an attribute
the Queue class body annotates (its state; not the methods attached at run time), or a field of
the writer or the index: `<expr>._log.f`, `<expr>._ix.f`, or `x.f` where x is a local bound to
one of them or a parameter annotated with its class (counted as "_log.f", "_ix.f"). An owned
object's field (OWNED: `_rm`, ddq_reclaim.Reclaim) is written the same ways, or as `self.f` in
its class's methods. (A change inside a value, `q._swept[s] = lease`, is not a write of it.)

    python3 tools/state_owners.py            # exit 1: a write by neither owner nor builder
    python3 tools/state_owners.py --report   # also each attribute, its writers, its owner

Every private Queue attribute has an entry in ATTRS (its owner: one module, or a role of which a
queue loads one module; the modules that build it besides the open), every owned object's field
its entry in OWNED. The check fails on a write by a module that neither owns nor builds what it
writes, on a Queue attribute without an entry, and on an entry for no attribute. The last line is
always `state: N attributes, M (module, attribute) pairs, K modules writing, U unowned pairs;
owned: ...` (U: the writes refused; each owned object, its owner and its fields). Standard
library only.
"""

import argparse
import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = os.path.join(REPO, "port")
# The open (ddq_recover: init, _reset, recover) builds every attribute of Queue from the options
# and the disk: it may write each one.
BUILDER = "ddq_recover"
ADM = ("ddq_admit", "ddq_hold")  # the admission rule: one of them a queue (Queue._adm, at open)
# Queue's private attributes: attribute -> (owner, the modules besides BUILDER that build it).
ATTRS = {
    "_o": ("ddq_recover", ()),  # the options: set by the open alone
    "_log": ("ddq_recover", ()),  # the writer: one object from open to close (_Log.adopt)
    "_rm": ("ddq_recover", ()),  # the reclamation state (its fields: OWNED)
    "_adm": ("ddq_recover", ()),  # the admission rule the open chose by window
    # the salvage counts [salvaged, lost]; ddq_salvage.in_place swaps them out around its own
    # recovery of the repaired directory (which must raise what it finds) and counts into them
    "_salv": ("ddq_recover", ("ddq_salvage",)),
    "_closed": ("ddq", ()),  # close
    "_lock": ("ddq", ()),  # close releases it
    "_rbuf": ("ddq", ()),  # the read buffer: Queue._buf sizes it, and _buf(0) drops it
    # a publication (ddq_compact.adopt: compact_now, ddq_reclaim's) puts in the copy's index
    "_ix": (
        "ddq_compact",
        ("ddq_index",),  # ddq_index: load adopts the index queue.index holds
    ),
    "_swept": ("ddq_compact", ()),  # ddq.py adds to it; a publication made it durable
    "_has_manifest": ("ddq_compact", ()),  # the first compaction publishes one
    "_ixcov": ("ddq_index", ()),  # what queue.index covers: save, load
    "_plan": (
        ADM,
        (
            "ddq_index",  # load: the plan queue.index saved (an upper bound like any cached one)
            "ddq_compact",  # adopt: the copy's plan, placed record by record as it copied
            "ddq",  # enqueue under the hold rule, which keeps none (one test of window, inline)
        ),
    ),
    "_slack": (ADM, ()),  # the room the last admission left
    "_hd": ("ddq_hold", ()),  # the hold rule's DATA bytes
}
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


def who(k):
    """(the owner's modules, the builders' modules, "owner (built by ...)") of the state k (an
    attribute or "_rm.f"), or None when it has no entry."""
    o = k.split(".")[0] if "." in k else None
    if o in OWNED:
        owner, built = (OWNED[o][1],), OWNED[o][2]
    elif o is None and k in ATTRS:
        owner, built = ATTRS[k]
        owner = owner if isinstance(owner, tuple) else (owner,)
        built = tuple(b for b in (BUILDER,) + built if b not in owner)
    else:
        return None
    text = "|".join(owner) + (" (built by %s)" % ", ".join(built) if built else "")
    return owner, built, text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", action="store_true", help="list every attribute and its writers")
    ap.add_argument("--port", default=PORT)
    a = ap.parse_args(argv)
    state, every = scan(a.port)
    bad = []  # a write by a module that neither owns nor builds what it writes
    for (m, k), lines in sorted(every.items()):
        w = who(k)
        if w is not None and m not in w[0] and m not in w[1]:
            bad.append(
                "not its owner: %s writes %s (line %d): %s is written by %s alone"
                % (m, k, lines[0], k, w[2])
            )
    for k in sorted(state - set(ATTRS)):
        bad.append("no owner: Queue.%s (give it an owner in ATTRS, tools/state_owners.py)" % k)
    for k in sorted(set(ATTRS) - state):
        bad.append("not state: ATTRS names %s, which ddq.Queue does not annotate" % k)
    fields = {o: set() for o in OWNED}
    for _m, k in every:
        if "." in k and k.split(".")[0] in OWNED:
            fields[k.split(".")[0]].add(k)
    pairs = [p for p in every if "." not in p[1] or p[1].split(".")[0] not in OWNED]
    summary = "state: %d attributes, %d (module, attribute) pairs, %d modules writing" % (
        len(state),
        len(pairs),
        len({m for m, _ in pairs}),
    )
    summary += ", %d unowned pairs" % sum(1 for b in bad if b.startswith("not its owner"))
    summary += "; owned: " + ", ".join(
        "%s by %s (%d fields)" % (o, who(o + ".*")[2], len(fields[o])) for o in OWNED
    )
    for b in bad:
        print(b)
    if a.report:
        by = {}
        for (m, k), lines in every.items():
            by.setdefault(k, []).append("%s(%d)" % (m, len(lines)))
        for k in sorted(by):
            w = who(k)
            print("%-16s %-44s %s" % (k, " ".join(sorted(by[k])), w[2] if w else "(no owner)"))
    print(summary)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
