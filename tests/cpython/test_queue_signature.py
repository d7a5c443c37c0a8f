"""ddq.Queue's declared options (the `if TYPE_CHECKING:` signature the type checkers and readers
see; compiled to nothing on a board) are exactly ddq_recover.init's, whose defaults are the ones
in force (docs/API.md): the same names, order, defaults and annotations."""

import ast
import os

PORT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "port")


def _tree(name):
    with open(os.path.join(PORT, name), encoding="utf-8") as f:
        return ast.parse(f.read())


def _shape(fn, skip):
    a = fn.args
    names = [x.arg for x in a.args][skip:]
    notes = [ast.dump(x.annotation) if x.annotation else None for x in a.args][skip:]
    defaults = [ast.dump(d) for d in a.defaults]
    return names, notes, defaults


def test_declared_queue_options_are_recoverys():
    queue = next(
        n for n in _tree("ddq.py").body if isinstance(n, ast.ClassDef) and n.name == "Queue"
    )
    declared = [
        f
        for n in queue.body
        if isinstance(n, ast.If)
        for f in n.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    ]
    init = next(
        n
        for n in _tree("ddq_recover.py").body
        if isinstance(n, ast.FunctionDef) and n.name == "init"
    )
    assert len(declared) == 1, declared
    assert _shape(declared[0], 1) == _shape(init, 1)


def _parts_table():
    # {name: module} of the public names ddq.py's _PARTS gives (the "-" marker dropped)
    for n in _tree("ddq.py").body:
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_PARTS":
            out = {}
            for k, v in zip(n.value.keys, n.value.values):
                for name in v.value.replace("-", " ").split():
                    out[name] = k.value
            return out
    raise AssertionError("no _PARTS in ddq.py")


def _sig(fn):
    # names, annotations (quotes dropped: "Stats" and Stats read the same), defaults; self left out
    a = fn.args
    notes = [ast.unparse(x.annotation).strip("'\"") if x.annotation else None for x in a.args]
    ret = ast.unparse(fn.returns).strip("'\"") if fn.returns else None
    return [x.arg for x in a.args][1:], notes[1:], [ast.dump(d) for d in a.defaults], ret


def test_declared_part_methods_are_the_parts():
    # Issue 37: a Queue method whose body lives in a part (attached at its first call by
    # Queue.__getattr__) is declared for mypy by an `if TYPE_CHECKING:` stub in Queue, with the
    # part's own signature; every such method has one, and Queue declares no other part name.
    queue = next(
        n for n in _tree("ddq.py").body if isinstance(n, ast.ClassDef) and n.name == "Queue"
    )
    stubs = {
        f.name: f
        for n in queue.body
        if isinstance(n, ast.If)
        for f in n.body
        if isinstance(f, ast.FunctionDef) and f.name != "__init__"
    }
    methods = {}
    for name, m in _parts_table().items():
        for f in _tree(m + ".py").body:
            if isinstance(f, ast.FunctionDef) and f.name == name and f.args.args:
                note = f.args.args[0].annotation
                if note is not None and ast.unparse(note).strip("'\"") == "Queue":
                    methods[name] = f
    methods.pop("init")  # Queue(...)'s body: the __init__ stub above (its own test)
    assert sorted(stubs) == sorted(methods), (sorted(stubs), sorted(methods))
    for name, f in methods.items():
        assert _sig(stubs[name]) == _sig(f), (name, _sig(stubs[name]), _sig(f))
