# Part 2: block-level power cuts on the MicroPython unix port (run with .venv/bin/micropython).
#
#   micropython tests/torture/mp_powercut.py FS MODE SEED NOPS [STRIDE] [OFFSET] [index=N]
#     FS    lfs | fat          (vfs.VfsLfs2 on 4096-byte blocks, vfs.VfsFat on 512-byte blocks)
#     MODE  show  - debug: list the image at cut OFFSET (STRIDE 2: torn), then recover it
#           snap  - one recorded run; for every program/erase op N the image of a cut there
#                   (drop: op N and all later lost) and of op N torn half-way (torn)
#           raise | errno - re-run the workload per cut point N (N = OFFSET, OFFSET+STRIDE, ...):
#                   op N raises PowerCut through the file system's C code / returns -5 (EIO);
#                   every later op is dropped. Exercises ddq's error paths, not only the image.
#
# Every cut image is remounted as a COPY with a new VFS object, the queue reopened (recovery), and
# judged by tmodel.check against the history of the run. Prints one JSON summary line last.
#     index=N  the workload runs with index_bytes=N (tmodel.params: 1 writes queue.index at every
#              close + reopen and save_index step); every cut image is then opened through the
#              index and, on another copy, with index_bytes=0: both must agree (SPEC 12.1).
import json
import os
import sys

import vfs

sys.path.insert(0, "tests/torture")
sys.path.insert(0, "port")
sys.path.append("tests")  # tests/ddqfmt.py, tests/blockdev.py
import edges
import fatcheck
import tmodel

from blockdev import RAMBlockDev

if "standin" in sys.argv:
    import standin as ddq
else:
    import ddq


class PowerCut(Exception):
    pass


class BD(RAMBlockDev):
    """tests/blockdev.py's RAM block device; counts program/erase ops; can cut power at one."""

    def __init__(self, bs, nb, data=None):
        RAMBlockDev.__init__(self, bs, nb, data)
        self.bs = bs
        self.nb = nb
        self.ops = 0
        self.cut = -1
        self.mode = "raise"
        self.dead = False
        self.rec = None  # list of (addr, bytes) when recording; erase is (addr, None)

    def _op(self, a, b, erase):
        if self.dead:
            return 0
        k = self.ops
        self.ops += 1
        if k == self.cut:
            self.dead = True
            if self.mode == "raise":
                raise PowerCut("cut at op %d" % k)
            if self.mode == "errno":
                return -5
            return 0
        if self.rec is not None:
            self.rec.append((a, None if erase else bytes(b), len(b) if not erase else b))
        if erase:
            self.data[a : a + b] = b"\xff" * b
        else:
            self.data[a : a + len(b)] = (
                b  # copy now: buf points into C memory valid only during the call
            )
        return 0

    def program(self, a, buf):
        return self._op(a, buf, False)

    def erase(self, a):
        return self._op(a, self.bs, True)


class CountingStorage(ddq.PosixStorage):
    """ddq's own storage, counting open handles (none may stay open after close()). The lock
    file's handle is ddq's lock token, closed by unlock(), so it is not counted here."""

    opened = 0

    def open(self, path, mode):
        h = ddq.PosixStorage.open(self, path, mode)
        if not path.endswith("queue.lock"):
            CountingStorage.opened += 1
        return h

    def close(self, h):
        CountingStorage.opened -= 1
        ddq.PosixStorage.close(self, h)


INDEX = None
for _a in sys.argv:
    if _a.startswith("index="):
        INDEX = int(_a[6:])
GEOM = {"lfs": (4096, 32), "fat": (512, 256)}
# Mount points are unique per task: ddq's lock on the unix port is an abstract socket named after
# the path, shared by every process on the machine, and run_ci runs two micropython processes.
TAG = "/t_" + "_".join(a.replace("=", "") for a in sys.argv[1:8] if a != "standin") + "_"
CHK = TAG + "chk"
DIF = TAG + "dif"
LFS_IO = 256  # read/prog size as RP2 mounts it (progsize=256); the cache is 4x that
PROBE_EVERY = 8  # every 8th cut also enqueues after recovery (sequence never reused)
CONT_EVERY = 10  # every 10th cut is also written on, closed and reopened (edges.py, part 1c)


