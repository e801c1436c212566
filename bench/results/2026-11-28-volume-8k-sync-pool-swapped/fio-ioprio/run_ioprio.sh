#!/bin/bash
# Does the group commit's fdatasync wait behind the reads in the I/O
# scheduler? Runs ../../2026-11-28-volume-8k-sync-flush/flush.fio (24 O_DIRECT
# 8 KiB random readers beside one writer that fdatasyncs every 72 KiB) with
# the writer in I/O class 2 (best effort, as every thread runs by default)
# and in class 1 (real time, needs CAP_SYS_ADMIN or CAP_SYS_NICE), in the
# order 2, 1, 1, 2. The device's scheduler is mq-deadline, which serves a
# real-time request before any best-effort one.
# usage: run_ioprio.sh SCRATCH_DIR OUT_DIR
set -euo pipefail
scratch=$1; out=$2; here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../2026-11-28-volume-8k-sync-flush/flush.fio
mkdir -p "$scratch" "$out"; cd "$scratch"
sed 's/^fdatasync=1$/fdatasync=1\nprioclass=${WCLASS}\nprio=0/' "$src" > flushprio.fio
cat /sys/block/vda/queue/scheduler > "$out/scheduler.txt"
n=0
for c in 2 1 1 2; do
  n=$((n + 1))
  READERS=24 WBS=72k WCLASS=$c fio --output-format=normal flushprio.fio > "$out/flush-$n-class$c.txt"
done
