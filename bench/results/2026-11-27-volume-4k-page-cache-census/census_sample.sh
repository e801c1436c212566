#!/usr/bin/env bash
# What the page cache holds of a running store, every PERIOD seconds: bytes
# resident (fincore) and on disk, summed per file kind (ledger tables,
# journal write segments, journal compaction segments, other), plus the
# memory cgroup's own accounting. Stops when the scenario's process is gone.
# Recycling-pool files (.free) are counted too since 2026-11-28.
# usage: census_sample.sh OUT LOG [PERIOD]
set -u
out=$1 log=$2 period=${3:-30}
t0=$(date +%s)
while pgrep -f "bench scenario volume.*--out $out" >/dev/null; do
  sleep "$period"
  t=$(( $(date +%s) - t0 ))
  for cg in /sys/fs/cgroup/memory/tablinum-bench-*; do
    [ -d "$cg" ] || continue
    st=$(awk '$1=="cache"||$1=="rss"||$1=="mapped_file"||$1=="active_file"||$1=="inactive_file"{printf "%s_mb=%d ", $1, $2/1048576}' "$cg/memory.stat")
    echo "t=$t cgroup $st"
  done
  find "$out" -type f \( -name '*.sst' -o -name '*.jnl' -o -name '*.gcj' -o -name '*.log' -o -name '*.blob' -o -name '*.free' \) -path '*-r[0-9]*' -print0 2>/dev/null |
    xargs -0 -r fincore -b -n -r -o RES,SIZE,FILE 2>/dev/null |
    awk -v t="$t" '{
        k = $3; sub(/.*\./, "", k);
        r = $3; sub(/^.*\//, "", r);
        if (match($3, /\/[a-z0-9_:=,-]+-r[0-9]+\//)) k = substr($3, RSTART + 1, RLENGTH - 2) "." k;
        res[k] += $1; size[k] += $2; n[k]++
      } END { for (k in res) printf "t=%s kind=%s files=%d resident_mb=%d size_mb=%d\n", t, k, n[k], res[k]/1048576, size[k]/1048576 }'
done >> "$log"
