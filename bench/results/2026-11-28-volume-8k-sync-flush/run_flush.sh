#!/bin/bash
# Runs flush.fio at each (readers, write size) pair; output per pair.
# usage: run_flush.sh SCRATCH_DIR OUT_DIR
set -euo pipefail
scratch=$1; out=$2; here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$scratch" "$out"; cd "$scratch"
for r in 24 1; do
  for w in 8k 72k 288k; do
    READERS=$r WBS=$w fio --output-format=normal "$here/flush.fio" > "$out/flush-r$r-w$w.txt"
  done
done
