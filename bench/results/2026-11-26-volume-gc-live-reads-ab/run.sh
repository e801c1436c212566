#!/usr/bin/env bash
# A/B of value GC reading only live records (6fc6535) against reading whole
# segments (bad7eb8): the 8k-gc variant (2.3 GB of 8 KB values preloaded,
# 120 s of 5:1 GET:UPDATE by 24 workers under 768 MiB, journal compaction
# back to back from 60 s), tablinum only, the two binaries interleaved.
# Binaries: release builds with `peers` of each commit:
#   CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: run.sh OLD_BIN NEW_BIN OUT
set -eu
old=$1 new=$2 out=$3
mkdir -p "$out"
cd /tmp
for r in 1 2; do
  for side in old new; do
    bin=$old; [ "$side" = new ] && bin=$new
    "$bin" bench scenario volume --variants 8k-gc --targets tablinum --workers 24 \
      --memory-limit-mib 768 --duration-s 120 --out "$out/$side-r$r" \
      > "$out/$side-r$r.log" 2>&1
  done
done
