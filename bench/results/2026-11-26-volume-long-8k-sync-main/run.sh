#!/usr/bin/env bash
# The 8 KB sync long run on main after value GC reads only live records
# (commit 79de0e3; engine as of 6fc6535/492c632), tablinum and RocksDB side
# by side: the two targets of the 2.0x target that fit in one session (the
# BlobDB and fjall-kv figures of ../2026-11-26-volume-long-8k-sync are from
# bad7eb8's day and are quoted, not re-run).
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: run.sh OUT   (OUT on a disk with ~40 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --variants 8k-sync \
  --targets tablinum,rocksdb --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k/du_sample.sh" "$out" "$out.du.log" &
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
wait
