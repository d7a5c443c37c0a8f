# Example outbox app for PYBV11 (MicroPython's reference board, pyboard v1.1 (STM32F405, Cortex-M4F): 1 MB flash with a FAT filesystem of about 96 KB on internal flash, about 100 KB heap, no network)
#
# Enqueue a sensor reading every period, then deliver what is due: claim -> send -> ack. A reading
# is durable once enqueue() returns, so a power cut between readings loses nothing that was queued;
# a reading whose send failed is retried with a growing delay; one the far end rejects for good is
# quarantined with the reason (inspect it on a host: `ddq pull :outbox out && ddq inspect out`).
#
# Start from here: replace send() with your transport (for example an MQTT QoS 1 publish that
# returns True only after the PUBACK), and read_sensor() with your sensor.
import time

import ddq

QUEUE_DIR = "outbox"
# Queue options of boards/PYBV11.json. Keep them fixed for the life of the directory: DDQ does not
# store them, and a reader with smaller limits reports the directory as corrupt.
OPTIONS = {
    "segment_bytes": 4096,
    "max_payload_bytes": 256,
    "max_items": 88,
    "max_segments": 12,
}
LEASE_MS = 30000  # how long a claimed reading stays ours before another claim may take it
MAX_ATTEMPTS = 8  # then quarantine: the reading is kept as evidence, delivery moves on
RETRY_BASE_MS = 1000  # first retry delay; doubles per attempt, capped at 5 minutes


def read_sensor():
    """STM32F405 internal temperature sensor (pyb.ADCAll), degrees C with one decimal."""
    import pyb

    t = pyb.ADCAll(12, 0x70000).read_core_temp()
    return b"%d.%d" % (int(t), int(abs(t) * 10) % 10)


def send(payload):
    """Deliver one payload; return True once the far end confirmed it, False to retry later.

    Raise ValueError for a payload the far end will never accept: it is quarantined.
    """
    print("send", payload)
    return True


def encode(reading, seq_hint):
    # Small, self-describing, no allocation-heavy json on tiny boards: "n=<count> t=<ms> v=<value>".
    return b"n=%d t=%d v=%s" % (seq_hint, time.ticks_ms(), reading)


def deliver(q, budget=16, sender=None):
    """Claim and send up to budget due readings; return (acked, retried, quarantined)."""
    sender = sender or send
    acked = retried = quarantined = 0
    for _ in range(budget):  # bounded: never loop on the queue forever
        c = q.claim(LEASE_MS)
        if c is None:
            break
        payload = q.read(c.seq)
        try:
            ok = sender(payload)
        except ValueError as e:
            q.quarantine(c.seq, str(e).encode()[:200])
            quarantined += 1
            continue
        except Exception:  # transport trouble: try again later
            ok = False
        if ok:
            q.ack(c.seq)
            acked += 1
        elif c.attempts + 1 >= MAX_ATTEMPTS:
            q.quarantine(c.seq, b"gave up after %d attempts" % (c.attempts + 1))
            quarantined += 1
        else:
            q.retry(c.seq, min(300000, RETRY_BASE_MS << c.attempts))  # 1 s, 2 s, 4 s, ...
            retried += 1
    return acked, retried, quarantined


def run(rounds=None, period_ms=10000, sender=None, queue_dir=QUEUE_DIR, budget=16):
    """Enqueue a reading and deliver up to budget due ones, every period_ms; rounds=None: forever."""
    q = ddq.Queue(queue_dir, **OPTIONS)
    n = 0
    try:
        while rounds is None or n < rounds:
            n += 1
            try:
                q.enqueue(encode(read_sensor(), n))
            except ddq.Full:
                print("outbox full: reading dropped")  # nothing acked could be reclaimed
            deliver(q, budget, sender)
            if period_ms:
                time.sleep_ms(period_ms)
        return q.stats()
    finally:
        q.close()


if __name__ == "__main__":
    run()
