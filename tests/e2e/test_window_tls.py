"""ddq_mqtt.WindowSender (OUTBOX E25) over TLS against a real mosquitto, from CPython (pump, and
the asyncio loop, which polls the TLS socket without blocking) and from the MicroPython unix port.
EVIDENCE-OF: E25 E20
"""

import asyncio
import os
import sys
import time

import pytest

import ddq_mqtt
import ddq_outbox
import tlsbroker

pytest.importorskip("paho.mqtt.client")
if tlsbroker.missing():
    pytest.skip(tlsbroker.missing(), allow_module_level=True)

MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")
USERS = {"dev": "dev pass", "sub": "sub pass"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory):  # type: ignore[no-untyped-def]
    yield from tlsbroker.serve(tmp_path_factory.mktemp("tlsw"), USERS)


def _wait(got, prefix, n, seconds=120.0):  # type: ignore[no-untyped-def]  # (returns at n)
    end = time.monotonic() + seconds
    while time.monotonic() < end and len({p for t, p in got if t.startswith(prefix)}) < n:
        time.sleep(0.02)
    return {p for t, p in got if t.startswith(prefix)}


def test_cpython_window_over_tls(tls, tmp_path):  # type: ignore[no-untyped-def]
    b, pki, got = tls
    ctx = ddq_mqtt.tls_context(cafile=pki["ca.crt"])
    ob = ddq_outbox.Outbox(str(tmp_path / "q"))
    link = ddq_mqtt.WindowSender(
        "localhost",
        b.port,
        inflight_max=16,
        client_id=b"tlsw-cpy",
        ssl=ctx,
        user=b"dev",
        password=USERS["dev"].encode(),
    )
    try:
        for i in range(60):
            ob.put("wtls/cpy/%d" % (i % 3), b"p%d" % i)
        assert ob.pump(link, budget=30) == 30
        n = asyncio.run(ob.run(link, idle_ms=5, stop=ob.empty))
        assert n == 30 and ob.empty() and link.connects == 1 and link.timeouts == 0
    finally:
        link.close()
        ob.close()
    assert _wait(got, "wtls/cpy/", 60) == {b"p%d" % i for i in range(60)}


MP_SCRIPT = """
import sys
sys.path.insert(0, %(port)r)
import ddq_mqtt, ddq_outbox
ctx = ddq_mqtt.tls_context(cafile=%(ca)r)
ob = ddq_outbox.Outbox(%(q)r)
for i in range(40):
    ob.put("wtls/mp/%%d" %% (i %% 3), b"m%%d" %% i)
link = ddq_mqtt.WindowSender("localhost", %(tls_port)d, inflight_max=16, client_id=b"tlsw-mp",
                             ssl=ctx, user=b"dev", password=%(pw)r)
n = ob.pump(link, budget=40)
print("sent", n, "connects", link.connects, "timeouts", link.timeouts)
link.close()
ob.close()
"""


def test_micropython_window_over_tls(tls, tmp_path):  # type: ignore[no-untyped-def]
    if not os.path.exists(MICROPYTHON):
        pytest.skip("no MicroPython unix port in the venv")
    b, pki, got = tls
    out = tlsbroker.run_micropython(
        tmp_path / "mp_wtls.py",
        MP_SCRIPT,
        ca=pki["ca.crt"],
        q=str(tmp_path / "mq"),
        tls_port=b.port,
        pw=USERS["dev"].encode(),
    )
    assert "sent 40 connects 1 timeouts 0" in out, out
    assert _wait(got, "wtls/mp/", 40) == {b"m%d" % i for i in range(40)}
