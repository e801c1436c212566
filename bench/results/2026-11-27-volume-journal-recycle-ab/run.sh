#!/usr/bin/env bash
# Recycled journal segments (issue 10, item 3): one binary,
# both settings in one scenario, 600 s each in the --long shape, with the
# device, CPU, stall and page-cache samplers.
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: BIN=path/to/tablinum VARIANT=8k-nosync TARGETS=... run.sh OUT
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
ab=$res/2026-11-27-volume-4k-memtable-shards-ab
bin=${BIN:-/work/target-peers/release/tablinum}
variant=${VARIANT:-8k-sync}
targets=${TARGETS:-tablinum:journal_recycle_segments=0,tablinum,rocksdb}
out=$1
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
(cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants "$variant" \
  --targets "$targets" --out "$out" > "$out.progress.log" 2>&1) &
sleep 5
"$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$out" "$out.disk.log" &
"$ab/cpu_sample.sh" "$out" "$out.cpu.log" &
"$ab/stall_sample.py" "$out" "$out.stall.log" 20 &
"$res/2026-11-27-volume-4k-page-cache-census/census_sample.sh" "$out" "$out.census.log" 30 &
wait
