#!/usr/bin/env bash
# Ledger passes in large reads (issue 10, item 3): value GC's pass over the
# ledger and ledger compaction read up to 512 KiB of consecutive blocks per
# pread, past the block cache, instead of one ~2 KiB block per pread through
# it. One 600-s run of tablinum in the --long shape per binary, back to back,
# with the device, CPU and stall samplers of
# ../2026-11-27-volume-4k-journal-preallocate-ab.
# Binaries: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers,
#   at this directory's commit (BIN) and at its parent (the baseline).
# usage: BIN=path/to/tablinum VARIANT=8k-sync run.sh OUT
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
ab=$res/2026-11-27-volume-4k-memtable-shards-ab
bin=${BIN:-/work/target-peers/release/tablinum}
variant=${VARIANT:-8k-sync}
targets=${TARGETS:-tablinum}
out=$1
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
(cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants "$variant" \
  --targets "$targets" --out "$out" > "$out.progress.log" 2>&1) &
sleep 5
"$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$out" "$out.disk.log" &
"$ab/cpu_sample.sh" "$out" "$out.cpu.log" &
"$ab/stall_sample.py" "$out" "$out.stall.log" 20 &
wait
