# Encrypted messages (SPEC §13.1 E23): AES-256-CTR payloads, encrypt-then-MAC, through the
# Outbox. Shared suite: subset Python, both interpreters. The HMAC and topic tests:
# tests/test_auth.py (the two halves each import on a 140 KiB board beside the test runner).
import ddq
import ddq_outbox
import ddq_seal
import support
from authkit import KEY, OTHER, T0, drain as _drain, hexs as _hex, ob as _ob

# ---------------------------------------------------------------------------------- encryption
# AES-256-CTR payloads, encrypt-then-MAC (SPEC E23). CPython uses the cryptography package's
# CTR mode, the unix port cryptolib's ECB mode with ddq_outbox's own counter: the same hex is
# expected from both, so what one writes the other reads (both directions).

NONCE = b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb"


def _unhex(s):
    return bytes([int(s[i : i + 2], 16) for i in range(0, len(s), 2)])


def _fixed(*nonces):
    # a nonce source returning the given nonces in turn (a stand-in for a hardware RNG)
    left = list(nonces)
    return lambda: left.pop(0)


def _enc_ob(d=None, **kw):
    kw.setdefault("hmac_key", KEY)
    kw.setdefault("encrypt", True)
    return _ob(d, **kw)


def _encrypting():
    # A fresh directory and an encrypting Outbox over it, for a test that needs AES and the heap.
    _needs_aes(heap=True)
    d = support.tmpdir()
    return d, _enc_ob(d)


def _needs_aes(heap=False):
    if heap:  # an encrypting Outbox beside the module: as much heap as the Outbox tests
        support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    # Encryption needs AES: cryptolib.aes on MicroPython, a firmware build option that many
    # boards' firmware lacks (the qemu Cortex-M3 board's does), which their user cannot add;
    # CPython takes the cryptography package (a dependency: never skipped there).
    cl = ddq_outbox._import("cryptolib")
    if ddq._MP and not hasattr(cl, "aes"):
        raise support.Skip("this port has no cryptolib.aes (AES-CTR, SPEC E23)")


def test_aes_ctr_nist_sp800_38a_vectors():
    # EVIDENCE-OF: E23
    _needs_aes()
    pt = _unhex(
        "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51"
        "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710"
    )
    iv = _unhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
    k256 = _unhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
    c256 = ddq_outbox.aes_ctr(k256, iv, pt)  # F.5.5 CTR-AES256.Encrypt
    assert _hex(c256) == (
        "601ec313775789a5b7a7f504bbf3d228f443e3ca4d62b59aca84e990cacaf5c5"
        "2b0930daa23de94ce87017ba2d84988ddfc9c58db67aada613c2dd08457941a6"
    ), _hex(c256)
    k128 = _unhex("2b7e151628aed2a6abf7158809cf4f3c")
    c128 = ddq_outbox.aes_ctr(k128, iv, pt)  # F.5.1 CTR-AES128.Encrypt
    assert _hex(c128) == (
        "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff"
        "5ae4df3edbd5d35e5b4f09020db03eab1e031dda2f be03d1792170a0f3009cee"
    ).replace(" ", ""), _hex(c128)
    assert ddq_outbox.aes_ctr(k256, iv, c256) == pt  # CTR is its own inverse
    assert ddq_outbox.aes_ctr(k256, iv, pt[0:21]) == c256[0:21]  # a partial last block
    assert ddq_outbox.aes_ctr(k256, iv, b"") == b""
    support.raises(ddq.InvalidArgument, ddq_outbox.aes_ctr, k256[0:24], iv, pt)
    support.raises(ddq.InvalidArgument, ddq_outbox.aes_ctr, k256, iv[0:12], pt)
    # the 32-bit block counter never wraps into the nonce
    support.raises(ddq.InvalidArgument, ddq_outbox.aes_ctr, k256, b"\xff" * 16, bytes(17))


