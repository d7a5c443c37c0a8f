# The tail cut by copy + rename (SPEC R12, R21, R22) against the C library's view of every crash
# state (SPEC §12, DESIGN §7): libddq must refuse the directory or see the items ddq sees, and ddq
# must never delete a leftover holding records its segment does not. libddq's view is modelled by
# tests/libddqmodel.py (what ddq.c at 9eb47a95 refuses and ignores). Shared suite: the crash
# points are taken by a storage that stops inside the cut; FAT's rename over an existing file
# (remove, then rename) is emulated so that "segment gone, copy left" is reached on every fs.
import support

# ddq, ddqfmt and libddqmodel (its writer: no R23, SPEC V3) beside the runner: every test met
# MemoryError on the 64-bit 140 KiB model once libddqmodel wrote as libddq does (issue 35).
support.needs_heap(160 * 1024, support.MARGIN_HEAP, 128 * 1024)
import ddq  # noqa: E402
import ddqfmt  # noqa: E402
import libddqmodel  # noqa: E402

T0 = 1767225600000
OPTS = {"segment_bytes": 256, "max_payload_bytes": 16, "max_items": 64, "max_segments": 64}
SEQS = list(range(1, 10))


class Crash(Exception):
    pass


class CutStorage(ddq.PosixStorage):
    """No truncate (MicroPython's case, S8): tails are cut by copy + rename. fat: a rename over an
    existing file is remove + rename. crash: stop the cut at "copy" (half the copy written),
    "rename" (copy synced, not renamed), "split" (FAT: segment removed, copy not renamed) or
    "renamed" (after the rename, before the directory sync)."""

    def __init__(self, fat=False, crash=None):
        super().__init__()
        self.can_truncate = False
        self.fat = fat
        self.crash = crash
        self.stage = None
        self.renames = 0

    def open(self, path, mode):
        f = super().open(path, mode)
        if path.endswith(".reserve") and mode == "wb":
            self.stage = f
        return f

    def write(self, f, buf):
        if f is self.stage and self.crash == "copy":
            super().write(f, buf[0 : len(buf) // 2])
            raise Crash()
        super().write(f, buf)

    def rename(self, src, dst):
        if src.endswith(".reserve"):
            self.renames += 1
            if self.crash == "rename":
                raise Crash()
            if self.fat and self.kind(dst) == 1:
                self.remove(dst)
                if self.crash == "split":
                    raise Crash()
            super().rename(src, dst)
            if self.crash == "renamed":
                raise Crash()
            return
        super().rename(src, dst)


def _q(d, storage=None):
    return ddq.Queue(d, clock=support.FakeClock(T0), storage=storage, **OPTS)


def _payload(i):
    return b"item-%02d-padding." % i  # 16 bytes: a 64-byte record, four to a segment


def _nine(d):
    """Items 1-4 in segment 0, 5-8 in segment 1, 9 in segment 2 (the issue's queue)."""
    q = _q(d)
    for i in SEQS:
        assert q.enqueue(_payload(i)) == i
    q.close()
    segs = [n for n in support.listdir_sorted(d) if ddqfmt.parse_seg_name(n) is not None]
    assert segs == [ddq.segment_name(0, k) for k in range(3)], segs
    return d + "/" + ddq.segment_name(0, 2)


def _ddq_items(d, storage=None):
    q = _q(d, storage)
    try:
        out = [it.seq for it in q.items()]
        for s in out:
            assert q.read(s) == _payload(s)
    finally:
        q.close()
    return out


def _libddq_agrees_or_refuses(d, want):
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "corrupt" or v[1] == want, v
    return v


def test_issue16_a_leftover_cut_then_libddq_writes():
    # EVIDENCE-OF: R22 V4 N5
    d = support.tmpdir() + "/q"
    seg = _nine(d)
    support.write_file(seg + ".cut", support.read_file(seg))
    import os

    os.remove(seg)  # an older ddq's cut, cut by FAT between remove and rename
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "ok" and v[1] == SEQS[:8] and v[2] == 9, v  # libddq ignores .cut: 8 of 9
    assert libddqmodel.enqueue(d, b"new", OPTS["segment_bytes"]) == 9  # seq 9 again
    before = libddqmodel.snapshot(d)
    support.raises(ddq.Corrupt, _q, d)  # the .cut holds a seq 9 the segment does not
    assert libddqmodel.snapshot(d) == before  # both kept, nothing renamed or removed


def test_issue16_the_staged_copy_is_refused_by_libddq():
    # EVIDENCE-OF: R21 R22 V4
    d = support.tmpdir() + "/q"
    seg = _nine(d)
    support.write_file(seg + ".reserve", support.read_file(seg))
    import os

    os.remove(seg)  # this ddq's cut, cut by FAT between remove and rename
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "corrupt" and "reserve" in v[4], v
    libddqmodel.apply(d, v[3])
    assert _ddq_items(d) == SEQS  # adopted
    assert ddq.segment_name(0, 2) + ".reserve" not in support.listdir_sorted(d)
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "ok" and v[1] == SEQS, v


def test_a_single_segment_copy_survives_libddq_creating_segment_0():
    # EVIDENCE-OF: R22
    d = support.tmpdir() + "/q"
    q = _q(d)
    q.enqueue(_payload(1))
    q.enqueue(_payload(2))
    q.close()
    seg = d + "/" + ddq.segment_name(0, 0)
    support.write_file(seg + ".reserve", support.read_file(seg))
    import os

    os.remove(seg)
    v = libddqmodel.view(libddqmodel.snapshot(d))
    # no segment: libddq creates an empty segment 0 during recovery, then refuses the copy
    assert v[0] == "corrupt" and v[3] == {ddq.segment_name(0, 0): b""}, v
    libddqmodel.apply(d, v[3])
    assert support.file_size(seg) == 0
    assert _ddq_items(d) == [1, 2]  # the empty segment holds nothing: the copy is adopted


def test_every_crash_state_of_the_cut():
    # EVIDENCE-OF: R12 R21 R22 S4 S8 C9
    tail = ddqfmt.encode_record(ddqfmt.T_DATA, 10, 0, _payload(10))[0:30]
    base = support.tmpdir() + "/base"
    seg = _nine(base)
    support.write_file(seg, support.read_file(seg) + tail)  # a torn tail after item 9
    name = ddq.segment_name(0, 2)
    n = 0
    for fat in (False, True):
        for crash in ("copy", "rename", "split", "renamed", None):
            if crash == "split" and not fat:
                continue
            n += 1
            d = support.tmpdir() + "/c%d" % n
            support.copytree(base, d)
            fs = CutStorage(fat, crash)
            try:
                items = _ddq_items(d, fs)
                assert crash is None and items == SEQS, (crash, items)
            except Crash:
                assert crash is not None
            names = support.listdir_sorted(d)
            if crash in ("rename", "split"):
                assert name + ".reserve" in names, names
            if crash == "split":
                assert name not in names, names
            # libddq refuses every state holding the copy, or sees items 1-9
            v = _libddq_agrees_or_refuses(d, SEQS)
            assert (v[0] == "corrupt") == (
                support.file_size(d + "/" + name + ".reserve") > 0
                if name + ".reserve" in names
                else False
            ), (crash, v)
            # ddq recovers every record (cutting again where needed) and leaves no copy
            assert _ddq_items(d, CutStorage(fat)) == SEQS, (fat, crash)
            names = support.listdir_sorted(d)
            assert name + ".reserve" not in names and support.file_size(d + "/" + name) == 64
            v = libddqmodel.view(libddqmodel.snapshot(d))
            assert v[0] == "ok" and v[1] == SEQS and not v[3], v


def test_a_tail_with_nothing_before_it_is_emptied_in_place():
    # EVIDENCE-OF: R12 R21 R23
    d = support.tmpdir() + "/q"
    _nine(d)
    seg3 = d + "/" + ddq.segment_name(0, 3)
    support.write_file(seg3, ddqfmt.encode_record(ddqfmt.T_DATA, 10, 0, b"x")[0:20])
    fs = CutStorage(True)
    assert _ddq_items(d, fs) == SEQS
    assert fs.renames == 0  # no staged copy, no rename
    # emptied, then removed: an empty last segment past the boundary is a lost rotation (R23)
    names = support.listdir_sorted(d)
    assert ddq.segment_name(0, 3) not in names and ddq.segment_name(0, 2) in names
    assert ddq.segment_name(0, 3) + ".reserve" not in names


def test_a_zero_filled_copy_is_not_data():
    # EVIDENCE-OF: R22 S5
    # a copy whose size ran ahead of its data (not yet synced): zeros after part of the prefix
    d = support.tmpdir() + "/q"
    seg = _nine(d)
    data = support.read_file(seg)
    support.write_file(seg + ".reserve", data[0:40] + bytes(len(data) - 40))
    assert _ddq_items(d) == SEQS
    assert ddq.segment_name(0, 2) + ".reserve" not in support.listdir_sorted(d)


def test_without_ddq_cut_a_leftover_is_refused_and_kept():
    # EVIDENCE-OF: R22
    import sys

    d = support.tmpdir() + "/q"
    seg = _nine(d)
    support.write_file(seg + ".reserve", support.read_file(seg))
    import os

    os.remove(seg)
    before = libddqmodel.snapshot(d)
    saved = sys.modules.get("ddq_cut")
    sys.modules["ddq_cut"] = None  # a board that shipped ddq without it
    try:
        support.raises(ddq.Corrupt, _q, d)
    finally:
        if saved is None:
            del sys.modules["ddq_cut"]
        else:
            sys.modules["ddq_cut"] = saved
    assert libddqmodel.snapshot(d) == before
    assert _ddq_items(d) == SEQS  # with it: adopted


def test_salvage_reads_a_staged_copy_whose_segment_is_missing():
    # EVIDENCE-OF: K2 R22
    # On the 140 KiB board of tests/host/test_host_smallheap.py the import of ddq_salvage (20 KB)
    # beside this module's own (ddqfmt, libddqmodel: 17 KB) and the runner ran out of heap.
    support.needs_heap(
        192 * 1024,
        "ddq_salvage (20 KB imported) beside this module's codec "
        "and model (17 KB) and the test runner",
    )
    import ddq_salvage

    d = support.tmpdir() + "/q"
    seg = _nine(d)
    support.write_file(seg + ".reserve", support.read_file(seg))
    import os

    os.remove(seg)
    support.write_file(d + "/" + ddq.segment_name(0, 3) + ".reserve", b"")  # an empty spare
    out = support.tmpdir() + "/out"
    rep = ddq_salvage.salvage(d, out, **OPTS)
    assert rep["lost_seqs"] == [] and rep["kept"] == 9, rep
    assert _ddq_items(out) == SEQS


def test_issue16_libddq_appended_to_the_segment_before():
    # EVIDENCE-OF: R22 R5 V4
    # the old .cut again, but libddq's seq 9 fits in segment 1: the .cut is adopted and the
    # replay refuses the reused seq; every byte of both writers is still on disk
    d = support.tmpdir() + "/q"
    q = _q(d)
    for p in [_payload(1)] * 4 + [b"", b"", b"", b"y", _payload(9)]:
        q.enqueue(p)
    q.close()
    seg = d + "/" + ddq.segment_name(0, 2)
    old = support.read_file(seg)
    support.write_file(seg + ".cut", old)
    import os

    os.remove(seg)
    assert libddqmodel.enqueue(d, b"new", OPTS["segment_bytes"]) == 9
    assert ddq.segment_name(0, 2) not in support.listdir_sorted(d)  # appended to segment 1
    support.raises(ddq.Corrupt, _q, d)
    assert support.read_file(seg) == old  # renamed back, nothing deleted
    v = libddqmodel.view(libddqmodel.snapshot(d))
    assert v[0] == "corrupt", v  # and libddq refuses it too now
