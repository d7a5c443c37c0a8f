"""ddq_tls: TLS contexts for ddq_mqtt.Sender (ssl=...), made with the port's own ssl module [E20].

Loaded at its first use, never by a board that publishes in the clear (DESIGN §4.1):
Sender(ssl=True) imports it, and ddq_mqtt.tls_context is this module's (ddq_mqtt's _PARTS).

    import ddq_mqtt
    link = ddq_mqtt.Sender("broker.local", ssl=ddq_mqtt.tls_context(cafile="ca.der"))

Behaviour: docs/OUTBOX.md §13.3, TLS [E20].
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

from ddq_mqtt import const

TYPE_CHECKING = const(0)  # folded: MicroPython compiles no byte of its blocks (ddq.py)
if TYPE_CHECKING:
    from typing import Any, Optional


# ============================================================================ TLS [E20]
def _der(data: bytes) -> "list[bytes]":
    # PEM -> DER blocks. The PyPI unix port's mbedtls parses DER only (a PEM CA or key is
    # "invalid cert"/"invalid key"), and one load takes one DER certificate, so a PEM bundle is
    # loaded block by block. Bytes that are not PEM are returned as one DER block.
    import binascii

    if not data.lstrip().startswith(b"-----BEGIN"):
        return [data]
    out = []
    for block in data.split(b"-----BEGIN")[1:]:
        end = block.find(b"-----END")
        body = block[block.find(b"\n") + 1 : end if end >= 0 else len(block)]
        if b":" in body:
            raise ValueError("encrypted PEM is not supported: decrypt the key first")
        out.append(binascii.a2b_base64(body.replace(b"\r", b"").replace(b"\n", b"")))
    return out


def _file(path: str) -> bytes:
    with open(path, "rb") as f:
        b: bytes = f.read()
    return b


def tls_context(
    cafile: "Optional[str]" = None,
    cadata: "Optional[bytes]" = None,
    certfile: "Optional[str]" = None,
    keyfile: "Optional[str]" = None,
    verify: bool = True,
) -> "Any":
    """Return a client TLS context for Sender(ssl=...), made with the port's ssl module [E20].

    verify=True (the default): the handshake fails unless the broker's certificate chains to a
    CA given here (cafile: a PEM or DER file; cadata: its bytes) and names the host the Sender
    connects to (or its server_hostname). CPython uses the system's CAs when none is given;
    MicroPython has no CA store, so one is required (ValueError). verify=False encrypts
    without authenticating the broker (anyone on the path can read and answer): tests only.
    certfile/keyfile: a client certificate and its unencrypted key (PEM or DER; CPython reads
    the key from certfile when keyfile is None). Raises ImportError where the port has no ssl.
    """
    m: "Any" = None
    for name in ("ssl", "ussl"):  # ussl: MicroPython before 1.23
        try:
            m = __import__(name)
            break
        except ImportError:
            pass
    if m is None:
        raise ImportError("ddq_mqtt: TLS needs the ssl module; this port has none")
    if verify and cafile is None and cadata is None and not hasattr(m, "create_default_context"):
        raise ValueError("ddq_mqtt: verify=True needs cafile or cadata (no CA store here)")
    if not hasattr(m, "SSLContext"):
        return _WrapTLS(m, cafile, cadata, certfile, keyfile, verify)
    ctx = m.SSLContext(m.PROTOCOL_TLS_CLIENT)
    if hasattr(ctx, "check_hostname"):
        # CPython: PROTOCOL_TLS_CLIENT checks the chain and the host name by default.
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = m.CERT_NONE
        elif cafile is not None or cadata is not None:
            # cadata: CPython reads PEM from a str, DER from bytes.
            pem = cadata.decode() if cadata and cadata.lstrip().startswith(b"-----") else None
            ctx.load_verify_locations(cafile=cafile, cadata=pem or cadata)
        else:
            ctx.load_default_certs()
        if certfile is not None:
            ctx.load_cert_chain(certfile, keyfile)
        return ctx
    # MicroPython (mbedtls): the default is CERT_NONE, which validates nothing; CERT_REQUIRED
    # checks the chain and the server_hostname given to wrap_socket.
    ctx.verify_mode = m.CERT_REQUIRED if verify else m.CERT_NONE
    if verify:
        for der in _der(_file(cafile) if cafile is not None else cadata or b""):
            ctx.load_verify_locations(cadata=der)
    if certfile is not None:
        ctx.load_cert_chain(_der(_file(certfile))[0], _der(_file(keyfile or certfile))[-1])
    return ctx


class _WrapTLS:
    # A context-like adapter for ports with only ssl.wrap_socket (MicroPython before 1.23).
    def __init__(
        self,
        m: "Any",
        cafile: "Optional[str]",
        cadata: "Optional[bytes]",
        certfile: "Optional[str]",
        keyfile: "Optional[str]",
        verify: bool,
    ) -> None:
        kw: "dict[str, Any]" = {}
        if verify:
            if not hasattr(m, "CERT_REQUIRED"):  # axTLS ports: no certificate checks at all
                raise ValueError("ddq_mqtt: this port's ssl cannot verify certificates")
            kw["cert_reqs"] = m.CERT_REQUIRED
            kw["cadata"] = _der(_file(cafile) if cafile is not None else cadata or b"")[0]
        if certfile is not None:
            kw["cert"] = _der(_file(certfile))[0]
            kw["key"] = _der(_file(keyfile or certfile))[-1]
        self.m, self.kw = m, kw

    def wrap_socket(self, sock: "Any", server_hostname: "Optional[str]" = None) -> "Any":
        return self.m.wrap_socket(sock, server_hostname=server_hostname, **self.kw)