def mkfs(fs):
    bs, nb = GEOM[fs]
    bd = BD(bs, nb)
    if fs == "lfs":
        vfs.VfsLfs2.mkfs(bd, readsize=LFS_IO, progsize=LFS_IO)
    else:
        vfs.VfsFat.mkfs(bd)
    return bd


def mount(fs, bd, where):
    v = vfs.VfsLfs2(bd, readsize=LFS_IO, progsize=LFS_IO) if fs == "lfs" else vfs.VfsFat(bd)
    vfs.mount(v, where)


def umount(where):
    try:
        vfs.umount(where)
    except OSError:
        pass


def run_workload(fs, base, seed, nops, cut=-1, mode="raise", record=False, where=None):
    if where is None:
        where = TAG + "rec"
    bd = BD(base.bs, base.nb, bytearray(base.data))
    if record:
        bd.rec = []
    mount(fs, bd, where)
    bd.ops = 0
    opts = tmodel.params(seed, None, INDEX)
    if opts.get("reclaim_step"):
        # A staged queue answers admission at its limit on the shadow in RAM (SPEC C14) where the
        # inline mode copies the queue again and again, so its workload writes far less: three
        # times the operations keep its cut points many (crash.py doubles them for the same
        # reason).
        nops *= 3
    wl = tmodel.Workload(
        ddq, where + "/q", CountingStorage, seed, nops, opts=opts, pos=lambda: bd.ops
    )
    bd.cut = cut
    bd.mode = mode
    err = None
    try:
        wl.run(stop=lambda i: bd.dead)
    except PowerCut as e:
        err = e
    except OSError as e:
        err = e
    except ddq.Error as e:  # the first open failed (IOFailure after an errno cut)
        err = e
    finally:
        try:
            wl.close()
        except Exception:
            pass
        umount(where)
    return wl, bd, err


