#!/usr/bin/env bash
# Issue 10 status sitting: 4 KB and 8 KB NoSync on main, tablinum beside
# RocksDB and fjall-kv (the better KV-separated peer in both variants'
# 30-min runs), 600 s each in the --long shape, with the samplers of
# ../2026-11-27-volume-journal-recycle-ab/run.sh.
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: BIN=path/to/tablinum sit.sh OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=$here/../2026-11-27-volume-journal-recycle-ab/run.sh
out=$1
mkdir -p "$out"
for v in 4k-nosync 8k-nosync; do
  VARIANT=$v TARGETS=tablinum,rocksdb,fjall-kv "$run" "$out/$v"
  echo "$v done $(date -u +%FT%TZ)" >> "$out/sit.log"
done
echo all-done >> "$out/sit.log"
