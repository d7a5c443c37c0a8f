# Helpers shared by the benchmark parts on CPython and MicroPython (subset Python: no typing,
# no os.path, no f-strings). A part is run by bench/run.py as its own process and reports one
# line "RESULT <json>" on stdout; everything else it prints is commentary.
#
#   now_us()          a monotonic microsecond clock (perf_counter / ticks_us)
#   since_us(t0)      microseconds since t0
#   args(defaults)    "key=value" command-line arguments over a dict of defaults (ints kept int)
#   rmtree(p) mkdirs(p) file_size(p)
#   best(values)      the smallest (the machine is shared: the best of R runs is the least noisy)
#   emit(result)      print the RESULT line
import gc
import json
import os
import sys
import time

try:
    _pc = time.perf_counter

    def now_us():
        return int(_pc() * 1000000)

    def since_us(t0):
        return now_us() - t0

except AttributeError:
    _ticks_us = time.ticks_us
    _ticks_diff = time.ticks_diff

    def now_us():
        return _ticks_us()

    def since_us(t0):
        return _ticks_diff(_ticks_us(), t0)


MICROPYTHON = sys.implementation.name == "micropython"
_S_IFDIR = 0o040000


def args(defaults):
    out = {}
    for k in defaults:
        out[k] = defaults[k]
    for a in sys.argv[2:]:
        k, _, v = a.partition("=")
        if k not in out:
            raise SystemExit("unknown argument: " + a)
        out[k] = int(v) if isinstance(out[k], int) else v
    return out


def kind(path):
    try:
        mode = os.stat(path)[0]
    except OSError:
        return 0
    return 2 if mode & 0o170000 == _S_IFDIR else 1


def rmtree(path):
    k = kind(path)
    if k == 1:
        os.remove(path)
    elif k == 2:
        for name in os.listdir(path):
            rmtree(path + "/" + name)
        os.rmdir(path)


def mkdirs(path):
    if kind(path) == 2:
        return
    i = path.rfind("/")
    if i > 0:
        mkdirs(path[:i])
    os.mkdir(path)


def fresh(path):
    """Remove path and make it again, empty."""
    rmtree(path)
    mkdirs(path)
    return path


def file_size(path):
    return os.stat(path)[6]


def tree_bytes(path, suffix=""):
    n = 0
    for name in os.listdir(path):
        if name.endswith(suffix):
            n += file_size(path + "/" + name)
    return n


def best(values):
    return min(values)


def collect():
    gc.collect()
    gc.collect()
    return gc.mem_alloc() if hasattr(gc, "mem_alloc") else 0


def emit(result):
    print("RESULT " + json.dumps(result))


def part_name():
    return sys.argv[1] if len(sys.argv) > 1 else ""
