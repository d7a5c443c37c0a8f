#!/usr/bin/env bash
# `make demo` and tests/brokers.py, before a broker is needed: install mosquitto from Debian when
# it is missing and we are root with apt-get (tools/apt_install.sh: waits for a held dpkg lock,
# prints apt's error when it fails). $1 is the caller's label.
# Exit status: 0 mosquitto is there; 1 it was installable but apt-get failed (the error is printed);
# 2 it cannot be installed here (not root, or no apt-get). `make demo` goes on with the embedded
# amqtt broker either way; the tests that need mosquitto fail on 1 and skip only on 2.
set -u
WHO="${1:-make demo}"
have() { command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; }
have && exit 0
echo "$WHO: mosquitto is missing: apt-get install mosquitto"
"$(dirname "$0")/../tools/apt_install.sh" "$WHO" mosquitto
rc=$?
if [ $rc -eq 0 ] && have; then
  exit 0
fi
[ $rc -eq 0 ] && { echo "$WHO: apt-get installed mosquitto but it is not on PATH or in /usr/sbin"; rc=1; }
exit $rc
