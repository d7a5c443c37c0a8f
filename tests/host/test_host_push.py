"""`ddq push` on the virtual board (docs/HOST.md "pull / push"): --force never moves next_seq back
(a seq is never reused) and says what it overwrote; push reads a pulled directory with the writer's
options (ddq-options.json), not the profile the pull recorded.

Queue directories on the device have names unique to this run (the unix port's lock is an abstract
socket named after the path, shared by every process of the machine).
"""

import json
import os

from conftest import ddq, one_line_error
from ddqhost.device import Device

QD = "pushq-%d" % os.getpid()
BIG = "bigq-%d" % os.getpid()
UNIX = "segment_bytes=4096,max_payload_bytes=256,max_items=256,max_segments=16"


def _exec(board, code):
    with Device(board.tty, soft_reset=False) as dev:
        return dev.exec(code)


def _stats(board, qd):
    r = ddq("stats", "--device", board.tty, ":" + qd, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _hashes(board, qd):
    with Device(board.tty, soft_reset=False) as dev:
        return dev.hash_dir(":" + qd)


def test_push_force_reports_what_it_overwrites_and_never_reuses_a_seq(board, tmp_path):
    r = ddq("flash", "--device", board.tty, "--format", "py")
    assert r.returncode == 0, r.stderr
    _exec(
        board,
        "import ddq\n_q=ddq.Queue(%r,%s)\nfor _i in range(3): _q.enqueue(b'm%%d' %% _i)\n"
        "_q.close()" % (QD, UNIX),
    )
    local = tmp_path / "pulled"
    r = ddq("pull", "--device", board.tty, ":" + QD, local)
    assert r.returncode == 0, r.stderr

    # The device acks seq 1: a state change, no new seq. push refuses, --force overwrites and
    # says so.
    _exec(
        board,
        "import ddq\n_q=ddq.Queue(%r,%s)\n_q.claim(1000)\n_q.ack(1)\n_q.close()" % (QD, UNIX),
    )
    line = one_line_error(ddq("push", "--device", board.tty, local, ":" + QD), 1)
    assert "changed on the device since the pull" in line
    assert "1 acked on the device would be available (delivered twice)" in line, line
    r = ddq("push", "--device", board.tty, local, ":" + QD, "--force", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["forced"] is True
    assert res["overwritten"] == {
        "device_next_seq": 4,
        "pushed_next_seq": 4,
        "items": [{"seq": 1, "device_state": "acked", "pushed_state": "available"}],
        "kinds": [{"device_state": "acked", "pushed_state": "available", "count": 1, "seqs": "1"}],
    }
    st = _stats(board, QD)
    assert (st["next_seq"], st["available_items"], st["acknowledged_items"]) == (4, 3, 0)

    # The same in text.
    _exec(
        board,
        "import ddq\n_q=ddq.Queue(%r,%s)\n_q.claim(1000)\n_q.ack(1)\n_q.close()" % (QD, UNIX),
    )
    r = ddq("push", "--device", board.tty, local, ":" + QD, "--force")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [
        "--force overwrote the device copy (next_seq 4 kept)",
        "--force: 1 acked on the device, available now (delivered twice): seq 1",
    ], r.stdout

    # The device enqueues seq 4: --force would move next_seq back to 4 and reuse it. Refused.
    _exec(board, "import ddq\n_q=ddq.Queue(%r,%s)\n_q.enqueue(b'new')\n_q.close()" % (QD, UNIX))
    before = _hashes(board, QD)
    line = one_line_error(ddq("push", "--device", board.tty, local, ":" + QD, "--force"), 1)
    assert "refusing --force: the device used seqs 4..4 since the pull" in line, line
    assert "1 message(s) enqueued on the device" in line
    assert _hashes(board, QD) == before
    assert _stats(board, QD)["next_seq"] == 5


def test_push_reads_the_pulled_dir_with_the_writers_options(board, tmp_path):
    r = ddq("flash", "--device", board.tty, "--format", "py")
    assert r.returncode == 0, r.stderr
    # A writer with larger options than the UNIX profile the pull records: a 1000-byte payload.
    opts = {
        "segment_bytes": 8192,
        "max_payload_bytes": 2048,
        "max_items": 256,
        "max_segments": 16,
    }
    _exec(
        board,
        "import ddq\n_q=ddq.Queue(%r,%s)\n_q.enqueue(b'x'*1000)\n_q.enqueue(b'y')\n_q.close()\n"
        "_f=open(%r,'w')\n_f.write(%r)\n_f.close()"
        % (
            BIG,
            ",".join("%s=%d" % kv for kv in opts.items()),
            BIG + "/ddq-options.json",
            json.dumps(opts),
        ),
    )
    local = tmp_path / "pulled"
    r = ddq("pull", "--device", board.tty, ":" + BIG, local)
    assert r.returncode == 0, r.stderr
    assert (
        json.loads((local / ".ddq-pull.json").read_text())["options"]["max_payload_bytes"] == 256
    )
    assert ddq("verify", local).returncode == 0  # verify takes ddq-options.json
    r = ddq("push", "--device", board.tty, local, ":" + BIG, "--json")
    assert r.returncode == 0, r.stderr  # was: "is corrupt; not pushing it" (profile options)
    res = json.loads(r.stdout)
    assert (res["written"], res["appended"], res["removed"]) == ([], [], [])


def test_the_refusal_says_what_force_costs_when_no_items_state_would_change(monkeypatch):
    # The device's files changed since the pull but every item has the same state in both copies
    # (the same acks written in another order): the refusal's last clause is a whole sentence
    # (the wheel-only walk of issue 39 read "--force would overwrite the device's changes: no
    # item's state").
    from ddqhost import transfer

    same = {"device_next_seq": 4, "pushed_next_seq": 4, "items": [], "reuse": False, "new": 0}
    monkeypatch.setattr(transfer, "_overwrites", lambda *a: dict(same))
    line = transfer._refusal(None, "outbox", {}, "q", {}, ["segment-00000000000000000000.log"])
    assert line.endswith(
        "; --force would overwrite the device's changes: its files differ, but no item's state "
        "would change"
    ), line
    assert line.startswith(":outbox changed on the device since the pull"), line
