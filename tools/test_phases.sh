#!/usr/bin/env bash
# Run `make <phase>` for each phase given, keep going past failures, then print a table of
# phases with their status and time, and one closing line that sums the suites' counts:
#
#   test: N passed, N failed, N skipped
#
# preceded by the line saying which MQTT broker served the end-to-end tests.
#
# Counts come from the runners' own closing lines (pytest's "== 3 passed, 1 skipped in 0.2s =="
# and mprun's "lfs2: 8 passed, 0 failed"). A phase that failed without reporting a failed test
# (lint, typecheck, a crashed runner) adds 1 to "failed". Exit status 1 if any phase failed.
# Each phase's output is also kept in $LOGDIR/<phase>.log: a new temporary directory (named in the
# summary), so that `make test` leaves nothing in the checkout.
set -uo pipefail
MAKE="${MAKE:-make}"
LOGDIR="${LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/ddq-test-logs.XXXXXX")}"
mkdir -p "$LOGDIR"

now() { date +%s.%N; }
rows=()
failed_phases=0
total_p=0 total_f=0 total_s=0

# Sum the counts of a log's runner closing lines: prints "passed failed skipped".
counts() {
  awk '
    function grab(line, word,   m) {
      if (match(line, "[0-9]+ " word)) { m = substr(line, RSTART, RLENGTH); sub(" .*", "", m); return m + 0 }
      return 0
    }
    # pytest: "===== 3 passed, 1 skipped, 2 warnings in 0.12s =====" (also "no tests ran")
    /^=+ .*(passed|failed|skipped|error|no tests ran).* in [0-9.]+s.*=+$/ {
      p += grab($0, "passed"); f += grab($0, "failed") + grab($0, "error"); s += grab($0, "skipped"); next
    }
    # mprun and other plain runners: "lfs2: 8 passed, 0 failed, 1 skipped"
    /^([A-Za-z0-9_.\[\]-]+: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$/ {
      p += grab($0, "passed"); f += grab($0, "failed"); s += grab($0, "skipped")
    }
    END { printf "%d %d %d\n", p, f, s }
  ' "$1"
}

for phase in "$@"; do
  echo
  echo "===== make $phase"
  start=$(now)
  "$MAKE" --no-print-directory "$phase" 2>&1 | tee "$LOGDIR/$phase.log"
  rc=${PIPESTATUS[0]}
  secs=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  read -r p f s < <(counts "$LOGDIR/$phase.log")
  tally=""
  [ $((p + f + s)) -eq 0 ] || tally="$p passed, $f failed, $s skipped"
  status=ok
  if [ "$rc" -ne 0 ]; then
    status=FAILED
    failed_phases=$((failed_phases + 1))
    [ "$f" -gt 0 ] || f=1
  fi
  total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
  rows+=("$(printf '  %-14s %-7s %7ss  %s' "$phase" "$status" "$secs" "$tally")")
done

echo
echo "===== summary (logs in $LOGDIR/)"
printf '%s\n' "${rows[@]}"
if [ "$failed_phases" -gt 0 ]; then
  echo "make test: $failed_phases phase(s) failed"
fi
# Which MQTT broker served the end-to-end tests (pytest's "MQTT broker: ..." line, tests/brokers.py).
grep -h "^MQTT broker: " "$LOGDIR"/*.log 2>/dev/null | sort -u
echo "test: $total_p passed, $total_f failed, $total_s skipped"
[ "$failed_phases" -eq 0 ]
