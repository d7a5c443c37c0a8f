"""C-DDQ-format directories for the host tests, written with tests/ddqfmt.py (the test-side
independent codec: docs/SPEC.md §3-§6, not port/ddq.py or host/ddqhost/fsck.py), so that the
directory it produces checks both readers. It writes exactly what it is told (records, manifest,
marker) and returns the state the format rules say recovery must find.
"""

import os

from ddqfmt import (
    S_AVAILABLE as ST_AVAILABLE,
    S_CLAIMED as ST_CLAIMED,
    S_QUARANTINED as ST_QUARANTINED,
    T_ACK as ACK,
    T_CLAIM as CLAIM,
    T_DATA as DATA,
    T_QUARANTINE as QUARANTINE,
    T_RETRY as RETRY,
    encode_manifest,
    encode_record as record,
    seg_name,
    state_record,
)


def write_dir(path, gen, segments, man=None, lock=True):
    """segments: list of bytes (segment 0..n-1).

    man: manifest tuple or None (legacy, no marker).
    """
    os.mkdir(path)
    for i, data in enumerate(segments):
        with open(os.path.join(path, seg_name(gen, i)), "wb") as f:
            f.write(data)
    if man is not None:
        with open(os.path.join(path, "queue.manifest"), "wb") as f:
            f.write(encode_manifest(*man))
        open(os.path.join(path, "queue.format"), "wb").close()
    if lock:
        open(os.path.join(path, "queue.lock"), "wb").close()


T0 = 1767225600000


def _item(state, attempts, lease_until_ms, not_before_ms, payload, **more):
    """An expected item of a scenario (the fields inspect and the reader report)."""
    return dict(
        state=state,
        attempts=attempts,
        lease_until_ms=lease_until_ms,
        not_before_ms=not_before_ms,
        payload=payload,
        **more,
    )


def compacted_scenario(path, segment_bytes=768):
    """A generation-2 directory: a snapshot prefix with every STATE shape, then live records.

    Returns (options, expected items, expected stats). Items: seq -> dict.
    """
    lease = T0 + 3600000
    snap = b"".join(
        [
            record(DATA, 3, 0, b"three"),  # default state: no STATE
            record(DATA, 5, 0, b"five"),
            state_record(5, ST_CLAIMED, 1, lease, T0 + 1000),  # claimed, lease kept
            record(DATA, 6, 0, b"six:\x00\xff"),
            state_record(6, ST_QUARANTINED, 2, 0, T0 + 2000),
            record(QUARANTINE, 6, 0, b'bad "payload"\tx'),  # its reason, right after
            record(DATA, 8, 0, b""),  # empty payload
            state_record(8, ST_AVAILABLE, 3, 0, T0 + 50000),  # backing off
        ]
    )
    end = len(snap)
    live0 = b"".join(
        [
            record(DATA, 11, 0, b"eleven"),  # next_seq from the manifest
            record(CLAIM, 11, T0 + 60000),
            record(ACK, 11),
            record(CLAIM, 3, T0 + 70000),
            record(RETRY, 3, T0 + 80000),
        ]
    )
    seg0 = snap + live0
    assert len(seg0) <= segment_bytes
    seg1 = b"".join(
        [
            record(DATA, 12, 0, b"twelve" * 5),
            record(CLAIM, 12, T0 + 90000),
        ]
    )
    write_dir(path, 2, [seg0, seg1], man=(2, 11, 1, 4, end))
    items = {  # seq: (state, attempts, lease_until_ms, not_before_ms, payload)
        3: _item("available", 1, 0, T0 + 80000, b"three"),
        5: _item("claimed", 1, lease, T0 + 1000, b"five"),
        6: _item("quarantined", 2, 0, T0 + 2000, b"six:\x00\xff", reason=b'bad "payload"\tx'),
        8: _item("available", 3, 0, T0 + 50000, b""),
        11: _item("acked", 0, 0, 0, b"eleven"),
        12: _item("claimed", 0, T0 + 90000, 0, b"twelve" * 5),
    }
    stats = {
        "total_items": 6,
        "available_items": 2,
        "claimed_items": 2,
        "acknowledged_items": 1,
        "quarantined_items": 1,
        "stored_bytes": len(seg0) + len(seg1),
        "segment_count": 2,
        "next_seq": 13,
        "recovered_tail_bytes": 0,
        "generation": 2,
    }
    opts = {
        "segment_bytes": segment_bytes,
        "max_payload_bytes": 64,
        "max_items": 16,
        "max_segments": 4,
    }
    return opts, items, stats
