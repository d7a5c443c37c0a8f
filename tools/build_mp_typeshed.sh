#!/usr/bin/env bash
# Build a custom typeshed for mypy's MicroPython pass (micropython-platform.md §9).
#
#   tools/build_mp_typeshed.sh <port-stub-package==version> <outdir>
#   e.g. PIP=.venv/bin/pip tools/build_mp_typeshed.sh micropython-unix-stubs==1.29.0.post1 types/unix_typeshed
#
# Why a typeshed and not MYPYPATH: the stubs shadow stdlib modules (sys, os, time), which mypy
# refuses on a search path; `custom_typeshed_dir` replaces the stdlib stubs instead. One port's
# stub package per typeshed: two port packages install the same top-level .pyi files.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 <port-stub-package==version> <outdir>" >&2
  exit 2
fi
PKG="$1"
OUT="$2"
PIP="${PIP:-pip}"
PYTHON="${PYTHON:-python3}"
STDLIB_STUBS="${STDLIB_STUBS:-micropython-stdlib-stubs==1.29.0.post2}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

$PIP install -q --no-deps --target "$TMP" "$PKG" "$STDLIB_STUBS"
[ -f "$TMP/stdlib/VERSIONS" ] || { echo "$0: $STDLIB_STUBS has no stdlib/VERSIONS" >&2; exit 1; }

# Build beside the target and swap it in at the end, so an interrupted run leaves no half typeshed.
NEW="$OUT.new"
rm -rf "$NEW"
mkdir -p "$NEW"
cp -r "$TMP/stdlib" "$NEW/stdlib"
cp -r "$TMP/stubs" "$NEW/stubs"
# The port's modules (machine, micropython, vfs, ...) become stdlib modules of this typeshed,
# unless the stdlib stubs already have them.
for f in "$TMP"/*.pyi "$TMP"/_mpy_shed "$TMP"/rp2 "$TMP"/mip "$TMP"/requests; do
  [ -e "$f" ] || continue
  b=$(basename "$f")
  [ -e "$NEW/stdlib/$b" ] || cp -r "$f" "$NEW/stdlib/"
done

# Register the added modules in stdlib/VERSIONS, or mypy does not see them.
"$PYTHON" - "$NEW/stdlib" <<'PY'
import os
import sys

root = sys.argv[1]
with open(root + "/VERSIONS") as f:
    listed = {l.split(":")[0].strip() for l in f if ":" in l and not l.startswith("#")}
new = [
    n[:-4] if n.endswith(".pyi") else n
    for n in sorted(os.listdir(root))
    if n != "VERSIONS" and (n.endswith(".pyi") or os.path.isdir(os.path.join(root, n)))
]
with open(root + "/VERSIONS", "a") as v:
    for m in new:
        if m not in listed:
            v.write("%s: 3.0-\n" % m)
PY

rm -rf "$OUT"
mv "$NEW" "$OUT"
printf '%s\n%s\n' "$PKG" "$STDLIB_STUBS" > "$OUT/.source"
echo "built $OUT from $PKG + $STDLIB_STUBS ($(du -sh "$OUT" | cut -f1))"
