"""Long host commands say what they will take and show progress (issue 39; docs/HOST.md
"Progress"): `ddq salvage` and `ddq replay` of one directory or a fleet print a plan line on
stderr before they start (segments, bytes, an estimated time; replay then the messages pending)
and a progress display as they go; on stderr only, so --json output is the same; quiet when
stderr is not a terminal unless --progress."""

import json
import os

import ddq as ddqmod
from conftest import ddq
from ddqhost import locate, progress

OPTS = {"segment_bytes": 4096, "max_payload_bytes": 256, "max_items": 1000, "max_segments": 64}
FLAGS = [f for k, v in OPTS.items() for f in ("--" + k.replace("_", "-"), str(v))]


def _queue(d, n=300, acked=100):
    ob = locate.load_outbox().Outbox(str(d), **OPTS)
    for i in range(n):
        ob.put("t/x", b"reading %04d " % i + b"x" * 100)
    ob.close()
    q = ddqmod.Queue(str(d), **OPTS)
    for _ in range(acked):
        q.ack(q.claim(1000).seq)
    q.close()
    return d


def test_salvage_says_what_it_will_take_and_shows_its_progress(tmp_path):
    d = _queue(tmp_path / "q")
    segs, size = progress.on_disk([str(d)])
    assert segs == len([n for n in os.listdir(d) if ddqmod.parse_segment_name(n)]) > 5
    r = ddq("salvage", d, tmp_path / "out", "--json", "--progress", *FLAGS)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "clean"  # stdout: the JSON alone
    first = r.stderr.splitlines()[0]
    assert first.startswith(
        "ddq salvage: %s: %d segment(s), %.1f KiB to read: about 1 s at ~3 MiB/s"
        % (d, segs, size / 1024)
    ), first
    # not a terminal and no --progress: nothing on stderr, the same report
    r2 = ddq("salvage", d, tmp_path / "out2", "--json", *FLAGS)
    assert r2.returncode == 0 and r2.stderr == "", r2.stderr
    j1, j2 = json.loads(r.stdout), json.loads(r2.stdout)
    assert {k: v for k, v in j1.items() if k != "output"} == {
        k: v for k, v in j2.items() if k != "output"
    }


def test_salvage_progress_counts_every_byte_of_the_queue_once(tmp_path):
    # The bar's figure: the bytes of each file read so far (the highest offset reached), through
    # the port's storage seam; at the end every byte of the queue's files, counted once though
    # salvage reads the kept payloads a second time.
    import ddq_salvage

    d = _queue(tmp_path / "q")
    _segs, size = progress.on_disk([str(d)])
    seen = []
    count = progress.CountReads(ddqmod.PosixStorage(), seen.append)
    rep = ddq_salvage.salvage(str(d), str(tmp_path / "out"), storage=count, **OPTS)
    assert rep["status"] == "clean" and rep["kept"] == 200, rep
    assert seen == sorted(seen) and seen[-1] == size, (seen[-3:], size)


def test_fleet_replay_says_what_it_will_take_then_what_is_pending(tmp_path, mosquitto):
    dirs = [_queue(tmp_path / n, n=40 + 10 * i, acked=5) for i, n in enumerate(("a", "b"))]
    segs, size = progress.on_disk([str(x) for x in dirs])
    url = "mqtt://127.0.0.1:%d" % mosquitto
    r = ddq("replay", *dirs, "--to", url, "--progress", "--json", *FLAGS)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [x["sent"] for x in res["dirs"]] == [35, 45], res
    lines = r.stderr.splitlines()
    assert lines[0].startswith(
        "ddq replay: 2 directories, %d segment(s), %s: opening them, about 1 s; then each "
        "pending message at ~140 a second" % (segs, progress.size_text(size))
    ), lines
    assert "ddq replay: 80 message(s) pending in 2 directories: about 1 s at ~140 a second" in (
        lines
    ), lines
    assert lines[-1].startswith("replay: 80/80 sent, 2 dir(s)"), lines
    # one directory: the same two lines
    c = _queue(tmp_path / "c", n=30, acked=0)
    r = ddq("replay", c, "--to", url, "--progress", *FLAGS)
    assert r.returncode == 0 and "sent 30," in r.stdout, r.stdout + r.stderr
    assert r.stderr.startswith("ddq replay: 1 directory, ")
    assert "ddq replay: 30 message(s) pending in 1 directory: about 1 s" in r.stderr
    # not a terminal, no --progress: quiet
    d = _queue(tmp_path / "d", n=3, acked=0)
    r = ddq("replay", d, "--to", url, *FLAGS)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_about_says_seconds_minutes_hours():
    assert [progress.about(s) for s in (0.2, 4.4, 59.6, 61, 120, 3725)] == [
        "about 1 s",
        "about 4 s",
        "about 1 min",
        "about 1 min 1 s",
        "about 2 min",
        "about 1 h 2 min",
    ]
