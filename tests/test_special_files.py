# A queue file that is not a regular file (SPEC §6 N7): a FIFO, a symbolic link or a device
# with a name ddq opens is refused with Corrupt before anything is opened (SPEC N7), never
# opened (a FIFO blocks the open forever) or appended through (a link writes outside the
# directory). Shared suite: CPython and MicroPython; FIFOs and links exist only on a host
# filesystem (posix), so elsewhere these tests skip with that reason.
import os

import ddq
import support

OPTS = {"segment_bytes": 1024, "max_payload_bytes": 100, "max_items": 50, "max_segments": 8}
SEG0 = "segment-00000000000000000000.log"
SEG1 = "segment-00000000000000000001.log"


def _queue(items=3):
    d = support.tmpdir() + "/q"
    q = ddq.Queue(d, **OPTS)
    for i in range(items):
        q.enqueue(b"item %d" % i)
    q.close()
    return d


def _entry_type(d, name):
    # The entry's own type (a link's is a link): os.ilistdir's where it exists, else lstat.
    il = getattr(os, "ilistdir", None)
    if il is not None:
        for e in il(d):
            if e[0] == name:
                return e[1] & 0o170000
        return None
    try:
        return os.lstat(d + "/" + name)[0] & 0o170000
    except OSError:
        return None


def _make(kind, d, name, target=None):
    # A FIFO ("fifo") or a symbolic link ("link" to target) named d/name: os.mkfifo/os.symlink
    # where they exist, else the shell (the unix port has os.system); Skip where the filesystem
    # cannot hold one (LittleFS, FAT: a RAM disk the shell does not see).
    p = d + "/" + name
    fn = getattr(os, "mkfifo" if kind == "fifo" else "symlink", None)
    try:
        if fn is not None:
            fn(p) if kind == "fifo" else fn(target, p)
        elif hasattr(os, "system"):
            os.system(
                ("mkfifo '%s'" % p if kind == "fifo" else "ln -s '%s' '%s'" % (target, p))
                + " 2>/dev/null"
            )
    except OSError:
        pass
    want = 0o010000 if kind == "fifo" else 0o120000
    if _entry_type(d, name) != want:
        raise support.Skip(
            "this filesystem holds no %s" % ("FIFO" if kind == "fifo" else "symlink")
        )


def _refused(d, what):
    try:
        ddq.Queue(d, **OPTS)
    except ddq.Corrupt as e:
        assert what in str(e) and "regular file" in str(e), str(e)
        return
    raise AssertionError("opened a queue with %s" % what)


def test_fifo_named_like_a_staged_cut_is_refused_not_opened():
    # EVIDENCE-OF: N7
    d = _queue()
    _make("fifo", d, SEG1 + ".reserve")
    _refused(d, SEG1 + ".reserve")
    _refused(d, SEG1 + ".reserve")  # nothing was changed: the same answer again


def test_fifo_named_like_a_segment_or_the_lock_is_refused():
    # EVIDENCE-OF: N7
    d = _queue()
    _make("fifo", d, SEG1)
    _refused(d, SEG1)
    os.remove(d + "/" + SEG1)
    os.remove(d + "/queue.lock")
    _make("fifo", d, "queue.lock")
    _refused(d, "queue.lock")


def test_symlinked_segment_is_never_appended_through():
    # EVIDENCE-OF: N7
    # Segment 0 replaced by a link to a valid segment outside the directory: ddq must not
    # replay it, and above all not append to the file outside.
    d = _queue()
    outside = support.tmpdir() + "/elsewhere.log"
    os.rename(d + "/" + SEG0, outside)
    before = support.read_file(outside)
    _make("link", d, SEG0, outside)
    try:
        _refused(d, SEG0)
        assert support.read_file(outside) == before
    finally:
        os.remove(d + "/" + SEG0)  # (support.rmtree's stat on MicroPython follows a link)


def test_staged_cut_linked_to_a_device_is_refused():
    # EVIDENCE-OF: N7
    try:
        dev = os.stat("/dev/zero")[0] & 0o170000 == 0o020000
    except OSError:
        dev = False
    if not dev:
        raise support.Skip("no /dev/zero here")
    d = _queue()
    _make("link", d, SEG0 + ".reserve", "/dev/zero")
    try:
        _refused(d, SEG0 + ".reserve")
    finally:
        os.remove(d + "/" + SEG0 + ".reserve")


def test_staged_cut_larger_than_a_segment_is_corrupt():
    # EVIDENCE-OF: N7 R15 R22
    # A cut's copy is a prefix of its segment, never larger than segment_bytes: one that is
    # larger (a sparse file of gigabytes would take minutes to compare) is refused unread.
    d = _queue()
    support.write_file(d + "/" + SEG0 + ".reserve", bytes(OPTS["segment_bytes"] + 1))
    try:
        ddq.Queue(d, **OPTS)
    except ddq.Corrupt as e:
        assert "larger than segment_bytes" in str(e), str(e)
    else:
        raise AssertionError("a staged cut larger than segment_bytes was accepted")
    assert support.file_size(d + "/" + SEG0 + ".reserve") == OPTS["segment_bytes"] + 1


