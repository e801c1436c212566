#!/usr/bin/env bash
# A/B of deleting obsolete files on the reader thread ("direct": the engine
# of bd2df6a with Graveyard::bury_later deleting at once, as before that
# commit) against queueing them for the background workers ("queued":
# bd2df6a as committed). Each 600 s of the long 4 KB nosync shape in its own
# 768 MiB cgroup; D-state kernel stacks every 100 ms and memory every 10 s
# beside it.
# usage: run.sh DIRECT_BIN QUEUED_BIN OUT_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
cg_run=$here/../2026-11-24-volume-gc-pace-sweep/cg_run.sh
direct=$1; queued=$2; out=$3
mkdir -p "$out"
"$here/../2026-11-25-volume-4k-journal-writeback-ab/dstack_sample.sh" 'tablinum-ab-*' 1260 "$out/dstack.log" &
"$here/mem_sample_ab.sh" 1260 "$out/memory.log" &
"$cg_run" "$direct" tablinum "$here/workload.toml" "$out/direct" 768
"$cg_run" "$queued" tablinum "$here/workload.toml" "$out/queued" 768
wait
python3 "$here/windows.py" "$out/direct" "$out/queued"
