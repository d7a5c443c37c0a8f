"""The message-layer envelope as the host tools see it: the device's HMAC key, and what a
payload is (encrypted? signed? authentic?). The envelope is decoded by port/ddq_outbox.py only
(SPEC §13.1, E21, E23): nothing here reads its bytes.
"""

import os
from typing import Any

from . import locate
from .errors import HostError

HMAC_KEY_ENV = "DDQ_HMAC_KEY"  # the key in hex, when no --hmac-key-file is given
# A key no device has: decoding with it tells a tagged envelope (tag mismatch) from an untagged
# one (no tag), without the key, through ddq_outbox's own checks.
_PROBE_KEY = bytes(16)


class HmacKeyError(HostError):
    """The HMAC key cannot be used (never shows the key)."""


def load_hmac_key(path: str | None, queue_dir: str | None = None) -> bytes | None:
    """The device's HMAC key (SPEC E21/OUTBOX E22): hex digits in the file `path` (whitespace
    ignored, e.g. `openssl rand -hex 32 > device.key`), else in $DDQ_HMAC_KEY, else None (no
    check). A key file inside the queue directory is refused: the key must never travel with the
    queue. The key is never echoed."""
    if path is not None:
        if queue_dir is not None:
            d, f = os.path.realpath(queue_dir), os.path.realpath(path)
            if os.path.commonpath([d, f]) == d:
                raise HmacKeyError(
                    "%s: the HMAC key file must not be inside the queue directory" % path
                )
        try:
            with open(path, "rb") as fh:
                text = fh.read(4096).decode("ascii", "replace")
        except OSError as e:
            raise HmacKeyError(
                "%s: cannot read the HMAC key file (%s)" % (path, e.strerror or e)
            ) from None
        where = path
    elif os.environ.get(HMAC_KEY_ENV):
        text, where = os.environ[HMAC_KEY_ENV], "$" + HMAC_KEY_ENV
    else:
        return None
    try:
        key = bytes.fromhex("".join(text.split()))
    except ValueError:
        key = b""
    if len(key) < 16:
        raise HmacKeyError("%s: the HMAC key must be at least 16 bytes written in hex" % where)
    return key


def decode(payload: bytes, hmac_key: bytes | None = None) -> Any:
    """ddq_outbox.decode_envelope(payload) (the message layer's Message), or None when the
    payload is not an envelope (raw bytes enqueued with Queue.enqueue). With hmac_key an
    envelope with a valid tag is decoded verified (an encrypted payload decrypted, SPEC E23);
    one without is decoded unchecked, an encrypted payload left as ciphertext."""
    ob = locate.load_outbox()
    if hmac_key is not None:
        try:
            return ob.decode_envelope(payload, hmac_key=hmac_key)
        except ob.Unauthenticated:
            pass  # shown unchecked; auth_status says why
        except Exception:
            return None
    try:
        return ob.decode_envelope(payload)
    except Exception:  # BadEnvelope, InvalidArgument: not an envelope
        return None


def _signed(payload: bytes) -> bool:
    """True for an envelope that carries an HMAC tag (SPEC E21), told without the key: with a
    key no device has, ddq_outbox finds the tag wrong rather than missing."""
    ob = locate.load_outbox()
    try:
        ob.decode_envelope(payload, verify=False, hmac_key=_PROBE_KEY)
    except ob.Unauthenticated as e:
        return not str(e).endswith("no HMAC tag")
    except Exception:  # BadEnvelope, InvalidArgument: not an envelope
        return False
    return True  # (the probe key verified it: a tag all the same)


class EncryptedError(HostError):
    """Encrypted messages that cannot be decrypted here: no key, or no AES (never shows a key)."""


def is_encrypted(payload: bytes) -> bool:
    """True for an envelope whose payload is encrypted (SPEC E23), as ddq_outbox decodes it."""
    m = decode(payload)
    return m is not None and bool(m.encrypted)


def check_decryptable(n_encrypted: int, hmac_key: bytes | None, what: str = "message") -> None:
    """Raise EncryptedError when n_encrypted > 0 encrypted messages cannot be decrypted here:
    without the key, or without the cryptography package (CPython's AES)."""
    if not n_encrypted:
        return
    are = "s are" if n_encrypted > 1 else " is"
    if hmac_key is None:
        raise EncryptedError(
            "%d %s%s encrypted (SPEC E23): give the device key with --hmac-key-file F or $%s"
            % (n_encrypted, what, are, HMAC_KEY_ENV)
        )
    try:
        locate.load_seal().aes_ctr(bytes(32), bytes(16), b"")
    except locate.load_ddq().InvalidArgument:
        raise EncryptedError(
            "%d %s%s encrypted: decrypting needs the 'cryptography' package "
            "(pip install cryptography)" % (n_encrypted, what, are)
        ) from None


def auth_status(payload: bytes, hmac_key: bytes | None) -> str:
    """ "ok" (a valid tag), "unauthenticated: <why>" (with a key: no valid tag, or not an
    envelope), "unchecked" (a tag, no key given) or "unsigned" (no tag, no key)."""
    ob = locate.load_outbox()
    if hmac_key is None:
        return "unchecked" if _signed(payload) else "unsigned"
    check_decryptable(int(is_encrypted(payload)), hmac_key)  # no AES: an error, not a verdict
    try:
        ob.decode_envelope(payload, hmac_key=hmac_key)
    except ob.Unauthenticated as e:
        return "unauthenticated: %s" % e
    except Exception as e:  # BadEnvelope or not bytes: cannot carry a valid tag
        return "unauthenticated: not an envelope (%s)" % e
    return "ok"