def test_regular_files_beside_the_queue_are_still_fine():
    # EVIDENCE-OF: N5 N7
    # Names ddq never opens may be anything; the queue still opens and keeps them.
    d = _queue()
    support.write_file(d + "/notes.txt", b"x")
    try:
        _make("fifo", d, "a-fifo")
    except support.Skip:
        pass
    q = ddq.Queue(d, **OPTS)
    assert q.stats().total_items == 3
    q.close()
    assert "notes.txt" in os.listdir(d)


def test_the_test_codec_takes_ascii_digits_only():
    # EVIDENCE-OF: N4
    # tests/ddqfmt.py (the suite's own reader) agrees with ddq: another script's digit is no
    # segment id (str.isdigit() takes it on CPython).
    support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)  # (a module more to load)
    import ddqfmt

    assert ddqfmt.parse_seg_name(SEG1) == (0, 1)
    assert ddqfmt.parse_seg_name(SEG1[:-5] + "\u0661.log") is None
    assert ddq.parse_segment_name(SEG1[:-5] + "\u0661.log") is None


# ---- on_corrupt="salvage" (SPEC K9, K10): salvage's own names are checked before it opens one


def _damaged():
    # A queue whose segment 0 has a flipped byte: recovery raises Corrupt, salvage repairs it.
    d = _queue(5)
    b = bytearray(support.read_file(d + "/" + SEG0))
    b[60] ^= 0xFF
    support.write_file(d + "/" + SEG0, bytes(b))
    return d


def _state(d):
    # Each entry's name and, for a regular file, its bytes: what "nothing changed" compares.
    out = []
    for n in support.listdir_sorted(d):
        t = _entry_type(d, n)
        out.append((n, support.read_file(d + "/" + n) if t == 0o100000 else t))
    return out


def _salvage_refused(d, name):
    before = _state(d)
    try:
        ddq.Queue(d, on_corrupt="salvage", **OPTS)
    except ddq.Corrupt as e:
        assert name + " is not a regular file" in str(e) and "segment" in str(e), str(e)
    else:
        raise AssertionError("salvaged beside %s" % name)
    assert _state(d) == before


def test_fifo_named_like_salvage_s_files_is_refused_not_opened():
    # EVIDENCE-OF: N7 K9
    # A FIFO named salvage.intent (read by a rerun) or salvage-report-1.json (written by
    # salvage) blocked the open for ever: refused now, the Corrupt salvage would repair named.
    for name in ("salvage.intent", "salvage-report-1.json"):
        d = _damaged()
        _make("fifo", d, name)
        _salvage_refused(d, name)


def test_directory_named_like_salvage_s_files_is_refused_and_nothing_moves():
    # EVIDENCE-OF: N5 N7 K9
    # A directory where salvage reads or writes a file: refused before salvage changes anything
    # (it was an IOFailure on every open, with the sources already set aside for the report);
    # without it, the same open salvages. A directory recovery opens is never touched: salvage's
    # names are checked only when there is something to salvage.
    d = _queue()
    os.mkdir(d + "/salvage.intent")
    q = ddq.Queue(d, on_corrupt="salvage", **OPTS)
    assert q.stats().total_items == 3 and q.stats().salvaged == 0
    q.close()
    for name in ("salvage.intent", "salvage-report-1.json"):
        d = _damaged()
        os.mkdir(d + "/" + name)
        _salvage_refused(d, name)
        _salvage_refused(d, name)
        os.rmdir(d + "/" + name)
        h = support.heap_size()
        if h is not None and h < 192 * 1024:
            continue  # (the refusal imports nothing; a salvage needs ddq_salvage: 20 KB, test_cut)
        q = ddq.Queue(d, on_corrupt="salvage", **OPTS)
        assert q.stats().salvaged == 1 and q.stats().total_items >= 1, q.stats().as_dict()
        q.close()


def test_special_file_is_refused_not_salvaged():
    # EVIDENCE-OF: N7 K9
    # N7's refusal is not damage salvage repairs (it salvaged the rest, then refused the FIFO
    # again on every open): Corrupt, nothing changed.
    d = _queue()
    _make("fifo", d, SEG1)
    before = _state(d)
    try:
        ddq.Queue(d, on_corrupt="salvage", **OPTS)
    except ddq.Corrupt as e:
        assert SEG1 + " is not a regular file" in str(e), str(e)
    else:
        raise AssertionError("opened beside a FIFO segment")
    assert _state(d) == before
