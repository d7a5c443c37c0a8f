"""The field engineer's loop on the virtual board (issue 39): pull -> inspect -> damage -> salvage
-> replay -> push back, and the board's app goes on delivering; at every step `ddq verify --board
UNIX` is clean and nothing acked before the pull is delivered twice. Then the small cases of each
step: options travel with a salvaged directory, the push refusal names the safe route and what
--force costs, errors name `ddq salvage`, the dry run honours --limit (docs/HOST.md).

Queue directories on the device other than the app's :outbox have names unique to this run (the
unix port's lock is an abstract socket named after the path, shared by every process).
"""

import json
import os

import brokers
import ddq as ddqmod
from conftest import REPO, Subscriber, ddq, one_line_error, option_flags, tree_hash
from ddqhost import boards, locate, options
from ddqhost.device import Device

UNIX = {k: boards.load("UNIX")[k] for k in options.KEYS}
SEG0 = "segment-00000000000000000000.log"


def _ok(*args, code=0):
    r = ddq(*args)
    assert r.returncode == code, (args, r.returncode, r.stdout, r.stderr)
    return r


def _verify_clean(d):
    """`ddq verify --board UNIX d` is clean (exit 0), and so is d's own view of its options."""
    r = _ok("verify", "--board", "UNIX", d)
    assert "result: clean" in r.stdout, r.stdout
    own = json.loads(_ok("verify", d, "--json").stdout)
    assert own["verdict"] == "clean" and own["options"] == UNIX, own["options_source"]
    for n in os.listdir(d):
        if ddqmod.parse_segment_name(n):
            assert os.path.getsize(os.path.join(d, n)) <= UNIX["segment_bytes"], n


def _inner(hexed):
    """The reading inside an Outbox envelope (what the broker receives)."""
    return bytes(locate.load_outbox().decode_envelope(bytes.fromhex(hexed)).payload)


def _items(d):
    return json.loads(_ok("inspect", d, "--json", "--payloads").stdout)["items"]


def _exec(board, code):
    with Device(board.tty, soft_reset=False) as dev:
        return dev.exec(code)


def _app(tmp_path, port):
    """The UNIX example app against the test's broker, a reading every 100 ms, each reading
    unique to its boot (so a duplicate is a duplicate, never a later reading alike)."""
    with open(os.path.join(REPO, "boards", "UNIX", "main.py")) as f:
        src = f.read()
    src = src.replace(
        "BROKER_PORT = 1883",
        "BROKER_PORT = %d\nPERIOD_MS = 100" % port,
    )
    src = src.replace(
        "ddq_app.bind(globals())",
        "_BOOT = b'boot%d' % time.time_ns()\n\n\ndef read_sensor():\n    return _BOOT\n\n\n"
        "ddq_app.bind(globals())",
    )
    app = tmp_path / "main.py"
    app.write_text(src)
    return app


def _run_app_until(board, sub, n):
    """Start the app, wait for n more readings at the broker, stop it."""
    have = len(sub.got)
    _ok("app", "start", "-d", board.tty, "--seconds", "0")
    brokers.wait_until(lambda: len(sub.got) >= have + n, 60, "%d readings from the app" % n)
    r = _ok("app", "stop", "-d", board.tty)
    assert "stopped the app" in r.stdout, r.stdout


