"""What `ddq ... -h` tells a newcomer (docs/HOST.md "Queue options"): the queue options' precedence
where the options are, --json described everywhere, what `board virtual` starts, --state-dir on
every command that takes a state directory, profiles named by `ddq board list`/`show` (a wheel has
no boards/), and `inspect` showing a printable payload as text."""

import argparse
import json

from conftest import ddq, one_line_error
from ddqhost import cli, inspect_dir, locate


def _parsers(p, path=("ddq",)):
    """Every (command path, parser) of the CLI."""
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_option_is_described_and_no_help_names_the_checkouts_files():
    for path, p in _parsers(cli.build_parser()):
        text = p.format_help()
        assert "boards/" not in text and "PROFILE.json" not in text, path
        assert "ddq inspect -h" not in text, path  # the precedence is told where the options are
        for a in p._actions:
            if a.option_strings and a.help is not argparse.SUPPRESS:
                assert a.help, (path, a.option_strings)
        if any("--segment-bytes" in a.option_strings for a in p._actions):
            assert "first of: its" in " ".join(text.split()), path


def test_board_virtual_help_says_what_it_starts_and_takes_state_dir():
    r = ddq("board", "virtual", "start", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "MicroPython unix port" in text and "LittleFS image" in text and "--state-dir" in text
    assert "--dir" not in r.stdout.replace("--state-dir", "")  # the old name works, unlisted


def test_state_dir_and_the_old_dir_alias(tmp_path):
    for flag in ("--state-dir", "--dir"):
        r = ddq("board", "virtual", "status", flag, tmp_path / "vb", "--json")
        assert r.returncode == 3 and json.loads(r.stdout)["state_dir"] == str(tmp_path / "vb")


def test_board_show_prints_a_profile():
    r = ddq("board", "show", "UNIX", "--json")
    assert r.returncode == 0, r.stderr
    prof = json.loads(r.stdout)
    assert prof["board"] == "UNIX" and prof["segment_bytes"] > 0
    assert not any(k.startswith("_") for k in prof)
    r = ddq("board", "show", "UNIX")
    assert r.returncode == 0 and "max_items" in r.stdout
    line = one_line_error(ddq("board", "show", "NOPE"), 1)
    assert "`ddq board list`" in line


def test_inspect_shows_a_printable_payload_as_text(tmp_path):

    locate.load_ddq()
    import ddq_outbox

    ob = ddq_outbox.Outbox(str(tmp_path / "q"))
    ob.put("sensors/t", "21.5 °C".encode())
    ob.put("sensors/raw", b"\x00\x01\xff")
    ob.close()
    r = ddq("inspect", tmp_path / "q")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert rows[0].endswith("21.5 °C"), rows
    assert rows[1].endswith("0x0001ff"), rows
    assert inspect_dir._preview("é".encode() * 30) == "é" * 20 + "..."  # a cut inside a character
