# fatcheck: a minimal fsck for the FAT12/16 images of the power-cut sweep (subset Python).
#
# FatFs (VfsFat) is not power-fail safe: a cut between its FAT-table, directory and data writes
# can leave a directory or file whose cluster chain is broken or shared. Such an image is damaged
# below ddq, and what ddq does on it says nothing about ddq. mp_powercut.py asks check(img) first
# and counts a ddq failure on a damaged image as "fat_fs_damage", not as a ddq failure.
import struct


def _fat_get(fat, bits, n):
    if bits == 16:
        return struct.unpack_from("<H", fat, n * 2)[0]
    v = struct.unpack_from("<H", fat, n + n // 2)[0]
    return (v >> 4) if n & 1 else (v & 0xFFF)


def check(img):
    """Return None for a consistent image, else a one-line description of the damage."""
    bps, spc, rsv, nfats, nroot, tot16, media, fatsz = struct.unpack_from("<HBHBHHBH", img, 11)
    if bps != 512 or spc == 0 or nfats == 0:
        return "boot sector"
    tot = tot16 or struct.unpack_from("<I", img, 32)[0]
    root_secs = (nroot * 32 + bps - 1) // bps
    data0 = rsv + nfats * fatsz + root_secs
    nclus = (tot - data0) // spc
    bits = 12 if nclus < 4085 else 16
    fat = img[rsv * bps : (rsv + fatsz) * bps]
    eoc = 0xFF8 if bits == 12 else 0xFFF8
    csize = spc * bps
    used = {}

    def chain(start, what):
        out = []
        c = start
        for _ in range(nclus + 1):
            if c < 2 or c >= nclus + 2:
                return None, "%s: cluster %d out of range" % (what, c)
            if c in used:
                return None, "%s: cluster %d shared with %s" % (what, c, used[c])
            used[c] = what
            out.append(c)
            nxt = _fat_get(fat, bits, c)
            if nxt >= eoc:
                return out, None
            if nxt == 0:
                return None, "%s: cluster %d is marked free" % (what, c)
            c = nxt
        return None, "%s: cluster chain loops" % what

    def entries(raw, where, depth):
        if depth > 8:
            return "%s: too deep" % where
        for off in range(0, len(raw), 32):
            e = raw[off : off + 32]
            if e[0] == 0:
                # The end marker: every later entry is free too (FatFs zero-fills a cluster it
                # adds to a directory). A cut between the FAT write linking a new directory
                # cluster and that fill leaves stale bytes behind the marker; FatFs then places
                # new entries there, past the marker, where no listing or lookup finds them (a
                # created file vanishes: seen as a continuation that lost its segments).
                for off2 in range(off + 32, len(raw), 32):
                    if raw[off2] not in (0, 0xE5):
                        return "%s: entries after the end marker (an unfilled cluster)" % (
                            where or "/"
                        )
                return None
            if e[0] == 0xE5 or e[11] == 0x0F or e[11] & 0x08:
                continue
            name = bytes(e[0:11])
            if name[:2] in (b". ", b".."):
                continue
            start = struct.unpack_from("<H", e, 26)[0]
            size = struct.unpack_from("<I", e, 28)[0]
            what = "%s/%s" % (
                where,
                name.decode("latin-1").strip() if hasattr(name, "decode") else name,
            )
            if e[11] & 0x10:
                if start == 0:
                    return what + ": directory without clusters"
                cl, err = chain(start, what)
                if err:
                    return err
                sub = bytearray()
                for c in cl:
                    a = (data0 + (c - 2) * spc) * bps
                    sub += img[a : a + csize]
                err = entries(sub, what, depth + 1)
                if err:
                    return err
            else:
                if size == 0:
                    if start != 0:
                        cl, err = chain(start, what)
                        if err:
                            return err
                    continue
                if start == 0:
                    return what + ": %d bytes without clusters" % size
                cl, err = chain(start, what)
                if err:
                    return err
                if size > len(cl) * csize or size <= (len(cl) - 1) * csize:
                    return "%s: size %d does not match %d clusters" % (what, size, len(cl))
        return None

    root = img[(rsv + nfats * fatsz) * bps : data0 * bps]
    err = entries(root, "", 0)
    if err:
        return err
    # lost clusters: allocated in the FAT, reachable from no directory entry (e.g. a directory
    # chain cut short by a half-written FAT12 entry): chkdsk territory
    lost = 0
    for c in range(2, nclus + 2):
        if c not in used and _fat_get(fat, bits, c) != 0:
            lost += 1
    if lost:
        return "%d lost clusters" % lost
    return None
