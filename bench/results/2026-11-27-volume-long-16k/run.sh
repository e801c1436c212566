#!/usr/bin/env bash
# The 16 KB nosync long run (issue 10, item 1): tablinum, RocksDB and
# fjall-kv side by side, one repeat of 30 min each. fjall-kv is the stronger
# of the two key/value-separated peers in every nosync long run so far
# (4 KB: 28,655 vs BlobDB 18,330 ops/s; 8 KB: 32,986 vs 19,932), so it is the
# one the 1.3x target is held against here; BlobDB did not fit the session.
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: run.sh OUT   (OUT on a disk with ~60 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --variants 16k-nosync \
  --targets tablinum,rocksdb,fjall-kv --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k/du_sample.sh" "$out" "$out.du.log" &
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
wait