class Judge:
    def __init__(self, fs, wl, seed):
        self.fs = fs
        self.wl = wl
        self.seed = seed
        self.res = {
            "cuts": 0,
            "lost": 0,
            "resurrected": 0,
            "reused_seq": 0,
            "unexpected": 0,
            "mount_fail": 0,
            "repairs": 0,
            "fat_damaged": 0,
            "fat_fs_damage": 0,
            "index_compared": 0,
            "index_opens": 0,
            "index_mismatch": 0,
            "index_write_cuts": 0,
            "continued": 0,
            "bricked": 0,
        }
        self.index_cmp = bool(wl.opts.get("index_bytes"))
        self.damage = None  # fatcheck's verdict on the image being judged (FAT only)
        self.fail = []

    def bad(self, cat, detail, k, how):
        if self.damage is not None:
            # the file system itself is broken at this cut (FatFs is not power-fail safe)
            self.res["fat_fs_damage"] += 1
            if self.res["fat_fs_damage"] <= 2 and len(self.fail) < 6:
                self.fail.append(
                    {
                        "fs": self.fs,
                        "seed": self.seed,
                        "cut_op": k,
                        "how": how,
                        "category": "info",
                        "detail": "on a damaged FAT (%s): %s" % (self.damage, detail[:200]),
                    }
                )
            return
        self.res[cat] = self.res.get(cat, 0) + 1
        if len(self.fail) < 4:
            i = self.wl.inflight(k)
            self.fail.append(
                {
                    "fs": self.fs,
                    "seed": self.seed,
                    "cut_op": k,
                    "how": how,
                    "op_in_flight": repr(
                        self.wl.ops[i] if i is not None and i < len(self.wl.ops) else None
                    ),
                    "category": cat,
                    "detail": detail[:400],
                }
            )

    def check(self, img, k, how, bs, nb):
        self.res["cuts"] += 1
        self.damage = fatcheck.check(img) if self.fs == "fat" else None
        if self.damage is not None:
            self.res["fat_damaged"] += 1
        if self.fs == "fat" and self.damage is None:
            # Differential attribution: judge on the FAT image; if that fails, copy the same
            # files onto MemFS and judge again. Passing there means FatFs itself misbehaved on
            # this cut image (seen: a new file's entry vanishing), not ddq.
            held = self.fail
            counts = dict(self.res)
            self.fail = []
            self._check_img(img, k, how, bs, nb)
            if (
                self.res["unexpected"]
                + self.res["lost"]
                + self.res["resurrected"]
                + self.res["reused_seq"]
                > counts["unexpected"]
                + counts["lost"]
                + counts["resurrected"]
                + counts["reused_seq"]
            ):
                why = self._differential(img, k, bs, nb)
                if why is not None:
                    for key in ("unexpected", "lost", "resurrected", "reused_seq"):
                        self.res[key] = counts[key]
                    self.res["fat_fs_damage"] += 1
                    if self.res["fat_fs_damage"] <= 2:
                        self.fail = [
                            {
                                "fs": "fat",
                                "seed": self.seed,
                                "cut_op": k,
                                "how": how,
                                "category": "info",
                                "detail": "FatFs misbehaved, ddq passes on the same files (%s): %s"
                                % (why, self.fail[0]["detail"][:200] if self.fail else ""),
                            }
                        ]
                    else:
                        self.fail = []
            self.fail = held + self.fail
            return
        self._check_img(img, k, how, bs, nb)

    def _differential(self, img, k, bs, nb):
        import memfs

        files = {}
        bd = BD(bs, nb, bytearray(img))
        try:
            mount(self.fs, bd, DIF)
            try:
                for n in os.listdir(DIF + "/q"):
                    f = open(DIF + "/q/" + n, "rb")
                    try:
                        files["/q/" + n] = f.read()
                    finally:
                        f.close()
            finally:
                umount(DIF)
        except Exception as e:
            return "reading the cut image failed: %r" % (e,)
        memfs.MemFS.Locked = ddq.Locked
        wl = self.wl
        i = wl.inflight(k)
        if i is not None and i >= len(wl.ops):
            i = None
        allowed, returned = wl.allowed(i)
        try:
            q = ddq.Queue(
                "/q",
                storage=memfs.MemFS(files, ("/q",)),
                clock=tmodel.Clock(tmodel.CLOCK0 + 10**7),
                **wl.opts,
            )
        except Exception:
            return None
        try:
            if tmodel.check(q, allowed, returned, wl.opts.get("sync")):
                return None
            try:
                q.enqueue(b"probe")
            except ddq.Full:
                pass
        except Exception:
            return None
        finally:
            q.close()
        return "same files on MemFS recover and pass"

    def _check_img(self, img, k, how, bs, nb):
        bd = BD(bs, nb, bytearray(img))
        try:
            mount(self.fs, bd, CHK)
        except OSError as e:
            self.res["mount_fail"] += 1
            self.bad("unexpected", "mount failed: %r" % (e,), k, how)
            return
        got = None
        try:
            got = self._check(k, how)
        finally:
            umount(CHK)
        if got is not None and self.index_cmp:
            self._index_compare(img, k, how, bs, nb, got)

    def _index_compare(self, img, k, how, bs, nb, got):
        # The same cut image, another copy, opened with index_bytes=0 (a full replay): the same
        # error or the identical state as the open through queue.index [X4][X5].
        i = self.wl.inflight(k)
        if (
            i is not None
            and i < len(self.wl.ops)
            and self.wl.ops[i][0] in ("reopen", "save_index")
        ):
            self.res["index_write_cuts"] += 1
        self.res["index_compared"] += 1
        if got[0] == "ok" and got[2]:
            self.res["index_opens"] += 1
        bd = BD(bs, nb, bytearray(img))
        try:
            mount(self.fs, bd, DIF)
        except OSError as e:
            self.bad("unexpected", "mount of a second copy failed: %r" % (e,), k, how)
            return
        kw = dict(self.wl.opts)
        kw["index_bytes"] = 0
        try:
            try:
                q = ddq.Queue(
                    DIF + "/q",
                    clock=tmodel.Clock(tmodel.CLOCK0 + 1000 * (len(self.wl.ops) + 10)),
                    storage=CountingStorage(),
                    **kw,
                )
            except Exception as e:
                want = ("err", type(e).__name__, str(e))
            else:
                try:
                    want = ("ok", tmodel.index_view(q))
                except Exception as e:
                    want = ("err", type(e).__name__, "after open: %s" % e)
                finally:
                    q.close()
        finally:
            umount(DIF)
        if got[0] != want[0] or (got[0] == "err" and got != want):
            self.bad(
                "index_mismatch",
                "index open %r, full replay %r"
                % (got[:3] if got[0] == "err" else "ok", want[:3] if want[0] == "err" else "ok"),
                k,
                how,
            )
        elif got[0] == "ok" and got[1] != want[1]:
            self.bad(
                "index_mismatch",
                "index open and full replay differ: " + tmodel.index_diff(got[1], want[1]),
                k,
                how,
            )

    def _check(self, k, how):
        wl = self.wl
        i = wl.inflight(k)
        if i is not None and i >= len(wl.ops):
            i = None
        allowed, returned = wl.allowed(i)
        clock = tmodel.Clock(tmodel.CLOCK0 + 1000 * (len(wl.ops) + 10))
        CountingStorage.opened = 0
        got = None
        try:
            q = ddq.Queue(CHK + "/q", clock=clock, storage=CountingStorage(), **wl.opts)
        except Exception as e:
            self.bad(
                "unexpected", "reopen after cut raised %s: %s" % (type(e).__name__, e), k, how
            )
            return ("err", type(e).__name__, str(e))
        try:
            for cat, detail in tmodel.check(q, allowed, returned, wl.opts.get("sync")):
                self.bad(cat, detail, k, how)
            if self.index_cmp:
                got = ("ok", tmodel.index_view(q), q.index_used)
            st = q.stats()
            if st.recovered_tail_bytes:
                self.res["repairs"] += 1
            if self.res["cuts"] % PROBE_EVERY == 0:
                try:
                    seq = q.enqueue(b"probe")
                    if seq <= returned:
                        self.bad(
                            "reused_seq", "probe got %d, %d was returned" % (seq, returned), k, how
                        )
                except ddq.Full:
                    pass
            cont = self.res["cuts"] % CONT_EVERY == 0 and self.damage is None
            state = tmodel.recovered_state(q) if cont else None
        except Exception as e:
            self.bad("unexpected", "checking raised %s: %s" % (type(e).__name__, e), k, how)
            state = None
        finally:
            try:
                q.close()
            except Exception as e:
                self.bad("unexpected", "close raised %r" % (e,), k, how)
        if CountingStorage.opened:
            self.bad("unexpected", "%d file handles left open" % CountingStorage.opened, k, how)
        if state is not None:
            # part 1c: the recovered directory, written on and reopened (a refusal: bricked)
            self.res["continued"] += 1
            for cat, detail in edges.continue_state(
                ddq,
                CountingStorage(),
                CHK + "/q",
                wl.opts,
                state,
                self.seed * 7919 + k,
                clock,
                grow=self.res["continued"] % 4 == 0,
            ):
                self.bad(cat, detail, k, how)
        return got