# header (flags 0x31: QoS 1, HMAC tag, encrypted), tag, nonce, topic in clear, ciphertext
ENC_HEX = (
    "444501310003000000000000a8da769b010000"
    "238befeb2765679b4116c947921b4b8cc212722e43a085f30e6f7bd1671725ed"  # tag
    "00112233445566778899aabb"  # nonce
    "742f31"  # topic "t/1", in clear
    "0e6b6b"
)  # AES-256-CTR of "hi!"


def test_encrypted_envelope_byte_exact_both_directions():
    # EVIDENCE-OF: E23 E1
    support.needs_heap(320 * 1024, support.OUTBOX_HEAP, 128 * 1024)
    # Write: an Outbox with a fixed nonce source (as a hardware RNG would feed it) stores these
    # bytes, on CPython and on MicroPython alike.
    _needs_aes()
    ob = _enc_ob(nonce=_fixed(NONCE))  # its clock reads T0
    seq = ob.put("t/1", b"hi!")
    raw = bytes(ob.queue.read(seq))
    ob.close()
    assert _hex(raw) == ENC_HEX, _hex(raw)
    e = ddq_outbox.encode_envelope(
        "t/1", b"hi!", enqueued_ms=T0, hmac_key=KEY, encrypt=True, nonce=NONCE
    )
    assert e == raw
    # Its parts: tag = HMAC(K, all but the tag), AES key = HMAC(K, "ddq-aes-256-ctr-v1" 01)
    # (HKDF-Expand, RFC 5869), counter block = nonce | 00000000.
    assert len(e) == 19 + 32 + 12 + 3 + 3 and e[3] == 0x31
    assert e[19:51] == ddq_outbox.hmac_sha256(KEY, e[0:19] + e[51:])
    ek = ddq_outbox.hmac_sha256(KEY, b"ddq-aes-256-ctr-v1\x01")
    assert e[66:] == ddq_outbox.aes_ctr(ek, NONCE + bytes(4), b"hi!")
    # Read: the same hex decrypts to the plaintext on either interpreter.
    m = ddq_outbox.decode_envelope(_unhex(ENC_HEX), hmac_key=KEY)
    assert (m.topic, m.payload, m.encrypted, m.qos) == ("t/1", b"hi!", True, 1)
    # Without the key: readable header and topic, the payload stays ciphertext, marked.
    m = ddq_outbox.decode_envelope(_unhex(ENC_HEX))
    assert (m.topic, m.payload, m.encrypted) == ("t/1", _unhex("0e6b6b"), True)


def test_encrypted_round_trip_through_the_outbox():
    # EVIDENCE-OF: E23
    d, ob = _encrypting()
    sizes = (0, 1, 15, 16, 17, 31, 33, 255, 300, 1000)  # partial blocks; past the 256-byte buffer
    want = []
    for n in sizes:
        p = bytes([(i * 7 + n) & 0xFF for i in range(n)])
        ob.put("s/%d" % n, p, key=b"k%d" % n, retain=n == 1)
        want.append(("s/%d" % n, p, b"k%d" % n))
    ob.close()
    ob = _enc_ob(d, encrypt=False)  # the key alone decrypts: encrypt only changes what put writes
    got = _drain(ob)
    assert [(m.topic, m.payload, m.key) for m in got] == want
    assert all(m.encrypted for m in got) and got[1].retain
    ob.put("s/plain", b"signed only")
    assert ob.queue.read(ob.queue.stats().next_seq - 1)[3] == 0x11
    assert _drain(ob)[0].encrypted is False
    ob.close()


