#!/usr/bin/env bash
# A/B of journal writeback: the same binary, off (journal_writeback_bytes=0)
# then on (the default, 1 MiB), each 600 s of the long 4 KB nosync shape in
# its own 768 MiB cgroup; dirty/writeback pages sampled beside it.
# usage: run.sh [BIN] [OUT_DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
cg_run=$here/../2026-11-24-volume-gc-pace-sweep/cg_run.sh
B=${1:-/tmp/tablinum-new}; out=${2:-/tmp/ab-wb}
mkdir -p "$out"
"$here/dirty_sample.sh" "$out/dirty.log" 1400 &
"$cg_run" "$B" tablinum:journal_writeback_bytes=0 "$here/workload.toml" "$out/off" 768
"$cg_run" "$B" tablinum "$here/workload.toml" "$out/on" 768
wait
