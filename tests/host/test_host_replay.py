"""`ddq replay` and `ddq inspect` on message-layer envelopes: topics, retain, raw payloads, TTL expiry."""

import json
import time

from conftest import Subscriber, ddq, tree_hash
from ddqhost import qdir

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}


def _make_queue(path):
    ddqmod = qdir.load_ddq()
    import ddq_outbox

    now = int(time.time() * 1000)
    enc = ddq_outbox.encode_envelope
    q = ddqmod.Queue(str(path), **OPTS)
    try:
        a = q.enqueue(enc("sensors/t", b"21.5", qos=1, enqueued_ms=now - 5000))
        b = q.enqueue(enc("status", b"online", qos=0, retain=True, enqueued_ms=now - 1000))
        c = q.enqueue(b"not an envelope \x00\xff")
        d = q.enqueue(enc("sensors/t", b"stale", enqueued_ms=now - 120000, ttl_ms=60000))
    finally:
        q.close()
    (path / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    return a, b, c, d


def test_inspect_shows_envelope_fields(tmp_path):
    a, b, c, d = _make_queue(tmp_path / "q")
    r = ddq("inspect", tmp_path / "q", "--json")
    assert r.returncode == 0, r.stderr
    items = {it["seq"]: it for it in json.loads(r.stdout)["items"]}
    ea = items[a]["envelope"]
    assert (ea["topic"], ea["qos"], ea["retain"], ea["payload_preview"]) == (
        "sensors/t",
        1,
        False,
        "21.5",
    )
    assert 4000 <= ea["age_ms"] < 60000 and ea["expired"] is False
    assert items[b]["envelope"]["retain"] is True and items[b]["envelope"]["qos"] == 0
    assert "envelope" not in items[c]
    assert items[d]["envelope"]["expired"] is True
    r = ddq("inspect", tmp_path / "q")
    assert "envelope: topic status qos 0 retain" in r.stdout and "EXPIRED" in r.stdout


def test_replay_routes_envelopes_raw_and_expired(tmp_path, mosquitto):
    q = tmp_path / "q"
    a, b, c, d = _make_queue(q)
    url = "mqtt://127.0.0.1:%d/site7" % mosquitto
    before = tree_hash(q)
    r = ddq("replay", q, "--to", url, "--dry-run", "--json")
    plan = json.loads(r.stdout)
    assert [w["topic"] for w in plan["would_send"]] == [
        "site7/sensors/t",
        "site7/status",
        "site7/raw",
    ]
    assert plan["expired_seqs"] == [d]
    assert tree_hash(q) == before  # a dry run touches nothing
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", q, "--to", url, "--json")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        got = sub.wait_for(3)
    finally:
        sub.close()
    assert (res["sent"], res["raw"], res["expired"], res["remaining"]) == (3, 1, 1, 0)
    assert sorted(got) == sorted(
        [
            ("site7/sensors/t", b"21.5"),
            ("site7/status", b"online"),
            ("site7/raw", b"not an envelope \x00\xff"),
        ]
    )
    items = {it["seq"]: it for it in json.loads(ddq("inspect", q, "--json").stdout)["items"]}
    assert [items[s]["state"] for s in (a, b, c)] == ["acked"] * 3
    assert items[d]["state"] == "quarantined" and items[d]["reason"] == "expired"
    assert ddq("verify", q).returncode == 0


def test_empty_prefix_publishes_envelope_topics_verbatim(tmp_path, mosquitto):
    q = tmp_path / "q"
    _make_queue(q)
    r = ddq(
        "replay",
        q,
        "--to",
        "mqtt://127.0.0.1:%d/" % mosquitto,
        "--dry-run",
        "--json",
        "--send-expired",
    )
    topics = [w["topic"] for w in json.loads(r.stdout)["would_send"]]
    assert topics == ["sensors/t", "status", "raw", "sensors/t"]
