#!/usr/bin/env bash
# `make demo`, before the run: install mosquitto from Debian when it is missing and we are root
# with apt-get. Otherwise demo/run.py falls back to the embedded amqtt broker (from PyPI, into
# .venv, only then). Never fails: the fallback covers every case. tests/brokers.py runs it too,
# with its own label as $1.
set -u
WHO="${1:-make demo}"
if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "$WHO: mosquitto is missing: apt-get install mosquitto"
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
       apt-get install -y -qq --no-install-recommends mosquitto >/dev/null; then
    exit 0
  fi
  echo "$WHO: apt-get could not install mosquitto"
fi
echo "$WHO: no mosquitto: the embedded amqtt broker from PyPI serves instead"
exit 0
