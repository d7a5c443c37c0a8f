"""ddq_cut: finishing a tail cut that a crash interrupted (SPEC R12, R21, R22), loaded on demand.

Where truncate is missing (MicroPython), ddq.Queue cuts a torn tail by copying the valid prefix
to <segment>.reserve and renaming it over the segment. Only a recovery that finds such a leftover
(or an older ddq's <segment>.cut) imports this module, so that the common open does not pay for
it in import heap. Without it, such a recovery refuses with Corrupt and changes nothing.
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import ddq
from ddq import const

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any


# ============================================================================ leftover of a cut
def leftover(q: "Any", name: str, seg: str, gen: int) -> None:
    """Finish or refuse the leftover `name` of segment `seg` in queue q's directory [R22]: deleted
    when the segment holds all its bytes (the rename never happened; trailing zeros are an
    unsynced copy's, not data), renamed to the segment when that is missing or empty (FAT's
    rename-over removed the old file first, or libddq, refusing the directory, created an empty
    segment 0), else Corrupt with both kept: the segment was written after the copy was made,
    which only a reader that ignored the copy can have done (libddq, reusing its seqs). gen:
    the selected generation (a leftover of another one is never renamed)."""
    fs, lp, sp = q._o.fs, q._path(name), q._path(seg)
    k = fs.kind(sp)
    m = fs.size(sp) if k == 1 else 0
    n = fs.size(lp)
    if n > q._o.seg_bytes:  # a cut's copy is a segment's prefix [R15]: a bigger one is no cut
        raise ddq._err("Corrupt", "%s is larger than segment_bytes", name)
    b = memoryview(bytearray(128))
    src = fs.open(lp, "rb")
    dst = fs.open(sp, "rb") if m else None
    e, d = 0, n  # its length without trailing zeros; the first offset where the two differ
    try:
        for off in range(0, n, 64):
            got = q._read_exact(src, off, b[0:64])
            if dst is not None:
                q._read_exact(dst, off, b[64:128])
            for i in range(got):
                if b[i]:
                    e = off + i + 1
                if d == n and (off + i >= m or b[i] != b[64 + i]):
                    d = off + i
    finally:
        fs.close(src)
        if dst is not None:
            fs.close(dst)
    if d >= e:
        fs.remove(lp)
    elif not m and k < 2 and (ddq.parse_segment_name(seg) or (-1,))[0] == gen:
        fs.rename(lp, sp)
    else:
        raise ddq._err(
            "Corrupt",
            "%s holds bytes from offset %d that %s does not: both kept [R22]",
            name,
            d,
            seg,
        )
    fs.sync_dir(q._o.dir)
