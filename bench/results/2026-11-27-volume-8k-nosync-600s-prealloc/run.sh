#!/usr/bin/env bash
# 8 KB nosync in the --long shape cut to 600 s (issue 10, item 4) on main with journal
# preallocation on by default (929a71d): tablinum and RocksDB side by side,
# 600 s each, with the device, CPU and stall samplers
# of ../2026-11-27-volume-4k-journal-preallocate-ab.
# Binary: main at 929a71d (687c626 after it changed only a doc comment), CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
#   (run as BIN=/tmp/bin-main/tablinum, a copy of that build)
# usage: run.sh OUT   (OUT on a disk with ~40 GB free; TARGETS=... to change the order)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
ab=$res/2026-11-27-volume-4k-memtable-shards-ab
bin=${BIN:-/work/target-peers/release/tablinum}
targets=${TARGETS:-tablinum,rocksdb}
out=$1
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
(cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants 8k-nosync \
  --targets "$targets" --out "$out" > "$out.progress.log" 2>&1) &
sleep 5
"$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$out" "$out.disk.log" &
"$ab/cpu_sample.sh" "$out" "$out.cpu.log" &
"$ab/stall_sample.py" "$out" "$out.stall.log" 20 &
wait
