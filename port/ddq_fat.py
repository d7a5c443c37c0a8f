"""ddq_fat: the lock key of a queue directory on FAT (SPEC L3), loaded only there.

PosixStorage.lock (port/ddq_recover.py) keys a directory by its absolute path. On FAT one
directory has many spellings; ddq_recover imports this module only when the directory's names
fold case (FAT), so that an open elsewhere does not pay for it in import heap (DESIGN §4.1).
"""

__version__ = "0.1.0"

# Copyright (c) 2026 the ddq authors. BSD-3-Clause.

import os

import ddq
from ddq import const

TYPE_CHECKING = const(0)
if TYPE_CHECKING:
    from typing import Any


def key(p: str, path: str, f: "Any") -> str:
    """The lock key of the absolute path p (path: as given) as FatFs reads it [L3].

    "\\" separates too; ASCII case and a name's trailing dots and spaces do not count. (A
    control character ends a FatFs path: such a directory's queue.lock is the directory itself,
    which opens nothing.) Refused, f (queue.lock) closed first: a name FAT may read as another's
    8.3 short name (LONGQU~1 for longqueuename: one with "~" that its directory does not list,
    any case): InvalidArgument; a key this process holds: Locked."""
    out: "list[str]" = []
    for part in p.replace("\\", "/").lower().split("/"):
        if part == "..":
            if out:
                out.pop()
        elif part and part != ".":
            out.append(part.rstrip(". "))
    for k in range(len(out)):
        if "~" in out[k]:
            for e in os.listdir("/" + "/".join(out[:k])):
                if e.lower() == out[k]:
                    break
            else:
                f.close()
                raise ddq._err(
                    "InvalidArgument", path + ": may be a FAT short name; use the long name"
                )
    k2 = "/" + "/".join(out)
    if k2 in ddq.PosixStorage._held:
        f.close()
        raise ddq._err("Locked", "locked by this process: " + path)
    return k2
