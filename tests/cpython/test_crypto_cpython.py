"""Encrypted envelopes on CPython (SPEC E23): the key derivation is RFC 5869's HKDF-Expand, the
Outbox's CTR equals an independent one, and a CPython without the cryptography package refuses
with an error that names it (the host tools too)."""

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

import ddq
import ddq_outbox
import ddq_seal
from ddqhost import qdir

KEY = bytes(range(32))


def test_encryption_key_is_hkdf_expand_and_ciphertext_is_cryptography_ctr():
    # EVIDENCE-OF: E23
    ek = HKDFExpand(hashes.SHA256(), 32, b"ddq-aes-256-ctr-v1").derive(KEY)
    assert ek == ddq_outbox.hmac_sha256(KEY, b"ddq-aes-256-ctr-v1\x01")
    nonce = bytes(range(100, 112))
    pt = bytes(range(256)) * 3 + b"tail"
    e = ddq_outbox.encode_envelope("a/b", pt, key=b"id", hmac_key=KEY, encrypt=True, nonce=nonce)
    c = Cipher(algorithms.AES(ek), modes.CTR(nonce + bytes(4))).encryptor().update(pt)
    assert e.endswith(c) and e[51:63] == nonce and pt not in e


def test_without_the_cryptography_package_the_error_names_it(monkeypatch, tmp_path):
    # EVIDENCE-OF: E23
    monkeypatch.setattr(ddq_seal, "_CIPHERS", [None])  # as if `import cryptography` failed
    with pytest.raises(ddq.InvalidArgument, match="cryptography package"):
        ddq_outbox.Outbox(str(tmp_path / "q"), hmac_key=KEY, encrypt=True)
    e = ddq_outbox.encode_envelope("t", b"x", hmac_key=KEY)  # signing needs no AES
    assert ddq_outbox.decode_envelope(e, hmac_key=KEY).payload == b"x"
    with pytest.raises(qdir.EncryptedError, match="pip install cryptography"):
        qdir.check_decryptable(2, KEY)
    with pytest.raises(qdir.EncryptedError, match="--hmac-key-file"):
        qdir.check_decryptable(1, None)
    qdir.check_decryptable(0, None)
