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
