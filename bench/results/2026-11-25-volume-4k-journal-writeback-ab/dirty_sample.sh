#!/usr/bin/env bash
# Every 5 s while an A/B run (cg_run.sh) is going: the cgroup's dirty and
# writeback page-cache bytes, anonymous memory and page cache, MiB.
# usage: dirty_sample.sh LOG SECONDS
log=$1; end=$(( $(date +%s) + $2 ))
while [ "$(date +%s)" -lt "$end" ]; do
  for cg in /sys/fs/cgroup/memory/tablinum-ab-*/; do
    [ -d "$cg" ] || continue
    awk -v t="$(date +%s)" -v cg="$(basename $cg)" '
      $1=="total_dirty"{d=$2} $1=="total_writeback"{w=$2} $1=="total_rss"{r=$2} $1=="total_cache"{c=$2}
      END {printf "%s %s dirty_mib=%d writeback_mib=%d rss_mib=%d cache_mib=%d\n", t, cg, d/1048576, w/1048576, r/1048576, c/1048576}' $cg/memory.stat
  done
  sleep 5
done >> "$log"
