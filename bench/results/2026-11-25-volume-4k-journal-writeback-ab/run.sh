#!/usr/bin/env bash
# A/B of journal writeback: the same binary, off (journal_writeback_bytes=0)
# then on (the default, 1 MiB), each 600 s of the long 4 KB nosync shape in
# its own 768 MiB cgroup; dirty/writeback pages sampled beside it.
set -u
B=${1:-/tmp/tablinum-new}
cd /tmp/ab-wb
/tmp/dirty_sample.sh /tmp/ab-wb/dirty.log 1400 &
../2026-11-24-volume-gc-pace-sweep/cg_run.sh $B tablinum:journal_writeback_bytes=0 /tmp/ab-wb/workload.toml /tmp/ab-wb/off 768
../2026-11-24-volume-gc-pace-sweep/cg_run.sh $B tablinum /tmp/ab-wb/workload.toml /tmp/ab-wb/on 768
wait
