"""Independent reader of the DDQ on-disk format (STYLE rules 22, 26): fsck for ``ddq verify`` /
``ddq records``.

This package deliberately does NOT import ddq. Every constant and rule in it is written from the
format tables of docs/SPEC.md (which restate DDQ's C format): records §3, record types §4, manifest
§5, names §6, options §7.1, recovery §12, the recovery index §12.1. When ddq and this reader
disagree about a directory, one of them has a bug; tests compare both against directories written
by the C library.

Shaped like littlefs's readmdir.py + readtree.py, one step a module, each using only those before:
  format.py  constants; decode a record, the manifest, queue.index (the file alone); Report
  index.py   would ddq adopt queue.index (X4), and does it hold the replay's state (X3)?
  replay.py  scan(): the directory rules and the replay of every record, as recovery would
  report.py  the text of `ddq records`, `ddq verify` and the index line
(replay.py drives index.py's check along its walk and hands it the state it reached, so
index.py comes first and imports neither replay.py nor report.py.)

ddq's docs/SPEC.md adds a few recovery rules to the C ones ("Extension"); they are applied here
too, because verify answers "will ddq open this directory, and what will recovery change", and each
use is reported as a note saying what libddq (C) would do instead:
  - R11: a bad header whose bytes to the end of file are all 0x00 or all 0xFF, or a complete final
    record failing validation whose footer onwards is uniform, is a torn tail (C: corrupt);
  - R22: a staged tail cut left by an interrupted cut (`<segment>.reserve`, or an older ddq's
    `<segment>.cut`) is removed when its segment holds all its records, adopted when the segment
    is missing or empty, else corrupt (C: refuses a non-empty `.reserve`; ignores a `.cut`);
  - R14: a missing manifest with the marker present adopts a valid `queue.manifest.tmp` (C:
    corrupt);
  - F7: a segment before one that holds records must hold one, and inside a snapshot must end
    where its successor's first record did not fit (past it, an early end is a note: libddq,
    which has no R23, writes it after a lost rotation, V3).

The recovery index `queue.index` (SPEC §12.1, X1-X8; ddq only, libddq ignores it) is decoded from
the SPEC's layout too: it is "valid" when ddq would adopt it (X4), and then its state must equal
this reader's replay at the end of the bytes it covers (X3), else ddq would open a wrong state
(corrupt). A stale or damaged index is a note: ddq ignores it and replays everything (time only).

Verdicts: CLEAN (0), TORN (1: only a torn tail that recovery would remove), CORRUPT (2).
"""

# What the host tools and the tests use; the rest is reached through its module (fsck.format...).
from .format import (
    CORRUPT,
    INDEX_NAME,
    INDEX_TMP,
    IX_ABI,
    IX_FIELDS,
    IX_FMT,
    IX_HEADER,
    IX_SEG,
    MAN_FMT,
    MAN_SIZE,
    MANIFEST_NAME,
    OK,
    OPTION_RANGES,
    REC_HEADER,
    REC_HEADER_FMT,
    REC_MIN,
    S_ACKED,
    S_AVAILABLE,
    STATE_NAMES,
    T_DATA,
    NotAQueue,
    Report,
    check_options,
    record_crc,
    segment_name,
)
from .replay import scan
from .report import _human, printable, render_index, render_records, render_verify

__all__ = [
    "CORRUPT",
    "INDEX_NAME",
    "INDEX_TMP",
    "IX_ABI",
    "IX_FIELDS",
    "IX_FMT",
    "IX_HEADER",
    "IX_SEG",
    "MAN_FMT",
    "MAN_SIZE",
    "MANIFEST_NAME",
    "OK",
    "OPTION_RANGES",
    "REC_HEADER",
    "REC_HEADER_FMT",
    "REC_MIN",
    "S_ACKED",
    "S_AVAILABLE",
    "STATE_NAMES",
    "T_DATA",
    "NotAQueue",
    "check_options",
    "record_crc",
    "segment_name",
    "Report",
    "scan",
    "_human",
    "printable",
    "render_index",
    "render_records",
    "render_verify",
]
