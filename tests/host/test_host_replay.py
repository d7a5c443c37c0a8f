"""`ddq replay` and `ddq inspect` on message-layer envelopes: topics, retain, raw payloads,
TTL expiry."""

import json
import time
import types

from conftest import Subscriber, ddq, tree_hash
from ddqhost import locate, qdir, replay

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}


def _make_queue(path):
    ddqmod = locate.load_ddq()
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


def _items(q):
    """{seq: item} of `ddq inspect q --json`, which must succeed."""
    r = ddq("inspect", q, "--json")
    assert r.returncode == 0, r.stderr
    return {it["seq"]: it for it in json.loads(r.stdout)["items"]}


def test_inspect_shows_envelope_fields(tmp_path):
    a, b, c, d = _make_queue(tmp_path / "q")
    items = _items(tmp_path / "q")
    ea = items[a]["envelope"]
    want = {"topic": "sensors/t", "qos": 1, "retain": False, "payload_preview": "21.5"}
    assert {k: ea[k] for k in want} == want
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
    items = _items(q)
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
    # No path at all is the same: the topic the device gave each message (a prefix is opt-in;
    # docs/HOST.md "replay": the default used to add ddq/, so the example app's ddq/unix/temp
    # landed on ddq/ddq/unix/temp).
    r = ddq(
        "replay",
        q,
        "--to",
        "mqtt://127.0.0.1:%d" % mosquitto,
        "--dry-run",
        "--json",
        "--send-expired",
    )
    assert [w["topic"] for w in json.loads(r.stdout)["would_send"]] == topics


# ---------------------------------------------------------------- unpublishable / unauthenticated

KEY = bytes(range(32))


def _wildcard(enc, now):
    # A raw encode as an old writer (or a forger) made it: put() refuses such a topic today.
    b = bytearray(enc("sensors/x", b"wild", enqueued_ms=now))
    i = bytes(b).index(b"sensors/x") + 8
    b[i : i + 1] = b"#"
    return bytes(b)


