#!/usr/bin/env bash
# Every 10 s while a volume scenario runs: the child's memory (cgroup
# memory.stat: anon rss, page cache, active/inactive file; /proc status:
# RssAnon), its disk reads and writes (/proc/PID/io), and how much of the
# store's journal and ledger the page cache holds (fincore).
# usage: mem_sample.sh OUT_ROOT LOG
root=$1; log=$2; t0=$(date +%s)
while pgrep -f "bench scenario volume" >/dev/null; do
  for cg in /sys/fs/cgroup/memory/tablinum-bench-*/; do
    [ -d "$cg" ] || continue
    st() { awk -v k="$1" '$1==k {print int($2/1048576)}' $cg/memory.stat; }
    pid=$(head -1 $cg/cgroup.procs 2>/dev/null); [ -n "$pid" ] || continue
    anon=$(awk '/^RssAnon/ {print int($2/1024)}' /proc/$pid/status 2>/dev/null)
    rb=$(awk '/^read_bytes/ {print int($2/1048576)}' /proc/$pid/io 2>/dev/null)
    wb=$(awk '/^write_bytes/ {print int($2/1048576)}' /proc/$pid/io 2>/dev/null)
    d=$(find "$root" -maxdepth 4 -type d -name data 2>/dev/null | head -1)
    jr=$(fincore -b -n -o RES "$d"/journal/* 2>/dev/null | awk '{s+=$1} END {print int(s/1048576)}')
    js=$(du -sm "$d"/journal 2>/dev/null | cut -f1)
    lr=$(fincore -b -n -o RES "$d"/ledger/* 2>/dev/null | awk '{s+=$1} END {print int(s/1048576)}')
    ls_=$(du -sm "$d"/ledger 2>/dev/null | cut -f1)
    echo "t=$(( $(date +%s) - t0 )) rss_anon_mib=$anon cg_rss_mib=$(st total_rss) cg_cache_mib=$(st total_cache) active_file_mib=$(st total_active_file) inactive_file_mib=$(st total_inactive_file) read_mib=$rb write_mib=$wb journal_res_mib=$jr journal_mib=$js ledger_res_mib=$lr ledger_mib=$ls_"
  done
  sleep 10
done >> "$log"
