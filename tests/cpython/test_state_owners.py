"""tools/state_owners.py: a part that writes queue state it did not write before is reported
(ARCHITECTURE.md "State has owners"; the ratchet of issue 37 item 1)."""

import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(REPO, "tools", "state_owners.py")

DDQ = """
class _Log:
    pass


class Queue:
    _n_acked: int
    _log: _Log
    _hold: "Callable[[int], None]"

    def ack(self):
        self._n_acked += 1
        log = self._log
        log.off = 0


_PARTS = {"ddq_a": " x ", "ddq_b": ""}
"""


def _run(port, *args):
    p = subprocess.run(
        [sys.executable, TOOL, "--port", str(port), "--base", os.path.join(str(port), "b.json")]
        + list(args),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.returncode, p.stdout


def _port(tmp_path, parts):
    d = tmp_path / "port"
    d.mkdir()
    (d / "ddq.py").write_text(DDQ)
    for name, text in parts.items():
        (d / name).write_text(text)
    return d


def test_the_repository_writes_no_new_state_across_modules():
    p = subprocess.run(
        [sys.executable, TOOL], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert p.returncode == 0, p.stdout
    assert p.stdout.splitlines()[-1].startswith("state: "), p.stdout


def test_a_new_cross_module_write_fails_and_names_it(tmp_path):
    d = _port(tmp_path, {"ddq_a.py": "def x(q):\n    q._n_acked = 0\n"})
    rc, out = _run(d, "--write")
    assert rc == 0 and "2 (module, attribute) pairs" in out, out
    with open(os.path.join(str(d), "b.json")) as f:  # (the writer's fields: owned, below)
        assert json.load(f)["pairs"] == ["ddq _n_acked", "ddq_a _n_acked"]
    # ddq_b writes the writer's offset through an alias (the writer is ddq's: not its owner),
    # ddq_a a second attribute (new)
    (d / "ddq_b.py").write_text("def y(q):\n    lg, ix = q._log, None\n    lg.off = 1\n")
    (d / "ddq_a.py").write_text("def x(q):\n    q._n_acked = 0\n    q._log = None\n")
    rc, out = _run(d)
    assert rc == 1, out
    assert "not its owner: ddq_b writes _log.off (line 3)" in out, out
    assert "new write: ddq_a writes _log (line 3)" in out, out
    # a method attached at run time is not state; a module outside _PARTS is not a room
    (d / "ddq_b.py").write_text("def y(q):\n    q._hold = None\n")
    (d / "ddq_a.py").write_text("def x(q):\n    q._n_acked = 0\n")
    (d / "ddq_other.py").write_text("def z(q):\n    q._n_acked = 0\n")
    rc, out = _run(d)
    assert rc == 0, out
    assert out.splitlines()[-1] == (
        "state: 2 attributes, 2 (module, attribute) pairs, 2 modules writing;"
        " owned: _rm by ddq_reclaim (0 fields), _o by ddq_recover (0 fields),"
        " _log by ddq (built by ddq_recover, ddq_index) (1 fields),"
        " _ix by ddq (built by ddq_recover, ddq_index) (0 fields)"
    ), out


RECLAIM = """
class Reclaim:
    def __init__(self, units):
        self.units = units
        self.bld = None


def drop(r: "Reclaim", q):
    r.bld, q._n_acked = None, 0
    staged = q._rm
    staged.dead = []
"""


def _with_part(tmp_path, name, src, a):
    # a port whose table names the part `name` (made of src) beside ddq_a.py (made of a), its
    # baseline written: the port's directory and the --write run's output
    d = _port(tmp_path, {name + ".py": src, "ddq_a.py": a})
    ddq = (d / "ddq.py").read_text().replace('"ddq_b": ""', '"ddq_b": "", "%s": ""' % name)
    (d / "ddq.py").write_text(ddq)
    rc, out = _run(d, "--write")
    assert rc == 0, out
    return d, out


def _refused(d, src, msg):
    # ddq_a.py made src: the check fails and says msg
    (d / "ddq_a.py").write_text(src)
    rc, out = _run(d)
    assert rc == 1 and msg in out, out


def test_an_owned_object_is_written_by_its_owner_alone(tmp_path):
    # the reclamation state (Queue._rm, ddq_reclaim.Reclaim): its class's methods, a parameter
    # annotated with its class and a local bound to q._rm all write it, in its owner
    d, out = _with_part(tmp_path, "ddq_reclaim", RECLAIM, "def x(q):\n    q._rm = 1\n")
    assert "owned: _rm by ddq_reclaim (3 fields), " in out.splitlines()[-1], out
    with open(os.path.join(str(d), "b.json")) as f:  # the owner's writes are not in the ratchet
        assert "ddq_reclaim _n_acked" in json.load(f)["pairs"]
    # another module writing a field of it fails, whatever the baseline lists, and names it
    (d / "ddq_a.py").write_text("def x(q):\n    q._rm = 1\n    q._rm.bld = None\n")
    rc, out = _run(d, "--write")
    assert rc == 1, out
    _refused(
        d,
        "def x(q):\n    q._rm = 1\n    q._rm.bld = None\n",
        "not its owner: ddq_a writes _rm.bld (line 3): _rm's fields are written by ddq_reclaim"
        " alone",
    )
    _refused(
        d,
        "def x(q):\n    s = q._rm\n    s.sh = 0\n",
        "not its owner: ddq_a writes _rm.sh (line 3)",
    )


RECOVER = """
def init(q):
    q._o = None
    o = q._o
    o.win = 0


def _reset(q):
    log = q._log
    log.off = log.next = 0
"""


def test_the_options_the_writer_and_the_index_have_owners(tmp_path):
    # the options (Queue._o) are set by ddq_recover.init alone; the writer (Queue._log) and the
    # index with its counts (Queue._ix) are ddq's, which recovery (ddq_recover, ddq_index)
    # builds from the disk: no other part writes them (issue 37 item 1)
    d, out = _with_part(tmp_path, "ddq_recover", RECOVER, "def x(q):\n    pass\n")
    assert "_o by ddq_recover (1 fields)" in out and "(built by ddq_recover, ddq_index) (2" in out
    _refused(
        d,
        "def x(q):\n    q._o.win = 4\n",
        "not its owner: ddq_a writes _o.win (line 2): _o's fields are written by ddq_recover"
        " alone",
    )
    _refused(
        d,
        "def x(q):\n    w = q._log\n    w.h = None\n",
        "not its owner: ddq_a writes _log.h (line 3): _log's fields are written by ddq (built by"
        " ddq_recover, ddq_index) alone",
    )
    _refused(
        d,
        "def x(q):\n    ix = q._ix\n    ix.acked -= 1\n",
        "not its owner: ddq_a writes _ix.acked (line 3)",
    )


def test_a_pair_gone_is_reported_for_the_record(tmp_path):
    d = _port(tmp_path, {"ddq_a.py": "def x(q):\n    q._n_acked = 0\n"})
    assert _run(d, "--write")[0] == 0
    (d / "ddq_a.py").write_text("def x(q):\n    return q._n_acked\n")
    rc, out = _run(d)
    assert rc == 0 and "1 listed pairs are gone" in out, out


def test_an_unreadable_baseline_is_one_line(tmp_path):
    d = _port(tmp_path, {})
    rc, out = _run(d)
    assert rc == 1 and out.startswith("state_owners: cannot read "), out
    shutil.rmtree(str(d))