def test_requeued_encrypted_dead_letter_stays_encrypted():
    # EVIDENCE-OF: E23 E14
    d, ob = _encrypting()
    s = ob.put("s/x", b"secret-requeue")
    ob.reject(ob.get(), "test")
    ob.close()
    ob = _enc_ob(d, encrypt=False)
    dl = ob.dead_letters()
    assert [(m.seq, m.payload, m.encrypted) for m in dl] == [(s, b"secret-requeue", True)]
    new = ob.requeue()
    raw = ob.queue.read(new[0])
    assert raw[3] & 0x20 and raw.find(b"secret") < 0
    m = ob.get()
    assert (m.payload, m.orig_seq, m.encrypted) == (b"secret-requeue", s, True)
    ob.close()


def test_encrypted_with_wrong_or_no_key_is_unauthenticated():
    # EVIDENCE-OF: E23 E22
    d, ob = _encrypting()
    ob.put("s/a", b"payload-a")
    ob.put("s/b", b"payload-b")
    ob.close()
    ob = _ob(d, hmac_key=OTHER)
    m = ob.get()
    assert m is None
    dead = ob.dead_letters()
    assert [x.reason for x in dead] == [b"unauthenticated: envelope: HMAC tag mismatch"] * 2
    # shown unchecked, the payload never decrypted with a key that did not verify it
    assert dead[0].encrypted and dead[0].payload.find(b"payload") < 0
    ob.close()
    d = support.tmpdir()
    ob = _enc_ob(d)
    ob.put("s/a", b"payload-a")
    ob.close()
    ob = _ob(d)  # no key: never delivers ciphertext as if it were the message
    sent = []
    assert ob.pump(lambda m: sent.append(m) or True) == 0 and sent == []
    assert ob.dead_letters()[0].reason == b"unauthenticated: envelope: encrypted, no key"
    assert ob.stats()["unauthenticated"] == 1
    support.raises(ddq_outbox.Unauthenticated, ob.requeue, ob.dead_letters()[0].seq)
    ob.close()
    ob = _ob(d, hmac_key=KEY)  # the key holder can requeue and read it
    assert len(ob.requeue()) == 1 and ob.get().payload == b"payload-a"
    ob.close()


def test_altered_ciphertext_is_refused_before_decryption():
    # EVIDENCE-OF: E23 E21
    _needs_aes(heap=True)
    e = ddq_outbox.encode_envelope(
        "s/t", b"21.5 C", key=b"id", orig_seq=3, hmac_key=KEY, encrypt=True, nonce=NONCE
    )
    assert e[3] == 0x39 and e[27 + 32 : 27 + 44] == NONCE
    refused = 0
    for i in range(len(e)):  # every byte: header, orig_seq, tag, nonce, key, topic, ciphertext
        c = bytearray(e)
        c[i] ^= 0x04
        try:
            ddq_outbox.decode_envelope(c, hmac_key=KEY)
        except ddq_outbox.BadEnvelope:
            refused += 1
    assert refused == len(e), refused
    # a flipped ciphertext bit would flip the same plaintext bit (CTR is malleable): the tag,
    # checked first, is what refuses it
    c = bytearray(e)
    c[-1] ^= 0x01
    e2 = support.raises(ddq_outbox.Unauthenticated, ddq_outbox.decode_envelope, c, True, KEY)
    assert str(e2) == "envelope: HMAC tag mismatch"
    # bit 5 without bit 4 (an encrypted payload with no tag) is not an envelope; clearing bit 5
    # to read the ciphertext as plaintext breaks the tag
    c = bytearray(e)
    c[3] &= ~0x10
    support.raises(ddq_outbox.BadEnvelope, ddq_outbox.decode_envelope, c)
    c = bytearray(e)
    c[3] &= ~0x20
    support.raises(ddq_outbox.Unauthenticated, ddq_outbox.decode_envelope, c, True, KEY)
    # an Outbox delivers none of the altered copies
    ob = _enc_ob()
    good = ob.put("s/g", b"good")
    for i in (19, 27, 60, 63, 67):
        f = bytearray(ob.queue.read(good))
        f[i] ^= 0x80
        ob.queue.enqueue(f)
    got = _drain(ob)
    assert [(m.seq, m.payload) for m in got] == [(good, b"good")]
    assert ob.stats()["unauthenticated"] == 5
    ob.close()


