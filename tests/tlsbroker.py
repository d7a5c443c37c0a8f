"""CPython-only test helper: certificates made with the openssl CLI, and a mosquitto with TLS
listeners and a password file, on loopback ports, ended by pid. Used by tests/host and tests/e2e.

    pki = make_pki(tmp)            # CA, server cert (localhost, 127.0.0.1), client cert, other CA
    with TLSBroker(tmp, pki, users={"ddq": "pw"}) as b:
        b.port                      # TLS, password required
        b.mtls_port                 # TLS, password and a client certificate required

Not part of the shared suite (the name does not start with test_).
"""

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time

OPENSSL = shutil.which("openssl")
MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None
)
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")

_EXT = """\
[server]
subjectAltName = DNS:localhost, IP:127.0.0.1
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
[elsewhere]
subjectAltName = DNS:broker.example
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
[client]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
"""


def missing():
    """Why the TLS tests cannot run here, or None. mosquitto is installed first where we can
    (tests/brokers.py: apt-get when root); the embedded amqtt cannot stand in: these tests need
    TLS listeners that check a password file and require client certificates."""
    global MOSQUITTO, MOSQUITTO_PASSWD
    if OPENSSL is None:
        return "openssl CLI not found (apt-get install openssl)"
    if MOSQUITTO is None and os.environ.get("DDQ_TEST_BROKER") != "amqtt":
        import brokers

        MOSQUITTO = brokers.ensure_mosquitto()
        MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")
        failed = brokers.install_failure()
        if MOSQUITTO is None and failed:
            return "mosquitto is missing and apt-get could not install it: " + failed
    if MOSQUITTO is None:
        if os.environ.get("DDQ_TEST_BROKER") == "amqtt":
            return (
                "DDQ_TEST_BROKER=amqtt: the TLS tests need mosquitto's TLS listeners with a "
                "password file and client certificates, which the embedded amqtt lacks"
            )
        return (
            "mosquitto is not installed and this run cannot install it (not root, or no "
            "apt-get): the TLS tests need its TLS listeners with a password file and client "
            "certificates, which the embedded amqtt broker lacks (apt-get install mosquitto)"
        )
    return None


def require():
    """For a module's autouse fixture: skip when the TLS tests cannot run here for a reason the
    run cannot fix; fail (not skip) when mosquitto was installable and the install failed, so
    that `make test` cannot report the phase ok with these tests skipped (a test skips only
    for what a user cannot fix)."""
    import pytest

    why = missing()
    if why is None:
        return
    import brokers

    if brokers.install_failure() or (
        OPENSSL is None and os.geteuid() == 0 and shutil.which("apt-get")
    ):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def _ssl(*args, cwd):
    r = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stderr))


def _ca(d, name):
    _ssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", name + ".key", "-out", name + ".crt", "-days", "2", "-subj", "/CN=" + name,
        cwd=d,
    )  # fmt: skip


def _leaf(d, name, ca, ext, cn):
    _ssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn,
        cwd=d,
    )  # fmt: skip
    _ssl(
        "x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
        "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", "ext.cnf",
        "-extensions", ext,
        cwd=d,
    )  # fmt: skip


def make_pki(d):
    """Write into directory d: ca (the broker's CA), other-ca (a CA that signed nothing the
    broker uses), server (CN localhost; SAN localhost and 127.0.0.1), elsewhere (signed by ca
    for broker.example only), client (signed by ca);
    PEM .crt/.key and DER .der copies of every certificate and key. Returns {name: path}."""
    d = str(d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write(_EXT)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "server", "ca", "server", "localhost")
    _leaf(d, "elsewhere", "ca", "elsewhere", "broker.example")
    _leaf(d, "client", "ca", "client", "ddq-client")
    out = {}
    for n in ("ca", "other-ca", "server", "elsewhere", "client"):
        out[n + ".crt"] = os.path.join(d, n + ".crt")
        out[n + ".key"] = os.path.join(d, n + ".key")
        _ssl("x509", "-in", n + ".crt", "-outform", "DER", "-out", n + ".der", cwd=d)
        _ssl("pkey", "-in", n + ".key", "-outform", "DER", "-out", n + ".key.der", cwd=d)
        out[n + ".der"] = os.path.join(d, n + ".der")
        out[n + ".key.der"] = os.path.join(d, n + ".key.der")
    for p in os.listdir(d):
        os.chmod(os.path.join(d, p), 0o600)
    return out


def password_line(user, password):
    """A mosquitto password-file line in the salted SHA-512 format ($6$) every mosquitto 1.x/2.x
    reads; used only where mosquitto_passwd is missing."""
    salt = os.urandom(12)
    h = hashlib.sha512(password.encode() + salt).digest()
    return "%s:$6$%s$%s\n" % (user, base64.b64encode(salt).decode(), base64.b64encode(h).decode())


