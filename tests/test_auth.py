# Authenticated messages (SPEC §13.1 E21, OUTBOX §13.2 E22) and topics MQTT cannot publish (E4):
# HMAC-SHA256 envelopes, the Outbox signing on put and verifying on get, forged/altered/unsigned
# messages quarantined as "unauthenticated" and never delivered. Shared suite: subset Python, both
# interpreters (CPython uses its hmac module, the unix port the RFC 2104 construction over
# hashlib.sha256: the same bytes are expected from both). Encryption (E23): tests/test_auth_aes.py
# (two modules, so that each imports on a 140 KiB board beside the test runner).
import ddq
import ddq_outbox
import support
from authkit import KEY, OTHER, T0, drain as _drain, hexs as _hex, ob as _ob

# Where a test skips in a small heap (support.needs_heap; unix port, 64-bit, the module beside
# the runner): each test that opens an Outbox. In 140 KiB the other 5 (the codec's, no queue)
# pass; 19 of 21 pass in 256 KiB, all in 320 KiB. On the 32-bit qemu board (136 KiB, 32-bit
# objects) the Outbox tests run too, but two: 64 KiB topics, and two Outboxes in one test.


# ---------------------------------------------------------------------------------- HMAC


def test_hmac_sha256_rfc4231_vectors():
    # EVIDENCE-OF: E21
    h = ddq_outbox.hmac_sha256
    assert (
        _hex(h(b"\x0b" * 20, b"Hi There"))
        == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    )
    assert (
        _hex(h(b"Jefe", b"what do ya want for nothing?"))
        == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
    # a key longer than the 64-byte block is hashed first (RFC 4231 case 6)
    assert (
        _hex(h(b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First"))
        == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    )
    # exactly one block: zero padding only
    assert h(b"k" * 64, b"x") != h(b"k" * 63, b"x")


def test_signed_envelope_layout_and_tag_coverage():
    # EVIDENCE-OF: E21 E1
    b = ddq_outbox.encode_envelope("t/1", b"hi", qos=1, hmac_key=b"k" * 32)
    # the same bytes on both interpreters (CPython's hmac, the unix port's own construction)
    assert _hex(b) == (
        "4445011100030000000000000000000000000086598eb1c6a81b2a0d083ea45165d8"
        "61c71818524581ebe22654c414959afc6d742f316869"
    ), _hex(b)
    assert b[3] == 0x11 and len(b) == 19 + 32 + 3 + 2
    # the tag covers the whole envelope but its own field: header .. payload
    assert b[19:51] == ddq_outbox.hmac_sha256(b"k" * 32, b[0:19] + b[51:])
    o = ddq_outbox.encode_envelope("t", b"p", key=b"id", orig_seq=9, hmac_key=KEY)
    assert o[3] == 0x19 and o[27:59] == ddq_outbox.hmac_sha256(KEY, o[0:27] + o[59:])
    m = ddq_outbox.decode_envelope(o, hmac_key=KEY)
    assert (m.topic, m.payload, m.key, m.orig_seq) == ("t", b"p", b"id", 9)
    # without a key the tag is skipped, like a SHA-256 without hashlib: readable, unchecked
    assert ddq_outbox.decode_envelope(o).payload == b"p"


def test_every_altered_byte_is_refused_with_the_key():
    # EVIDENCE-OF: E21
    b = ddq_outbox.encode_envelope(
        "s/t", b"21.5", key=b"id", orig_seq=3, ttl_ms=9, enqueued_ms=T0, hmac_key=KEY
    )
    refused = 0
    for i in range(len(b)):
        for bit in (0x01, 0x80):
            c = bytearray(b)
            c[i] ^= bit
            try:
                ddq_outbox.decode_envelope(c, hmac_key=KEY)
            except ddq_outbox.BadEnvelope:
                refused += 1
    assert refused == 2 * len(b), refused
    # truncated or extended by a byte: the payload changes, so does the tag
    for c in (b[0:-1], b + b"\x00"):
        support.raises(ddq_outbox.Unauthenticated, ddq_outbox.decode_envelope, c, True, KEY)


def test_missing_foreign_or_copied_tags_are_unauthenticated():
    # EVIDENCE-OF: E21
    plain = ddq_outbox.encode_envelope("t", b"x")
    sha = ddq_outbox.encode_envelope("t", b"x", sha256=True)
    other = ddq_outbox.encode_envelope("t", b"x", hmac_key=OTHER)
    for b in (plain, sha, other):
        e = support.raises(ddq_outbox.Unauthenticated, ddq_outbox.decode_envelope, b, True, KEY)
        assert isinstance(e, ddq_outbox.BadEnvelope) and str(e).startswith("envelope: ")
    # a valid tag copied onto another message (same layout) does not make it valid
    a = ddq_outbox.encode_envelope("t", b"aaaa", hmac_key=KEY)
    f = bytearray(ddq_outbox.encode_envelope("t", b"evil", hmac_key=KEY))
    f[19:51] = a[19:51]
    support.raises(ddq_outbox.Unauthenticated, ddq_outbox.decode_envelope, f, True, KEY)
    # a SHA-256 field passed off as a tag (flag bit 4 set on a SHA envelope) is refused too
    s = bytearray(sha)
    s[3] = (s[3] & ~0x04) | 0x10
    support.raises(ddq_outbox.Unauthenticated, ddq_outbox.decode_envelope, s, True, KEY)
    s[3] |= 0x04  # both bits: no valid envelope has them
    support.raises(ddq_outbox.BadEnvelope, ddq_outbox.decode_envelope, s)
    support.raises(
        ddq.InvalidArgument, ddq_outbox.encode_envelope, "t", b"", sha256=True, hmac_key=KEY
    )


# ---------------------------------------------------------------------------------- topics


def test_put_refuses_topics_mqtt_cannot_publish():
    # EVIDENCE-OF: E4
    support.needs_heap(
        320 * 1024, "an Outbox beside 64 KiB topics (MQTT's 65,535 B limit)", 320 * 1024
    )
    ob = _ob(max_topic_bytes=16)
    for t in ("sensors/#", "a/+/b", "#", "+", "", "a\x00b", "x" * 17, b"\xff"):
        e = support.raises(ddq.InvalidArgument, ob.put, t, b"v")
        assert "MQTT" in str(e), str(e)
    assert ob.qsize() == 0 and ob.queue.stats().next_seq == 1  # nothing stored, no seq used
    ob.put("x" * 16, b"v")
    ob.put("a/b c/\u00e9", b"v")
    assert ob.qsize() == 2
    ob.close()
    assert ddq_outbox.publishable("a/b") == ""
    assert "wildcard" in ddq_outbox.publishable(b"a/#")
    assert "65535" in ddq_outbox.publishable("x" * 65536)
    assert ddq_outbox.publishable("x" * 65535) == ""
    support.raises(ddq.InvalidArgument, ddq_outbox.encode_envelope, "x" * 65536, b"")


# The seven topics mosquitto 2.0 drops the connection for ("malformed packet"; tested on 2.0.11)
POISON = ("a\x01b", "a\nb", "a\x7fb", "a\x85b", "a\uffffb", "a\ufffeb", "\U0010ffff")


def test_put_refuses_control_and_non_characters_brokers_drop():
    # EVIDENCE-OF: E4
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    ob = _ob()
    for t in POISON + (
        "a\x1fb",
        "a\x9fb",
        "a\ufdd0b",
        "\U0001fffe",
        b"a\xc0\x80b",
        b"\xed\xa0\x80",
    ):
        e = support.raises(ddq.InvalidArgument, ob.put, t, b"v")
        assert "MQTT" in str(e) and "topic" in str(e), str(e)
        assert ddq_outbox.publishable(t) != ""
    assert "U+0085" in ddq_outbox.publishable("a\x85b")
    assert ob.qsize() == 0 and ob.queue.stats().next_seq == 1  # nothing stored, no seq used
    for t in ("a b/\u00a0/\u00e9", "\ufdcf\ufdf0\ufffd", "\U0001f600", "~"):
        assert ddq_outbox.publishable(t) == "", t
        ob.put(t, b"v")
    assert ob.qsize() == 4
    ob.close()


def test_a_stored_poison_topic_is_dead_lettered_and_the_rest_delivered():
    # EVIDENCE-OF: E4 E30
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    for ordered in (False, True):
        ob = _ob(ordered=ordered)
        bad = []
        for t in POISON:  # written by an older version, or a tampered directory
            b = bytearray(ddq_outbox.encode_envelope("a", b"old", enqueued_ms=T0))
            j = len(b) - 3
            b[j - 1 : j] = t.encode()  # the 1-byte topic "a" becomes t: its length fixed too
            b[5] = len(t.encode())  # topic_len, u16 LE at offset 5 (SPEC E1)
            bad.append(ob.queue.enqueue(b))
            assert ddq_outbox.decode_envelope(b).topic == t
        ob.put("ok", b"ok")
        sent = []
        assert ob.pump(lambda m, out=sent: out.append(m.payload) or True, 20) == 1
        assert ob.empty()
        assert sent == [b"ok"] and ob.counters["unpublishable"] == 7
        assert [m.seq for m in ob.dead_letters()] == bad
        assert (
            ob.queue.reason(bad[1])
            == b"unpublishable: topic contains U+000A (a control or non-character)"
        )
        ob.close()


def test_requeue_all_skips_a_dead_letter_put_would_refuse():
    # EVIDENCE-OF: E4 E14
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    ob = _ob()
    b = bytearray(ddq_outbox.encode_envelope("sensors/x", b"old", enqueued_ms=T0))
    b[-4] = 0x23  # "sensors/#": an old writer's record
    old = ob.queue.enqueue(b)
    ok = ob.put("sensors/ok", b"ok")
    m = ob.get()  # the old record is never handed to a sender: quarantined as it is claimed
    assert m.payload == b"ok" and ob.counters["unpublishable"] == 1
    assert ob.queue.reason(old).startswith(b"unpublishable: topic contains an MQTT wildcard")
    ob.reject(m, "test")
    new = ob.requeue()
    assert len(new) == 1 and ob.get().payload == b"ok"
    assert [x.seq for x in ob.dead_letters()] == [old] and ob.dead_letters()[
        0
    ].topic == "sensors/#"
    support.raises(ddq.InvalidArgument, ob.requeue, old)
    assert ok != old
    ob.close()


# ---------------------------------------------------------------------------------- Outbox


def test_outbox_signs_on_put_and_verifies_on_get():
    # EVIDENCE-OF: E22 E21
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 160 * 1024)  # two Outboxes' worth
    d = support.tmpdir()
    ob = _ob(d, hmac_key=KEY, sha256=True)  # the tag replaces the SHA-256
    a = ob.put("s/a", b"one", key=b"k1")
    raw = ob.queue.read(a)
    assert raw[3] & 0x10 and not raw[3] & 0x04
    ddq_outbox.decode_envelope(raw, hmac_key=KEY)
    unsigned = ob.queue.enqueue(ddq_outbox.encode_envelope("s/u", b"unsigned", enqueued_ms=T0))
    foreign = ob.queue.enqueue(ddq_outbox.encode_envelope("s/f", b"f", hmac_key=OTHER))
    alt = bytearray(ddq_outbox.encode_envelope("s/x", b"100", enqueued_ms=T0, hmac_key=KEY))
    alt[-1] = 0x39  # "109"
    altered = ob.queue.enqueue(alt)
    not_env = ob.queue.enqueue(b"not an envelope")
    c = ob.put("s/c", b"two")
    got = _drain(ob)
    assert [(m.seq, m.payload) for m in got] == [(a, b"one"), (c, b"two")]
    dead = ob.dead_letters()
    assert [m.seq for m in dead] == [unsigned, foreign, altered, not_env]
    assert dead[0].reason == b"unauthenticated: envelope: no HMAC tag", dead[0].reason
    assert dead[1].reason == b"unauthenticated: envelope: HMAC tag mismatch"
    assert dead[2].reason == b"unauthenticated: envelope: HMAC tag mismatch"
    assert dead[3].reason.startswith(b"corrupt: ")
    assert ob.queue.read(altered) == bytes(alt)  # kept byte for byte, for the post-mortem
    st = ob.stats()
    assert st["unauthenticated"] == 3 and st["corrupt"] == 1
    assert st["quarantined_by_reason"] == {"unauthenticated": 3, "corrupt": 1}
    ob.close()
    # the key is never written to the queue directory
    for name in support.listdir_sorted(d):
        data = support.read_file(d + "/" + name)
        assert data.find(KEY) < 0 and data.find(KEY[0:16]) < 0, name
    # after a restart the dead letters keep their reason class
    ob = _ob(d, hmac_key=KEY)
    assert ob.stats()["quarantined_by_reason"] == {"unauthenticated": 3, "corrupt": 1}
    ob.close()


def test_pump_never_sends_a_forged_message():
    # EVIDENCE-OF: E22 E17
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    ob = _ob(hmac_key=KEY)
    good = ob.put("s/g", b"good")
    f = bytearray(ob.queue.read(good))
    f[-1] ^= 0x20
    ob.queue.enqueue(f)
    ob.queue.enqueue(ddq_outbox.encode_envelope("s/f", b"forged", enqueued_ms=T0))
    sent = []

    def send(m):
        sent.append((m.seq, m.payload))
        return True

    assert ob.pump(send, budget=10) == 1
    assert sent == [(good, b"good")] and ob.qsize() == 0
    assert ob.stats()["unauthenticated"] == 2
    ob.close()


def test_requeue_never_re_signs_a_forgery():
    # EVIDENCE-OF: E22 E14
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    ob = _ob(hmac_key=KEY)
    forged = ob.queue.enqueue(ddq_outbox.encode_envelope("s/f", b"forged", enqueued_ms=T0))
    real = ob.put("s/r", b"real")
    m = ob.get()
    assert m.seq == real  # the forgery was quarantined on the way
    ob.reject(m, "test")
    assert [x.seq for x in ob.dead_letters()] == [forged, real]
    support.raises(ddq_outbox.Unauthenticated, ob.requeue, forged)
    new = ob.requeue()  # requeue-all leaves the forgery where it is
    assert len(new) == 1
    got = _drain(ob)
    assert [(x.payload, x.orig_seq) for x in got] == [(b"real", real)]
    assert [x.seq for x in ob.dead_letters()] == [forged]
    ob.close()


def test_signed_queue_read_without_a_key_and_with_the_wrong_key():
    # EVIDENCE-OF: E22
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    d = support.tmpdir()
    ob = _ob(d, hmac_key=KEY)
    ob.put("s/a", b"a")
    ob.close()
    ob = _ob(d)  # no key: delivered unchecked (the tag is skipped)
    assert [m.payload for m in _drain(ob)] == [b"a"]
    ob.put("s/b", b"b")  # unsigned
    ob.close()
    ob = _ob(d, hmac_key=OTHER)
    assert _drain(ob) == []
    assert ob.stats()["quarantined_by_reason"] == {"unauthenticated": 1}
    ob.close()


def test_hmac_key_arguments():
    # EVIDENCE-OF: E22
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    support.raises(ddq.InvalidArgument, _ob, hmac_key=b"short")
    support.raises(ddq.InvalidArgument, _ob, hmac_key=12345678901234567890)
    ob = _ob(hmac_key=bytearray(KEY))
    ob.put("t", b"x")
    assert _drain(ob)[0].payload == b"x"
    ob.close()


def test_a_valid_envelope_copied_under_another_seq_is_accepted():
    # EVIDENCE-OF: E21
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    # What the tag does not bind (SPEC E21): the DDQ seq. A duplicate of a valid envelope is
    # delivered again, with the same idempotency key, which the consumer dedupes on.
    ob = _ob(hmac_key=KEY)
    a = ob.put("s/a", b"once", key=b"id-7")
    b = ob.queue.enqueue(ob.queue.read(a))
    got = _drain(ob)
    assert [(m.seq, m.key) for m in got] == [(a, b"id-7"), (b, b"id-7")]
    ob.close()
