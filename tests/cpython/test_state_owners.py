"""tools/state_owners.py: each private attribute of ddq.Queue has an owner (ATTRS) and each field
of an owned object one (OWNED); a write by a module that neither owns nor builds it fails, with
no baseline to list it (ARCHITECTURE.md "State has owners"; issue 37 item 1)."""

import importlib.util
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(REPO, "tools", "state_owners.py")
_spec = importlib.util.spec_from_file_location("state_owners", TOOL)
so = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(so)

# A port's ddq.py: Queue annotates the attributes the tool names (and one method attached at
# run time, which is not state); its table names the parts.
DDQ = (
    "class _Log:\n    pass\n\n\nclass Queue:\n"
    + "".join("    %s: int\n" % a for a in sorted(so.ATTRS))
    + '    _hold: "Callable[[int], None]"\n\n    def close(self):\n        self._closed = True\n'
    + "        log = self._log\n        log.off = 0\n\n\n_PARTS = {%s}\n"
)
PARTS = ("ddq_recover", "ddq_compact", "ddq_index", "ddq_reclaim", "ddq_admit", "ddq_hold")


def _run(port):
    p = subprocess.run(
        [sys.executable, TOOL, "--port", str(port)], capture_output=True, text=True, timeout=60
    )
    return p.returncode, p.stdout


def _port(tmp_path, parts, extra=""):
    d = tmp_path / "port"
    d.mkdir(parents=True)
    (d / "ddq.py").write_text(
        DDQ.replace("class Queue:\n", "class Queue:\n" + extra)
        % ", ".join('"%s": ""' % m for m in PARTS)
    )
    for name, text in parts.items():
        (d / (name + ".py")).write_text(text)
    return d


def _refused(tmp_path, part, src, msg):
    # the port with part made of src: the check fails and says msg
    rc, out = _run(_port(tmp_path, {part: src}))
    assert rc == 1 and msg in out, out
    assert ", 1 unowned pairs;" in out.splitlines()[-1], out


