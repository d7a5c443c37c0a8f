"""`cli.main` reports every failure as one `ddq: ...` line with its exit status (docs/HOST.md
"Errors and exit status"): a bad argument, a missing file, an error of the queue, an interrupted
run. One `except HostError` in main; what a command raises otherwise (an OSError, a ddq.Error)
becomes a HostError at one boundary (errors.as_host_error)."""

import os
import signal
import socket
import subprocess
import sys

from conftest import REPO, cli_env, ddq, one_line_error
from ddqhost import cli, errors, locate

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}


def _queue(path):
    q = locate.load_ddq().Queue(str(path), **OPTS)
    q.enqueue(b"one")
    q.close()
    return str(path)


def test_a_bad_argument_is_one_line_with_its_status(tmp_path):
    q = _queue(tmp_path / "q")
    line = one_line_error(ddq("replay", q, "--to", "mqtt://127.0.0.1:1", "--timeout", "0"), 2)
    assert "--timeout must be more than 0" in line
    line = one_line_error(ddq("replay", q, "--to", "mqtt://127.0.0.1:1", "--window", "0"), 1)
    assert "--window must be 1..65535, got 0" in line
    line = one_line_error(ddq("replay", q, "--to", "http://127.0.0.1/x"), 1)
    assert "broker URL must look like mqtt://" in line
    line = one_line_error(ddq("inspect", q, "--segment-bytes", "7"), 1)
    assert line.startswith("ddq: bad queue options: ")


def test_a_missing_file_is_one_line(tmp_path):
    missing = str(tmp_path / "none")
    assert "no such directory" in one_line_error(ddq("inspect", missing), 1)
    q = _queue(tmp_path / "q")
    r = ddq("replay", q, "--to", "mqtt://u@127.0.0.1:1", "--password-file", missing)
    assert "--password-file %s: No such file or directory" % missing in one_line_error(r, 1)


def _main(monkeypatch, capsys, exc):
    # What a handler raises, through the one boundary (errors.as_host_error) and main.
    def handler(args):
        raise exc

    monkeypatch.setitem(cli.COMMANDS, "board", (handler,) + cli.COMMANDS["board"][1:])
    code = cli.main(["board", "list"])
    return code, capsys.readouterr().err


def test_an_oserror_or_a_ddq_error_becomes_one_line(monkeypatch, capsys):
    code, err = _main(monkeypatch, capsys, FileNotFoundError(2, "No such file or directory", "x"))
    assert (code, err) == (1, "ddq: x: No such file or directory\n")
    ddqmod = locate.load_ddq()
    code, err = _main(monkeypatch, capsys, ddqmod.Corrupt("bad record\nat 0"))
    assert (code, err) == (2, "ddq: corrupt: bad record\\nat 0\n")  # one line, escaped
    code, err = _main(monkeypatch, capsys, ddqmod.Full(""))
    assert (code, err) == (1, "ddq: full: Full\n")
    assert errors.as_host_error(ValueError("a bug")) is None  # a bug keeps its traceback


def test_an_interrupted_run_is_one_line_and_130(tmp_path):
    # A broker that takes the connection and never answers: ddq waits for its CONNACK for up
    # to --timeout 3600 s. Once the broker has ddq's CONNECT (the event this waits for, not a
    # time: a busy machine only makes it later), Ctrl-C (SIGINT) ends the run with one line
    # and status 130, nothing claimed. (A device stood in here before: its 8 s connect bound
    # could fire first on a busy machine, giving exit 1.)
    q = _queue(tmp_path / "q")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    url = "mqtt://127.0.0.1:%d" % srv.getsockname()[1]
    p = subprocess.Popen(
        [sys.executable, "-m", "ddqhost.cli", "replay", q, "--to", url, "--timeout", "3600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=REPO,
    )
    conn = None
    try:
        srv.settimeout(120)  # (a bound for a broken ddq only, never reached by a working one)
        conn, _ = srv.accept()
        conn.settimeout(120)
        got = b""
        while len(got) < 2:  # CONNECT's first byte and its length: ddq is waiting now
            part = conn.recv(2 - len(got))
            assert part, "ddq closed the connection without a CONNECT"
            got += part
        assert got[0] == 0x10, got
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if conn is not None:
            conn.close()
        srv.close()
    assert (p.returncode, out, err) == (130, "", "ddq: interrupted\n")
    q2 = locate.load_ddq().Queue(q, **OPTS)
    try:
        assert [it.state for it in q2.items()] == ["available"]  # nothing claimed
    finally:
        q2.close()


def test_a_closed_stdout_is_one_line():
    # `ddq board list | head -0`: the reader is gone before ddq writes.
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "ddqhost.cli", "board", "list"],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
            cwd=REPO,
            timeout=120,
        )
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (1, "ddq: Broken pipe\n")
