# The parts of the queue beside ddq.py (SPEC O21, O22): a part the options need that is missing
# from the install is an IOFailure at open naming the file and what needs it, and nothing on disk
# changes. Each case imports a fresh ddq from a directory holding every part but one (the
# runner's own port/ taken off sys.path for the while), as an install that forgot a file would.
import os
import sys

import ddq
import support

T0 = 1700000000000
# The parts a queue may need at open; ddq_index and ddq_cut are optional (X9, R22), ddq_salvage
# is left out of every copy (its case is a copy without it).
PARTS = (
    "ddq",
    "ddq_recover",
    "ddq_compact",
    "ddq_extra",
    "ddq_admit",
    "ddq_hold",
    "ddq_reclaim",
    "ddq_fat",
)


def _port():
    # (directory, extension) of the parts the runner imported: port/*.py, or a board's .mpy
    f = ddq.__file__
    return (f[: f.rfind("/")] if "/" in f else "."), f[f.rfind(".") :]


def _copy_part(m, lib):
    # Copy part m into lib from where an import finds it: beside ddq first (a board's install),
    # else the first directory of sys.path that has it (`ddq test --installed` after
    # `ddq flash --example-app`: the board holds only what its app needs, the runner's port/
    # the rest).
    src, ext = _port()
    for p in [src] + [p for p in sys.path if p != src]:
        for x in (ext, ".py", ".mpy"):
            f = (p or ".") + "/" + m + x
            if support._kind(f) == 1:
                support.copyfile(f, lib + "/" + m + x)
                return
    raise AssertionError("no %s.py or .mpy on sys.path %r" % (m, sys.path))


def _holds_ddq(p):
    for x in ("/ddq.py", "/ddq.mpy"):
        try:
            os.stat((p or ".") + x)
            return True
        except OSError:
            pass
    return False


def _ours(k):
    return k == "ddq" or k.startswith("ddq_")


def _snapshot(d):
    if support._kind(d) == 0:
        return None
    return [(n, support.read_file(d + "/" + n)) for n in support.listdir_sorted(d)]


def _open_without(missing, d, opts):
    # Queue(d, **opts) with a fresh ddq imported from a copy of the parts less `missing`; return
    # the IOFailure it raised (anything else fails the test).
    lib = support.tmpdir() + "/lib"
    os.mkdir(lib)
    for m in PARTS:
        if m != missing:
            _copy_part(m, lib)
    try:
        return _with_lib(lib, _open_raises, d, opts)
    finally:
        support.rmtree(lib)  # (a RAM disk holds a few copies)


def _open_raises(fresh, d, opts):
    return support.raises(fresh.IOFailure, fresh.Queue, d, clock=support.FakeClock(T0), **opts)


def _with_lib(lib, fn, *a):
    # fn(fresh ddq, *a) with ddq and its parts imported from lib alone, as an install holds them.
    path = list(sys.path)
    saved = {}
    for k in list(sys.modules):
        if _ours(k):
            saved[k] = sys.modules.pop(k)
    sys.path.clear()
    sys.path.append(lib)
    sys.path.extend([p for p in path if not _holds_ddq(p)])
    # CPython: an editable install's finder serves port/ whatever sys.path says; the standard
    # finders only for the while (MicroPython has no meta_path).
    meta = getattr(sys, "meta_path", None)
    kept = list(meta) if meta is not None else None
    if meta is not None:
        std = ("BuiltinImporter", "FrozenImporter", "PathFinder")
        meta[:] = [f for f in kept if getattr(f, "__name__", type(f).__name__) in std]
    try:
        return fn(__import__("ddq"), *a)
    finally:
        for k in list(sys.modules):
            if _ours(k):
                del sys.modules[k]
        sys.modules.update(saved)
        sys.path.clear()
        sys.path.extend(path)
        if meta is not None:
            meta[:] = kept


