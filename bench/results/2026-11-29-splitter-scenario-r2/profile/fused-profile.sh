#!/usr/bin/env bash
# fused-alone with phase timing + cpu/disk sampling
set -euo pipefail
BIN=$1; OUT=$2; N=${3:-50000}; SPLIT=${SPLIT:-34,33,33}
rm -rf "$OUT"; mkdir -p "$OUT"
export XDG_CONFIG_HOME=$OUT/home TABLINUM_CLUSTER=127.0.0.1:7630
"$BIN" up --data "$OUT/data" --listen 127.0.0.1:7630 --http 127.0.0.1:7631 --sservers 0 > "$OUT/up.log" 2>&1 &
UP=$!; trap 'kill $UP' EXIT
for _ in $(seq 100); do "$BIN" status >/dev/null 2>&1 && break; sleep 0.2; done
"$BIN" topic create logs --partitions 8 >/dev/null
"$BIN" topic create aggregate --partitions 8 >/dev/null
t0=$(date +%s.%N)
"$BIN" topic produce logs --generate "$N" --split "$SPLIT" > /dev/null 2>&1
t1=$(date +%s.%N); echo "produce: $(echo "$t1 - $t0" | bc) s"
cat > "$OUT/f.toml" <<T
[flow]
name = "fused"
parallelism = 8
commit_interval_ms = ${CI_MS:-1000}
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
sync
( while true; do echo "$(date +%s.%N) $(head -1 /proc/stat) | $(awk '{print $14, $15}' /proc/$UP/stat) | $(grep -E ' (vda|sda|nvme0n1) ' /proc/diskstats | awk '{print $10}')"; sleep 0.25; done ) > "$OUT/samples.txt" &
S=$!
[ -n "${PERF:-}" ] && perf record -F 299 -a --call-graph dwarf,16384 -o $OUT/perf.data -- sleep 5 >/dev/null 2>&1 &
P=$!; [ -z "${PERF:-}" ] && P=""
"$BIN" flow run "$OUT/f.toml" --until-idle-ms 2000 2>&1 | grep -E "^flow fused" 
kill $S; [ -n "$P" ] && wait $P || true
