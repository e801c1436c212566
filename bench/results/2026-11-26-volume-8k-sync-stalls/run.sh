#!/usr/bin/env bash
# Tracing the slow phases of the 8 KB sync long run (../2026-11-26-volume-long-8k-sync):
# tablinum alone, 30 min, with iostall.bt attached from t = 600 s for 900 s
# (the phases were at 810-1,020 s and 1,200-1,290 s); the machine's and
# the threads' CPU every 10 s (cpu_sample.py); system-wide perf profiles of
# 20 s at 300, 870, 1,230 and 1,700 s (perf_at.sh).
# Binary: release build with `peers` (see NOTE.md for the commit):
#   CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# Needs bpftrace and `mount -t tracefs nodev /sys/kernel/tracing`.
# usage: run.sh OUT   (OUT on a disk with ~30 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --variants 8k-sync \
  --targets tablinum --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k/du_sample.sh" "$out" "$out.du.log" &
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
"$here/perf_at.sh" "$out.progress.log" "$out.perf" 300 870 1230 1700 &
(
  pid=
  for _ in $(seq 1 120); do
    pid=$(cat /sys/fs/cgroup/memory/tablinum-bench-*/cgroup.procs 2>/dev/null | head -1)
    [ -n "$pid" ] && break; sleep 1
  done
  echo "traced pid $pid" > "$out.iostall.log"
  "$here/cpu_sample.py" "$pid" "$out.cpu.log" &
  sleep 600
  ulimit -l 8192
  timeout 900 bpftrace "$here/iostall.bt" "$pid" 200 >> "$out.iostall.log" 2>&1
) &
wait
