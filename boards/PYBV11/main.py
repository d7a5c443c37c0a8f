# Example outbox app for PYBV11 (pyboard v1.1: 96 KB of FAT, no network). Every PERIOD_MS:
# put a reading into a durable Outbox (on flash once put() returned), deliver what is due
# (Outbox.pump). Without a transport readings wait for `ddq pull` and `ddq replay` on a host.
# The 96 KB hold the code too (docs/BOARDS.md). Replace send() and read_sensor() with yours.
import time

import ddq
import ddq_outbox

QUEUE_DIR = "outbox"
# boards/PYBV11.json's options, fixed for the life of the directory (DDQ does not store them)
OPTIONS = {
    "segment_bytes": 2048,
    "max_payload_bytes": 256,
    "max_items": 96,
    "max_segments": 6,
    # the hold rule (SPEC 10.1): room for 4 claims in flight and 256 B of dead-letter reasons
    "window": 4,
    "evidence_bytes": 256,
}
try:  # `ddq flash --layout raw` (docs/BOARDS.md): the queue on the raw flash region
    import ddq_layout
except ImportError:
    ddq_layout = None
if ddq_layout:
    ddq_layout.use(OPTIONS)
LEASE_MS = 30000  # a claimed reading stays ours this long
RETRY_BASE_MS = 1000  # retry delays: full jitter up to base * 2**attempts, at most RETRY_MAX_MS
RETRY_MAX_MS = 300000
MAX_ATTEMPTS = 8  # then a dead letter, kept as evidence
PERIOD_MS = 10000
BUDGET = 16  # messages one pump may send
TOPIC = "sensors/pybv11/t"


def read_sensor():
    """STM32F405's temperature sensor, degrees C with one decimal."""
    import pyb

    t = pyb.ADCAll(12, 0x70000).read_core_temp()
    return b"%d.%d" % (int(t), int(abs(t) * 10) % 10)


def send(msg):
    """True once the far end confirmed msg (msg.topic, msg.payload); else retried later.
    Raise ddq_outbox.Rejected for a message never accepted: a dead letter."""
    print("send", msg.topic, msg.payload)
    return True


def open_outbox(queue_dir=QUEUE_DIR):
    return ddq_outbox.Outbox(
        queue_dir,
        lease_ms=LEASE_MS,
        min_retry_ms=RETRY_BASE_MS,
        max_retry_ms=RETRY_MAX_MS,
        max_attempts=MAX_ATTEMPTS,
        **OPTIONS,
    )


def run(rounds=None, period_ms=PERIOD_MS, sender=None, queue_dir=QUEUE_DIR, budget=BUDGET):
    """Put a reading, deliver up to budget, every period_ms; rounds=None: forever."""
    ob = open_outbox(queue_dir)
    n = 0
    try:
        while rounds is None or n < rounds:  # bounded when rounds is given
            n += 1
            try:
                ob.put(TOPIC, b"n=%d t=%d v=%s" % (n, time.ticks_ms(), read_sensor()))
            except ddq.Full:
                print("outbox full: reading dropped")  # nothing acked could be reclaimed
            ob.pump(sender or send, budget)
            if period_ms:
                time.sleep_ms(period_ms)
        return ob.stats()
    finally:
        ob.close()


if __name__ == "__main__":
    run()
