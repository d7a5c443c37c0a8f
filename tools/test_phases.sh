#!/usr/bin/env bash
# Run `make <phase>` for each phase given, keep going past failures, then print a table of
# phases with their status and time, and one closing line that sums the suites' counts:
#
#   test: N passed, N failed, N skipped
#
# preceded by the line saying which MQTT broker served the end-to-end tests.
#
# Arguments are groups, run one after another: a group is one phase (its output shown as it
# runs) or phases joined by "+", run at the same time, each into its own log, which is printed
# whole when that phase ends (so concurrent outputs never interleave). A phase may carry ":N",
# a nice increment: `torture-ci:10` yields the cores to the phases that wait on subprocesses with
# time bounds, and takes the time they leave idle.
#
#   tools/test_phases.sh lint test-cpython+test-mp:5+torture-ci:10 bench-smoke
#
# Counts come from the runners' own closing lines (pytest's "== 3 passed, 1 skipped in 0.2s =="
# and mprun's "lfs2: 8 passed, 0 failed"). A phase that failed without reporting a failed test
# (lint, typecheck, a crashed runner) adds 1 to "failed". Exit status 1 if any phase failed.
# Each phase's output is kept in $LOGDIR/<phase>.log: a new temporary directory (named in the
# summary), so that `make test` leaves nothing in the checkout. The table keeps the order of
# the arguments; the time of a phase is its own (start to end), concurrent or not.
set -uo pipefail
MAKE="${MAKE:-make}"
LOGDIR="${LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/ddq-test-logs.XXXXXX")}"
mkdir -p "$LOGDIR"

now() { date +%s.%N; }
declare -A row=()
order=()
failed_phases=0
total_p=0 total_f=0 total_s=0
t0=$(now)

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

# record PHASE RC START END: add the phase's row and counts to the summary.
record() {
  local phase=$1 rc=$2 secs p f s tally="" status=ok
  secs=$(awk -v a="$3" -v b="$4" 'BEGIN { printf "%.1f", b - a }')
  read -r p f s < <(counts "$LOGDIR/$phase.log")
  [ $((p + f + s)) -eq 0 ] || tally="$p passed, $f failed, $s skipped"
  if [ "$rc" -ne 0 ]; then
    status=FAILED
    failed_phases=$((failed_phases + 1))
    [ "$f" -gt 0 ] || f=1
  fi
  total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
  row[$phase]="$(printf '  %-14s %-7s %7ss  %s' "$phase" "$status" "$secs" "$tally")"
}

# One phase, its output shown as it runs.
run_one() {
  local phase=${1%%:*} inc=0 start rc
  [[ $1 != *:* ]] || inc=${1#*:}
  echo
  echo "===== make $phase"
  start=$(now)
  nice -n "$inc" "$MAKE" --no-print-directory "$phase" 2>&1 | tee "$LOGDIR/$phase.log"
  rc=${PIPESTATUS[0]}
  record "$phase" "$rc" "$start" "$(now)"
}

# Phases at the same time: each into its log; a log is printed when its phase ends.
run_group() {
  local spec phase inc pending=() left
  echo
  echo "===== make ${*%%:*} ... at the same time (each phase's output follows when it ends)"
  for spec in "$@"; do
    phase=${spec%%:*} inc=0
    [[ $spec != *:* ]] || inc=${spec#*:}
    (
      start=$(now)
      nice -n "$inc" "$MAKE" --no-print-directory "$phase" >"$LOGDIR/$phase.log" 2>&1
      echo "$? $start $(now)" >"$LOGDIR/$phase.end"
    ) &
    pending+=("$phase")
  done
  local ticks=0
  while [ ${#pending[@]} -gt 0 ]; do
    sleep 1
    ticks=$((ticks + 1))
    # a line every 5 minutes, so a log that only grows when a phase ends shows it is alive
    [ $((ticks % 300)) -ne 0 ] || echo "===== still running after $((ticks / 60)) min: ${pending[*]}"
    left=()
    for phase in "${pending[@]}"; do
      if [ ! -s "$LOGDIR/$phase.end" ]; then
        left+=("$phase")
        continue
      fi
      read -r rc start end <"$LOGDIR/$phase.end"
      rm -f "$LOGDIR/$phase.end"
      echo
      echo "===== make $phase (ended after $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s, status $rc)"
      cat "$LOGDIR/$phase.log"
      record "$phase" "$rc" "$start" "$end"
    done
    pending=("${left[@]+"${left[@]}"}")
  done
  wait
}

for group in "$@"; do
  IFS=+ read -r -a members <<<"$group"
  for spec in "${members[@]}"; do order+=("${spec%%:*}"); done
  if [ ${#members[@]} -eq 1 ]; then
    run_one "${members[0]}"
  else
    run_group "${members[@]}"
  fi
done

echo
echo "===== summary (logs in $LOGDIR/; $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }') s in all)"
for phase in "${order[@]}"; do printf '%s\n' "${row[$phase]}"; done
if [ "$failed_phases" -gt 0 ]; then
  echo "make test: $failed_phases phase(s) failed"
fi
# Which MQTT broker served the end-to-end tests (pytest's "MQTT broker: ..." line, tests/brokers.py).
grep -h "^MQTT broker: " "$LOGDIR"/*.log 2>/dev/null | sort -u
echo "test: $total_p passed, $total_f failed, $total_s skipped"
[ "$failed_phases" -eq 0 ]
