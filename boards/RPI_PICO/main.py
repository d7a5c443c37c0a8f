# Example outbox app for RPI_PICO (Raspberry Pi Pico (RP2040): 2 MB flash, about 1.4 MB LittleFS,
# 264 KB RAM)
#
# This board's settings and sensor; the app itself is ddq_app (port/ddq_app.py, the same for every
# board with a network): join the network (WiFi with backoff; skipped where the port has no
# `network`), read the sensor every PERIOD_MS, put each reading into a durable Outbox with this
# board's queue options, and deliver with the message layer's own loop (Outbox.pump) through
# ddq_mqtt.WindowSender, WINDOW publishes in flight, so a backlog drains at link speed
# (LINK = "umqtt": through umqtt.simple, one publish per round trip). A reading is acked only after
# the broker's PUBACK; while the broker or the network is away, the app reconnects with backoff,
# claims nothing and new readings keep being queued; a failed send is retried with a growing,
# jittered delay. A reading is on flash once put() returned; one in flight at a power cut is sent
# again when its lease ends (LEASE_MS). A reading the far end refuses for good (raise
# ddq_outbox.Rejected in a send), or that fails MAX_ATTEMPTS sends (8: one whose send resets the
# board too), is kept as a dead letter: `ddq pull :outbox out && ddq inspect out` shows it.
#
# On the board: ddq, ddq_outbox, ddq_mqtt, ddq_app (`ddq flash --example-app` installs them and
# this file as main.py); with LINK = "umqtt" here, umqtt.simple (`mpremote mip install
# umqtt.simple`) and ddq_clients (flash installs it then; without either, the app uses
# ddq_mqtt.WindowSender). Set BROKER, CLIENT_ID, the WiFi
# settings and read_sensor() for yours. run_async() is the same app on asyncio, delivering through
# mqtt_as.
import ddq_app
import ddq_outbox  # noqa: F401  (main.ddq_outbox.Outbox: the app's Outbox class, for the REPL)

# The other settings (QUEUE_DIR, LEASE_MS, the retry policy, PERIOD_MS, BUDGET, ...) are
# ddq_app.DEFAULTS unless set here.
# Queue options of boards/RPI_PICO.json. Keep them fixed for the life of the directory: DDQ does
# not store them, and a reader with smaller limits reports the directory as corrupt.
OPTIONS = {
    "segment_bytes": 4096,
    "max_payload_bytes": 976,
    "max_items": 5392,
    "max_segments": 147,
    # the hold rule (SPEC 10.1): room for 16 claims in flight and 1 KiB of dead-letter reasons
    # instead of libddq's reserve per reading: about 4.8 x the readings (docs/BOARDS.md)
    "window": 16,
    "evidence_bytes": 1024,
    # staged reclamation (SPEC C13): no call copies the whole queue
    "reclaim_step": 16,
}
# OUTBOX = "ddq_batch"  # readings share queue items, written when full or a minute old: 3 to 4 x
# the readings, durable a minute later (docs/OUTBOX.md 13.4). With it BATCH_OPTIONS replace
# OPTIONS' reserve: an item holds tens of readings, so 4 claimed at once carry the whole window.
BATCH_OPTIONS = {"window": 4, "evidence_bytes": 256}

BROKER = "192.168.1.10"  # your broker
BROKER_PORT = 1883
CLIENT_ID = b"ddq-pico"
TOPIC = "ddq/pico/temp"
WIFI_SSID = "my-ssid"  # Pico W (a plain Pico has no `network`: readings wait on flash)
WIFI_PASSWORD = "my-password"


def read_sensor():
    """RP2040 internal temperature sensor (ADC input 4), in degrees C with one decimal."""
    import machine

    raw = machine.ADC(4).read_u16() * 3.3 / 65535
    t = 27 - (raw - 0.706) / 0.001721
    return b"%d.%d" % (int(t), int(abs(t) * 10) % 10)


ddq_app.bind(globals())  # run(), run_async() and Wifi over these settings (port/ddq_app.py)

if __name__ == "__main__":
    run()  # noqa: F821 (bound above)  asyncio with mqtt_as: import asyncio; asyncio.run(run_async())
