"""Outbox(lock=True) when a caller is killed as it takes the lock (OUTBOX [E16], issue 35): an
exception delivered to a thread blocked in the lock's acquire (an asynchronous exception,
PyThreadState_SetAsyncExc; KeyboardInterrupt has the same window in the main thread) is raised
as the acquire returns. Before, that was outside the `try` whose `finally` releases, so the lock
stayed held and every later call of every thread waited for ever. CPython only (async
exceptions, real threads); every wait here is bounded."""

# EVIDENCE-OF: E16
import ctypes
import sys
import threading

import ddq_outbox

BOUND_S = 10.0


class Killed(BaseException):
    """What an asynchronous exception delivers (a BaseException, like KeyboardInterrupt)."""


def _blocked_in_locked(t):
    # Thread t is inside ddq_outbox's lock wrapper, waiting for the lock.
    f = sys._current_frames().get(t.ident)
    return f is not None and f.f_code.co_name == "call" and "ddq_outbox" in f.f_code.co_filename


def _until(cond, what):
    ev = threading.Event()
    for _ in range(int(BOUND_S / 0.001)):
        if cond():
            return
        ev.wait(0.001)
    raise AssertionError("never: " + what)


def test_a_caller_killed_as_it_takes_the_lock_leaves_it_free(tmp_path):
    ob = ddq_outbox.Outbox(str(tmp_path / "q"), lock=True, clock=lambda: 1000)
    ob.put("t", b"x")
    acquire, release = ob._lk
    assert acquire()  # the test holds the Outbox's lock
    out = []

    def victim():
        try:
            ob.qsize()
        except Killed:
            out.append("killed")

    t = threading.Thread(target=victim, daemon=True)
    t.start()
    _until(lambda: _blocked_in_locked(t), "the victim waits for the lock")
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(t.ident), ctypes.py_object(Killed)
    )
    assert n == 1
    release()  # the victim takes the lock, then meets Killed
    t.join(BOUND_S)
    assert not t.is_alive() and out == ["killed"]
    res = []
    t2 = threading.Thread(target=lambda: res.append(ob.qsize()), daemon=True)
    t2.start()
    t2.join(BOUND_S)
    assert res == [1], "the lock stayed held: a later call waited for ever"
    ob.close()
