"""The end-to-end demo, bounded: the virtual board delivers through real mosquitto while the broker
restarts and the device loses power; nothing may be lost, and every duplicate must be a copy sent
before its ack was durable. Plus the checker itself, on hand-made queues (it must see a violation).

Replay a failure: DDQ_DEMO_SEED=<seed printed in the failure> pytest tests/e2e/test_demo.py
"""

import importlib.util
import os
import random
import sys

import brokers

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "demo"))

import devapp  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "ddq_demo_run", os.path.join(_REPO, "demo", "run.py")
)
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)

import ddq  # noqa: E402

OPTIONS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 256, "max_segments": 16}


def _seed():
    env = os.environ.get("DDQ_DEMO_SEED")
    return int(env) if env else random.SystemRandom().randrange(1, 10**6)


def _demo(tmp_path, **cfg):
    """demo.run at 100 messages a second with these settings; (result, why, its log lines)."""
    seed = _seed()
    print("ddq demo seed %d" % seed)
    conf = demo.Config(
        rate=100,
        seed=seed,
        broker=brokers.kind(),
        workdir=str(tmp_path / "demo"),
        progress=False,
        drain_timeout=90.0,
        **cfg,
    )
    lines = []
    res = demo.run(conf, log=lines.append)
    brokers.served(res.get("broker_version") or conf.broker)
    why = "seed %d (DDQ_DEMO_SEED=%d to replay)\n%s\n%s" % (
        seed,
        seed,
        demo.render(res),
        "\n".join(lines[-20:]),
    )
    return res, why, lines


def test_demo_virtual_board_through_broker_restarts_and_power_cuts(tmp_path):
    # The broker tests/brokers.py picks: mosquitto (installed with apt-get when root), else the
    # demo's embedded amqtt, whose restarts are outages of a relay (sessions kept).
    res, why, _lines = _demo(tmp_path, messages=2000, broker_restarts=3, kills=3)
    assert "failure" not in res, why
    assert res["enqueued"] >= 2000, why
    assert res["broker_restarts"] >= 3 and res["device_kills"] >= 3, why
    assert len(res["power_cuts"]) == res["device_kills"], why  # every image recovered
    assert res["lost"] == 0, why
    assert res["pending"] == 0 and res["verify_rc"] == 0, why
    assert res["errors"] == [], why
    # every duplicate was sent while its ack was not yet durable (checked against each power cut)
    assert res["violation_count"] == 0, why
    assert res["delivered"] == res["enqueued"], why
    assert sum(res["duplicate_causes"].values()) == res["duplicates"], why
    # the field engineer's loop ran during the chaos: each step exited as it should (verify clean
    # at every step but the damaged copy's), the app went on from the pushed queue, and nothing
    # the pull held as acked was sent again (violation_count above; the replay's copies count)
    fl = res["field_loop"]
    assert fl["run"], why
    steps = [(st["step"], st["exit"]) for st in fl["steps"]]
    assert steps == [
        ("app stop", 0),
        ("pull", 0),
        ("verify", 0),
        ("inspect", 0),
        ("records", 0),
        ("damage", None),
        ("verify damaged", 2),
        ("salvage", 1),
        ("verify", 0),
        ("replay", 0),
        ("verify", 0),
        ("push", 0),
        ("pull", 0),
        ("verify", 0),
        ("app start", None),
    ], why
    # the app went on from the pushed queue (as boot b+2, or a later boot if a power cut came
    # first) and delivered; lost 0 and enqueued >= 2000 above say it went on with no gap
    assert sum(n for b, n in res["by_boot"] if b >= fl["boots"][2]) > 0, why
    assert "field loop       at " in demo.render(res), why
    assert res["passed"], why


def test_demo_with_the_queue_on_the_virtual_boards_raw_flash(tmp_path):
    # `make demo STORAGE=raw`: the board's queue on its raw NOR region through ddq_flash
    # (`ddq flash --layout raw`); each power cut's image and the final `ddq pull --raw` image are
    # recovered on the host through the same port code. Nothing lost, no ack undone.
    res, why, lines = _demo(tmp_path, storage="raw", messages=600, broker_restarts=2, kills=2)
    assert "failure" not in res and res["storage"] == "raw", why
    assert "raw layout: erased 128 blocks" in "\n".join(lines), why
    assert res["device_kills"] >= 2 and len(res["power_cuts"]) == res["device_kills"], why
    assert res["lost"] == 0 and res["pending"] == 0 and res["errors"] == [], why
    assert res["violation_count"] == 0 and res["delivered"] == res["enqueued"] >= 600, why
    assert os.path.getsize(str(tmp_path / "demo" / "pulled")) == 128 * 4096, why
    assert res["passed"], why


