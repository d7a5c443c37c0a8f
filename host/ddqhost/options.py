"""The queue options the host tools know, with their defaults and ranges: SPEC §7.1, said once.

qdir (option layers), fsck (the independent reader: a table of numbers, not ddq.py) and boards
(profile keys) import this table; ddq.Queue's keyword defaults are the port's own copy of it
(tests/host/test_host_packaging.py holds the two equal).
"""

# name: (default, lowest, highest), in the order the tools list them (SPEC §7.1).
QUEUE_OPTIONS = {
    "segment_bytes": (4194304, 256, 64 * 1024 * 1024),
    "max_payload_bytes": (1048576, 1, (1 << 32) - 1),
    "max_items": (100000, 1, 1000000),
    "max_segments": (1024, 1, 4096),
}
KEYS = tuple(QUEUE_OPTIONS)
DEFAULTS = {k: v[0] for k, v in QUEUE_OPTIONS.items()}
RANGES = {k: (v[1], v[2]) for k, v in QUEUE_OPTIONS.items()}
