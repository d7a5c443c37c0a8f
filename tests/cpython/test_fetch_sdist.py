"""tools/fetch_sdist.py (make venv's step for umqtt/simple.py and mqtt_async.py) against a local
PEP 503 index: the pinned member is written; a wrong hash or a missing member is refused and
writes nothing."""

import hashlib
import io
import os
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "fetch_sdist.py")


def _index(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"class MQTTClient:\n    pass\n"
        info = tarfile.TarInfo("micropython-umqtt.simple-9.9/umqtt/simple.py")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    sdist = buf.getvalue()
    proj = tmp_path / "simple" / "micropython-umqtt-simple"
    proj.mkdir(parents=True)
    (proj / "micropython-umqtt.simple-9.9.tar.gz").write_bytes(sdist)
    (proj / "index.html").write_text(
        '<a href="micropython-umqtt.simple-9.9.tar.gz">micropython-umqtt.simple-9.9.tar.gz</a>\n'
    )
    return "file://%s/simple" % tmp_path, hashlib.sha256(sdist).hexdigest()


def _run(index, *args):
    env = dict(os.environ, PIP_INDEX_URL=index, PIP_EXTRA_INDEX_URL="")
    return subprocess.run(
        [sys.executable, TOOL, *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_fetches_the_pinned_member(tmp_path):
    index, sha = _index(tmp_path)
    dest = tmp_path / "lib" / "umqtt" / "simple.py"
    r = _run(index, "micropython-umqtt.simple==9.9", sha, "umqtt/simple.py", str(dest))
    assert r.returncode == 0, r.stderr
    assert dest.read_bytes() == b"class MQTTClient:\n    pass\n"


def test_refuses_a_wrong_hash_or_member(tmp_path):
    index, sha = _index(tmp_path)
    dest = tmp_path / "out.py"
    r = _run(index, "micropython-umqtt.simple==9.9", "0" * 64, "umqtt/simple.py", str(dest))
    assert r.returncode != 0 and "pinned 000" in r.stderr and not dest.exists()
    r = _run(index, "micropython-umqtt.simple==9.9", sha, "umqtt/robust.py", str(dest))
    assert r.returncode != 0 and "has no umqtt/robust.py" in r.stderr and not dest.exists()
    r = _run(index, "micropython-umqtt.simple==1.0", sha, "umqtt/simple.py", str(dest))
    assert r.returncode != 0 and "not found" in r.stderr and not dest.exists()
