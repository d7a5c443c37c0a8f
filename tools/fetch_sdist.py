#!/usr/bin/env python3
"""Fetch one file out of a pinned sdist that pip refuses to install, from the index pip uses.

    tools/fetch_sdist.py NAME==VERSION SHA256 MEMBER DEST

micropython-lib's packages on PyPI (micropython-umqtt.simple, micropython-mqtt-async) are sdists
without setup.py or pyproject.toml: `pip download` fetches them, then refuses them ("does not
appear to be a Python project"). This asks the same indexes pip is configured with (PIP_INDEX_URL
and PIP_EXTRA_INDEX_URL, else `pip config`, else https://pypi.org/simple) through the simple API
(PEP 691 JSON, else PEP 503 HTML), checks the archive against SHA256 (the pin), and writes
MEMBER (a path inside the archive, after its top folder) to DEST. Standard library only.
"""

import hashlib
import html.parser
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request

DEFAULT_INDEX = "https://pypi.org/simple"


def pip_config(key):
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", key],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def indexes():
    main = os.environ.get("PIP_INDEX_URL") or pip_config("global.index-url") or DEFAULT_INDEX
    extra = (
        os.environ["PIP_EXTRA_INDEX_URL"]
        if "PIP_EXTRA_INDEX_URL" in os.environ
        else pip_config("global.extra-index-url")
    )
    out = []
    for url in [main] + extra.split():
        if url.startswith("file:") and not os.path.isdir(urllib.parse.urlparse(url).path):
            continue  # a configured local mirror that is not on this machine (pip skips it too)
        if url not in out:
            out.append(url)
    return out


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs).get("href", ""))


def _open(url):
    if url.startswith("file:"):
        path = urllib.parse.urlparse(url).path
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        with open(path, "rb") as f:
            return f.read(), "text/html"
    req = urllib.request.Request(
        url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read(), r.headers.get("Content-Type", "")


def candidates(index, name):
    """(filename, url) of every file the index lists for the project."""
    page = index.rstrip("/") + "/" + re.sub(r"[-_.]+", "-", name).lower() + "/"
    body, ctype = _open(page)
    if "json" in ctype:
        return [
            (f["filename"], urllib.parse.urljoin(page, f["url"]))
            for f in json.loads(body)["files"]
        ]
    p = _Links()
    p.feed(body.decode("utf-8", "replace"))
    out = []
    for href in p.links:
        url = urllib.parse.urljoin(page, href)
        out.append((urllib.parse.unquote(url.split("#")[0].rsplit("/", 1)[-1]), url))
    return out


def fetch(spec, sha, member, dest):
    name, version = spec.split("==")
    norm = re.sub(r"[-_.]+", "_", name).lower()
    errors = []
    for index in indexes():
        try:
            files = candidates(index, name)
        except Exception as e:  # an index without the project, or offline: try the next one
            errors.append("%s: %s" % (index, e))
            continue
        for fn, url in files:
            stem = fn[:-7] if fn.endswith(".tar.gz") else None
            if (
                stem is None
                or re.sub(r"[-_.]+", "_", stem).lower()
                != norm + "_" + re.sub(r"[-_.]+", "_", version).lower()
            ):
                continue
            data = _open(url)[0]
            got = hashlib.sha256(data).hexdigest()
            if got != sha:
                raise SystemExit("fetch_sdist: %s has sha256 %s, pinned %s" % (fn, got, sha))
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                for m in tf.getmembers():
                    if m.isfile() and m.name.split("/", 1)[-1] == member:
                        src = tf.extractfile(m)
                        assert src is not None
                        text = src.read()
                        break
                else:
                    raise SystemExit("fetch_sdist: %s has no %s" % (fn, member))
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            with open(dest + ".tmp", "wb") as f:
                f.write(text)
            os.replace(dest + ".tmp", dest)
            print("fetch_sdist: %s from %s (sha256 %s...) -> %s" % (member, fn, sha[:12], dest))
            return
        errors.append("%s: no %s sdist" % (index, spec))
    raise SystemExit("fetch_sdist: %s not found: %s" % (spec, "; ".join(errors)))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__.split("\n\n")[1])
    fetch(*sys.argv[1:])
