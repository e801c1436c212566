#!/usr/bin/env bash
# Every 10 s while a volume scenario runs: the run's CPU seconds per second
# (user and system, from /proc/PID/stat of the process in the run's memory
# cgroup) and the machine's busy share (/proc/stat).
# usage: cpu_sample.sh OUT_ROOT LOG
root=$1; log=$2; t0=$(date +%s); hz=$(getconf CLK_TCK)
read -r _ u0 n0 s0 i0 w0 _ < /proc/stat; last_pid=""; pu0=0; ps0=0
while pgrep -f "bench scenario volume" >/dev/null; do
  sleep 10
  read -r _ u1 n1 s1 i1 w1 _ < /proc/stat
  pid=""; for cg in /sys/fs/cgroup/memory/tablinum-bench-*/; do [ -d "$cg" ] && pid=$(head -1 "$cg/cgroup.procs" 2>/dev/null); done
  pu1=0; ps1=0
  if [ -n "$pid" ] && [ -r /proc/$pid/stat ]; then
    read -r pu1 ps1 < <(awk '{print $14, $15}' /proc/$pid/stat)
  fi
  if [ "$pid" != "$last_pid" ]; then pu0=$pu1; ps0=$ps1; last_pid=$pid; fi
  run=$(ls -td "$root"/*/*/ 2>/dev/null | head -1 | xargs -r basename)
  tot=$(( (u1+n1+s1+i1+w1) - (u0+n0+s0+i0+w0) ))
  echo "t=$(( $(date +%s) - t0 )) run=$run proc_user_cpu_s=$(echo "scale=2; ($pu1-$pu0)/$hz/10" | bc) proc_sys_cpu_s=$(echo "scale=2; ($ps1-$ps0)/$hz/10" | bc) machine_busy_pct=$(( tot > 0 ? 100 * ((u1+n1+s1) - (u0+n0+s0)) / tot : 0 )) machine_iowait_pct=$(( tot > 0 ? 100 * (w1-w0) / tot : 0 ))"
  u0=$u1; n0=$n1; s0=$s1; i0=$i1; w0=$w1; pu0=$pu1; ps0=$ps1
done >> "$log"
