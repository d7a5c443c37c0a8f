# A stand-in for MicroPython's `network` module (WiFi) on the unix port, which has none and reaches
# the broker through the host's network: the station interface is always up. Only what mqtt_async
# (micropython-mqtt-async 0.7b4) calls. Test code: never installed on a board.
STA_IF = 0
STAT_CONNECTING = 1
STAT_GOT_IP = 3


class WLAN:
    def __init__(self, interface=STA_IF):
        self.interface = interface

    def active(self, *on):
        return True

    def isconnected(self):
        return True

    def connect(self, *a, **k):
        pass

    def disconnect(self):
        pass

    def status(self):
        return STAT_GOT_IP
