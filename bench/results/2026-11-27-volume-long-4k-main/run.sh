#!/usr/bin/env bash
# 4 KB nosync long run on main (issue 10, item 1): tablinum against fjall-kv,
# the better key/value-separated peer at 4 KB in ../2026-11-25-volume-long-4k-peers,
# since value GC now reads only live records (2026-11-26). 30 min each.
# Beside it: du (../2026-11-25-volume-long-4k/du_sample.sh), memory
# (../2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh) and device
# reads/writes per second (../2026-11-27-volume-value-cache-ab/disk_sample.sh).
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: run.sh OUT   (OUT on a disk with ~60 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
cd /tmp && "$bin" bench scenario volume --long --variants 4k-nosync \
  --targets tablinum,fjall-kv --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k/du_sample.sh" "$out" "$out.du.log" &
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
"$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$out" "$out.disk.log" &
wait