def test_a_missing_part_is_an_error_at_open_naming_it_and_nothing_changes():
    # EVIDENCE-OF: O22 O21
    support.needs_heap(
        512 * 1024, "a second ddq and ddq_recover compiled from source beside the first"
    )
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, clock=support.FakeClock(T0), segment_bytes=4096, max_payload_bytes=1024)
    for k in range(5):
        q.enqueue(b"item %d" % k)
    q.close()
    before = _snapshot(d)
    fresh = support.tmpdir() + "/new"
    for missing, opts, why in (
        ("ddq_recover", {}, "init"),  # Queue(...)'s body
        ("ddq_compact", {}, "compaction"),
        ("ddq_extra", {}, "stats"),
        ("ddq_admit", {}, "window 0"),
        ("ddq_hold", {"window": 4}, "window > 0"),
        ("ddq_reclaim", {"reclaim_step": 8}, "reclaim_step > 0"),
        ("ddq_salvage", {"on_corrupt": "salvage"}, "on_corrupt"),
    ):
        for where in (d, fresh):
            e = _open_without(missing, where, opts)
            msg = str(e)
            assert missing + ".py" in msg and why in msg, (missing, msg)
        assert _snapshot(d) == before, missing  # not even the lock file was touched
        assert _snapshot(fresh) is None, missing  # no directory made
    # A part only some options need is not asked of a queue opened without them.
    q = ddq.Queue(d, clock=support.FakeClock(T0), segment_bytes=4096, max_payload_bytes=1024)
    assert [i.seq for i in q.items()] == [1, 2, 3, 4, 5]
    q.close()
    # The hold rule never needs libddq's admission: a queue with window > 0 opens and takes
    # items without ddq_admit (a board profile's install leaves it out).
    lib = support.tmpdir() + "/hold"
    os.mkdir(lib)
    for m in PARTS:
        if m != "ddq_admit":
            _copy_part(m, lib)
    assert _with_lib(lib, _hold_fill, d) == [1, 2, 3, 4, 5, 6]
    support.rmtree(lib)


def _hold_fill(fresh, d):
    q = fresh.Queue(
        d, clock=support.FakeClock(T0), segment_bytes=4096, max_payload_bytes=1024, window=4
    )
    q.enqueue(b"held")
    c = q.claim(1000)
    q.ack(c.seq)
    out = [i.seq for i in q.items()]
    q.close()
    return out


class _Windowed:
    # A windowed sender (publish, poll: E25) that never gets a message: the loop needs ddq_window
    inflight_max = 4

    def publish(self, m, dup):
        raise AssertionError("published without ddq_window")

    def poll(self, timeout_ms):
        return []


def _addons(fresh, d):
    obm = __import__("ddq_outbox")
    e = support.raises(fresh.IOFailure, obm.Outbox, d, hmac_key=b"k" * 32)
    assert "ddq_seal.py" in str(e) and "hmac_key" in str(e), str(e)
    assert support._kind(d) == 0  # refused before the queue was opened: no directory made
    ob = obm.Outbox(d, clock=support.FakeClock(T0), ticks=lambda: 0)
    ob.put("t/a", b"one")
    ob.put("t/a", b"two")
    sent = []
    assert ob.pump(lambda m: sent.append(m.payload) or True) == 2 and sent == [b"one", b"two"]
    ob.put("t/a", b"three")
    e = support.raises(fresh.IOFailure, ob.pump, _Windowed())
    assert "ddq_window.py" in str(e) and "windowed sender" in str(e), str(e)
    assert ob.qsize() == 1 and ob.stats()["in_flight"] == 0  # nothing was claimed
    loaded = sorted(k for k in sys.modules if _ours(k))
    ob.close()
    return loaded


def test_the_outbox_loads_its_add_ons_only_where_used_and_names_a_missing_one():
    # EVIDENCE-OF: E22 E25
    # ddq_outbox without ddq_seal (HMAC, AES) and ddq_window (windowed delivery), as a board
    # without a network and without a key is installed (docs/HOST.md flash): a plain Outbox puts
    # and pumps; a key or a windowed sender is an IOFailure naming the missing file.
    support.needs_heap(512 * 1024, "a second ddq and ddq_outbox compiled from source")
    lib = support.tmpdir() + "/lib"
    os.mkdir(lib)
    for m in PARTS + ("ddq_outbox",):
        _copy_part(m, lib)
    try:
        loaded = _with_lib(lib, _addons, support.tmpdir() + "/q")
    finally:
        support.rmtree(lib)
    assert "ddq_seal" not in loaded and "ddq_window" not in loaded, loaded
