"""Host tools never damage a queue and never hang or crash on what they read (docs/HOST.md
"Trust"): a tool that writes uses the writer's options; a hostile ddq-options.json or a FIFO named
like a segment is one clear error line; a broker that accepts TCP and stays silent times out with a
clear message.
"""

import json
import os

import pytest

from conftest import HostileServer, ddq, one_line_error, tree_hash
from ddqhost import locate, qdir

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}
SEG1 = "segment-00000000000000000001.log"


def _make_queue(path, n=3):
    ddqmod = locate.load_ddq()
    q = ddqmod.Queue(str(path), **OPTS)
    try:
        for i in range(n):
            q.enqueue(b"message %d" % i)
    finally:
        q.close()
    return path


def test_replay_refuses_options_other_than_the_writers(tmp_path):
    q = _make_queue(tmp_path / "q")
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    before = tree_hash(q)
    line = one_line_error(
        ddq("replay", q, "--to", "mqtt://127.0.0.1:1/x", "--segment-bytes", "8192"), 1
    )
    assert "--segment-bytes 8192 (command line) disagrees with the writer's 4096" in line, line
    assert "(ddq-options.json)" in line
    line = one_line_error(ddq("replay", q, "--to", "mqtt://127.0.0.1:1/x", "--board", "UNIX"), 1)
    with open(os.path.join(locate.repo_root(), "boards", "UNIX.json")) as f:
        unix = json.load(f)["max_items"]
    assert "--max-items %d (board UNIX) disagrees with the writer's 64" % unix in line, line
    assert tree_hash(q) == before
    # A pulled directory without ddq-options.json: the options the pull recorded are the writer's.
    os.remove(q / qdir.OPTIONS_FILE)
    (q / qdir.PULL_META).write_text(json.dumps({"options": OPTS, "files": {}}))
    before = tree_hash(q)
    line = one_line_error(
        ddq("replay", q, "--to", "mqtt://127.0.0.1:1/x", "--max-segments", "64"), 1
    )
    assert "disagrees with the writer's 8 (.ddq-pull.json)" in line, line
    assert tree_hash(q) == before
    # The writer's own options (given or not) pass the check and reach the broker.
    line = one_line_error(
        ddq("replay", q, "--to", "mqtt://127.0.0.1:1/x", "--segment-bytes", "4096"), 1
    )
    assert "cannot connect to broker" in line


@pytest.mark.parametrize("body", ["[" * 100000, '{"a":' * 50000 + "1" + "}" * 50000])
def test_deeply_nested_options_json_is_one_clear_error(tmp_path, body):
    q = _make_queue(tmp_path / "q")
    (q / qdir.OPTIONS_FILE).write_text(body)
    before = tree_hash(q)
    for args in (
        ("inspect", q),
        ("verify", q),
        ("records", q),
        ("replay", q, "--to", "mqtt://127.0.0.1:1", "--dry-run"),
        ("replay", q, "--to", "mqtt://127.0.0.1:1"),
    ):
        line = one_line_error(ddq(*args, timeout=60), 1)
        assert "ddq-options.json: unreadable JSON (nested too deeply)" in line, (args, line)
    assert tree_hash(q) == before


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dir"])
def test_non_regular_file_named_like_a_queue_file_is_refused_unopened(tmp_path, kind):
    q = _make_queue(tmp_path / "q")
    p = q / SEG1
    if kind == "fifo":
        os.mkfifo(p)  # opening it for reading would block forever
        what = "a FIFO"
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"")
        os.symlink(tmp_path / "elsewhere", p)
        what = "a symbolic link"
    else:
        os.mkdir(p)
        what = "a directory"
    for args in (
        ("inspect", q),
        ("replay", q, "--to", "mqtt://127.0.0.1:1", "--dry-run"),
        ("replay", q, "--to", "mqtt://127.0.0.1:1"),
    ):
        line = one_line_error(ddq(*args, timeout=30), 1)
        assert "%s is %s, not a regular file" % (SEG1, what) in line, (args, line)
    # verify and records read with the independent reader: a corrupt verdict, never an open.
    r = ddq("verify", q, timeout=30)
    assert r.returncode == 2 and "not a regular file" in r.stdout, r.stdout + r.stderr


class SilentBroker(HostileServer):
    """Accepts TCP connections on 127.0.0.1 and never answers (no CONNACK)."""


def test_broker_that_never_answers_times_out_waiting_for_connack(tmp_path):
    q = _make_queue(tmp_path / "q")
    before = tree_hash(q)
    b = SilentBroker()
    try:
        r = ddq(
            "replay", q, "--to", "mqtt://127.0.0.1:%d/x" % b.port, "--timeout", "0.5", timeout=30
        )
        accepted = len(b.conns)
    finally:
        b.close()
    line = one_line_error(r, 1)
    assert accepted >= 1
    assert (
        "broker 127.0.0.1:%d accepted the TCP connection but sent no CONNACK:"
        " timed out after 0.5 s" % b.port
    ) in line, line
    assert tree_hash(q) == before
