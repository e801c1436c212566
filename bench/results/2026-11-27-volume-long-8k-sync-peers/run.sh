#!/usr/bin/env bash
# The 8 KB sync long run's key/value-separated peers (issue 10, item 1):
# RocksDB BlobDB and fjall-kv, one repeat of 30 min each, on the same binary
# and machine as tablinum and RocksDB in ../2026-11-26-volume-long-8k-sync-main
# (the engine has not changed since 785313c; only client and bench code did).
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: run.sh OUT   (OUT on a disk with ~60 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --variants 8k-sync \
  --targets rocksdb-blob,fjall-kv --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k/du_sample.sh" "$out" "$out.du.log" &
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
wait
