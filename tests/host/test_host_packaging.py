"""Packaging and board profiles: one version everywhere, flat sorted profiles, mpy-cross builds."""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, ddq
from ddqhost import boards, qdir, transfer


def ddq_version():
    with open(os.path.join(REPO, "port", "ddq.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    assert m, "port/ddq.py has no __version__ literal"
    return m.group(1)


def test_package_json_for_mip():
    with open(os.path.join(REPO, "package.json")) as f:
        pkg = json.load(f)
    assert pkg["version"] == ddq_version()
    assert ["ddq.py", "port/ddq.py"] in pkg["urls"]
    assert ["ddq_outbox.py", "port/ddq_outbox.py"] in pkg["urls"]
    # Relative URLs: mip resolves them against package.json's location.
    for _target, url in pkg["urls"]:
        with open(os.path.join(REPO, url)) as f:
            assert '__version__ = "%s"' % pkg["version"] in f.read(), url


def test_manifest_py_for_freezing():
    calls = []
    with open(os.path.join(REPO, "manifest.py")) as f:
        src = f.read()
    exec(
        compile(src, "manifest.py", "exec"),
        {  # noqa: S102 - the manifest DSL is Python calls
            "metadata": lambda **kw: calls.append(("metadata", kw)),
            "module": lambda *a, **kw: calls.append(("module", a, kw)),
        },
    )
    assert calls[0] == (
        "metadata",
        {"description": calls[0][1]["description"], "version": ddq_version()},
    )
    assert ("module", ("ddq.py",), {"base_path": "port"}) in calls
    for _kind, args, kw in calls[1:]:
        assert os.path.exists(os.path.join(REPO, kw["base_path"], args[0]))


def test_cli_version_matches():
    r = ddq("--version")
    assert r.returncode == 0 and r.stdout.strip() == "ddq " + ddq_version()


def test_every_profile_is_checked():
    assert set(boards.names()) >= {"RPI_PICO", "ESP32_GENERIC", "UNIX", "PYBV11", "ARMV7M_GENERIC"}


@pytest.mark.parametrize("name", boards.names())
def test_board_profiles_are_flat_sorted_and_complete(name, tmp_path):
    path = os.path.join(REPO, "boards", name + ".json")
    with open(path) as f:
        text = f.read()
    prof = json.loads(text)
    assert text == json.dumps(prof, indent=2, sort_keys=True) + "\n", (
        "not flat JSON with sorted keys"
    )
    assert all(not isinstance(v, (dict, list)) for v in prof.values())
    assert prof["board"] == name
    for k in boards.SIZE_KEYS:  # what tools/board_capacity.py sizes the queue from
        assert isinstance(prof[k], int) and prof[k] > 0, k
    assert isinstance(prof["network"], bool)
    # A compaction stages the next generation beside the current one: both fit in half the fs.
    assert prof["max_segments"] * prof["segment_bytes"] <= prof["fs_bytes"] // 2
    loaded = boards.load(name)
    opts = boards.queue_options(loaded)
    assert opts["max_payload_bytes"] <= opts["segment_bytes"] - 48
    app = boards.app_path(loaded)
    assert os.path.isfile(app)
    with open(app) as f:
        tree = ast.parse(f.read())
    # The example app uses the profile's own queue options.
    consts = {
        t.targets[0].id: ast.literal_eval(t.value)
        for t in tree.body
        if isinstance(t, ast.Assign)
        and isinstance(t.targets[0], ast.Name)
        and t.targets[0].id == "OPTIONS"
    }
    assert consts["OPTIONS"] == opts
    q = qdir.load_ddq().Queue(str(tmp_path / "q"), **opts)  # ddq accepts them
    q.close()


def test_board_selection_by_probe():
    assert boards.select({"build": "RPI_PICO", "platform": "rp2"}) == "RPI_PICO"
    assert boards.select({"build": "ESP32_GENERIC-SPIRAM", "platform": "esp32"}) == "ESP32_GENERIC"
    assert boards.select({"build": "standard", "platform": "linux"}) == "UNIX"
    assert boards.select({"platform": "linux"}) == "UNIX"  # no _build at all: getattr default ''
    assert boards.select({"build": "PYBV11", "platform": "pyboard"}) == "PYBV11"
    assert boards.select({"build": "MPS2_AN385", "platform": "qemu"}) == "ARMV7M_GENERIC"
    assert boards.select({"build": "NUCLEO_F091RC", "platform": "pyboard"}) is None
    assert boards.device_mpy({"mpy": 2822}) == (6, 3, "x64")


@pytest.mark.parametrize("arch,archbits", [("armv6m", 4), ("xtensawin", 10), (None, 0)])
def test_mpy_cross_builds_for_board_archs(arch, archbits, tmp_path):
    out = transfer.mpy_cross(qdir.ddq_source(), str(tmp_path / "ddq.mpy"), arch)
    head = transfer.mpy_header(out)
    # mpy v6; ddq has no native code, so its bytecode stays portable whatever -march says.
    assert head[0:3] == b"M\x06\x00"
    for name in ("RPI_PICO", "ESP32_GENERIC"):
        transfer.mpy_cross(
            boards.app_path(boards.load(name)), str(tmp_path / (name + ".mpy")), arch
        )
    if arch is None:
        return
    # The -march flag does reach mpy-cross: a native function carries the arch in the flags byte.
    probe = tmp_path / "probe.py"
    probe.write_text("import micropython\n@micropython.native\ndef f(x):\n    return x + 1\n")
    head = transfer.mpy_header(transfer.mpy_cross(str(probe), str(tmp_path / "probe.mpy"), arch))
    assert head[2] >> 2 == archbits


def test_mpy_names_its_source_without_the_host_path(tmp_path):
    # A device traceback from an .mpy that flash built says File "ddq.py", not the host's path
    # (mpy-cross -s): the path is not in the file at all.
    src = qdir.ddq_source()
    assert os.path.isabs(src)
    with open(transfer.mpy_cross(src, str(tmp_path / "ddq.mpy")), "rb") as f:
        data = f.read()
    assert os.path.dirname(src).encode() not in data and b"/port/" not in data
    assert b"ddq.py" in data


def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    # The wheel carries modules ddq, ddq_outbox, ddq_mqtt, the host package and the `ddq` console script;
    # installed (without its network dependencies) into a new venv, `ddq --version` and
    # `ddq verify` (which needs only ddq and the standard library) run from outside the checkout.
    import subprocess
    import sys

    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), REPO], check=True, timeout=300)
    whl = [p for p in os.listdir(wheels) if p.endswith(".whl")]
    assert len(whl) == 1 and whl[0].startswith("ddq-%s-" % ddq_version()), whl
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run(pip + [str(wheels / whl[0])], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    out = subprocess.run([str(venv / "bin" / "ddq"), "--version"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=60)
    assert out.returncode == 0 and ddq_version() in out.stdout, out
    basic = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "ddq-c", "basic")
    if os.path.isdir(basic):
        out = subprocess.run([str(venv / "bin" / "ddq"), "verify", basic], capture_output=True,
                             text=True, cwd=tmp_path, env=env, timeout=60)
        assert out.returncode == 0 and "result: clean" in out.stdout, out
    mod = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import ddq, ddq_outbox, ddq_mqtt, ddqhost; print(ddq.__file__)"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert mod.returncode == 0 and str(venv) in mod.stdout, mod


def test_board_max_items_is_reachable():
    # Each profile's max_items is what its queue really takes: filled with the profile's options
    # and the example app's message, exactly max_items enqueues succeed and the next raises Full,
    # on CPython and on the MicroPython unix port with the board's heap (tools/board_capacity.py;
    # docs/BOARDS.md shows the derivation).
    r = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "board_capacity.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(" reachable: ") == len(boards.names()), r.stdout


def _app(tmp_path, text):
    p = tmp_path / "main.py"
    p.write_text(text)
    return str(p)


def test_flash_installs_what_the_app_imports(tmp_path):
    names = lambda mods: [os.path.basename(m) for m in mods]  # noqa: E731
    unix, pyb = boards.load("UNIX"), boards.load("PYBV11")
    # No app: every port module the board can load; no socket on PYBV11, so no ddq_mqtt.
    assert names(transfer.modules_to_install(unix)) == [
        "ddq.py", "ddq_outbox.py", "ddq_mqtt.py", "ddq_group.py"]
    assert names(transfer.modules_to_install(pyb)) == ["ddq.py", "ddq_outbox.py", "ddq_group.py"]
    # An app: ddq and what it imports (also inside functions, and `from ... import`).
    plain = _app(tmp_path, "import time\nimport ddq\n")
    assert names(transfer.modules_to_install(unix, plain)) == ["ddq.py"]
    ob = _app(tmp_path, "def f():\n    from ddq_outbox import Outbox\n")
    assert names(transfer.modules_to_install(pyb, ob)) == ["ddq.py", "ddq_outbox.py"]
    mq = _app(tmp_path, "import ddq_mqtt\nimport ddq_outbox\n")
    assert names(transfer.modules_to_install(unix, mq)) == [
        "ddq.py", "ddq_outbox.py", "ddq_mqtt.py"]
    # ddq_mqtt loads without socket (the adapters need none): an app that imports it gets it.
    assert names(transfer.modules_to_install(pyb, mq)) == [
        "ddq.py", "ddq_outbox.py", "ddq_mqtt.py"]
    for name in boards.names():  # each example app loads on its own board
        prof = boards.load(name)
        transfer.modules_to_install(prof, boards.app_path(prof))
