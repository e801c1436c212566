#!/usr/bin/env bash
# The fused splitter alone (outside the scenario): one `tablinum up`, topic
# `logs` (8 partitions) generated first, then one flow that splits by level
# into three sinks on topic `aggregate` (sync, commit every 1000 ms), then
# validation and latency. Nothing else runs. Usage:
#
#   fused-alone.sh BIN OUT [RECORDS_PER_PARTITION]
#
# SAMPLE=1 also writes OUT/samples.txt during the flow (every 0.25 s: the
# time, /proc/stat's cpu line, the cluster's utime and stime, the disk's
# sectors written); PERF=1 also records 5 s of `perf record -a
# --call-graph dwarf` into OUT/perf.data (the splitter round-2 profiles).
set -euo pipefail
BIN=$1; OUT=$2; N=${3:-50000}; SPLIT=${SPLIT:-34,33,33}
rm -rf "$OUT"; mkdir -p "$OUT"
export XDG_CONFIG_HOME=$OUT/home TABLINUM_CLUSTER=127.0.0.1:7630
"$BIN" up --data "$OUT/data" --listen 127.0.0.1:7630 --http 127.0.0.1:7631 --sservers 0 > "$OUT/up.log" 2>&1 &
UP=$!; trap 'kill $UP' EXIT
for _ in $(seq 100); do "$BIN" status >/dev/null 2>&1 && break; sleep 0.2; done
"$BIN" topic create logs --partitions 8 >/dev/null
"$BIN" topic create aggregate --partitions 8 >/dev/null
"$BIN" topic produce logs --generate "$N" --split "$SPLIT" > /dev/null 2>&1
cat > "$OUT/f.toml" <<T
[flow]
name = "fused"
parallelism = 8
commit_interval_ms = 1000
durability = "sync"

[[source]]
name = "in"
kind = "topic"
topic = "logs"

[[operator]]
name = "by-level"
kind = "split"
input = "in"
field = "level"
routes = { INFO = "info", WARNING = "warning", ERROR = "error" }
T
for l in info warning error; do
  printf '\n[[sink]]\nname = "%s"\ninput = "by-level"\nkind = "topic"\ntopic = "aggregate"\n' $l >> "$OUT/f.toml"
done
if [ -n "${SAMPLE:-}" ]; then
  ( while true; do echo "$(date +%s.%N) $(head -1 /proc/stat) | $(awk '{print $14, $15}' /proc/$UP/stat) | $(grep -E ' (vda|sda|nvme0n1) ' /proc/diskstats | awk '{print $10}')"; sleep 0.25; done ) > "$OUT/samples.txt" &
  S=$!; trap 'kill $S $UP' EXIT
fi
[ -n "${PERF:-}" ] && perf record -F 299 -a --call-graph dwarf,16384 -o "$OUT/perf.data" -- sleep 5 >/dev/null 2>&1 &
"$BIN" flow run "$OUT/f.toml" --until-idle-ms 2000
"$BIN" flow validate "$OUT/f.toml" --latency || true
