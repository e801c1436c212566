#!/usr/bin/env bash
# Issue 32 targets, on real processes (`tablinum jepsen`: a manager and
# three tablet servers, six clients on ten registers, heartbeat timeout
# 1500 ms; disk faults through each tablet server's TABLINUM_DISK_FAULTS
# control file):
#   - 20 runs x 60 s with only `fsync-lost` (every journal fsync of one
#     tablet server fails for 1 s and the unsynced bytes are dropped):
#     linearizability violations and lost acknowledged writes;
#   - 5 runs x 60 s with only `slow-disk` (every journal append and fsync
#     of one tablet server takes 1.5 s more, for 4 s): servers declared dead
#     (the manager's "missed heartbeats" log lines);
#   - 3 runs x 60 s with only `disk-full`.
# Usage: run.sh BIN OUT
set -euo pipefail
BIN=${1:?tablinum binary}
OUT=${2:?output directory}
mkdir -p "$OUT"
run() { # kind seed
  local dir="$OUT/$1-$2"
  rm -rf "$dir"
  "$BIN" jepsen --seconds 60 --faults "$1" --seed "$2" --out "$dir" > "$dir.txt" 2>&1 || true
  local dead
  dead=$(grep -c "missed heartbeats" "$dir/cluster.log" || true)
  echo "servers declared dead: $dead" >> "$dir.txt"
  rm -rf "$dir/storage"
}
for s in $(seq 1 20); do run fsync-lost "$s"; done
for s in $(seq 1 5); do run slow-disk "$s"; done
for s in $(seq 1 3); do run disk-full "$s"; done
