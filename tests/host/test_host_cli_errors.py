"""`cli.main` reports every failure as one `ddq: ...` line with its exit status (docs/HOST.md
"Errors and exit status"): a bad argument, a missing file, an error of the queue, an interrupted
run. One `except HostError` in main; what a command raises otherwise (an OSError, a ddq.Error)
becomes a HostError at one boundary (errors.as_host_error)."""

import argparse
import os
import signal
import socket
import subprocess
import sys

from conftest import REPO, cli_env, ddq, one_line_error
from ddqhost import cli, errors, locate, options

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
    line = one_line_error(ddq("replay", q, "--to", "mqtt://127.0.0.1:1", "--window", "0"), 2)
    assert "--window must be 1..65535, got 0" in line
    line = one_line_error(ddq("replay", q, "--to", "http://127.0.0.1/x"), 1)
    assert "broker URL must look like mqtt://" in line
    line = one_line_error(ddq("inspect", q, "--segment-bytes", "7"), 2)
    assert line == "ddq: --segment-bytes must be 256..67108864, got 7"
    line = one_line_error(ddq("replay", q, "--to", "mqtt://127.0.0.1:1", "--limit", "x"), 2)
    assert line == "ddq: ddq replay: argument --limit: invalid int value: 'x' (ddq replay -h)"
    # Options a file gives are not arguments: exit 1
    (tmp_path / "q" / "ddq-options.json").write_text('{"segment_bytes": 7}')
    line = one_line_error(ddq("inspect", q), 1)
    assert line.startswith("ddq: bad queue options: ")


def _numeric_options():
    """(command path, dest) of every int/float option without choices, in every parser."""

    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from walk(sub, path + (name,))
            elif a.option_strings and a.type in (int, float) and not a.choices:
                yield path, a.dest

    return sorted(set(walk(cli.build_parser(), ())))


# The argv before each numeric option: a command that takes it (its other arguments valid).
BASE = {
    "size_kib": ["board", "virtual", "start"],
    "raw_kib": ["board", "virtual", "start"],
    "seconds": ["app", "start"],
    "now_ms": ["inspect", "Q"],
    "limit": ["replay", "Q", "--to", "mqtt://127.0.0.1:1"],
    "lease_ms": ["replay", "Q", "--to", "mqtt://127.0.0.1:1"],
    "timeout": ["replay", "Q", "--to", "mqtt://127.0.0.1:1"],
    "window": ["replay", "Q", "--to", "mqtt://127.0.0.1:1"],
    "max_attempts": ["replay", "Q", "--to", "mqtt://127.0.0.1:1"],
    "ramdisk_kb": ["test", "--fs", "lfs2"],
    "idle_timeout": ["test"],
    "block_size": ["export", "IMG", "DIR"],  # raw-flash images (SPEC Y12)
    **{k: ["verify", "Q"] for k in options.KEYS},
}


def test_every_numeric_option_has_a_range():
    # A new int/float option without an entry in cli.ARG_RANGES fails here.
    found = _numeric_options()
    assert {d for _p, d in found} == set(cli.ARG_RANGES) == set(BASE), found


def _out_of_range(dest):
    lo, hi, open_lo = cli.ARG_RANGES[dest]
    if isinstance(lo, int) and not open_lo and dest not in ("timeout", "seconds", "idle_timeout"):
        return [lo - 1, hi + 1, -(1 << 64), 1 << 65]  # ints (2**64 for --now-ms, -1 for --limit)
    return [lo - 1, hi * 2, "nan", "inf", "-inf"] + ([lo] if open_lo else [])


def test_every_argument_out_of_range_is_one_line_and_2(capsys):
    # Issue 35 item 9: --window 0/65536 exited 1; --limit -1, --now-ms -1 and --now-ms 2**64 were
    # accepted. Each refusal comes before anything runs (no device, broker or queue is needed).
    for dest in sorted(cli.ARG_RANGES):
        flag = "--" + dest.replace("_", "-")
        for v in _out_of_range(dest):
            code = cli.main(BASE[dest] + ["%s=%s" % (flag, v)])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1, (dest, v, code, err)
            assert err.startswith("ddq: %s must be " % flag) and ", got " in err, err
        lo, hi, open_lo = cli.ARG_RANGES[dest]
        for v in [hi] + ([lo] if not open_lo else []):  # the bounds themselves are taken
            args = cli.build_parser().parse_args(BASE[dest] + ["%s=%s" % (flag, v)])
            cli.check_ranges(args)


def test_heapsize_is_checked_too(capsys):
    for bad in ("8X", "", "0", "-1M", "4096M", "1e6"):
        assert cli.main(["board", "virtual", "start", "--heapsize=" + bad]) == 2, bad
        assert capsys.readouterr().err.startswith("ddq: --heapsize must be a size"), bad
    for good in ("8M", "512k", "100000", "2wM"):
        cli.check_ranges(
            cli.build_parser().parse_args(["board", "virtual", "start", "--heapsize", good])
        )


def _lock_dir(q):
    os.remove(os.path.join(q, "queue.lock"))
    os.mkdir(os.path.join(q, "queue.lock"))


def _crowd(q):
    for i in range(OPTS["max_segments"] * 8 + 1024 + 1 - len(os.listdir(q))):
        open(os.path.join(q, "note-%d" % i), "wb").close()


def test_verify_reports_every_directory_queue_refuses(tmp_path):
    # Issue 35 item 9: queue.lock as a directory was `result: clean` (exit 0) while Queue()
    # refused it; so was a directory of more entries than ddq reads (SPEC R4's Limit).
    flags = ["--segment-bytes", "4096", "--max-payload-bytes", "256", "--max-items", "64",
             "--max-segments", "8"]  # fmt: skip
    ddqmod = locate.load_ddq()
    for name, spoil, says in (
        ("lock", _lock_dir, "queue.lock is a directory, not a regular file"),
        ("crowd", _crowd, "directory entries, more than max_segments*8 + 1024 (1088)"),
    ):
        q = _queue(tmp_path / name)
        assert ddq("verify", q, *flags).returncode == 0
        spoil(q)
        try:
            ddqmod.Queue(q, **OPTS).close()
            raise AssertionError("Queue() opened %s" % name)
        except ddqmod.Error:
            pass
        r = ddq("verify", q, *flags)
        assert r.returncode == 2 and says in r.stdout, (name, r.stdout)
        assert "\nresult: corrupt" in r.stdout, r.stdout


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
