#!/usr/bin/env bash
# Samples /proc/PID/io and memory.stat of the volume child every 5 s.
out=$1
while true; do
  for cg in /sys/fs/cgroup/memory/tablinum-bench-*/; do
    [ -d "$cg" ] || continue
    for pid in $(cat $cg/cgroup.procs 2>/dev/null); do
      t=$(date +%s)
      rb=$(awk '/^read_bytes/{print $2}' /proc/$pid/io 2>/dev/null)
      wb=$(awk '/^write_bytes/{print $2}' /proc/$pid/io 2>/dev/null)
      rc=$(awk '/^rchar/{print $2}' /proc/$pid/io 2>/dev/null)
      cache=$(awk '/^total_cache /{print $2}' $cg/memory.stat)
      rss=$(awk '/^total_rss /{print $2}' $cg/memory.stat)
      majf=$(awk '/^total_pgmajfault /{print $2}' $cg/memory.stat)
      echo "$t $pid read_bytes=$rb write_bytes=$wb rchar=$rc cache=$cache rss=$rss pgmajfault=$majf" >> $out
    done
  done
  sleep 5
done
