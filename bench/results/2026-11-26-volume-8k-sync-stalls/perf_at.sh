#!/usr/bin/env bash
# System-wide CPU profiles (perf, 99 Hz, call graphs, 20 s each) taken when
# the scenario's progress log reaches each of the given measured seconds.
# usage: perf_at.sh PROGRESS_LOG OUT_PREFIX SECONDS...
log=$1; pre=$2; shift 2
for at in "$@"; do
  until grep -q "r1: $at s / " "$log" 2>/dev/null; do
    pgrep -f "bench scenario volume" >/dev/null || exit 0
    sleep 2
  done
  perf record -F 99 -a -g -o "$pre-$at.data" -- sleep 20 >/dev/null 2>&1
  perf report -i "$pre-$at.data" --no-children --sort comm,dso,sym --stdio 2>/dev/null | head -150 > "$pre-$at.txt"
done
