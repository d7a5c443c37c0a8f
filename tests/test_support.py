# Tests of tests/support.py itself, on every interpreter and filesystem the runners use.
# They prove the runners, not the queue, so they cite no SPEC requirement.
import support


def test_fake_clock_starts_advances_and_sets():
    clock = support.FakeClock()
    assert clock() == 1767225600000
    assert clock.advance(1500) == 1767225601500
    assert clock() == 1767225601500
    assert clock.set(5) == 5
    assert clock() == 5
    assert isinstance(support.FakeClock(7.9)(), int)


def test_raises_returns_the_exception():
    def boom(a, b=0):
        raise ValueError("bad %d %d" % (a, b))

    e = support.raises(ValueError, boom, 1, b=2)
    assert isinstance(e, ValueError)
    assert e.args[0] == "bad 1 2"
    assert isinstance(support.raises((KeyError, ValueError), boom, 3), ValueError)


def test_raises_fails_when_nothing_or_the_wrong_type_is_raised():
    e = support.raises(AssertionError, support.raises, ValueError, lambda: None)
    assert "nothing was raised" in str(e)
    e = support.raises(AssertionError, support.raises, KeyError, int, "x")
    assert "expected KeyError, got ValueError" in str(e)


def test_skip_is_an_exception():
    e = support.raises(support.Skip, _skip_now)
    assert str(e) == "no such capability"


def _skip_now():
    raise support.Skip("no such capability")


def test_tmpdir_is_fresh_empty_and_under_root():
    a = support.tmpdir()
    b = support.tmpdir()
    assert a != b
    assert a.startswith(support.ROOT + "/")
    assert support.listdir_sorted(a) == []
    support.write_file(a + "/x", b"1")
    assert support.listdir_sorted(a) == ["x"]
    assert support.listdir_sorted(b) == []


def test_write_read_size_and_list():
    d = support.tmpdir()
    data = bytes(range(256)) * 20
    support.write_file(d + "/b.bin", data)
    support.write_file(d + "/a.bin", b"")
    assert support.read_file(d + "/b.bin") == data
    assert support.file_size(d + "/b.bin") == 5120
    assert support.file_size(d + "/a.bin") == 0
    assert support.listdir_sorted(d) == ["a.bin", "b.bin"]
    support.write_file(d + "/b.bin", b"short")
    assert support.read_file(d + "/b.bin") == b"short"


def test_copytree_and_rmtree():
    src = support.tmpdir()
    support._makedirs(src + "/sub/deeper")
    support.write_file(src + "/top", b"T" * 5000)
    support.write_file(src + "/sub/deeper/leaf", b"L")
    dst = support.tmpdir() + "/copy"
    support.copytree(src, dst)
    assert support.listdir_sorted(dst) == ["sub", "top"]
    assert support.read_file(dst + "/top") == b"T" * 5000
    assert support.read_file(dst + "/sub/deeper/leaf") == b"L"
    support.rmtree(dst)
    assert _missing(dst)
    support.rmtree(dst)  # a missing path is not an error


def _missing(path):
    try:
        support.file_size(path)
    except OSError:
        return True
    return False


def test_copytree_from_the_c_fixtures_onto_the_filesystem_under_test():
    src = support.FIXTURES + "/basic"
    if _missing(src):
        raise support.Skip("fixtures not found at " + support.FIXTURES)
    dst = support.tmpdir() + "/basic"
    support.copytree(src, dst)
    names = support.listdir_sorted(src)
    assert "segment-00000000000000000000.log" in names
    assert support.listdir_sorted(dst) == names
    for name in names:
        assert support.read_file(dst + "/" + name) == support.read_file(src + "/" + name), name
    # The copy is writable although the fixtures are read-only.
    with open(dst + "/queue.lock", "ab") as f:
        f.write(b"x")
    assert support.file_size(dst + "/queue.lock") == 1
