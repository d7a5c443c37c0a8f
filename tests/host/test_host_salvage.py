"""`ddq salvage DIR OUT` (SPEC §15 [K8]): exit codes, text and --json, OUT refused when it exists
or lies inside DIR, DIR unchanged byte for byte, the output clean to the independent reader."""

import json
import os

import pytest

import conftest
import ddq as ddqmod
from conftest import FIXTURE_NAMES, FIXTURES, copy_fixture, ddq, one_line_error, tree_hash
from ddqhost import fsck

OPTS = {"segment_bytes": 512, "max_payload_bytes": 64, "max_items": 64, "max_segments": 32}
FLAGS = conftest.option_flags(OPTS)


def _queue(d):
    q = ddqmod.Queue(str(d), clock=lambda: 1767225600000, **OPTS)
    for s in range(1, 21):
        q.enqueue(b"payload-%02d" % s)
    for s in (1, 2, 3, 4):
        q.claim_seq(s, 1000)
    q.ack(1)
    q.retry(2, 100)
    q.quarantine(3, b"bad")
    q.close()
    return str(d)


def _verify_clean(out):
    rep = fsck.scan(out, dict(OPTS))
    assert rep.verdict == 0, fsck.render_verify(rep)


def test_salvage_clean_exit_0_text(tmp_path):
    # EVIDENCE-OF: K8 K7
    d = _queue(tmp_path / "q")
    before = tree_hash(d)
    out = str(tmp_path / "out")
    r = ddq("salvage", d, out, *FLAGS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: clean" in r.stdout and "kept: 19 items" in r.stdout
    assert tree_hash(d) == before
    _verify_clean(out)


def test_salvage_with_loss_exit_1_json(tmp_path):
    # EVIDENCE-OF: K8 K6
    d = _queue(tmp_path / "q")
    seg = os.path.join(d, ddqmod.segment_name(0, 1))
    b = bytearray(open(seg, "rb").read())
    b[60] ^= 0xFF
    with open(seg, "wb") as f:
        f.write(b)
    before = tree_hash(d)
    out = str(tmp_path / "out")
    r = ddq("salvage", d, out, "--json", *FLAGS)
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["status"] == "salvaged_with_loss"
    assert rep["damaged"] and rep["damaged"][0][0] == ddqmod.segment_name(0, 1)
    assert rep["lost_count"] == 1 and rep["kept"] == 18
    assert rep["next_seq"] == 21
    assert tree_hash(d) == before
    _verify_clean(out)
    # the text form says the same
    r = ddq("salvage", d, str(tmp_path / "out2"), *FLAGS)
    assert r.returncode == 1 and "result: salvaged_with_loss" in r.stdout
    assert "damaged: " + ddqmod.segment_name(0, 1) in r.stdout


def test_salvage_nothing_usable_exit_2(tmp_path):
    # EVIDENCE-OF: K8
    d = tmp_path / "g"
    d.mkdir()
    (d / ddqmod.segment_name(0, 0)).write_bytes(b"\x42" * 300)
    r = ddq("salvage", str(d), str(tmp_path / "out"), "--json", *FLAGS)
    assert r.returncode == 2, r.stdout + r.stderr
    assert json.loads(r.stdout)["status"] == "nothing_usable"
    assert not os.path.exists(tmp_path / "out")


def test_salvage_refuses_existing_out_and_out_inside_dir(tmp_path):
    # EVIDENCE-OF: K8 K1
    d = _queue(tmp_path / "q")
    before = tree_hash(d)
    (tmp_path / "out").mkdir()
    one_line_error(ddq("salvage", d, str(tmp_path / "out"), *FLAGS), 1)
    one_line_error(ddq("salvage", d, os.path.join(d, "inside"), *FLAGS), 1)
    one_line_error(ddq("salvage", str(tmp_path / "nope"), str(tmp_path / "o3"), *FLAGS), 1)
    assert tree_hash(d) == before
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_salvage_c_fixtures_clean(tmp_path, name):
    # EVIDENCE-OF: K4 K7 V3
    if not os.path.isdir(os.path.join(FIXTURES, name)):
        pytest.skip("no C DDQ fixtures")
    d = copy_fixture(name, str(tmp_path / "c"))
    before = tree_hash(d)
    out = str(tmp_path / "out")
    r = ddq("salvage", d, out, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree_hash(d) == before
    rep = fsck.scan(
        out,
        {
            "segment_bytes": 4194304,
            "max_payload_bytes": 1048576,
            "max_items": 100000,
            "max_segments": 1024,
        },
    )
    assert rep.verdict == 0, fsck.render_verify(rep)
    a = ddqmod.Queue(d, clock=lambda: 1767225600000)
    try:
        want = [
            (i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms, a.read(i.seq))
            for i in a.items()
            if i.state != "acked"
        ]
        want_next = a.stats().next_seq
    finally:
        a.close()
    b = ddqmod.Queue(out, clock=lambda: 1767225600000)
    try:
        got = [
            (i.seq, i.state, i.attempts, i.lease_until_ms, i.not_before_ms, b.read(i.seq))
            for i in b.items()
        ]
        assert got == want and b.stats().next_seq == want_next
    finally:
        b.close()


# A child that runs `ddq salvage` and SIGKILLs itself at its k-th state-changing step (a
# storage call of the salvage or the host's final rename): a real kill at a chosen moment.
_KILLER = r"""
import os, signal, sys
import ddq
k = int(sys.argv[1])
n = [0]
def step(fn):
    def w(*a, **kw):
        n[0] += 1
        if n[0] == k:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*a, **kw)
    return w
S = ddq.PosixStorage
for m in ("mkdir", "write", "sync", "sync_dir", "rename", "remove"):
    f = step(getattr(S, m))
    setattr(S, m, staticmethod(f) if m in ("rename", "remove") else f)
os.rename = step(os.rename)
from ddqhost import cli
sys.exit(cli.main(sys.argv[2:]))
"""


def _killed_at(k, d, out):
    import subprocess
    import sys

    from conftest import REPO, cli_env

    return subprocess.run(
        [sys.executable, "-c", _KILLER, str(k), "salvage", d, out, *FLAGS],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        cwd=REPO,
    )


def test_salvage_killed_at_every_step_leaves_no_queue(tmp_path):
    # EVIDENCE-OF: K8 K4 K13
    # SIGKILL at every step: OUT never exists until it is whole; the partial directory never
    # verifies clean nor opens as a queue; a rerun removes it and finishes.
    d = _queue(tmp_path / "q")
    seg = os.path.join(d, ddqmod.segment_name(0, 1))
    b = bytearray(open(seg, "rb").read())
    b[60] ^= 0xFF  # damaged: the result is a new generation (1), as in the issue
    with open(seg, "wb") as f:
        f.write(b)
    before = tree_hash(d)
    kills = 0
    for k in range(1, 200):  # bounded: the salvage takes far fewer steps
        out = str(tmp_path / ("out%d" % k))
        r = _killed_at(k, d, out)
        if r.returncode == 1:
            assert "result: salvaged_with_loss" in r.stdout, r.stdout + r.stderr
            assert not os.path.exists(out + ".partial")
            _verify_clean(out)
            break
        assert r.returncode == -9, (k, r.returncode, r.stdout, r.stderr)
        kills += 1
        assert tree_hash(d) == before
        assert not os.path.exists(out), k
        part = out + ".partial"
        names = os.listdir(part) if os.path.exists(part) else []
        if names:
            v = ddq("verify", part, *FLAGS)
            tmp = os.path.join(part, "queue.manifest.tmp")
            if "queue.manifest" in names or (os.path.exists(tmp) and os.path.getsize(tmp) == 48):
                # past the commit point (a whole tmp: R14 adopts it), the rename to OUT not yet
                assert v.returncode == 0, (k, names, v.stdout)
                q = ddqmod.Queue(part, **OPTS)
                assert len(list(q.items())) == 18
                q.close()
            else:
                assert v.returncode == 2 and "result: clean" not in v.stdout, (k, names, v.stdout)
                with pytest.raises(ddqmod.Corrupt):
                    ddqmod.Queue(part, **OPTS)
        # a rerun takes the partial directory back and finishes
        r = ddq("salvage", d, out, *FLAGS)
        assert r.returncode == 1 and "result: salvaged_with_loss" in r.stdout, (
            k,
            r.stdout,
            r.stderr,
        )
        assert not os.path.exists(part)
        _verify_clean(out)
    assert kills > 8, kills
    # anything else under OUT.partial is refused, not deleted
    out = str(tmp_path / "outx")
    os.mkdir(out + ".partial")
    open(os.path.join(out + ".partial", "mine.txt"), "w").close()
    one_line_error(ddq("salvage", d, out, *FLAGS), 1)
    assert os.listdir(out + ".partial") == ["mine.txt"]


def test_verify_segments_without_manifest_or_marker_is_corrupt(tmp_path):
    # EVIDENCE-OF: K13
    # Generation 1's segments alone (the state an interrupted salvage left before K4 wrote the
    # marker first): recovery would open an empty generation 0 and delete them.
    d = _queue(tmp_path / "q")
    out = str(tmp_path / "out")
    assert ddq("salvage", d, out, *FLAGS).returncode == 0
    os.remove(os.path.join(out, "queue.manifest"))
    os.remove(os.path.join(out, "queue.format"))
    r = ddq("verify", out, *FLAGS)
    assert r.returncode == 2 and "result: clean" not in r.stdout, r.stdout + r.stderr
    assert "ddq salvage" in r.stdout, r.stdout
    # salvage keeps them
    r = ddq("salvage", out, str(tmp_path / "again"), "--json", *FLAGS)
    assert r.returncode == 1 and json.loads(r.stdout)["kept"] == 19, r.stdout + r.stderr
