"""A board's filesystem filled by the queue can always drain (SPEC C9).

tools/board_capacity.py sizes max_segments so that C9's worst case (the current and a staged
generation of max_segments segments, a tail cut's copy, manifests, marker, lock) fits the board's
filesystem after the code, with copy-on-write room to spare (FS_SPARE). Here, on the profile's own
filesystem (VfsLfs2/VfsFat of fs_bytes on a RAM block device, in the MicroPython unix port): the
code's bytes, other files taking everything but the room the rule promises the queue (C9's
worst case and the spare), then a queue filled through ddq with max_payload_bytes messages until
Full, every item claimed and acked, and the queue reopened empty. Before the rule, the profiles'
max_segments (half the room left by the code) did not have that room: ARMV7M_GENERIC's 22
segments need more than its 64 blocks.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import PORT_DIR, REPO
from ddqhost import boards

sys.path.insert(0, os.path.join(REPO, "tools"))
import board_capacity as bc  # noqa: E402

DRAIN = r"""
import os, sys, json, vfs
f = open(sys.argv[1])
a = json.loads(f.read())
f.close()
sys.path[:0] = [a["tests"], a["port"]]
from blockdev import RAMBlockDev
import ddq
V = vfs.VfsFat if a["fs"] == "fat" else vfs.VfsLfs2
bd = RAMBlockDev(a["block"], a["fs_bytes"] // a["block"])
V.mkfs(bd)
vfs.mount(V(bd), "/f")
buf = bytes(512)


def put(path, n):
    f = open(path, "wb")
    while n > 0:
        f.write(buf[:min(n, 512)])
        n -= 512
    f.close()


put("/f/code.bin", a["code"])
o = a["options"]
# The room the sizing rule promises the queue, and not a block more: C9's worst case as files
# (two generations of max_segments segments, a cut's copy, manifests, marker, lock), then other
# files filling all but the spare, then the worst case removed again.
os.mkdir("/f/outbox")
names = ["/f/outbox/generation-%020d-segment-%020d.log" % (10 ** 19 + g, i)
         for g in (1, 2) for i in range(o["max_segments"])]
names.append(names[-1] + ".reserve")
room = "ok"
try:
    for p in names:
        put(p, o["segment_bytes"])
    for p, k in (("queue.manifest", 48), ("queue.manifest.tmp", 48), ("queue.format", 0)):
        put("/f/outbox/" + p, k)
        names.append("/f/outbox/" + p)
except OSError as e:
    room = "no room for C9's worst case: %r" % (e,)
g = open("/f/other.bin", "wb")  # another application's file, one block at a time
try:
    for _ in range(100000):
        if os.statvfs("/f")[3] <= a["spare"]:
            break
        g.write(bytes(a["block"]))
        g.flush()
except OSError:
    pass
g.close()
for p in names:
    try:
        os.remove(p)
    except OSError:
        pass
q = ddq.Queue("/f/outbox", clock=lambda: 1767225600000, **o)
n, end = 0, "limit"
payload = bytes(o["max_payload_bytes"])
for _ in range(o["max_items"] + 1):
    try:
        q.enqueue(payload)
        n += 1
    except ddq.Full:
        end = "Full"
        break
    except ddq.IOFailure as e:
        end = "IOFailure %s" % e
        break
q.close()
q = ddq.Queue("/f/outbox", clock=lambda: 1767225600000, **o)
acked, err = 0, None
try:
    for _ in range(n + 1):
        c = q.claim(60000)
        if c is None:
            break
        q.ack(c.seq)
        acked += 1
    q.close()
    q = ddq.Queue("/f/outbox", clock=lambda: 1767225600000, **o)
    left = q.stats().available_items + q.stats().claimed_items
    q.close()
except Exception as e:
    err, left = repr(e), -1
print("RESULT " + json.dumps({"n": n, "end": end, "room": room, "acked": acked, "err": err,
                              "left": left, "free": os.statvfs("/f")[3]}))
"""


def _run(prof, max_segments, tmp_path):
    code = bc.code_bytes(prof, str(tmp_path))
    opts = dict(boards.queue_options(prof), max_segments=max_segments)
    fs = prof["filesystem"]
    arg = {
        "fs": fs,
        "block": bc.FS_BLOCK.get(fs, 4096),
        "fs_bytes": prof["fs_bytes"],
        "code": code,
        "options": opts,
        "spare": bc.fs_spare(fs, max_segments),
        "tests": os.path.join(REPO, "tests"),
        "port": PORT_DIR,
    }
    p = tmp_path / "arg.json"
    p.write_text(json.dumps(arg))
    s = tmp_path / "drain.py"
    s.write_text(DRAIN)
    r = subprocess.run(
        [bc.MP, "-X", "heapsize=%d" % (prof["fs_bytes"] + (8 << 20)), str(s), str(p)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, r.stdout + r.stderr
    return code, json.loads(lines[-1][7:])


@pytest.mark.parametrize("name", boards.names())
def test_a_full_filesystem_of_the_profile_size_drains(name, tmp_path):
    # EVIDENCE-OF: C9
    if not os.path.exists(bc.MP):
        pytest.skip("no MicroPython unix port in .venv/bin")
    prof = boards.load(name)
    code = bc.code_bytes(prof, str(tmp_path))
    m = bc.fit_segments(prof, code, str(tmp_path))  # the sizing rule
    assert m >= 1
    _code, res = _run(prof, m, tmp_path)
    assert res["end"] == "Full", res  # the options, never the filesystem, stop the enqueues
    assert res["room"] == "ok", res
    assert res["err"] is None and res["acked"] == res["n"] and res["left"] == 0, res


def test_the_old_rule_left_no_room_for_the_worst_case(tmp_path):
    # Half the room left by the code (the rule before SPEC C9) on ARMV7M_GENERIC's 256 KiB
    # LittleFS: C9's worst case does not fit, so a compaction at its peak meets ENOSPC.
    prof = boards.load("ARMV7M_GENERIC")
    code = bc.code_bytes(prof, str(tmp_path))
    old = ((prof["fs_bytes"] - code) // 2) // prof["segment_bytes"]
    assert bc.fit_segments(prof, code, str(tmp_path)) < old
    _code, res = _run(prof, old, tmp_path)
    assert res["room"].startswith("no room"), res
