#!/usr/bin/env bash
# 4 KB nosync in the --long shape cut to 600 s (issue 10, item 3): the
# store before this directory's commit (BIN_BEFORE: one lock over the
# memtable, whole-key searches) and after it (BIN: 16 memtable shards, key
# heads), then RocksDB, run back to back from two binaries.
#   BIN_BEFORE: main at 75fe443 + ../2026-11-27-volume-cachestat-direct-reads-ab/cachestat-direct-reads.patch
#               (the patch's option is off by default: the buffered store of 75fe443)
#   BIN:        main at this directory's commit
#   each: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# Beside each scenario: device reads/writes (../2026-11-27-volume-value-cache-ab/disk_sample.sh),
# the run's CPU seconds per second (cpu_sample.sh) and the threads waiting
# for anything but a read, 10 times a second (stall_sample.py).
# usage: run.sh OUT   (OUT/before, OUT/after)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
out=$1
scenario() { # BIN TARGETS DIR
  for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
  sync; echo 3 > /proc/sys/vm/drop_caches
  (cd /tmp && "$1" bench scenario volume --long --duration-s 600 --variants 4k-nosync \
    --targets "$2" --out "$3" > "$3.progress.log" 2>&1) &
  sleep 5
  "$res/2026-11-27-volume-value-cache-ab/disk_sample.sh" "$3" "$3.disk.log" &
  "$here/cpu_sample.sh" "$3" "$3.cpu.log" &
  "$here/stall_sample.py" "$3" "$3.stall.log" 20 &
  wait
}
mkdir -p "$out"
scenario "${BIN_BEFORE:-/tmp/bin-cs-only}" tablinum "$out/before"
scenario "${BIN:-/work/target-peers/release/tablinum}" tablinum,rocksdb "$out/after"
