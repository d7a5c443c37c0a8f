# Example outbox app for ARMV7M_GENERIC (a generic Cortex-M3/M4 board (armv7m bytecode loads on
# both): 140 KiB heap (the qemu port's MPS2_AN385 default), 256 KiB LittleFS, no network)
#
# This board's settings and sensor; the app itself is ddq_app (port/ddq_app.py, the same as the
# boards with a network): read the sensor every PERIOD_MS and put each reading into a durable
# Outbox with this board's queue options. A reading is on flash once put() returned. Without a
# network the readings wait there: `ddq pull :outbox out && ddq replay out --to mqtt://...`
# delivers them (the message layer's loop, on the host). A board with a transport: pass run()
# a send function (sender=; it returns True once the far end confirmed) and the app delivers
# through the message layer's loop (Outbox.pump), retrying with a growing, jittered delay and
# keeping a reading that fails MAX_ATTEMPTS times as a dead letter (`ddq inspect` shows it).
#
# On the board: ddq, ddq_outbox, ddq_mqtt, ddq_app (`ddq flash --example-app` installs them and
# this file as main.py). Set TOPIC and read_sensor() for yours.
import time

import ddq_app
import ddq_outbox  # noqa: F401  (main.ddq_outbox.Outbox: the app's Outbox class, for the REPL)

# The other settings (QUEUE_DIR, LEASE_MS, the retry policy, PERIOD_MS, BUDGET, ...) are
# ddq_app.DEFAULTS unless set here.
# Queue options of boards/ARMV7M_GENERIC.json. Keep them fixed for the life of the directory: DDQ
# does not store them, and a reader with smaller limits reports the directory as corrupt.
OPTIONS = {
    "segment_bytes": 4096,
    "max_payload_bytes": 256,
    "max_items": 488,
    "max_segments": 15,
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
MAX_ATTEMPTS = 8  # then a dead letter: the reading is kept as evidence, delivery moves on
TOPIC = "ddq/armv7m/temp"


def read_sensor():
    """A fake temperature (no sensor on a generic board): a slow sawtooth around 21 C."""
    return b"%d.%d" % (20 + (time.ticks_ms() // 60000) % 3, (time.ticks_ms() // 1000) % 10)


ddq_app.bind(globals())  # run(), run_async() and Wifi over these settings (port/ddq_app.py)

if __name__ == "__main__":
    run()  # noqa: F821 (bound above)
