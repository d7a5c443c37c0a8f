# The board app itself draining a backlog, for bench/drain_bench.py (BENCHMARKS row D6), on
# MicroPython (subset Python):
#   micropython bench/drain_app.py DIR PORT N [LINK]
# boards/UNIX/main.py (the example app, ddq_app) with its broker at 127.0.0.1:PORT queues N
# readings while offline (budget=0), then, as after an outage, main.run() drains them through
# the sender it picks by default (LINK "window": ddq_mqtt.WindowSender) and prints
# "RESULT <json>" with the drain's time. The queue options are the UNIX profile's but sized for
# the backlog (the profile holds 848 readings; the drain, not the capacity, is measured here).
import sys

_here = sys.argv[0][: sys.argv[0].rfind("/") + 1]
sys.path.insert(0, _here + "../port")
sys.path.insert(0, _here + "../boards/UNIX")
sys.path.insert(0, _here)
import common  # noqa: E402
import main  # noqa: E402  (boards/UNIX/main.py)


def run():
    d, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    common.fresh(d)
    main.BROKER_PORT = port
    main.CLIENT_ID = b"drain-app"
    if len(sys.argv) > 4:
        main.LINK = sys.argv[4]
    main.OPTIONS = dict(main.OPTIONS, max_items=n + 64, max_segments=n // 2 + 64)
    q = d + "/outbox"
    main.run(rounds=n, period_ms=0, budget=0, queue_dir=q)  # the backlog, queued offline
    t0 = common.now_us()
    st = main.run(rounds=0, queue_dir=q, drain_ms=600000)  # the broker is back: drain it
    us = common.since_us(t0)
    common.emit(
        {
            "n": n,
            "sent": st["sent"],
            "pending": st["pending"],
            "us": us,
            "link": main.LINK,
            "window": main.WINDOW,
        }
    )


run()
