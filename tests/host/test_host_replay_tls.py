"""`ddq replay` over mqtts:// against a mosquitto with TLS listeners and a password file, with
certificates the test makes (tests/tlsbroker.py): delivery with --ca-file and a password from a
file or the environment; a wrong CA, a wrong host name, a wrong password, a missing client
certificate each fail with one clear line, before the queue is opened (nothing claimed, acked or
lost); a password is never printed back (URL redacted, the URL-password warning)."""

import json
import os
import time

import paho.mqtt.client  # noqa: F401  (make venv installs it: never a reason to skip)
import pytest

import tlsbroker
from conftest import ddq, one_line_error, tree_hash
from ddqhost import locate, qdir


@pytest.fixture(scope="module", autouse=True)
def _tls_ready():
    # skip for what this run cannot fix; fail when mosquitto was installable and was not
    tlsbroker.require()


OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 64, "max_segments": 8}
PASSWORD = "Tr0ub4dor&3 horse"
USERS = {"gw": PASSWORD, "sub": "sub secret"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    pki = tlsbroker.make_pki(d)
    with tlsbroker.TLSBroker(d, pki, USERS) as b:
        sub, got = tlsbroker.subscriber_tls(b.port, pki, "sub", USERS["sub"])
        try:
            yield b, pki, got
        finally:
            sub.disconnect()
            sub.loop_stop()


def _queue(path, n, topic):
    ddqmod = locate.load_ddq()
    import ddq_outbox

    q = ddqmod.Queue(str(path), **OPTS)
    try:
        for i in range(n):
            q.enqueue(
                ddq_outbox.encode_envelope(topic, b"m%d" % i, enqueued_ms=int(time.time() * 1000))
            )
    finally:
        q.close()
    (path / qdir.OPTIONS_FILE).write_text(json.dumps(OPTS))
    return path


def _pwfile(tmp_path, text=PASSWORD + "\n", mode=0o600):
    p = tmp_path / "pw"
    p.write_text(text)
    os.chmod(p, mode)
    return p


def _wait(got, prefix, n, seconds=120.0):  # (a bound for a broken run: returns at n)
    end = time.monotonic() + seconds
    while time.monotonic() < end and sum(1 for t, _ in got if t.startswith(prefix)) < n:
        time.sleep(0.02)
    return sorted(p for t, p in got if t.startswith(prefix))


def _pending(q):
    items = json.loads(ddq("inspect", q, "--json").stdout)["items"]
    return [it["seq"] for it in items if it["state"] == "available"]


def _no_secret(r):
    assert PASSWORD not in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert "Tr0ub4dor" not in r.stdout + r.stderr  # not even a prefix of it


def test_replay_over_tls_with_ca_and_password_file(tls, tmp_path):
    b, pki, got = tls
    q = _queue(tmp_path / "q", 5, "tls/a")
    url = "mqtts://gw@localhost:%d/site" % b.port
    r = ddq("replay", q, "--to", url, "--ca-file", pki["ca.crt"],
            "--password-file", _pwfile(tmp_path), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    _no_secret(r)
    assert r.stderr == "", r.stderr  # a private file, no URL password: no warning
    res = json.loads(r.stdout)
    assert (res["sent"], res["failed"], res["tls"]) == (5, 0, True), res
    assert _wait(got, "site/tls/a", 5) == [b"m%d" % i for i in range(5)]
    assert _pending(q) == []
    assert ddq("verify", q).returncode == 0


def test_password_from_environment_and_username_option(tls, tmp_path, monkeypatch):
    b, pki, got = tls
    q = _queue(tmp_path / "q", 2, "tls/env")
    env_name = "DDQ_TEST_MQTT_PW"
    monkeypatch.setenv(env_name, PASSWORD)  # the ddq process inherits it (cli_env copies)
    r = ddq("replay", q, "--to", "mqtts://127.0.0.1:%d/e" % b.port, "--ca-file", pki["ca.crt"],
            "--username", "gw", "--password-env", env_name)  # fmt: skip
    monkeypatch.delenv(env_name)
    assert r.returncode == 0, r.stderr
    _no_secret(r)
    assert _wait(got, "e/tls/env", 2) == [b"m0", b"m1"]
    r = ddq("replay", q, "--to", "mqtts://127.0.0.1:%d/e" % b.port, "--ca-file", pki["ca.crt"],
            "--username", "gw", "--password-env", env_name)  # fmt: skip
    assert "environment variable %s is not set" % env_name in one_line_error(r, 1)


@pytest.mark.parametrize(
    "case", ["wrong CA", "wrong host name", "wrong password", "no client cert"]
)
def test_refusals_are_one_clear_line_and_leave_the_queue_untouched(tls, tmp_path, case):
    b, pki, got = tls
    q = _queue(tmp_path / "q", 3, "tls/refused")
    before = tree_hash(q)
    port, ca, pwfile = b.port, pki["ca.crt"], _pwfile(tmp_path)
    if case == "wrong CA":
        ca = pki["other-ca.crt"]
    elif case == "wrong host name":
        port = b.elsewhere_port  # its certificate names broker.example only
    elif case == "wrong password":
        pwfile = _pwfile(tmp_path, "not the password\n")
    else:
        port = b.mtls_port
    r = ddq("replay", q, "--to", "mqtts://gw@127.0.0.1:%d/x" % port, "--ca-file", ca,
            "--password-file", pwfile, "--timeout", "5")  # fmt: skip
    line = one_line_error(r, 1)
    _no_secret(r)
    assert "not the password" not in line
    print(case, "->", line)
    want = {
        "wrong CA": "certificate refused",
        "wrong host name": "mismatch, certificate is not valid for '127.0.0.1'. (the host in",
        "wrong password": "refused the connection: Not authorized",
        "no client cert": "client certificate",
    }[case]
    assert want in line, line
    assert "Traceback" not in r.stderr
    assert tree_hash(q) == before  # not opened: nothing claimed, acked or lost
    assert len(_pending(q)) == 3
    assert _wait(got, "x/", 1, 0.2) == []


def test_client_certificate(tls, tmp_path):
    b, pki, got = tls
    q = _queue(tmp_path / "q", 2, "tls/mtls")
    pw = _pwfile(tmp_path, PASSWORD + "\r\nthe first line only\n")
    r = ddq("replay", q, "--to", "mqtts://gw@localhost:%d/c" % b.mtls_port, "--ca-file",
            pki["ca.crt"], "--cert", pki["client.crt"], "--key", pki["client.key"],
            "--password-file", pw)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert _wait(got, "c/tls/mtls", 2) == [b"m0", b"m1"]


def test_password_in_the_url_works_with_a_warning_and_is_never_printed(tls, tmp_path):
    b, pki, got = tls
    q = _queue(tmp_path / "q", 1, "tls/url")
    quoted = PASSWORD.replace("&", "%26").replace(" ", "%20")
    url = "mqtts://gw:%s@localhost:%d/u" % (quoted, b.port)
    r = ddq("replay", q, "--to", url, "--ca-file", pki["ca.crt"], "--json")
    assert r.returncode == 0, r.stderr
    assert "visible to other users in the process list" in r.stderr
    assert quoted not in r.stdout + r.stderr
    _no_secret(r)
    assert _wait(got, "u/tls/url", 1) == [b"m0"]
    # Errors that show the URL show it redacted.
    bad = [
        "mqtts://gw:%s@localhost:notaport/u" % quoted,
        "mqttx://gw:%s@localhost:1/u" % quoted,
        "mqtts://gw:%s@[::1/u" % quoted,
        "mqtts://gw:pa/ss@localhost:1/u",  # an unquoted / in the password
    ]
    for u in bad:
        r = ddq("replay", q, "--to", u, "--dry-run")
        line = r.stderr.strip().splitlines()[-1]
        assert r.returncode == 1 and line.startswith("ddq: "), r.stderr
        assert quoted not in r.stderr and "pa/ss" not in r.stderr and "gw:***@" in line, line
    r = ddq("replay", q, "--to", "mqtts://gw:wrong%%20one@localhost:%d/u" % b.port,
            "--ca-file", pki["ca.crt"])  # fmt: skip
    assert r.returncode == 1 and "Not authorized" in r.stderr and "wrong" not in r.stderr


def test_option_checks(tls, tmp_path):
    b, pki, got = tls
    q = _queue(tmp_path / "q", 1, "tls/opt")
    plain = "mqtt://gw@127.0.0.1:1/x"
    line = one_line_error(ddq("replay", q, "--to", plain, "--ca-file", pki["ca.crt"]), 1)
    assert "need an mqtts:// URL" in line
    tls_url = "mqtts://127.0.0.1:%d/x" % b.port
    line = one_line_error(ddq("replay", q, "--to", tls_url, "--password-env", "HOME"), 1)
    assert "needs a user name" in line
    line = one_line_error(ddq("replay", q, "--to", tls_url, "--ca-file", tmp_path / "none"), 1)
    assert "--ca-file" in line and "No such file" in line
    r = ddq("replay", q, "--to", "mqtts://gw@127.0.0.1:%d/x" % b.port, "--ca-file",
            pki["ca.crt"], "--password-file", _pwfile(tmp_path, mode=0o644))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "can be read by other users (mode 0644)" in r.stderr
    _no_secret(r)
