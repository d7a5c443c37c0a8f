"""tests/brokers.py's choice of broker, without touching the machine: mosquitto when present; when
missing, demo/ensure_broker.sh once (it installs mosquitto with apt-get when root); else the
embedded amqtt. DDQ_TEST_BROKER forces one."""

import os
import subprocess

import pytest

import brokers


def _no_env(monkeypatch):
    monkeypatch.delenv("DDQ_TEST_BROKER", raising=False)
    monkeypatch.setattr(brokers, "_tried_install", [])


def test_missing_mosquitto_is_installed_once_then_used(monkeypatch):
    _no_env(monkeypatch)
    found = []
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        found.append("/usr/sbin/mosquitto")  # what apt-get would have done
        return subprocess.CompletedProcess(cmd, 0, "")

    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: found[0] if found else None)
    monkeypatch.setattr(brokers.subprocess, "run", run)
    assert brokers.kind() == "mosquitto" and brokers.kind() == "mosquitto"
    assert len(calls) == 1 and calls[0][1].endswith("demo/ensure_broker.sh")


def test_not_installable_falls_back_to_the_embedded_broker(monkeypatch):
    _no_env(monkeypatch)
    calls = []
    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: None)
    monkeypatch.setattr(
        brokers.subprocess,
        "run",
        lambda cmd, **kw: (
            calls.append(cmd)
            or subprocess.CompletedProcess(cmd, 2, "pytest: cannot install mosquitto")
        ),
    )
    assert brokers.kind() == "amqtt" and brokers.kind() == "amqtt" and len(calls) == 1
    assert brokers.install_failure() is None  # not installable here: the TLS tests may skip


def test_a_failed_install_is_reported_not_taken_for_not_installable(monkeypatch):
    # Root with apt-get, and apt-get failed (a held dpkg lock past the wait, a broken mirror):
    # the TLS tests fail with apt's own error instead of skipping as "not installable" (a test
    # skips only for what a user cannot fix).
    import tlsbroker

    _no_env(monkeypatch)
    out = (
        "pytest: mosquitto is missing: apt-get install mosquitto\n"
        "pytest: apt-get install mosquitto failed:\n"
        "  apt-get: E: Unable to locate package mosquitto"
    )
    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: None)
    monkeypatch.setattr(
        brokers.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, out)
    )
    monkeypatch.setattr(tlsbroker, "MOSQUITTO", None)
    assert brokers.kind() == "amqtt"
    assert "Unable to locate package mosquitto" in brokers.install_failure()
    why = tlsbroker.missing()
    assert why.startswith("mosquitto is missing and apt-get could not install it: ")
    assert "Unable to locate package" in why and "not root" not in why
    with pytest.raises(pytest.fail.Exception):
        tlsbroker.require()


def test_apt_install_waits_for_the_dpkg_lock_and_shows_apts_error(tmp_path):
    # tools/apt_install.sh against a stand-in apt-get on PATH: the first two calls find the lock
    # held, the third fails for another reason; the script waits (not fails) on the lock, then
    # prints apt's own error and exits 1.
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    count = tmp_path / "count"
    (bin_ / "apt-get").write_text(
        "#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); n=$((n + 1)); echo $n > %s\n"
        "if [ $n -le 2 ]; then echo 'E: Could not get lock /var/lib/dpkg/lock-frontend. It is "
        "held by process 4242 (apt-get)' >&2; exit 100; fi\n"
        "echo 'E: Unable to locate package nosuchpkg' >&2; exit 100\n" % (count, count)
    )
    (bin_ / "apt-get").chmod(0o755)
    (bin_ / "sleep").write_text("#!/bin/sh\nexit 0\n")  # no real waiting in a test
    (bin_ / "sleep").chmod(0o755)
    (bin_ / "id").write_text("#!/bin/sh\necho 0\n")  # root, as far as the script can tell
    (bin_ / "id").chmod(0o755)
    script = os.path.join(brokers.REPO, "tools", "apt_install.sh")
    r = subprocess.run(
        ["bash", script, "t", "nosuchpkg"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH="%s:%s" % (bin_, os.environ["PATH"])),
        timeout=60,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.count("the dpkg lock is held by another process; waiting") == 2, r.stdout
    assert "apt-get: E: Unable to locate package nosuchpkg" in r.stdout, r.stdout


def test_forced(monkeypatch):
    _no_env(monkeypatch)
    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: "/usr/sbin/mosquitto")
    monkeypatch.setenv("DDQ_TEST_BROKER", "amqtt")
    assert brokers.kind() == "amqtt" and brokers.ensure_mosquitto() is None
    monkeypatch.setenv("DDQ_TEST_BROKER", "mosquitto")
    assert brokers.kind() == "mosquitto"
