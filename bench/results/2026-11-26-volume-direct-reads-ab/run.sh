#!/usr/bin/env bash
# A/B of direct value reads (direct-reads.patch: Options::direct_value_reads),
# with RocksDB to be given the same choice (rocksdb-direct: use_direct_reads),
# in the --long shape (768 MiB limit, 24 workers, key space 16x the limit)
# cut to 10 minutes per run. Stopped after the two tablinum runs of 8k-sync
# (see NOTE.md): direct reads lost, so the RocksDB half was not needed.
# Binary: release build with `peers` of the commit adding this directory
# + direct-reads.patch (the run directory `tablinum:direct_value_reads=true-r1`
# is committed as 8k-sync/tablinum-direct-r1):
#   git apply direct-reads.patch
#   CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: run.sh OUT   (OUT on a disk with ~60 GB free)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants 8k-sync,8k-nosync \
  --targets tablinum:direct_value_reads=true,tablinum,rocksdb-direct,rocksdb \
  --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
wait
