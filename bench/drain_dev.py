# One device-sender drain for bench/drain_bench.py, on CPython or MicroPython (subset Python):
#   <python> bench/drain_dev.py DIR PORT N W
# fills a fresh Outbox in DIR with N 100-byte messages, then drains it through
# ddq_mqtt.WindowSender (inflight_max=W) to 127.0.0.1:PORT and prints "RESULT <json>".
import sys

sys.path.insert(0, sys.argv[0][: sys.argv[0].rfind("/") + 1] + "../port")
sys.path.insert(0, sys.argv[0][: sys.argv[0].rfind("/") + 1])
import common  # noqa: E402

import ddq_mqtt  # noqa: E402
import ddq_outbox  # noqa: E402


def main():
    d, port, n, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    common.fresh(d)
    # Group commit (E15): a drain writes a CLAIM and an ACK per message; 50 ms of ticks between
    # syncs keeps fsync out of the round trip, as a device draining a backlog would.
    ob = ddq_outbox.Outbox(d, sync_interval_ms=50)
    body = b"x" * 100
    for i in range(n):
        ob.put("bench/dev/%d" % (i % 8), body)
    ob.sync()
    link = ddq_mqtt.WindowSender(
        "127.0.0.1", port, inflight_max=w, client_id=b"drain-dev", timeout_ms=10000
    )
    link.connect()
    t0 = common.now_us()
    sent = 0
    for _ in range(n + 10):
        sent += ob.pump(link, budget=n)
        if ob.empty():
            break
    us = common.since_us(t0)
    ob.close()
    link.close()
    common.emit(
        {"n": n, "w": w, "sent": sent, "us": us, "dups": link.dups, "connects": link.connects}
    )


main()
