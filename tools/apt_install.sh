#!/usr/bin/env bash
# apt_install.sh WHO PACKAGE...: install Debian packages with apt-get, as root, for `make test`,
# `make demo` and .ci/run. Another apt or dpkg (an unattended upgrade, a second run) may hold the
# dpkg lock: wait for it, up to $DDQ_APT_WAIT seconds (default 300), instead of failing at once.
# apt-get's own output is kept and, on failure, its last lines are printed (never swallowed).
# Exit status: 0 installed; 1 apt-get failed (its error printed above); 2 not possible here (not
# root, or no apt-get), nothing tried.
set -u
WHO="$1"
shift
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "$WHO: cannot install $* here (not root, or no apt-get)"
  exit 2
fi
wait_s="${DDQ_APT_WAIT:-300}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
end=$(($(date +%s) + wait_s))
# DPkg::Lock::Timeout makes apt-get wait for the dpkg frontend lock itself; the loop covers
# the lists lock of `apt-get update` and an apt that gives up early.
opts=(-o "DPkg::Lock::Timeout=$wait_s")
while :; do
  if apt-get "${opts[@]}" update -qq >"$log" 2>&1 &&
     DEBIAN_FRONTEND=noninteractive apt-get "${opts[@]}" install -y -qq --no-install-recommends \
       "$@" >>"$log" 2>&1; then
    exit 0
  fi
  if grep -qiE "could not get lock|unable to (acquire|lock)|is another process using it" "$log" &&
     [ "$(date +%s)" -lt "$end" ]; then
    echo "$WHO: the dpkg lock is held by another process; waiting (up to ${wait_s} s in all)"
    sleep 5
    continue
  fi
  echo "$WHO: apt-get install $* failed:"
  tail -n 20 "$log" | sed "s/^/  apt-get: /"
  exit 1
done