def write_password_file(path, users):
    path = str(path)
    with open(path, "w") as f:
        if MOSQUITTO_PASSWD is None:
            f.write("".join(password_line(u, p) for u, p in users.items()))
    os.chmod(path, 0o600)
    if MOSQUITTO_PASSWD is not None:
        for u, p in users.items():
            r = subprocess.run([MOSQUITTO_PASSWD, "-b", path, u, p], capture_output=True,
                               text=True, timeout=30)  # fmt: skip
            if r.returncode != 0:
                raise RuntimeError("mosquitto_passwd: %s" % r.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TLSBroker:
    """mosquitto with three TLS listeners on 127.0.0.1: .port (server certificate, password),
    .mtls_port (also require_certificate) and .elsewhere_port (a certificate for broker.example
    only: a wrong name for 127.0.0.1 and localhost); anonymous clients refused. Started on
    enter, killed by pid on exit."""

    def __init__(self, d, pki, users):
        self.dir = str(d)
        self.pki = pki
        self.port, self.mtls_port, self.elsewhere_port = free_port(), free_port(), free_port()
        self.pwfile = os.path.join(self.dir, "passwd")
        write_password_file(self.pwfile, users)
        tls = "cafile %s\ncertfile %s\nkeyfile %s\n" % (
            pki["ca.crt"],
            pki["server.crt"],
            pki["server.key"],
        )
        other = tls.replace(pki["server.crt"], pki["elsewhere.crt"]).replace(
            pki["server.key"], pki["elsewhere.key"]
        )
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        self.logfile = os.path.join(self.dir, "mosquitto.log")
        user = "user root\n" if os.getuid() == 0 else ""  # else mosquitto drops to "mosquitto"
        with open(self.conf, "w") as f:
            f.write(
                "per_listener_settings false\nallow_anonymous false\npassword_file %s\n"
                "persistence false\nlog_dest file %s\n%s"
                "listener %d 127.0.0.1\n%s"
                "listener %d 127.0.0.1\n%srequire_certificate true\n"
                "listener %d 127.0.0.1\n%s"
                % (
                    self.pwfile,
                    self.logfile,
                    user,
                    self.port,
                    tls,
                    self.mtls_port,
                    tls,
                    self.elsewhere_port,
                    other,
                )  # fmt: skip
            )
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", self.conf],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + 10
        for port in (self.port, self.mtls_port, self.elsewhere_port):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if self.proc.poll() is not None or time.monotonic() > end:
                        self.__exit__()
                        raise RuntimeError("mosquitto did not start: " + self.log()) from None
                    time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def log(self):
        try:
            with open(self.logfile) as f:
                return f.read()[-3000:]
        except OSError:
            return ""


def subscriber_tls(port, pki, user, password, client_id="ddq-tls-sub"):
    """A paho QoS 1 subscriber to '#' over TLS (CA-verified) with a password: returns a started
    client and its list of (topic, payload); call .disconnect() and .loop_stop() when done."""
    import ssl
    import threading

    import paho.mqtt.client as mqtt

    got = []
    ready = threading.Event()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    c.tls_set_context(ctx)
    c.username_pw_set(user, password)
    c.on_message = lambda cl, u, m: got.append((m.topic, bytes(m.payload)))
    c.on_subscribe = lambda *a: ready.set()
    c.on_connect = lambda cl, u, f, rc, p=None: cl.subscribe("#", qos=1)
    c.connect("localhost", port)
    c.loop_start()
    if not ready.wait(10):
        c.loop_stop()
        raise RuntimeError("TLS subscriber: subscription not acknowledged")
    return c, got


def run_micropython(script, template, **values):
    """Write template % values (plus "port": the repository's port/) to script, run it on the
    MicroPython unix port of the venv (60 s at most); it must exit 0. Returns its stdout."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    values["port"] = os.path.join(repo, "port")
    script.write_text(template % values)
    mp = os.path.join(os.path.dirname(sys.executable), "micropython")
    r = subprocess.run([mp, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def serve(d, users, sub="sub"):
    """A generator for a module fixture: the PKI made in d, a TLSBroker with users and a
    subscriber to '#' logged in as `sub`; yields (broker, pki, received) and ends them."""
    pki = make_pki(d)
    with TLSBroker(d, pki, users) as b:
        c, got = subscriber_tls(b.port, pki, sub, users[sub])
        try:
            yield b, pki, got
        finally:
            c.disconnect()
            c.loop_stop()
