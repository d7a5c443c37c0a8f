"""Boards with the queue on raw flash (issue 36 item 4; SPEC §16, DESIGN §15, docs/BOARDS.md "Raw
layout"): `ddq flash` installs ddq_flash only for the raw layout, the virtual board's raw region
(`import vboard; vboard.raw`, NOR semantics over STATE_DIR/raw.img) survives a power cut, and the
example app delivers from a queue on it."""

import os

import pytest

from conftest import kill_board
from ddqhost import boards, transfer, vboard
from ddqhost.device import Device


@pytest.fixture
def vb(tmp_path):
    d = str(tmp_path / "vb")
    st = vboard.start(d, raw_blocks=16)
    pids = {st["bridge_pid"], st["micropython_pid"]}
    try:
        yield d, st, pids
    finally:
        st2 = vboard.read_state(d) or {}
        pids.add(st2.get("micropython_pid"))
        assert kill_board(vboard.kill, d, [p for p in pids if p])


def names(mods):
    return [os.path.basename(m)[:-3] for m in mods]


def test_flash_installs_ddq_flash_for_the_raw_layout_only():
    for name in ("UNIX", "RPI_PICO", "ESP32_GENERIC", "PYBV11"):
        prof = boards.load(name)
        app = boards.app_path(prof)
        for a in (None, app):
            fs = names(transfer.modules_to_install(prof, a))
            raw = names(transfer.modules_to_install(prof, a, layout="raw"))
            # every .mpy costs a filesystem block: none for the LittleFS/FAT layout
            assert "ddq_flash" not in fs, (name, a)
            assert raw == [m for m in transfer.PORT_MODULES if m in fs or m == "ddq_flash"]


def test_virtual_board_raw_region_is_nor_flash_and_survives_a_power_cut(vb):
    d, st, pids = vb
    assert st["raw_bytes"] == 16 * 4096
    code = (
        "import vboard\n_d=vboard.raw\n"
        "_d.ioctl(6, 3)\n"
        "_d.writeblocks(3, b'\\x0f\\xf0\\x55', 10)\n"
        "_d.writeblocks(3, b'\\xf3\\x3f', 11)\n"  # a program only clears bits: f0 & f3
        "_b=bytearray(5)\n_d.readblocks(3, _b, 9)\n"
        "print(repr((_d.ioctl(4, 0), _d.ioctl(5, 0), bytes(_b))))\n"
    )
    with Device(st["device"], soft_reset=False) as dev:
        got = dev._collect(code)
    assert got.strip() == b"(16, 4096, b'\\xff\\x0f\\xf0\\x15\\xff')"
    kill_board(vboard.kill, d, [])  # a power cut: what was programmed is there at the next boot
    st = vboard.start(d)
    pids.update([st["bridge_pid"], st["micropython_pid"]])
    assert st["raw_bytes"] == 16 * 4096  # an existing region keeps its size
    with Device(st["device"], soft_reset=False) as dev:
        back = dev._collect(
            "import vboard\n_b=bytearray(4)\n_d=vboard.raw\n"
            "_d.readblocks(3,_b,10)\nprint(repr(bytes(_b)))\n"
            "_d.ioctl(6, 3)\n_d.readblocks(3,_b,10)\nprint(repr(bytes(_b)))\n"
        )
    assert back.split() == [b"b'\\x0f\\xf0\\x15\\xff'", b"b'\\xff\\xff\\xff\\xff'"]
    with open(os.path.join(d, "raw.img"), "rb") as f:
        assert f.read() == b"\xff" * (16 * 4096)
