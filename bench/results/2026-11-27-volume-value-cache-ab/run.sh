#!/usr/bin/env bash
# Values in the engine's cache (issue 10, item 3): GETs keep the journal
# values they read in the cache they share with ledger blocks, one budget
# (`--cache-bytes`, which every target gets). 8 KB sync in the --long shape
# cut to 600 s, as ../2026-11-27-volume-cachestat-direct-reads-ab did.
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: [TARGETS=a,b] [CACHE_BYTES=n] run.sh OUT
#   sitting 1: TARGETS=tablinum:cache_values=false,tablinum run.sh /tmp/VC1
#   sitting 2: TARGETS=tablinum,rocksdb CACHE_BYTES=268435456 run.sh /tmp/VC2
# The binary was built with value-cache.patch (beside this) applied to 3026f02.
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
for d in /sys/fs/cgroup/memory/tablinum-bench-*; do [ -d "$d" ] && rmdir "$d"; done
sync; echo 3 > /proc/sys/vm/drop_caches
cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants 8k-sync \
  --cache-bytes "${CACHE_BYTES:-67108864}" \
  --targets "${TARGETS:-tablinum:cache_values=false,tablinum}" --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
"$here/disk_sample.sh" "$out" "$out.disk.log" &
wait
