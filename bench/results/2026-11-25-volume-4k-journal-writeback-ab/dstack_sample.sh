#!/usr/bin/env bash
# Every 100 ms for SECONDS: the kernel stack of every thread of the process
# in cgroup CG_GLOB that is in uninterruptible sleep (D), top 6 frames, one
# line per thread seen: "epoch_ms tid comm | frame;frame;..."
# usage: dstack_sample.sh CG_GLOB SECONDS LOG
glob=$1; end=$(( $(date +%s) + $2 )); log=$3
while [ "$(date +%s)" -lt "$end" ]; do
  for cg in /sys/fs/cgroup/memory/$glob/; do
    pid=$(head -1 $cg/cgroup.procs 2>/dev/null); [ -n "$pid" ] || continue
    for t in /proc/$pid/task/*; do
      st=$(awk '{print $3}' $t/stat 2>/dev/null)
      [ "$st" = "D" ] || continue
      fr=$(awk '{print $2}' $t/stack 2>/dev/null | head -6 | sed 's/+0x.*//' | paste -sd';')
      echo "$(date +%s%3N) ${t##*/} $(cat $t/comm 2>/dev/null) | $fr"
    done
  done
  sleep 0.1
done >> "$log"