def test_nonces_are_fresh_and_a_repeating_source_is_refused():
    # EVIDENCE-OF: E23
    _needs_aes(heap=True)
    ob = _enc_ob()
    seqs = [ob.put("s/n", b"same payload") for _ in range(200)]
    raws = [bytes(ob.queue.read(s)) for s in seqs]
    nonces = [r[51:63] for r in raws]
    assert len(set(nonces)) == 200
    assert len(set([r[63 + 3 :] for r in raws])) == 200  # same plaintext, 200 ciphertexts
    ob.close()
    ob = _enc_ob(nonce=lambda: NONCE)  # a constant "RNG"
    ob.put("s/n", b"1")
    n = ob.queue.stats().next_seq
    e = support.raises(ddq.InvalidArgument, ob.put, "s/n", b"2")
    assert "same nonce" in str(e), str(e)
    assert ob.queue.stats().next_seq == n  # nothing stored, no seq used
    for bad in (lambda: b"short", lambda: 12, lambda: NONCE + b"x"):
        ob2 = _enc_ob(nonce=bad)
        support.raises(ddq.InvalidArgument, ob2.put, "s/n", b"x")
        assert ob2.qsize() == 0
        ob2.close()
    ob.close()


class _NoUrandom:
    # an os module as on a port without os.urandom (only what ddq_outbox uses)
    pass


def test_encrypt_without_a_nonce_source_is_refused():
    # EVIDENCE-OF: E23
    _needs_aes(heap=True)
    support.raises(ddq.InvalidArgument, _ob, encrypt=True)  # no hmac_key: no MAC, refused
    support.raises(ddq.InvalidArgument, ddq_outbox.encode_envelope, "t", b"x", encrypt=True)
    support.raises(ddq.InvalidArgument, _enc_ob, nonce=b"not callable")
    real = ddq_seal.os  # the nonce source is ddq_seal's (port/ddq_seal.py)
    ddq_seal.os = _NoUrandom()
    try:
        e = support.raises(ddq.InvalidArgument, _enc_ob)
        assert "os.urandom" in str(e) and "nonce=" in str(e), str(e)
        support.raises(
            ddq.InvalidArgument, ddq_outbox.encode_envelope, "t", b"x", hmac_key=KEY, encrypt=True
        )
        src = _fixed(NONCE, b"\x01" * 12)  # a hardware RNG passed in
        ob = _enc_ob(nonce=src)
        ob.put("s/a", b"a")
        ob.put("s/b", b"b")
        assert [m.payload for m in _drain(ob)] == [b"a", b"b"]
        ob.close()
    finally:
        ddq_seal.os = real


def test_no_plaintext_payload_in_the_queue_directory():
    # EVIDENCE-OF: E23
    _needs_aes(heap=True)
    d = support.tmpdir()
    ob = _enc_ob(d, sync_every=4)
    secret = b"TOP-SECRET-reading-"
    for i in range(40):
        ob.put("s/%d" % i, secret + b"%04d" % i + b"." * (i * 3))
    for m in [ob.get() for _ in range(10)]:
        ob.ack(m)
    ob.reject(ob.get(), "test")
    ob.close()
    ob = _enc_ob(d)
    ob.save_index()
    ob.close()
    names = support.listdir_sorted(d)
    assert len(names) >= 2, names
    ek = ddq_outbox.hmac_sha256(KEY, b"ddq-aes-256-ctr-v1\x01")
    for name in names:
        data = support.read_file(d + "/" + name)
        for needle in (secret[0:6], secret[7:13], b"reading", KEY[0:16], ek[0:8]):
            assert data.find(needle) < 0, (name, needle)
    ob = _enc_ob(d)
    assert ob.qsize() == 29 and _drain(ob)[0].payload.startswith(secret)
    ob.close()