def test_replay_quarantines_unpublishable_and_goes_on(tmp_path, mosquitto):
    import ddq_outbox

    q = tmp_path / "q"
    ddqmod = locate.load_ddq()
    now = int(time.time() * 1000)
    enc = ddq_outbox.encode_envelope
    qq = ddqmod.Queue(str(q), **OPTS)
    try:
        a = qq.enqueue(enc("ok/1", b"one", enqueued_ms=now))
        w = qq.enqueue(_wildcard(enc, now))
        plus = qq.enqueue(_wildcard(enc, now).replace(b"sensors/#", b"sensors/+"))
        long_t = qq.enqueue(enc("l" * 200, b"long", enqueued_ms=now))
        b = qq.enqueue(enc("ok/2", b"two", enqueued_ms=now))
    finally:
        qq.close()
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    # a 200-byte topic is fine; under a 65,400-byte prefix it is over MQTT's 65,535 bytes
    pre = "p" * 65400
    url = "mqtt://127.0.0.1:%d/%s" % (mosquitto, pre)
    r = ddq("replay", q, "--to", url, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["unpublishable_seqs"] == [w, plus, long_t]
    assert [x["seq"] for x in plan["would_send"]] == [a, b]
    short = json.loads(ddq("replay", q, "--to", url[:-65399], "--dry-run", "--json").stdout)
    assert short["unpublishable_seqs"] == [w, plus]  # prefix "p": the long topic fits
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", q, "--to", url, "--json", "-v")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        # (retained messages of other tests arrive too: only pre counts)
        got = [g for g in sub.wait_for(2, prefix=pre) if g[0].startswith(pre)]
    finally:
        sub.close()
    assert (res["sent"], res["unpublishable"], res["failed"], res["remaining"]) == (2, 3, 0, 0)
    assert "Traceback" not in r.stderr and "quarantined (unpublishable" in r.stderr
    assert sorted(got) == [(pre + "/ok/1", b"one"), (pre + "/ok/2", b"two")]
    items = _items(q)
    assert items[w]["state"] == items[plus]["state"] == "quarantined"
    assert items[w]["reason"].startswith("unpublishable: topic contains an MQTT wildcard")
    # the rerun is clean: nothing claimed, nothing left, nothing sent twice
    assert items[long_t]["reason"].startswith("unpublishable: topic is 65601 bytes")
    res = json.loads(ddq("replay", q, "--to", url, "--json").stdout)
    assert (res["sent"], res["unpublishable"], res["failed"], res["remaining"]) == (0, 0, 0, 0)
    assert res["stats"]["claimed_items"] == 0 and res["stats"]["quarantined_items"] == 3
    assert ddq("verify", q).returncode == 0


def test_replay_refuses_a_wildcard_prefix(tmp_path):
    q = tmp_path / "q"
    _make_queue(q)
    before = tree_hash(q)
    for p in ("a/%23", "+/b"):  # %23: a "#" in a URL starts the fragment
        r = ddq("replay", q, "--to", "mqtt://127.0.0.1:1/" + p, "--dry-run")
        assert r.returncode == 2 and "wildcard" in r.stderr and "Traceback" not in r.stderr
    # a control or non-character: mosquitto would drop the connection on every publish (E4)
    for p, cp in (("a%01b", "U+0001"), ("a%0Ab", "U+000A"), ("a%C2%85", "U+0085"),
                  ("%EF%BF%BF", "U+FFFF")):  # fmt: skip
        r = ddq("replay", q, "--to", "mqtt://127.0.0.1:1/" + p)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and cp in lines[0], r.stderr
        assert lines[0].startswith("ddq: topic prefix") and "\n" not in r.stderr.strip()
    assert tree_hash(q) == before


def test_replay_dead_letters_a_poison_topic_names_it_and_delivers_the_rest(tmp_path, mosquitto):
    # Topics written before put refused them (SPEC E4): mosquitto 2.0 drops the connection on
    # each ("malformed packet"), which left every run "sent 0, failed 16", exit 1.
    import ddq_outbox

    q = tmp_path / "q"
    ddqmod = locate.load_ddq()
    now = int(time.time() * 1000)
    qq = ddqmod.Queue(str(q), **OPTS)
    bad, ok = [], []
    try:
        for i in range(20):
            if i in (2, 9, 10):
                b = bytearray(ddq_outbox.encode_envelope("pz/X", b"bad", enqueued_ms=now))
                j = bytes(b).index(b"pz/X") + 3
                b[j : j + 1] = {2: b"\x01", 9: b"\n", 10: "\uffff".encode()}[i]
                b[5] += 0 if i < 10 else 2  # topic_len (SPEC E1): U+FFFF is 3 bytes
                bad.append(qq.enqueue(bytes(b)))
            else:
                ok.append(qq.enqueue(ddq_outbox.encode_envelope("pz/%d" % i, b"%d" % i,
                                                                enqueued_ms=now)))  # fmt: skip
    finally:
        qq.close()
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", q, "--to", "mqtt://127.0.0.1:%d" % mosquitto, "--timeout", "5")
        assert r.returncode == 0, r.stdout + r.stderr
        sub.wait_for(17)
        time.sleep(0.2)
        got = [g for g in sub.got if g[0].startswith("pz")]
    finally:
        sub.close()
    assert "sent 17, failed 0, skipped 0, expired 0, unpublishable 3," in r.stdout, r.stdout
    assert "unpublishable: seq %d, %d, %d" % tuple(bad) in r.stdout, r.stdout
    assert sorted(got) == sorted(
        ("pz/%d" % i, b"%d" % i) for i in range(20) if i not in (2, 9, 10)
    )
    items = _items(q)
    assert [items[s]["state"] for s in bad] == ["quarantined"] * 3
    assert items[bad[0]]["reason"].startswith("unpublishable: topic contains U+0001")
    assert items[bad[2]]["reason"].startswith("unpublishable: topic contains U+FFFF")
    r = ddq("replay", q, "--to", "mqtt://127.0.0.1:%d" % mosquitto, "--json")
    res = json.loads(r.stdout)
    assert r.returncode == 0 and (res["sent"], res["failed"], res["remaining"]) == (0, 0, 0)


def _signed_queue(path, key):
    import ddq_outbox

    ddqmod = locate.load_ddq()
    now = int(time.time() * 1000)
    enc = ddq_outbox.encode_envelope
    q = ddqmod.Queue(str(path), **OPTS)
    try:
        good = q.enqueue(enc("s/good", b"good", enqueued_ms=now, hmac_key=key))
        alt = bytearray(enc("s/alt", b"100", enqueued_ms=now, hmac_key=key))
        alt[-1] = ord("9")
        altered = q.enqueue(bytes(alt))
        unsigned = q.enqueue(enc("s/unsigned", b"u", enqueued_ms=now))
        foreign = q.enqueue(enc("s/foreign", b"f", enqueued_ms=now, hmac_key=b"x" * 32))
        raw = q.enqueue(b"raw bytes")
        good2 = q.enqueue(enc("s/good2", b"good2", enqueued_ms=now, hmac_key=key))
    finally:
        q.close()
    (path / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    return good, altered, unsigned, foreign, raw, good2


def _replay_two(mosquitto, prefix, *args):
    """`ddq replay *args --json` (which must succeed) with a subscriber on mosquitto until two
    messages arrived: (its JSON result, its stdout + stderr, the messages under prefix)."""
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", *args, "--json")
        assert r.returncode == 0, r.stderr
        got = [g for g in sub.wait_for(2, prefix=prefix) if g[0].startswith(prefix)]
    finally:
        sub.close()
    return json.loads(r.stdout), r.stdout + r.stderr, got


def test_replay_with_an_hmac_key_sends_only_authenticated_messages(tmp_path, mosquitto):
    q = tmp_path / "q"
    good, altered, unsigned, foreign, raw, good2 = _signed_queue(q, KEY)
    kf = tmp_path / "device.key"
    kf.write_text(KEY.hex() + "\n")
    url = "mqtt://127.0.0.1:%d/" % mosquitto
    plan = json.loads(
        ddq("replay", q, "--to", url, "--dry-run", "--json", "--hmac-key-file", kf).stdout
    )
    assert plan["unauthenticated_seqs"] == [altered, unsigned, foreign, raw]
    assert [w["seq"] for w in plan["would_send"]] == [good, good2]
    # "s/": other tests' retained messages are left out
    res, text, got = _replay_two(mosquitto, "s/", q, "--to", url, "--hmac-key-file", kf)
    assert (res["sent"], res["unauthenticated"], res["remaining"]) == (2, 4, 0)
    assert sorted(got) == [("s/good", b"good"), ("s/good2", b"good2")]
    assert KEY.hex() not in text
    items = _items(q)
    assert items[altered]["reason"] == "unauthenticated: envelope: HMAC tag mismatch"
    assert items[unsigned]["reason"] == "unauthenticated: envelope: no HMAC tag"
    assert items[raw]["reason"].startswith("unauthenticated: not an envelope")


def test_inspect_shows_auth_status(tmp_path, monkeypatch):
    q = tmp_path / "q"
    good, altered, unsigned, foreign, raw, good2 = _signed_queue(q, KEY)
    items = _items(q)
    assert items[good]["auth"] == "unchecked" and items[unsigned]["auth"] == "unsigned"
    monkeypatch.setenv("DDQ_HMAC_KEY", KEY.hex())
    r = ddq("inspect", q, "--json")  # the key from $DDQ_HMAC_KEY
    info = json.loads(r.stdout)
    items = {it["seq"]: it for it in info["items"]}
    assert info["hmac_checked"] is True
    assert [items[s]["auth"] for s in (good, good2)] == ["ok", "ok"]
    assert items[altered]["auth"] == "unauthenticated: envelope: HMAC tag mismatch"
    assert items[foreign]["auth"] == "unauthenticated: envelope: HMAC tag mismatch"
    assert items[unsigned]["auth"] == "unauthenticated: envelope: no HMAC tag"
    r = ddq("inspect", q)
    assert "auth: HMAC checked with the given key, 4 unauthenticated" in r.stdout
    assert "auth: UNAUTHENTICATED: envelope: HMAC tag mismatch" in r.stdout


def test_hmac_key_file_errors_never_show_the_key(tmp_path):
    q = tmp_path / "q"
    _signed_queue(q, KEY)
    inside = q / "device.key"
    inside.write_text(KEY.hex())
    r = ddq("inspect", q, "--hmac-key-file", inside)
    assert r.returncode == 1 and "inside the queue directory" in r.stderr
    short = tmp_path / "short.key"
    short.write_text("abcd" + "zz" * 20)
    r = ddq("inspect", q, "--hmac-key-file", short)
    assert r.returncode == 1 and "at least 16 bytes" in r.stderr and "zz" not in r.stderr
    r = ddq("inspect", q, "--hmac-key-file", tmp_path / "missing.key")
    assert r.returncode == 1 and "cannot read" in r.stderr
    assert "Traceback" not in r.stderr


def test_deliver_quarantines_what_paho_refuses_and_goes_on(tmp_path):
    # paho raises ValueError for what it cannot publish: quarantined, the next message is sent
    from ddqhost import replay

    q = tmp_path / "q"
    a, b, c, d = _make_queue(q)

    class Info:
        def wait_for_publish(self, timeout):
            pass

        def is_published(self):
            return True

    class Client:
        def __init__(self):
            self.sent = []

        def publish(self, topic, body, qos, retain):
            if topic.endswith("/status"):
                raise ValueError("Invalid topic.")
            self.sent.append(topic)
            return Info()

    cl = Client()
    ro = replay.ReplayOptions("mqtt://x", "x", 1883, False, "", timeout=1.0, window=1)
    res = replay._deliver(replay.Job(str(q), OPTS, prefix="p"), ro, cl, replay._Run())
    assert cl.sent == ["p/sensors/t", "p/raw"]
    assert res.unpublishable_seqs == [b] and res.sent_seqs == [a, c]
    assert res.stats["claimed_items"] == 0
    items = _items(q)
    assert items[b]["reason"] == "unpublishable: Invalid topic."


def test_deliver_stops_at_the_first_missing_puback_and_releases_the_window(tmp_path, monkeypatch):
    # EVIDENCE-OF: E26
    # No PUBACK for the 2nd publish (paho's info never published): the window in flight is
    # released with retry(0) (due again at once, one attempt counted) and replay stops.
    # Replay's monotonic clock is the test's: it moves only when a wait waits, so how fast the
    # machine runs the loop cannot make --timeout fire before the 3rd publish.
    from ddqhost import replay

    q = tmp_path / "q"
    a, b, c, d = _make_queue(q)
    mono = [0.0]
    monkeypatch.setattr(
        replay, "time", types.SimpleNamespace(monotonic=lambda: mono[0], time=time.time)
    )

    class Info:
        def __init__(self, ok):
            self.ok = ok

        def wait_for_publish(self, timeout):
            mono[0] += timeout  # the wait, on the test's clock

        def is_published(self):
            return self.ok

    class Client:
        def __init__(self):
            self.sent = []

        def publish(self, topic, body, qos, retain):
            self.sent.append((topic, qos))
            return Info(len(self.sent) < 2)

    cl = Client()
    ro = replay.ReplayOptions("mqtt://x", "x", 1883, False, "", timeout=0.05, window=2)
    res = replay._deliver(replay.Job(str(q), OPTS, prefix="p"), ro, cl, replay._Run())
    assert cl.sent == [("p/sensors/t", 1), ("p/status", 1), ("p/raw", 1)]  # QoS 1 forced
    assert res.sent_seqs == [a] and res.failed_seqs == [b, c]
    assert (res.expired, res.remaining, res.skipped) == (0, 1, 0)  # d not tried
    items = _items(q)
    assert [(items[s]["state"], items[s]["attempts"]) for s in (b, c)] == [("available", 1)] * 2
    assert "due_in_ms" not in items[b] and items[d]["state"] == "available"


# ---------------------------------------------------------------- encrypted payloads (SPEC E23)

SECRET = b"secret-reading-42.7"


def _encrypted_queue(path, key):
    import ddq_outbox

    ob = ddq_outbox.Outbox(str(path), hmac_key=key, encrypt=True, **OPTS)
    try:
        a = ob.put("s/enc", SECRET)
        b = ob.put("s/enc2", b"second-" + SECRET, retain=True)
    finally:
        ob.close()
    (path / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    return a, b


def test_replay_decrypts_for_the_subscriber_and_refuses_without_the_key(tmp_path, mosquitto):
    # EVIDENCE-OF: E23
    q = tmp_path / "q"
    a, b = _encrypted_queue(q, KEY)
    for name in sorted(p.name for p in q.iterdir()):  # plaintext nowhere at rest
        assert (q / name).read_bytes().find(SECRET[0:12]) < 0, name
    url = "mqtt://127.0.0.1:%d/" % mosquitto
    before = tree_hash(q)
    for extra in (["--dry-run"], []):
        r = ddq("replay", q, "--to", url, *extra)
        assert r.returncode == 1, r.stdout
        assert "2 pending messages are encrypted" in r.stderr and "--hmac-key-file" in r.stderr
        assert "Traceback" not in r.stderr
    items = _items(q)
    assert [items[s]["state"] for s in (a, b)] == ["available"] * 2  # nothing claimed
    assert tree_hash(q) == before  # refused before anything was written
    kf = tmp_path / "device.key"
    kf.write_text(KEY.hex() + "\n")
    plan = json.loads(
        ddq("replay", q, "--to", url, "--dry-run", "--json", "--hmac-key-file", kf).stdout
    )
    assert [(w["seq"], w["bytes"]) for w in plan["would_send"]] == [
        (a, len(SECRET)),
        (b, len(SECRET) + 7),
    ]
    res, text, got = _replay_two(mosquitto, "s/enc", q, "--to", url, "--hmac-key-file", kf)
    assert (res["sent"], res["unauthenticated"]) == (2, 0)
    assert sorted(got) == [("s/enc", SECRET), ("s/enc2", b"second-" + SECRET)]
    assert KEY.hex() not in text


def test_replay_quarantines_an_altered_encrypted_message(tmp_path):
    # EVIDENCE-OF: E23
    import ddq_outbox

    q = tmp_path / "q"
    ddqmod = locate.load_ddq()
    now = int(time.time() * 1000)
    e = bytearray(
        ddq_outbox.encode_envelope("s/x", SECRET, enqueued_ms=now, hmac_key=KEY, encrypt=True)
    )
    e[-1] ^= 1
    qq = ddqmod.Queue(str(q), **OPTS)
    s = qq.enqueue(bytes(e))
    qq.close()
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    kf = tmp_path / "device.key"
    kf.write_text(KEY.hex())
    plan = json.loads(
        ddq(
            "replay",
            q,
            "--to",
            "mqtt://127.0.0.1:1/",
            "--dry-run",
            "--json",
            "--hmac-key-file",
            kf,
        ).stdout
    )
    assert plan["unauthenticated_seqs"] == [s] and plan["would_send"] == []


def test_inspect_decrypts_with_the_key_and_marks_encrypted_without(tmp_path, monkeypatch):
    # EVIDENCE-OF: E23
    q = tmp_path / "q"
    a, b = _encrypted_queue(q, KEY)
    r = ddq("inspect", q, "--json")
    assert r.returncode == 0, r.stderr
    items = {it["seq"]: it for it in json.loads(r.stdout)["items"]}
    ea = items[a]["envelope"]
    want = {
        "topic": "s/enc",
        "encrypted": True,
        "decrypted": False,
        "payload_preview": "(encrypted)",
    }
    assert {k: ea[k] for k in want} == want
    assert ea["payload_len"] == len(SECRET) and items[a]["auth"] == "unchecked"
    text = ddq("inspect", q).stdout
    assert "envelope: topic s/enc qos 1 encrypted (no key: not decrypted)" in text
    assert SECRET.decode() not in text and SECRET.decode() not in r.stdout
    monkeypatch.setenv("DDQ_HMAC_KEY", KEY.hex())
    items = _items(q)
    eb = items[b]["envelope"]
    want = {"encrypted": True, "decrypted": True, "retain": True}
    want["payload_preview"] = "second-" + SECRET.decode()
    assert {k: eb[k] for k in want} == want
    assert items[b]["auth"] == "ok"
    text = ddq("inspect", q).stdout
    assert "envelope: topic s/enc qos 1 encrypted age" in text and "auth: ok (HMAC)" in text
    monkeypatch.setenv("DDQ_HMAC_KEY", bytes(32).hex())  # the wrong key: marked, not decrypted
    items = _items(q)
    assert items[a]["envelope"]["decrypted"] is False
    assert items[a]["auth"] == "unauthenticated: envelope: HMAC tag mismatch"


def test_inspect_says_a_lease_came_from_a_board_without_rtc(tmp_path):
    # A board without an RTC starts its clock at 2000-01-01: its leases and enqueue times are
    # some 26 years old on the host. inspect says so instead of `lease -849399607s`.
    import ddq_outbox

    ddqmod = locate.load_ddq()
    boot = 946684800000 + 3600000  # an hour after power-on, on a 2000-epoch clock
    q = ddqmod.Queue(str(tmp_path / "q"), clock=lambda: boot, **OPTS)
    try:
        q.enqueue(ddq_outbox.encode_envelope("t", b"x", enqueued_ms=boot - 1000))
        q.enqueue(b"raw")
        assert q.claim(30000) is not None
    finally:
        q.close()
    (tmp_path / "q" / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    r = ddq("inspect", tmp_path / "q")
    assert r.returncode == 0, r.stderr
    assert "lease set by a clock before 2001 (board without RTC?)" in r.stdout, r.stdout
    assert "enqueued by a clock before 2001 (board without RTC?)" in r.stdout, r.stdout
    assert "lease -" not in r.stdout and " age " not in r.stdout
    item = json.loads(ddq("inspect", tmp_path / "q", "--json").stdout)["items"][0]
    assert item["lease_clock_before_2001"] is True and "lease_remaining_ms" not in item
    assert item["lease_until_ms"] == boot + 30000  # the raw value stays
    assert item["envelope"]["clock_before_2001"] is True


# ---------------------------------------------------------------- batches (OUTBOX §13.4)


def test_replay_delivers_each_reading_of_a_batch(tmp_path, mosquitto):
    # A pulled BatchOutbox directory: replay publishes every reading of a batch (both keys:
    # b"\0C" runs and a first-release b"\0B" batch) as its own message, as the board would
    # have, beside a message put on its own; each item is acked once all its readings are.
    locate.load_ddq()
    import ddq_batch
    import ddq_outbox

    q = tmp_path / "q"
    now = int(time.time() * 1000)
    t = [now - 60000]
    ob = ddq_batch.BatchOutbox(str(q), clock=lambda: t[0], batch_bytes=120, **OPTS)
    want = []
    for k in range(12):  # two batches: 120 bytes hold 8 of these
        t[0] += 1000
        ob.put("sensors/t", b"reading-%02d" % k)
        want.append(("site/sensors/t", b"reading-%02d" % k))
    ob.flush()
    ob.put("alarm", b"door", key=b"k1")  # on its own
    want.append(("site/alarm", b"door"))
    old = b"\x05\x02ab" + b"\xe8\x07\x03xyz"  # b"\0B": ages 5, then a gap of 1,000
    ob.queue.enqueue(ddq_outbox.encode_envelope("old/t", old, enqueued_ms=now, key=b"\0B"))
    want += [("site/old/t", b"ab"), ("site/old/t", b"xyz")]
    ob.close()
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    envs = {s: it.get("envelope", {}) for s, it in _items(q).items()}
    assert [envs[s].get("readings") for s in (1, 2, 3, 4)] == [8, 4, None, 2], envs
    assert envs[1]["payload_preview"] == "reading-00" and envs[4]["payload_preview"] == "ab"
    r = ddq("inspect", q)
    assert "envelope: topic sensors/t qos 1 batch of 8 readings (the first shown)" in r.stdout
    url = "mqtt://127.0.0.1:%d/site" % mosquitto
    r = ddq("replay", q, "--to", url, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert [(w["topic"], w.get("reading")) for w in plan["would_send"]][:9] == [
        ("site/sensors/t", k) for k in range(8)
    ] + [("site/sensors/t", 0)]
    assert [w["seq"] for w in plan["would_send"]] == [1] * 8 + [2] * 4 + [3, 4, 4]
    r = ddq("replay", q, "--to", url, "--dry-run")
    assert "would send seq 1 reading 7 -> site/sensors/t (10 bytes)" in r.stdout, r.stdout
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", q, "--to", url, "--json")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        # (what earlier tests retained arrives too: not counted)
        got = [g for g in sub.wait_for(len(want), prefix="site/") if g[0].startswith("site/")]
    finally:
        sub.close()
    assert got == want, got
    assert (res["sent"], res["readings"], res["remaining"]) == (15, 14, 0), res
    assert res["sent_seqs"] == [1, 2, 3, 4], res["sent_seqs"]
    assert replay.READING == ddq_batch._ID  # the reading ids replay splits are ddq_batch's
    assert [it["state"] for it in _items(q).values()] == ["acked"] * 4
    assert ddq("verify", q).returncode == 0


# ---------------------------------------------------------------- a directory the hold rule filled

HOLD = {"segment_bytes": 1024, "max_payload_bytes": 256, "max_items": 1000, "max_segments": 8}


def _outage_queue(path):
    """A board's outbox after an outage under its profile's hold rule (SPEC §10.1): full, the
    first 20 messages past their TTL, and the last one the device left claimed under a live
    lease (it was sending when it was pulled). Returns the number of messages."""
    locate.load_ddq()
    import ddq_outbox

    now = int(time.time() * 1000)
    t = [now - 3600000]
    ob = ddq_outbox.Outbox(
        str(path), clock=lambda: t[0], seed=3, window=4, evidence_bytes=256, **HOLD
    )
    n = 0
    try:
        for _ in range(1000):
            try:
                ob.put("dev/%d" % n, b"r" * 40, ttl_ms=60000 if n < 20 else 0)
            except locate.load_ddq().Full:
                break
            n += 1
        ob.queue.claim_seq(n, 3600000)  # the last one, in flight for an hour
    finally:
        ob.queue.close()  # pulled while sending: the claim stays
    (path / qdir.OPTIONS_FILE).write_text(json.dumps(HOLD))
    return n


def test_replay_drains_a_directory_the_hold_rule_filled(tmp_path, mosquitto):
    # On main: "limit: segment limit reached and compaction gave no room", 0 sent and an item
    # left claimed, on every rerun (issue 35). Replay opens it within the hold rule's reserve
    # (window 1, no evidence reserve: SPEC H5), releases the claims the device left, and a dead
    # letter without room is dropped and counted (OUTBOX E32).
    q = tmp_path / "q"
    n = _outage_queue(q)
    r = ddq("replay", q, "--to", "mqtt://127.0.0.1:%d/" % mosquitto, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert len(plan["would_send"]) == n - 20, plan
    sub = Subscriber(mosquitto)
    try:
        r = ddq("replay", q, "--to", "mqtt://127.0.0.1:%d/" % mosquitto, "--json")
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        res = json.loads(r.stdout)
        got: list = []
        for _ in range(100):  # (other tests' retained messages come too: only dev/ counts)
            got = [g for g in sub.wait_for(1, 0.1) if g[0].startswith("dev/")]
            if len(got) >= n - 20:
                break
    finally:
        sub.close()
    assert res["sent"] == n - 20 and res["remaining"] == 0 and res["skipped"] == 0, res
    assert res["expired"] + res["dead_dropped"] == 20 and res["dead_dropped"] > 0, res
    items = _items(q)
    assert sorted(t for t, _ in got) == sorted("dev/%d" % k for k in range(20, n)), got
    assert not [s for s, it in items.items() if it["state"] in ("available", "claimed")]
    r = ddq("replay", q, "--to", "mqtt://127.0.0.1:%d/" % mosquitto)
    assert r.returncode == 0 and r.stdout.startswith("sent 0, failed 0"), (r.stdout, r.stderr)
    assert ddq("verify", q).returncode == 0


def _big_queue(q, big):
    """20 envelopes big/0..19, those whose index is in big 2,000 bytes (over 1024)."""
    import ddq_outbox

    opts = dict(OPTS, segment_bytes=65536, max_payload_bytes=4096)
    ob = ddq_outbox.Outbox(str(q), **opts)
    try:
        seqs = [ob.put("big/%d" % i, b"x" * 2000 if i in big else b"%010d" % i) for i in range(20)]
    finally:
        ob.close()
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(opts))
    return seqs


def test_replay_dead_letters_a_message_the_broker_drops_the_connection_for(tmp_path):
    # EVIDENCE-OF: E26 E30
    # mosquitto with max_packet_size closes the connection on the one PUBLISH above it (without
    # the PUBACKs it owed before it). The window is released, republished one at a time once
    # paho reconnected, and the message alone at each drop is charged: after --max-attempts it
    # is quarantined and named, and the 19 others are delivered (the old replay stopped with
    # "failed 16" on every run, the bad seq never named, the rest never delivered).

    import brokers
    import ddq_outbox

    b = brokers.small_packet_mosquitto(str(tmp_path / "broker"), 1024)
    opts = dict(OPTS, segment_bytes=16384, max_payload_bytes=4096)
    q = tmp_path / "q"
    ob = ddq_outbox.Outbox(str(q), **opts)
    try:
        seqs = [ob.put("big/%d" % i, b"x" * 2000 if i == 5 else b"%010d" % i) for i in range(20)]
    finally:
        ob.close()
    (q / qdir.OPTIONS_FILE).write_text(json.dumps(opts))
    url = "mqtt://127.0.0.1:%d" % b.port
    sub = Subscriber(b.port)
    try:
        # bounded: ddq() kills it after 120 s (each drop costs paho's 1 s reconnect: ~5 s)
        r = ddq("replay", q, "--to", url, "--timeout", "5", "--max-attempts", "2", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads(r.stdout)
        sub.wait_for(19)
        got = sorted(g for g in sub.got if g[0].startswith("big/"))
    finally:
        sub.close()
    assert (res["sent"], res["failed"], res["remaining"]) == (19, 0, 0), res
    assert res["unpublishable_seqs"] == [seqs[5]], res
    assert sorted(set(got)) == sorted(("big/%d" % i, b"%010d" % i) for i in range(20) if i != 5)
    item = _items(q)[seqs[5]]
    assert item["state"] == "quarantined", item
    assert item["reason"].startswith("unpublishable: the broker closed the connection"), item
    r = ddq("replay", q, "--to", url, "--json")
    res = json.loads(r.stdout)
    assert r.returncode == 0 and (res["sent"], res["failed"], res["remaining"]) == (0, 0, 0)
    r = ddq("replay", q, "--to", url, "--max-attempts", "0")
    assert r.returncode == 2 and "--max-attempts must be 1..1000" in r.stderr, r.stderr
    b.close()


def test_replay_stops_when_the_broker_drops_every_message(tmp_path):
    # EVIDENCE-OF: E26 E30
    # Every message is over the broker's max_packet_size: the first is dead-lettered after
    # --max-attempts drops (it cannot know better), but the next one dropped as often with
    # nothing delivered between is the broker's doing: the run stops there (failed 1, exit 1)
    # instead of dead-lettering the whole directory.
    import brokers

    b = brokers.small_packet_mosquitto(str(tmp_path / "broker"), 1024)
    q = tmp_path / "q"
    seqs = _big_queue(q, range(20))
    url = "mqtt://127.0.0.1:%d" % b.port
    try:
        r = ddq("replay", q, "--to", url, "--timeout", "5", "--max-attempts", "2", "--json")
    finally:
        b.close()
    res = json.loads(r.stdout)
    assert r.returncode == 1, r.stdout + r.stderr
    assert res["unpublishable_seqs"] == [seqs[0]] and res["failed_seqs"] == [seqs[1]], res
    assert (res["sent"], res["remaining"]) == (0, 18), res
    items = _items(q)
    assert [items[s]["state"] for s in seqs[1:]] == ["available"] * 19


def test_replay_returns_a_typed_result_counted_once(tmp_path):
    # EVIDENCE-OF: E26
    # replay/plan return a Result (attributes, not a dict the CLI sums again); a fleet's total
    # is Fleet.total(), and --json's keys are as_dict()'s.
    q = tmp_path / "q"
    a, b, c, d = _make_queue(q)
    ro = replay.ReplayOptions("mqtt://x", "x", 1883, False, "")
    res = replay.plan(replay.Job(str(q), OPTS), ro)
    assert isinstance(res, replay.Result) and res.dry_run and res.dir == str(q)
    assert (res.remaining, res.raw, res.expired, res.sent) == (0, 1, 1, 0)  # a run leaves 0
    assert [w["seq"] for w in res.would_send] == [a, b, c] and res.expired_seqs == [d]
    doc = res.as_dict()
    assert doc["remaining"] == 0 and len(doc["would_send"]) == 3
    assert "stats" not in doc and "broker" not in doc
    bad = replay.Result(dir="gone", error="cannot open")
    assert bad.as_dict() == {"dir": "gone", "error": "cannot open", "sent": 0, "failed": 0}
    fleet = replay.Fleet([res, bad, replay.Result(dir="x", sent=4, failed=1)])
    tot = fleet.total()
    assert (tot["sent"], tot["failed"], tot["remaining"], tot["errors"]) == (4, 1, 0, 1)
    assert fleet.as_dict()["total"] == tot and len(fleet.as_dict()["dirs"]) == 3
