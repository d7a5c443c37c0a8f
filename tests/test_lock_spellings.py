# One directory, two spellings (SPEC §7.6 L3, issue 35 item 6). On FAT a name is read without
# ASCII case and without trailing dots and spaces, so "outbox", "OUTBOX" and "outbox." are one
# directory: a second Queue on it must raise Locked, never open it twice (both enqueues
# returned seq 1 and one of them was gone after a reopen). A FAT short name (LONGQU~1 for
# longqueuename) is refused. Where names keep their case (POSIX, LittleFS) the spellings are
# distinct directories and open side by side. Shared suite: CPython and MicroPython over
# posix, lfs2 and fat; the filesystem's own answer decides which case a run checks.
import os

import ddq
import support

OPTS = {"segment_bytes": 1024, "max_payload_bytes": 100, "max_items": 50, "max_segments": 8}


def _exists(p):
    try:
        os.stat(p)
        return True
    except OSError:
        return False


def _payloads(d):
    with ddq.Queue(d, **OPTS) as q:
        return [q.read(it.seq) for it in q.items()]


def test_two_spellings_of_one_directory_are_locked():
    # EVIDENCE-OF: L3
    base = support.tmpdir()
    d = base + "/outbox"
    q = ddq.Queue(d, **OPTS)
    assert q.enqueue(b"first") == 1
    folds = _exists(base + "/OUTBOX")  # the filesystem's answer: FAT reads names without case
    others = ["/OUTBOX", "/Outbox.", "/outbox. .", "/outbox "]
    try:
        for o in others:
            if folds:
                assert _exists(base + o), o  # one directory ...
                support.raises(ddq.Locked, ddq.Queue, base + o, **OPTS)  # ... one Queue
            else:  # a directory of its own: opens beside the first
                with ddq.Queue(base + o, **OPTS) as q2:
                    assert q2.enqueue(b"other") == 1
        if folds:  # FatFs reads "\\" as "/" too
            support.raises(ddq.Locked, ddq.Queue, base + "\\outbox", **OPTS)
    finally:
        q.close()
    assert _payloads(d) == [b"first"]
    if folds:
        assert _payloads(base + "/OUTBOX") == [b"first"]  # the same directory, nothing lost
    else:
        for o in others:
            assert _payloads(base + o) == [b"other"], o


def test_fat_short_name_is_refused():
    # EVIDENCE-OF: L3
    base = support.tmpdir()
    d = base + "/longqueuename"
    q = ddq.Queue(d, **OPTS)
    try:
        short = base + "/LONGQU~1"
        if not _exists(short):
            raise support.Skip("no 8.3 short names on this filesystem")
        e = support.raises(ddq.InvalidArgument, ddq.Queue, short, **OPTS)
        assert "LONGQU~1" in str(e), str(e)
    finally:
        q.close()
    support.raises(ddq.InvalidArgument, ddq.Queue, base + "/LONGQU~1", **OPTS)  # closed: too
    assert _payloads(d) == []
    # a name that holds "~" and is listed is a name like any other
    with ddq.Queue(base + "/q~1", **OPTS) as q3:
        assert q3.enqueue(b"x") == 1
