"""ddq_seal: HMAC-SHA256 tags and AES-CTR for the Outbox's envelope [E21] [E23].

Loaded by ddq_outbox (port/ddq_outbox.py) the first time a key is used: an Outbox, an
encode_envelope or a decode_envelope given hmac_key. A board that never seals never imports it
(DESIGN §4.1); `ddq flash --app` installs it with an app that passes hmac_key.

    import ddq_seal
    ddq_seal.hmac_sha256(key, data)      # RFC 2104 / RFC 4231
    ddq_seal.aes_ctr(key, iv, data)      # the cipher of E23 alone

Format: see docs/SPEC.md "Envelope" [E21]-[E23].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import os
import struct

from ddq import InvalidArgument, _bytes_arg, _import, const

TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Union

    Buf = Union[bytes, bytearray, memoryview]

_NONCE = const(12)  # ddq_outbox's: the per-message random nonce (nonce | u32 BE a block) [E23]


# ============================================================================ hmac
def _pads(key: "Any") -> "tuple[bytes, bytes]":
    # HMAC's inner and outer padded keys (RFC 2104): a key longer than SHA-256's 64-byte block is
    # hashed first, then zero-padded to 64 bytes and XORed with 0x36 (inner) and 0x5C (outer).
    k = bytes(_bytes_arg(key, "hmac_key"))
    hl = _import("hashlib")
    if not hasattr(hl, "sha256"):
        raise InvalidArgument("HMAC-SHA256 needs hashlib.sha256")
    if len(k) > 64:
        k = bytes(hl.sha256(k).digest())
    k = k + bytes(64 - len(k))
    return bytes(b ^ 0x36 for b in k), bytes(b ^ 0x5C for b in k)


_HMAC_MOD: "list[Any]" = []  # [the hmac module or None], probed once: a failed import on a
# board searches the filesystem every time


def _hmac_mod() -> "Any":
    # The hmac module if it has new() and gives RFC 4231's test case 2 (a micropython-lib hmac that
    # needs hash.copy(), missing from MicroPython's sha256, fails here), else None.
    if not _HMAC_MOD:
        hm, hl = _import("hmac"), _import("hashlib")
        try:
            h = hm.new(b"Jefe", b"what do ya want for nothing?", hl.sha256)
            ok = bytes(h.digest())[0:4] == b"\x5b\xdc\xc1\x46"
        except Exception:
            ok = False
        _HMAC_MOD.append(hm if ok else None)
    return _HMAC_MOD[0]


def _hmac_parts(key: "Any", pads: "Optional[tuple[bytes, bytes]]", *parts: "Buf") -> bytes:
    # HMAC-SHA256 over the concatenated parts: the interpreter's hmac module where it exists
    # (CPython; micropython-lib's on a board), else RFC 2104 over hashlib.sha256 with the pads.
    hm = _hmac_mod()
    hl = _import("hashlib")
    if hm is not None:
        h = hm.new(bytes(_bytes_arg(key, "hmac_key")), None, hl.sha256)
        for part in parts:
            h.update(part)
        return bytes(h.digest())
    ipad, opad = pads or _pads(key)
    h = hl.sha256(ipad)
    for part in parts:
        h.update(part)
    o = hl.sha256(opad)
    o.update(h.digest())
    return bytes(o.digest())


def hmac_sha256(key: "Any", data: "Any") -> bytes:
    """Return HMAC-SHA256(key, data) (RFC 2104 / RFC 4231) [E21]."""
    return _hmac_parts(key, None, _bytes_arg(data, "data"))


def _same(a: "Buf", b: "Buf") -> bool:
    # Constant-time equality of two digests: hmac.compare_digest where it exists, else every byte
    # is compared whatever the first difference (no early exit).
    hm = _hmac_mod()
    if hm is not None and hasattr(hm, "compare_digest"):
        return bool(hm.compare_digest(bytes(a), bytes(b)))
    if len(a) != len(b):
        return False
    d = 0
    for i in range(len(a)):
        d |= a[i] ^ b[i]
    return d == 0


def _tag(mv: memoryview, a: int, n: int, key: "Any", pads: "Any") -> bytes:
    # The HMAC-SHA256 tag of the envelope mv[0:n] minus its tag field at [a, a+32) [E21].
    return _hmac_parts(key, pads, mv[0:a], mv[a + 32 : n])


# ============================================================================ aes-ctr
# AES-256-CTR for confidentiality at rest [E23]: encrypt-then-MAC under one device key K. The
# tag keeps K itself (E21, unchanged); the AES key is HKDF-Expand(K, info, 32) of RFC 5869, i.e.
# HMAC(K, info | 0x01). Every tag input starts with the magic "DE" (0x44), the info with "d"
# (0x64): the two uses of K never see the same input.
_ENC_INFO = b"ddq-aes-256-ctr-v1\x01"

_CIPHERS: "list[Any]" = []  # [cryptography's ciphers module or None], probed once


def _ciphers() -> "Any":
    # The cryptography package's ciphers module (CPython), else None (MicroPython: no such module).
    if not _CIPHERS:
        c = _import("cryptography.hazmat.primitives.ciphers.modes")
        _CIPHERS.append(c.hazmat.primitives.ciphers if c is not None else None)
    return _CIPHERS[0]


class _Ctr:
    # AES in CTR mode (NIST SP 800-38A) under one key. On MicroPython cryptolib.aes in ECB mode
    # (1) encrypts a counter block (nonce | u32 big-endian count) into a keystream block, XORed
    # into the data in place; both blocks are allocated once (cryptolib's own CTR mode 6 is a
    # build option most ports lack). Elsewhere the cryptography package's CTR: the same bytes.
    def __init__(self, key: "Buf") -> None:
        self.key = bytes(key)
        if len(self.key) not in (16, 32):
            raise InvalidArgument("AES key: 16 or 32 bytes")
        cl = _import("cryptolib")
        self.ecb: "Any" = None
        self.blk, self.ks = bytearray(16), bytearray(16)
        if cl is not None and hasattr(cl, "aes"):  # feature probe: cryptolib without aes exists
            self.ecb = cl.aes(self.key, 1)
        elif _ciphers() is None:
            raise InvalidArgument(
                "encryption needs cryptolib.aes (MicroPython) or the "
                "cryptography package (CPython: pip install cryptography)"
            )

    def xor(self, nonce: "Buf", c: int, buf: "Any", i: int, n: int) -> None:
        # buf[i:n] ^= the keystream of counter blocks nonce(12) | c, c + 1, ... (big-endian u32)
        if c + (n - i + 15) // 16 > 0x100000000:
            raise InvalidArgument("AES-CTR: the 32-bit block counter would wrap")
        blk, ks = self.blk, self.ks
        for j in range(12):  # not blk[0:12] = nonce[0:12]: two slices allocate
            blk[j] = nonce[j]
        if self.ecb is None:
            cm = _ciphers()
            struct.pack_into(">I", blk, 12, c)
            e = cm.Cipher(cm.algorithms.AES(self.key), cm.modes.CTR(bytes(blk))).encryptor()
            buf[i:n] = e.update(bytes(buf[i:n]))
            return
        ecb = self.ecb
        while i < n:
            struct.pack_into(">I", blk, 12, c)
            ecb.encrypt(blk, ks)
            for j in range(min(16, n - i)):
                buf[i + j] ^= ks[j]
            i += 16
            c += 1


def aes_ctr(key: "Any", iv: "Any", data: "Any") -> bytes:
    """Return AES-CTR(key, data) from the 16-byte counter block iv, whose last 4 bytes count
    blocks big-endian (InvalidArgument if they would wrap); key 16 or 32 bytes [E23]."""
    iv = _bytes_arg(iv, "iv")
    if len(iv) != 16:
        raise InvalidArgument("iv: 16 bytes")
    b = bytearray(_bytes_arg(data, "data"))
    _Ctr(_bytes_arg(key, "key")).xor(iv, struct.unpack_from(">I", iv, 12)[0], b, 0, len(b))
    return bytes(b)


def _enc_ctr(hkey: "Any", pads: "Any") -> _Ctr:
    # The AES-256-CTR context of HMAC key K [E23]: AES key = HMAC(K, _ENC_INFO).
    return _Ctr(_hmac_parts(hkey, pads, _ENC_INFO))


def _nonce_fn(nonce: "Any") -> "Callable[[], Any]":
    # The nonce source [E23]: the caller's callable, else os.urandom; else InvalidArgument (a
    # counter or the ticks would repeat after a power cut or on another device: never guessed).
    if nonce is not None:
        if not callable(nonce):
            raise InvalidArgument("nonce: a callable returning 12 random bytes")
        return nonce  # type: ignore[no-any-return]
    u = getattr(os, "urandom", None)
    if u is None:
        raise InvalidArgument(
            "encrypt needs os.urandom, or nonce=<a callable returning 12 "
            "random bytes> (a hardware RNG)"
        )
    return lambda: u(_NONCE)


def _nonce_ok(nb: "Any", last: "Any") -> bytes:
    # 12 bytes, and not the previous nonce (catches a constant source; cannot see older repeats)
    if not isinstance(nb, (bytes, bytearray)) or len(nb) != _NONCE:
        raise InvalidArgument("nonce source must return 12 bytes")
    if last is not None and bytes(nb) == last:
        raise InvalidArgument("nonce source returned the same nonce twice")
    return bytes(nb)
