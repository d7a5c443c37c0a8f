"""`ddq replay DIR...` (docs/HOST.md "replay", OUTBOX E25): a window of publishes in flight, many
directories at once (one connection each, {dir} / --prefix-per-dir, distinct client ids), resumable
per directory, a progress display and a --json summary per directory; replay's checks still apply
to each dir."""

import json
import time

from conftest import Subscriber, ddq, one_line_error, tree_hash
from ddqhost import locate, qdir

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 256, "max_segments": 64}
KEY = bytes(range(32))


def _queue(path, n, topic="t", key=None, extra=()):
    ddqmod = locate.load_ddq()
    import ddq_outbox

    now = int(time.time() * 1000)
    q = ddqmod.Queue(str(path), **OPTS)
    try:
        for i in range(n):
            q.enqueue(
                ddq_outbox.encode_envelope(
                    "%s/%d" % (topic, i),
                    b"%s-%d" % (path.name.encode(), i),
                    enqueued_ms=now,
                    hmac_key=key,
                )
            )
        for raw in extra:
            q.enqueue(raw)
    finally:
        q.close()
    (path / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    return path


def test_many_dirs_at_once_each_under_its_own_prefix(tmp_path, mosquitto):
    dirs = [_queue(tmp_path / n, 40) for n in ("dev1", "dev2", "dev3")]
    url = "mqtt://127.0.0.1:%d/site" % mosquitto
    sub = Subscriber(mosquitto)
    try:
        r = ddq(
            "replay",
            *dirs,
            "--to",
            url,
            "--prefix-per-dir",
            "--window",
            "8",
            "--json",
            "--client-id",
            "gw",
        )
        assert r.returncode == 0, r.stderr
        got = sub.wait_for(120)
    finally:
        sub.close()
    res = json.loads(r.stdout)
    assert [d["dir"] for d in res["dirs"]] == [str(d) for d in dirs]
    assert [d["sent"] for d in res["dirs"]] == [40, 40, 40] and res["total"]["sent"] == 120
    assert [d["prefix"] for d in res["dirs"]] == ["site/dev1", "site/dev2", "site/dev3"]
    assert [d["client_id"] for d in res["dirs"]] == ["gw-dev1", "gw-dev2", "gw-dev3"]
    assert all(d["window"] == 8 and d["failed"] == 0 for d in res["dirs"])
    want = {
        ("site/%s/t/%d" % (d.name, i), b"%s-%d" % (d.name.encode(), i))
        for d in dirs
        for i in range(40)
    }
    assert set(got) == want and len(got) == 120
    for d in dirs:
        assert ddq("verify", d).returncode == 0


def test_dir_placeholder_and_resume_per_dir(tmp_path, mosquitto):
    dirs = [_queue(tmp_path / n, 25) for n in ("a", "b")]
    url = "mqtt://127.0.0.1:%d/fleet/{dir}/up" % mosquitto
    r = ddq("replay", *dirs, "--to", url, "--dry-run", "--json")
    plans = json.loads(r.stdout)["dirs"]
    assert plans[0]["would_send"][0]["topic"] == "fleet/a/up/t/0"
    assert plans[1]["would_send"][0]["topic"] == "fleet/b/up/t/0"
    r = ddq("replay", *dirs, "--to", url, "--limit", "10", "--json")  # stop early, each dir
    first = json.loads(r.stdout)["dirs"]
    assert [(d["sent"], d["remaining"]) for d in first] == [(10, 15), (10, 15)], r.stdout
    r = ddq("replay", *dirs, "--to", url, "--json")  # resumes where each directory stopped
    second = json.loads(r.stdout)["dirs"]
    assert [(d["sent"], d["remaining"]) for d in second] == [(15, 0), (15, 0)]
    assert not set(first[0]["sent_seqs"]) & set(second[0]["sent_seqs"])
    assert json.loads(ddq("replay", *dirs, "--to", url, "--json").stdout)["total"]["sent"] == 0


def test_window_sizes_and_a_window_larger_than_the_queue(tmp_path, mosquitto):
    url = "mqtt://127.0.0.1:%d/w" % mosquitto
    for w, n in (("1", 5), ("64", 3)):
        d = _queue(tmp_path / ("w" + w), n)
        res = json.loads(ddq("replay", d, "--to", url, "--window", w, "--json").stdout)
        assert (res["sent"], res["window"], res["stats"]["claimed_items"]) == (n, int(w), 0)
    d = _queue(tmp_path / "bad", 1)
    before = tree_hash(d)
    line = one_line_error(ddq("replay", d, "--to", url, "--window", "0"), 2)  # (was 1; HOST.md: 2)
    assert "--window must be 1..65535" in line and tree_hash(d) == before


def test_progress_on_stderr(tmp_path, mosquitto):
    dirs = [_queue(tmp_path / n, 30) for n in ("p1", "p2")]
    r = ddq("replay", *dirs, "--to", "mqtt://127.0.0.1:%d/p" % mosquitto, "--progress")
    assert r.returncode == 0, r.stderr
    assert "replay: 60/60 sent, 2 dir(s), 2 done" in r.stderr.strip().splitlines()[-1]
    assert "p1: sent 30" in r.stdout and "p2: sent 30" in r.stdout
    more = [_queue(tmp_path / n, 2) for n in ("v1", "v2")]
    r = ddq("replay", *more, "--to", "mqtt://127.0.0.1:%d/p" % mosquitto, "-v")
    assert r.returncode == 0 and "v1: sent seq 1 -> p/t/0" in r.stderr, r.stderr
    assert "v2: sent seq 2 -> p/t/1" in r.stderr and "replay:" not in r.stderr


def test_checks_apply_to_every_dir(tmp_path, mosquitto):
    url = "mqtt://127.0.0.1:%d/c" % mosquitto
    good = _queue(tmp_path / "good", 3)
    # The writer's options: options on the command line that one directory's writer did not
    # use refuse the whole run, before anything is claimed anywhere.
    other = _queue(tmp_path / "other", 3)
    (other / qdir.OPTIONS_FILE).write_text(json.dumps(dict(OPTS, segment_bytes=8192)))
    before = tree_hash(good)
    line = one_line_error(ddq("replay", good, other, "--to", url, "--segment-bytes", "4096"), 1)
    assert "disagrees with the writer's 8192" in line and tree_hash(good) == before
    # Two directories with one name cannot have distinct client ids or prefixes.
    (tmp_path / "x").mkdir()
    twin = _queue(tmp_path / "x" / "good", 1)
    line = one_line_error(ddq("replay", good, twin, "--to", url), 1)
    assert "two directories are named good" in line
    # HMAC: each directory is checked with the key; the unpublishable ones quarantined per dir.
    signed = _queue(tmp_path / "signed", 4, key=KEY, extra=[b"unsigned raw"])
    wild = _queue(tmp_path / "wild", 2)
    ddqmod = locate.load_ddq()
    import ddq_outbox

    q = ddqmod.Queue(str(wild), **OPTS)
    env = bytearray(ddq_outbox.encode_envelope("ok/x", b"w"))
    i = bytes(env).index(b"ok/x")
    env[i : i + 4] = b"o+/x"  # a wildcard topic only a forged or old record can carry
    q.enqueue(bytes(env))
    q.close()
    kf = tmp_path / "key.hex"
    kf.write_text(KEY.hex())
    r = ddq("replay", signed, wild, "--to", url, "--json", "--hmac-key-file", kf)
    res = {d["dir"]: d for d in json.loads(r.stdout)["dirs"]}
    s, w = res[str(signed)], res[str(wild)]
    assert (s["sent"], s["unauthenticated"]) == (4, 1), s
    assert (w["sent"], w["unauthenticated"]) == (0, 3), w  # unsigned: never published


def test_one_broken_dir_does_not_stop_the_others(tmp_path, mosquitto):
    good = _queue(tmp_path / "fine", 5)
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    r = ddq("replay", good, gone, "--to", "mqtt://127.0.0.1:%d/b" % mosquitto, "--json")
    res = json.loads(r.stdout)
    assert r.returncode == 1 and res["total"]["errors"] == 1
    by = {d["dir"]: d for d in res["dirs"]}
    assert by[str(good)]["sent"] == 5 and "error" in by[str(gone)]
