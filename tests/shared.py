# Steps two or more test modules of the shared suite take, kept out of support.py so that the
# modules that do not need them pay no heap for them on a small board. Subset Python.
#
#   drain(ob, limit)             get and ack every message an Outbox has ready
#   cut_copy(src, synced)        a copy of a queue directory as a power cut leaves it
#   every_state(q, n, claims)    n items, then `claims` of them acked, retried, quarantined, held
import support


def drain(ob, limit=1000):
    """Get and ack what the Outbox ob has ready (at most limit messages); returns them."""
    out = []
    for _ in range(limit):
        m = ob.get()
        if m is None:
            break
        out.append(m)
        ob.ack(m)
    return out


def cut_copy(src, synced):
    """A fresh copy of the queue directory src as a power cut leaves it: each file cut to the
    length synced[path] says was synced (files it does not name are whole), no queue.lock."""
    dst = support.tmpdir()
    for name in support.listdir_sorted(src):
        if name == "queue.lock":
            continue
        data = support.read_file(src + "/" + name)
        n = synced.get(src + "/" + name)
        support.write_file(dst + "/" + name, data if n is None else data[0:n])
    return dst


def every_state(q, n, claims):
    """Enqueue n payloads of varied length, then claim `claims` of them in turn: ack one, retry
    the next (500 ms), quarantine the third with a reason, leave the fourth claimed."""
    for k in range(n):
        q.enqueue(b"payload %d " % k + b"x" * (k % 23))
    for k in range(claims):
        c = q.claim(1000)
        r = k % 4
        if r == 0:
            q.ack(c.seq)
        elif r == 1:
            q.retry(c.seq, 500)
        elif r == 2:
            q.quarantine(c.seq, b"reason %d" % k)