class _Sub:
    def __init__(self, receipts, hb):
        self.r, self.hb = receipts, hb

    def snapshot(self):
        return list(self.r), dict(self.hb), [], []


class _Dev:
    options = OPTIONS

    def snapshot_queue(self, snap, dest):
        demo.qdir.copy_queue(snap, dest)


def _queue(path, n, acked):
    """A queue with readings 1..n enqueued and the seqs in acked acknowledged."""
    with ddq.Queue(str(path), clock=lambda: 1000, **OPTIONS) as q:
        for i in range(1, n + 1):
            assert q.enqueue(devapp.reading(i)) == i
        for _ in range(n):
            c = q.claim(60000)
            if c is None:
                break
            if c.seq in acked:
                q.ack(c.seq)
    return str(path)


def _receipt(seq, boot, attempt=0):
    return (seq, boot, attempt, devapp.reading(seq), False, 0.0)


def test_checker_flags_a_resend_of_a_durably_acked_seq(tmp_path):
    # Power cut 0 ended boot 0 with seqs 1-3 acked and 4-5 pending. Boot 1 may resend 4 and 5,
    # never 2.
    cut = _queue(tmp_path / "cut0", 5, {1, 2, 3})
    final = demo.queue_state(_queue(tmp_path / "final", 5, {1, 2, 3, 4, 5}), OPTIONS)
    ok = [_receipt(s, 0) for s in (1, 2, 3, 4)] + [_receipt(4, 1), _receipt(5, 1)]
    cfg = demo.Config(messages=5, seed=1)
    res = demo.analyse(cfg, _Sub(ok, {0: 5}), final, [(0, cut, 0.0)], _Dev(), print)
    assert (res["lost"], res["duplicates"], res["violation_count"], res["errors"]) == (0, 1, 0, [])
    assert res["duplicate_causes"]["power cut"] == 1
    bad = ok + [_receipt(2, 1)]
    res = demo.analyse(cfg, _Sub(bad, {0: 5}), final, [(0, cut, 0.0)], _Dev(), print)
    assert res["violation_count"] == 1 and "seq 2 sent by boot 1" in res["violations"][0]


def test_checker_flags_a_copy_after_the_field_loop_of_a_seq_acked_at_its_pull(tmp_path):
    # The field loop pulled boot 0's queue with seqs 1-3 acked; the replay's copies count as boot
    # 1, the app after the push as boot 2: either may send 4 and 5 again, never 1-3.
    final = demo.queue_state(_queue(tmp_path / "final", 5, {1, 2, 3, 4, 5}), OPTIONS)
    loops = [(1, {1, 2, 3}), (2, {1, 2, 3, 4})]
    ok = [_receipt(s, 0) for s in (1, 2, 3, 4)] + [_receipt(4, 1), _receipt(5, 2)]
    cfg = demo.Config(messages=5, seed=1)
    res = demo.analyse(cfg, _Sub(ok, {0: 5}), final, [], _Dev(), print, loops)
    assert (res["lost"], res["duplicates"], res["violation_count"], res["errors"]) == (0, 1, 0, [])
    assert res["duplicate_causes"]["field loop"] == 1
    for bad in (_receipt(2, 1), _receipt(3, 2), _receipt(4, 2)):
        res = demo.analyse(cfg, _Sub(ok + [bad], {0: 5}), final, [], _Dev(), print, loops)
        assert res["violation_count"] == 1, (bad, res["violations"])
        assert "seq %d sent by boot %d" % bad[:2] in res["violations"][0]


def test_checker_counts_lost_and_unsurvived_enqueues(tmp_path):
    # seq 5 acked in the final queue but never received: lost. Boot 0 reported enqueue 6 returned,
    # but the image at its power cut ends at 5: an enqueue that did not survive.
    cut = _queue(tmp_path / "cut0", 5, set())
    final = demo.queue_state(_queue(tmp_path / "final", 5, {1, 2, 3, 4, 5}), OPTIONS)
    rec = [_receipt(s, 1) for s in (1, 2, 3, 4)]
    res = demo.analyse(
        demo.Config(messages=6, seed=1), _Sub(rec, {0: 6}), final, [(0, cut, 0.0)], _Dev(), print
    )
    assert res["lost"] == 1 and res["lost_seqs"] == [5]
    assert any("saw enqueue of seq 6 return" in e for e in res["errors"])


def test_reading_checksum_roundtrip():
    for seq in (1, 2, 99, 123456):
        assert devapp.check_reading(devapp.reading(seq)) == seq
    r = bytearray(devapp.reading(7))
    r[6] ^= 1
    assert devapp.check_reading(bytes(r)) == -1
