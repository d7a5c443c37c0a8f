"""tests/brokers.py's choice of broker, without touching the machine: mosquitto when present; when
missing, demo/ensure_broker.sh once (it installs mosquitto with apt-get when root); else the
embedded amqtt. DDQ_TEST_BROKER forces one."""

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

    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: found[0] if found else None)
    monkeypatch.setattr(brokers.subprocess, "run", run)
    assert brokers.kind() == "mosquitto" and brokers.kind() == "mosquitto"
    assert len(calls) == 1 and calls[0][1].endswith("demo/ensure_broker.sh")


def test_not_installable_falls_back_to_the_embedded_broker(monkeypatch):
    _no_env(monkeypatch)
    calls = []
    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: None)
    monkeypatch.setattr(brokers.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    assert brokers.kind() == "amqtt" and brokers.kind() == "amqtt" and len(calls) == 1


def test_forced(monkeypatch):
    _no_env(monkeypatch)
    monkeypatch.setattr(brokers.demo, "find_mosquitto", lambda: "/usr/sbin/mosquitto")
    monkeypatch.setenv("DDQ_TEST_BROKER", "amqtt")
    assert brokers.kind() == "amqtt" and brokers.ensure_mosquitto() is None
    monkeypatch.setenv("DDQ_TEST_BROKER", "mosquitto")
    assert brokers.kind() == "mosquitto"