def test_pull_inspect_damage_salvage_replay_push_and_the_app_goes_on(board, mosquitto, tmp_path):
    _ok("flash", "-d", board.tty, "--app", _app(tmp_path, mosquitto))
    _exec(  # a fresh outbox (the module's board is shared)
        board,
        "import os\nif 'outbox' in os.listdir():\n for _n in os.listdir('outbox'):"
        " os.remove('outbox/' + _n)",
    )
    sub = Subscriber(mosquitto)
    url = "mqtt://127.0.0.1:%d" % mosquitto
    try:
        _run_app_until(board, sub, 5)
        # A backlog the broker never saw: 70 readings a plain Outbox on the board put.
        _exec(
            board,
            "import main, ddq_outbox\n_o = ddq_outbox.Outbox('outbox', **main.OPTIONS)\n"
            "for _i in range(70): _o.put('ddq/unix/temp', b'backlog-%d' % _i)\n_o.close()",
        )
        backlog = {b"backlog-%d" % i for i in range(70)}

        # pull, inspect: clean with the board's options
        p = tmp_path / "pulled"
        _ok("pull", "-d", board.tty, ":outbox", p)
        _verify_clean(p)
        items = _items(p)
        acked = {s["seq"]: _inner(s["payload_hex"]) for s in items if s["state"] == "acked"}
        assert 1 in acked and len(acked) >= 5, items[:3]
        pending = [s for s in items if s["state"] in ("available", "claimed")]
        assert len(pending) >= 70

        # damage: seq 1's DATA record (acked; its ACK intact) gets a flipped payload byte
        with open(p / SEG0, "r+b") as f:
            f.seek(45)
            b = f.read(1)
            f.seek(45)
            f.write(bytes([b[0] ^ 0xFF]))
        before = tree_hash(p)
        assert _ok("verify", "--board", "UNIX", p, code=2)
        for args in (("inspect", p), ("replay", p, "--to", url), ("records", p)):
            r = ddq(*args)
            line = r.stderr.strip().splitlines()[-1]
            assert r.returncode == 2 and line.startswith("ddq: "), (args, r.stderr)
            assert "`ddq salvage %s OUT`" % p in line, (args, line)
        line = one_line_error(ddq("push", "-d", board.tty, p, ":outbox"), 2)
        assert "`ddq salvage %s OUT`" % p in line, line
        assert tree_hash(p) == before

        # salvage: OUT carries the pull's options and record (step 1)
        out = tmp_path / "salvaged"
        r = _ok("salvage", p, out, code=1)
        assert "result: salvaged_with_loss (no seq known lost; damaged bytes)" in r.stdout
        assert "lost seqs: 0: none" in r.stdout, r.stdout
        meta = json.loads((out / ".ddq-pull.json").read_text())
        assert meta["options"] == boards.queue_options(boards.load("UNIX")), meta
        assert meta["remote"] == ":outbox" and meta["derived_by"] == "salvage", meta
        _verify_clean(out)
        src = json.loads(_ok("verify", out, "--json").stdout)["options_source"]
        assert src["segment_bytes"] == ".ddq-pull.json", src

        # replay: what the dry run plans with --limit is what a run does; then everything
        r = _ok("replay", out, "--to", url, "--dry-run", "--limit", "5")
        assert r.stdout.count("would send seq") == 5, r.stdout
        r = _ok("replay", out, "--to", url, "--json")
        res = json.loads(r.stdout)
        assert res["sent"] == len(pending) and res["remaining"] == 0, res
        _verify_clean(out)  # no segment grew past the board's segment_bytes

        # push back to the same board: the salvaged queue replaces the device's
        _ok("push", "-d", board.tty, out, ":outbox")
        p2 = tmp_path / "pulled2"
        _ok("pull", "-d", board.tty, ":outbox", p2)
        _verify_clean(p2)
        assert not [s for s in _items(p2) if s["state"] in ("available", "claimed")]

        # the app goes on delivering from the pushed queue, and the device changes (step 2):
        # pushing the older copy now is refused, saying the safe route first and what --force
        # would cost (the app enqueued: --force is refused too); the safe route works
        _run_app_until(board, sub, 5)
        line = one_line_error(ddq("push", "-d", board.tty, p2, ":outbox"), 1)
        assert "changed on the device since the pull" in line, line
        safe = line.index("Safe: pull it again, replay and push that copy (`ddq pull :outbox")
        assert safe < line.index("--force is refused too: the device enqueued seqs"), line
        p3 = tmp_path / "pulled3"
        _ok("pull", "-d", board.tty, ":outbox", p3)
        _verify_clean(p3)
        _ok("replay", p3, "--to", url)
        _verify_clean(p3)
        _ok("push", "-d", board.tty, p3, ":outbox")
        _run_app_until(board, sub, 5)
        p4 = tmp_path / "pulled4"
        _ok("pull", "-d", board.tty, ":outbox", p4)
        _verify_clean(p4)
        got = sub.wait_for(0)
    finally:
        sub.close()
    counts = {}
    for _t, body in got:
        counts[body] = counts.get(body, 0) + 1
    twice = {b: n for b, n in counts.items() if n > 1 and (b in backlog or b in acked.values())}
    assert not twice, twice  # nothing acked before the pull, nor the replayed backlog, twice
    assert all(counts.get(b) == 1 for b in backlog), sorted(backlog - set(counts))
    assert len({b.split(b" v=")[-1] for b in counts if b.startswith(b"n=")}) == 3  # three boots


# ---------------------------------------------------------------- each step on its own

QD = "fieldq-%d" % os.getpid()
UNIX_ARGS = ",".join("%s=%d" % kv for kv in UNIX.items())


def _host_queue(d, n=12, acked=3):
    """A generation-0 queue on the host with the UNIX board's options (and window, as its app),
    seqs 1..acked acked, an Outbox envelope each."""
    ob = locate.load_outbox().Outbox(str(d), window=16, evidence_bytes=1024, **UNIX)
    for i in range(n):
        ob.put("t/x", b"m%d" % i)
    ob.close()
    q = ddqmod.Queue(str(d), window=16, evidence_bytes=1024, **UNIX)
    for _ in range(acked):
        q.ack(q.claim(1000).seq)
    q.close()
    return d


