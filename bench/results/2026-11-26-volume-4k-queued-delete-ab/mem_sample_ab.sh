#!/usr/bin/env bash
# Every 10 s while a cgroup tablinum-ab-* exists (up to SECONDS): the child's
# anonymous memory (RssAnon), the cgroup's page cache, and its disk reads
# and writes (/proc/PID/io).
# usage: mem_sample_ab.sh SECONDS LOG
end=$(( $(date +%s) + $1 )); log=$2; t0=$(date +%s)
while [ "$(date +%s)" -lt "$end" ]; do
  for cg in /sys/fs/cgroup/memory/tablinum-ab-*/; do
    [ -d "$cg" ] || continue
    pid=$(head -1 $cg/cgroup.procs 2>/dev/null); [ -n "$pid" ] || continue
    st() { awk -v k="$1" '$1==k {print int($2/1048576)}' $cg/memory.stat; }
    anon=$(awk '/^RssAnon/ {print int($2/1024)}' /proc/$pid/status 2>/dev/null)
    thr=$(awk '/^Threads/ {print $2}' /proc/$pid/status 2>/dev/null)
    rb=$(awk '/^read_bytes/ {print int($2/1048576)}' /proc/$pid/io 2>/dev/null)
    wb=$(awk '/^write_bytes/ {print int($2/1048576)}' /proc/$pid/io 2>/dev/null)
    echo "t=$(( $(date +%s) - t0 )) pid=$pid threads=$thr rss_anon_mib=$anon cg_cache_mib=$(st total_cache) read_mib=$rb write_mib=$wb"
  done
  sleep 10
done >> "$log"
