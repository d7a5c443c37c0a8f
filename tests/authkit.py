# What tests/test_auth.py and tests/test_auth_aes.py share: their keys, an Outbox on a fake
# clock, a drain and hex. Its own module (not tests/shared.py, whose import costs the 140 KiB
# boards the heap the Outbox tests need: tests/host/test_host_qemu.py) so that the two halves of
# the authenticated-message tests each import on a small board. Subset Python.
import ddq_outbox
import support

T0 = 1767225600000
KEY = b"0123456789abcdef0123456789abcdef"  # 32 bytes
OTHER = b"fedcba9876543210fedcba9876543210"


def ob(d=None, **kw):
    kw.setdefault("seed", 7)
    clock = support.FakeClock(T0)
    return ddq_outbox.Outbox(d or support.tmpdir(), clock=clock, **kw)


def drain(o, limit=200):
    out = []
    for _ in range(limit):
        m = o.get()
        if m is None:
            break
        out.append(m)
        o.ack(m)
    return out


def hexs(b):
    return "".join(["%02x" % x for x in b])