def main():
    fs = sys.argv[1]
    mode = sys.argv[2]
    seed = int(sys.argv[3])
    nops = int(sys.argv[4])
    stride = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5].isdigit() else 1
    offset = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[6].isdigit() else 0
    base = mkfs(fs)
    bs, nb = GEOM[fs]
    wl, bd, err = run_workload(fs, base, seed, nops, record=True)
    total = len(bd.rec)
    out = {
        "fs": fs,
        "mode": mode,
        "seed": seed,
        "nops": len(wl.ops),
        "device_ops": total,
        "live_unexpected": len(wl.unexpected),
    }
    j = Judge(fs, wl, seed)
    for u in wl.unexpected[:2]:
        j.fail.append(
            {"fs": fs, "seed": seed, "where": "live run", "category": u[0], "detail": u[1]}
        )
    j.res["unexpected"] += len(wl.unexpected)
    if (
        mode == "show"
    ):  # debug: the directory at cut OFFSET (STRIDE 2: torn) before and after recovery
        img = bytearray(base.data)
        for k in range(offset + (1 if stride == 2 else 0)):
            a, b, n = bd.rec[k]
            if k == offset:  # torn: half of the op lands
                n = n // 2 if b is None else n
                b = b if b is None else b[: len(b) // 2]
            if b is None:
                img[a : a + n] = b"\xff" * n
            else:
                img[a : a + len(b)] = b
        print(
            "cut at op",
            offset,
            "in flight:",
            wl.ops[wl.inflight(offset)],
            "fsck:",
            fatcheck.check(img) if fs == "fat" else "-",
        )
        mount(fs, BD(bs, nb, img), CHK)
        try:
            for name in sorted(os.listdir(CHK + "/q")):
                print("  ", name, os.stat(CHK + "/q/" + name)[6])
            q = ddq.Queue(CHK + "/q", clock=tmodel.Clock(tmodel.CLOCK0 + 10**6), **wl.opts)
            print("recovered", tmodel._short(tmodel.recovered_state(q)))
            q.close()
        except Exception as e:
            print("raised", repr(e))
        finally:
            umount(CHK)
        return
    if mode == "snap":
        img = bytearray(base.data)
        tj = 0
        for k in range(total + 1):
            if k % stride == offset % stride:
                j.check(img, k, "drop", bs, nb)
            if k == total:
                break
            a, b, n = bd.rec[k]
            if k % stride == offset % stride:
                t = bytearray(img)
                if b is None:
                    t[a : a + n // 2] = b"\xff" * (n // 2)
                else:
                    h = len(b) // 2
                    t[a : a + h] = b[:h]
                j.check(t, k, "torn", bs, nb)
                tj += 1
            if b is None:
                img[a : a + n] = b"\xff" * n
            else:
                img[a : a + len(b)] = b
        out["torn"] = tj
    else:
        k = offset
        while k < total:
            where = (
                TAG + "r%d" % k
            )  # a fresh path: a lock leaked by one rerun must not block the next
            wl2, bd2, err2 = run_workload(fs, base, seed, nops, cut=k, mode=mode, where=where)
            # ddq's in-process lock (an abstract socket on the unix port) must be free again
            probe = BD(bs, nb, bytearray(bd2.data))
            try:
                mount(fs, probe, where)
                try:
                    ddq.Queue(where + "/q", clock=tmodel.Clock(), **wl.opts).close()
                except ddq.Locked as e:
                    j.bad(
                        "unexpected",
                        "lock still held in-process after the cut (%r; run error %r)" % (e, err2),
                        k,
                        mode,
                    )
                except Exception:
                    pass
            finally:
                umount(where)
            # The rerun is the recorded run up to the cut (same seed, same device ops), so the
            # recorded history judges it; check that the completed ops agree.
            done = [x for x in range(len(wl2.ops)) if x < len(wl2.ends) and wl2.ends[x] <= k]
            if not bd2.dead or [wl2.ops[x] for x in done] != [wl.ops[x] for x in done]:
                j.bad("unexpected", "rerun diverged before cut %d" % k, k, mode)
            j.check(bd2.data, k, mode, bs, nb)
            k += stride
    for key in j.res:
        out[key] = j.res[key]
    out["fail"] = j.fail
    print("RESULT " + json.dumps(out))


main()
