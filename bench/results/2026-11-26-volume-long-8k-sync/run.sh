#!/usr/bin/env bash
# The 8 KB sync long run of issue 10 item 1, as run on 2026-11-26.
# Binary: release build with `peers` of commit bad7eb8 (33683b5 changes only a test):
#   CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# Samplers beside it: data-directory size every 30 s, memory and I/O every
# 10 s, and an off-CPU trace of the first (tablinum) run from t = 1,200 s
# for 300 s, where the 8 KB nosync run showed 0.6-1.5 s stalls (bpftrace;
# needs `mount -t tracefs nodev /sys/kernel/tracing`).
# usage: run.sh OUT   (OUT on a disk with ~70 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --variants 8k-sync \
  --targets tablinum,rocksdb,fjall-kv,rocksdb-blob --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k/du_sample.sh" "$out" "$out.du.log" &
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
(
  # The first run's process: the one in a tablinum-bench cgroup (a stale,
  # empty cgroup of an earlier run may sort first, so look in all of them).
  pid=
  for _ in $(seq 1 120); do
    pid=$(cat /sys/fs/cgroup/memory/tablinum-bench-*/cgroup.procs 2>/dev/null | head -1)
    [ -n "$pid" ] && break; sleep 1
  done
  sleep 1200
  ulimit -l 8192
  timeout 300 bpftrace "$res/2026-11-26-volume-4k-allocator/offcpu.bt" "$pid" 150 > "$out.offcpu.log" 2>&1
) &
wait
"$res/2026-11-26-volume-long-8k/offcpu_summary.py" "$out.offcpu.log" > "$out.offcpu-summary.txt"