def test_salvage_writes_the_options_it_used_and_replay_keeps_within_them(tmp_path, mosquitto):
    # EVIDENCE-OF: K8
    # A directory whose options a pull recorded; another that only --board names.
    d = _host_queue(tmp_path / "q", n=120, acked=0)
    (d / ".ddq-pull.json").write_text(
        json.dumps(
            {"options": dict(UNIX, window=16), "board": "UNIX", "remote": ":outbox", "files": {}}
        )  # fmt: skip
    )
    out = tmp_path / "out"
    _ok("salvage", d, out)
    meta = json.loads((out / ".ddq-pull.json").read_text())
    assert meta["options"] == dict(UNIX, window=16) and meta["remote"] == ":outbox", meta
    assert oct(os.stat(out / ".ddq-pull.json").st_mode & 0o777) == "0o600"
    js = json.loads(_ok("verify", out, "--json").stdout)
    assert js["options"] == UNIX and set(js["options_source"].values()) == {".ddq-pull.json"}
    # replay appends claims and acks: with the board's segment_bytes, never past it
    _ok("replay", out, "--to", "mqtt://127.0.0.1:%d" % mosquitto)
    _verify_clean(out)
    # --board only: written to OUT/ddq-options.json; flags the writer's record disagrees with
    # are refused before anything is written
    bare = _host_queue(tmp_path / "bare", n=4, acked=0)
    out2 = tmp_path / "out2"
    _ok("salvage", bare, out2, "--board", "UNIX")
    assert json.loads((out2 / "ddq-options.json").read_text()) == UNIX
    line = one_line_error(ddq("salvage", d, tmp_path / "out3", "--segment-bytes", "8192"), 1)
    assert "disagrees with the writer's 4096 (.ddq-pull.json)" in line, line
    assert not (tmp_path / "out3").exists() and not (tmp_path / "out3.partial").exists()


def test_push_refusal_says_the_safe_route_and_what_force_costs(board, tmp_path):
    _ok("flash", "-d", board.tty, "--format", "py")
    _exec(
        board,
        "import ddq\n_q=ddq.Queue(%r,%s)\nfor _i in range(30): _q.enqueue(b'm%%d' %% _i)\n"
        "_q.close()" % (QD, UNIX_ARGS),
    )
    local = tmp_path / "pulled"
    _ok("pull", "-d", board.tty, ":" + QD, local)
    # The device delivers 29 (acks, no new seq) after the pull.
    _exec(
        board,
        "import ddq\n_q=ddq.Queue(%r,%s)\nfor _i in range(29): _q.ack(_q.claim(1000).seq)\n"
        "_q.close()" % (QD, UNIX_ARGS),
    )
    line = one_line_error(ddq("push", "-d", board.tty, local, ":" + QD), 1)
    safe = line.index(
        "Safe: pull it again, replay and push that copy (`ddq pull :%s NEW_DIR`, `ddq replay "
        "NEW_DIR --to URL`, `ddq push NEW_DIR :%s`)" % (QD, QD)
    )
    cost = line.index(
        "--force would overwrite the device's changes: 29 acked on the device would be "
        "available (delivered twice)"
    )
    assert safe < cost, line
    r = _ok("push", "-d", board.tty, local, ":" + QD, "--force")
    assert r.stdout.splitlines()[1:] == [
        "--force overwrote the device copy (next_seq 31 kept)",
        "--force: 29 acked on the device, available now (delivered twice): seq 1-29",
    ], r.stdout


def test_errors_of_a_damaged_directory_name_salvage(tmp_path):
    d = _host_queue(tmp_path / "q")
    with open(d / SEG0, "r+b") as f:
        f.seek(45)
        f.write(b"\xff")
    before = tree_hash(d)
    for args in (
        ("inspect", d),
        ("replay", d, "--to", "mqtt://127.0.0.1:1", "--dry-run"),
        ("records", d),
    ):
        r = ddq(*args, *option_flags(UNIX))
        line = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(line) == 1 and line[0].startswith("ddq: "), r.stderr
        assert "`ddq salvage %s OUT` copies every intact item" % d in line[0], (args, line)
    assert tree_hash(d) == before


def test_salvage_of_a_generation_0_directory_is_clean_and_says_why_it_has_no_manifest(tmp_path):
    d = _host_queue(tmp_path / "q")
    r = _ok("salvage", d, tmp_path / "out", *option_flags(UNIX))
    assert "manifest: none (generation 0 has none until its first compaction)" in r.stdout
    assert "result: clean" in r.stdout and "kept: 9 items; dropped (acked): 3" in r.stdout
    assert "next: `ddq verify %s`" % (tmp_path / "out") in r.stdout, r.stdout


def test_dry_run_honours_limit_and_fleet_lines_name_their_directory(tmp_path):
    a = _host_queue(tmp_path / "a", n=6, acked=0)
    b = _host_queue(tmp_path / "b", n=6, acked=0)
    url = "mqtt://127.0.0.1:1"
    r = _ok("replay", a, "--to", url, "--dry-run", "--limit", "2", *option_flags(UNIX))
    assert [ln.split(" -> ")[0] for ln in r.stdout.splitlines()[:-1]] == [
        "would send seq 1",
        "would send seq 2",
    ], r.stdout
    # its summary is the run's: 2 sent, 4 left (a run with --limit 2 says "sent 2 ... remaining 4")
    last = r.stdout.splitlines()[-1]
    assert last.startswith("dry run: would send 2,") and last.endswith("remaining 4"), last
    r = _ok("replay", a, b, "--to", url, "--dry-run", *option_flags(UNIX))
    lines = r.stdout.splitlines()
    assert sum(ln.startswith("%s: would send seq" % a) for ln in lines) == 6, r.stdout
    assert sum(ln.startswith("%s: would send seq" % b) for ln in lines) == 6, r.stdout
