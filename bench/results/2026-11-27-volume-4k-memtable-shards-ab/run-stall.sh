#!/usr/bin/env bash
# Where the second-long stalls of the 4 KB run wait (issue 10, item 3): one
# tablinum run in the shape of run.sh (600 s) with stall_sample.py taking
# gdb stacks of every thread when 20 or more workers wait in a futex.
# Binary: the store with memtable-shards-heads.patch applied (BIN, default
# /tmp/bin-shards), so waits on the memtable's lock do not fill the samples.
# usage: run-stall.sh OUT
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
out=$1
mkdir -p "$out.dumps"
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
(cd /tmp && "${BIN:-/tmp/bin-shards}" bench scenario volume --long --duration-s 600 --variants 4k-nosync \
  --targets tablinum --out "$out" > "$out.progress.log" 2>&1) &
sleep 5
"$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$out" "$out.disk.log" &
"$here/stall_sample.py" "$out" "$out.stall.log" 20 "$out.dumps" &
wait
