#!/bin/bash
# samples the data dir size of each run of a scenario every 30 s
out=$1; log=$2
while pgrep -f "bench scenario volume" >/dev/null; do
  for d in $out/*/*/data; do
    [ -d "$d" ] || continue
    j=$(du -sm $d/journal 2>/dev/null | cut -f1)
    echo "$(date +%s) $d $(du -sm $d | cut -f1) journal=${j:-0}"
  done
  sleep 30
done >> $log
