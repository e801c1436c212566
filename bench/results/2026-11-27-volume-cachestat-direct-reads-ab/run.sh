#!/usr/bin/env bash
# Direct value reads that keep the page cache's hits (issue 10, item 3):
# `direct_value_reads` asks cachestat(2) whether a record's pages are
# cached, reads it through them if so and with O_DIRECT if not. A/B against
# the default (buffered) in one scenario, 8 KB sync in the --long shape cut
# to 600 s, as ../2026-11-26-volume-direct-reads-ab did for plain O_DIRECT.
# Binary: CARGO_TARGET_DIR=/work/target-peers cargo build --release -p tablinum-cli --features peers
# usage: [TARGETS=a,b] run.sh OUT   (repeat 2 ran TARGETS=tablinum,tablinum:direct_value_reads=true)
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=$here/..
bin=${BIN:-/work/target-peers/release/tablinum}
out=$1
cd /tmp && "$bin" bench scenario volume --long --duration-s 600 --variants 8k-sync \
  --targets "${TARGETS:-tablinum:direct_value_reads=true,tablinum}" --out "$out" > "$out.progress.log" 2>&1 &
sleep 5
"$res/2026-11-25-volume-long-4k-gc-drop-behind/mem_sample.sh" "$out" "$out.mem.log" &
wait
