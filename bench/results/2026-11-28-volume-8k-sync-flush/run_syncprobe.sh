#!/bin/bash
# syncprobe.py in each mode, alone and beside readers.fio.
# usage: run_syncprobe.sh SCRATCH_DIR OUT_DIR
set -euo pipefail
scratch=$1; out=$2; here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$scratch" "$out"; cd "$scratch"
for load in idle reads24; do
  for mode in overwrite keep-size append; do
    if [ $load = reads24 ]; then
      fio --runtime=75 "$here/readers.fio" > "$out/readers-$mode.txt" & fpid=$!
      sleep 5
    fi
    python3 "$here/syncprobe.py" $mode "$scratch" 60 73728 | sed "s/^/load=$load /" | tee -a "$out/syncprobe.txt"
    [ $load = reads24 ] && wait $fpid
  done
done