def test_the_repository_writes_each_attribute_from_its_owner_or_builders():
    p = subprocess.run(
        [sys.executable, TOOL], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert p.returncode == 0, p.stdout
    last = p.stdout.splitlines()[-1]
    assert last.startswith("state: ") and ", 0 unowned pairs; owned: " in last, p.stdout
    assert not os.path.exists(os.path.join(REPO, "tools", "state_owners.json"))  # no baseline


def test_a_write_by_neither_owner_nor_builder_is_refused(tmp_path):
    # the lifecycle is ddq's (close), built by the open: a compaction closing the queue is refused,
    # whatever wrote it before (there is no list of tolerated pairs)
    _refused(
        tmp_path,
        "ddq_compact",
        "def x(q):\n    q._closed = True\n",
        "not its owner: ddq_compact writes _closed (line 2): _closed is written by ddq (built by"
        " ddq_recover) alone",
    )


def test_the_admission_plan_has_its_role_and_builders(tmp_path):
    # _plan: the admission rule's (ddq_admit or ddq_hold, one a queue), built by the open, the
    # index's load, the publication and enqueue's hold branch; staged reclamation is none of them
    ok = {
        "ddq_admit": "def a(q):\n    q._plan = None\n    q._slack = 0\n",
        "ddq_hold": "def h(q):\n    q._slack = 1\n    q._hd = None\n",
        "ddq_index": "def load(q):\n    q._plan = [0, 0]\n    q._ixcov = None\n    q._ix = None\n",
        "ddq_compact": "def adopt(q, nix, plan):\n    q._ix, q._plan = nix, plan\n",
        "ddq_recover": "def init(q):\n    q._plan = q._hd = q._closed = q._rbuf = None\n",
    }
    rc, out = _run(_port(tmp_path, ok))
    assert rc == 0, out
    assert out.splitlines()[-1].startswith(
        "state: %d attributes, 14 (module, attribute) pairs, "
        "6 modules writing, 0 unowned pairs;" % len(so.ATTRS)
    ), out
    _refused(
        tmp_path / "r",
        "ddq_reclaim",
        "class Reclaim:\n    def publish(self, q, b):\n        q._plan = b.plan\n",
        "not its owner: ddq_reclaim writes _plan (line 3): _plan is written by ddq_admit|ddq_hold"
        " (built by ddq_recover, ddq_index, ddq_compact, ddq) alone",
    )


def test_an_attribute_without_an_owner_or_an_owner_of_nothing_fails(tmp_path):
    rc, out = _run(_port(tmp_path, {}, extra="    _new: int\n"))
    assert rc == 1 and "no owner: Queue._new (give it an owner in ATTRS" in out, out
    d = tmp_path / "g"
    d.mkdir()
    (d / "ddq.py").write_text("class Queue:\n    _o: int\n\n\n_PARTS = {}\n")
    rc, out = _run(d)
    assert rc == 1 and "not state: ATTRS names _closed, which ddq.Queue does not annotate" in out


def test_the_report_names_each_attribute_its_writers_and_owner(tmp_path):
    d = _port(tmp_path, {"ddq_hold": "def h(q):\n    q._slack = 1\n"})
    p = subprocess.run(
        [sys.executable, TOOL, "--port", str(d), "--report"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout
    rows = {ln.split()[0]: ln for ln in p.stdout.splitlines()[:-1]}
    assert rows["_slack"].split()[1:] == [
        "ddq_hold(1)",
        "ddq_admit|ddq_hold",
        "(built",
        "by",
        "ddq_recover)",
    ], rows
    assert rows["_closed"].split()[1:3] == ["ddq(1)", "ddq"], rows


RECLAIM = """
class Reclaim:
    def __init__(self, units):
        self.units = units
        self.bld = None


def drop(r: "Reclaim", q):
    r.bld = None
    staged = q._rm
    staged.dead = []
"""


def test_an_owned_object_is_written_by_its_owner_alone(tmp_path):
    # the reclamation state (Queue._rm, ddq_reclaim.Reclaim): its class's methods, a parameter
    # annotated with its class and a local bound to q._rm all write it, in its owner
    rc, out = _run(_port(tmp_path, {"ddq_reclaim": RECLAIM}))
    assert rc == 0 and "owned: _rm by ddq_reclaim (3 fields), " in out.splitlines()[-1], out
    _refused(
        tmp_path / "a",
        "ddq_compact",
        "def x(q):\n    q._rm.bld = None\n",
        "not its owner: ddq_compact writes _rm.bld (line 2): _rm.bld is written by ddq_reclaim"
        " alone",
    )
    _refused(
        tmp_path / "b",
        "ddq_index",
        "def x(q):\n    s = q._rm\n    s.sh = 0\n",
        "not its owner: ddq_index writes _rm.sh (line 3)",
    )


def test_the_options_the_writer_and_the_index_have_owners(tmp_path):
    # the options (Queue._o) are set by ddq_recover.init alone; the writer (Queue._log) and the
    # index with its counts (Queue._ix) are ddq's, which recovery (ddq_recover, ddq_index)
    # builds from the disk: no other part writes them
    _refused(
        tmp_path / "o",
        "ddq_compact",
        "def x(q):\n    q._o.win = 4\n",
        "not its owner: ddq_compact writes _o.win (line 2): _o.win is written by ddq_recover"
        " alone",
    )
    _refused(
        tmp_path / "w",
        "ddq_reclaim",
        "def x(q):\n    w = q._log\n    w.h = None\n",
        "not its owner: ddq_reclaim writes _log.h (line 3): _log.h is written by ddq (built by"
        " ddq_recover, ddq_index) alone",
    )
    _refused(
        tmp_path / "i",
        "ddq_admit",
        "def x(q):\n    ix = q._ix\n    ix.acked -= 1\n",
        "not its owner: ddq_admit writes _ix.acked (line 3)",
    )
