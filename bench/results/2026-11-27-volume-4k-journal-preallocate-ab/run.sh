#!/usr/bin/env bash
# 4 KB nosync in the --long shape cut to 600 s (issue 10, item 3): the store
# with and without `journal_preallocate` (fallocate each write segment's
# 128 MiB when it is created) in one scenario, after the stalls in
# ../2026-11-27-volume-4k-memtable-shards-ab (writer lock held while ext4
# allocates the journal's blocks). Beside it: device reads/writes, CPU, and
# the stall sampler of that directory (workers waiting on anything but a read).
# Binary: main at this directory's parent commit + the option (off by default then),
#   CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers;
#   the option is on by default from this directory's commit: use tablinum:journal_preallocate=false.
# usage: run.sh OUT   (TARGETS=... to change the order)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
ab=$res/2026-11-27-volume-4k-memtable-shards-ab
bin=${BIN:-/work/target-peers/release/tablinum}
targets=${TARGETS:-tablinum:journal_preallocate=true,tablinum}
out=$1
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
(cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants 4k-nosync \
  --targets "$targets" --out "$out" > "$out.progress.log" 2>&1) &
sleep 5
"$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$out" "$out.disk.log" &
"$ab/cpu_sample.sh" "$out" "$out.cpu.log" &
"$ab/stall_sample.py" "$out" "$out.stall.log" 20 &
wait
