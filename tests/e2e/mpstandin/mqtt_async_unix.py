# mqtt_async (micropython-mqtt-async 0.7b4) on the MicroPython unix port, for the tests. What the
# unix port lacks is stood in for here, and nothing else:
# - `network` (WiFi): network.py beside this file, a station that is always up;
# - machine.unique_id (mqtt_async's default client id, read at import): added to a copy of
#   `machine` in sys.modules;
# - its getaddrinfo gives a raw sockaddr (bytes), which asyncio.open_connection cannot take:
#   Client looks the broker up as (host, port), which is what boards' getaddrinfo gives;
# - no `logging`: mqtt_async's fallback logger raises on its own warning("...", e) calls (a
#   TypeError that kills its reconnect task), so a quiet one replaces it.
# Test code: never installed on a board.
import sys

import machine as _machine


class _Machine:
    pass


_m = _Machine()
for _k in dir(_machine):
    if not _k.startswith("__"):
        setattr(_m, _k, getattr(_machine, _k))
_m.unique_id = lambda: b"ddq-unix"
sys.modules["machine"] = _m

import mqtt_async  # noqa: E402

config = mqtt_async.config


class Client(mqtt_async.MQTTClient):
    def _dns_lookup(self):
        self._addr = (self._c.server, self._c.port)


class _Quiet:
    def debug(self, *a):
        pass

    info = warning = debug


mqtt_async.log = _Quiet()
