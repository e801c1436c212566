#!/usr/bin/env bash
# The Scribengin splitter report's experiment, tablinum beside Kafka Streams
# 4.4.0 (exactly_once_v2) on one Kafka 4.4.0 broker, in one run:
#
#   (a) tablinum topics end to end: generator -> topic `logs` (8 partitions)
#       -> splitter flow (by level) -> INFO / WARNING / ERROR topics ->
#       persister flow -> topic `aggregate`; both flows run at once.
#   (b) Kafka -> Kafka: Kafka topic `in` (8 partitions) -> tablinum's
#       splitter flow -> three Kafka topics (transactional sinks); then the
#       Kafka Streams splitter (bench/peers/kafka-streams/Splitter.java) on
#       the same input into its own three topics.
#
# Every variant is validated (flow validate: lost and duplicated must be 0)
# before its throughput counts. Usage:
#
#   bench/results/2026-11-29-splitter/run.sh BIN OUT [RECORDS_PER_PARTITION] [REPEATS]
#
# BIN: a release `tablinum` (cargo build --release -p tablinum-cli).
# SPLIT (environment): percent of INFO,WARNING,ERROR records (default the
# report's third each, 34,33,33; the skewed variant: 80,15,5).
set -euo pipefail
BIN=$(realpath "$1"); OUT=$2; N=${3:-50000}; REPEATS=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
SPLIT=${SPLIT:-34,33,33}; P=8; COMMIT_MS=1000; GRPC=127.0.0.1:7610; KPORT=19192; BROKERS=127.0.0.1:$KPORT
mkdir -p "$OUT/raw"; OUT=$(realpath "$OUT")
export XDG_CONFIG_HOME=$OUT/home TABLINUM_CLUSTER=$GRPC
LIBS=${TABLINUM_CACHE:-$HOME/.cache/tablinum}/kafka-4.4.0/libs

cleanup() {
  [ -n "${UP_PID:-}" ] && kill "$UP_PID" 2>/dev/null || true
  bash "$ROOT/scripts/kafka-broker.sh" stop "$OUT/kafka" || true
}
trap cleanup EXIT

{ echo "date: $(date -u +%FT%TZ)"; echo "commit: $(git -C "$ROOT" rev-parse HEAD)";
  echo "cpu: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)";
  echo "memory: $(free -g | awk '/Mem:/{print $2}') GiB"; uname -r; java -version 2>&1 | head -1;
  echo "records per partition: $N; partitions: $P; split: $SPLIT; commit interval: $COMMIT_MS ms; repeats: $REPEATS"; } > "$OUT/machine.txt"

"$BIN" up --data "$OUT/data" --listen $GRPC --http 127.0.0.1:7611 --sservers 0 > "$OUT/up.log" 2>&1 &
UP_PID=$!
bash "$ROOT/scripts/kafka-broker.sh" start "$OUT/kafka" $KPORT
for _ in $(seq 100); do "$BIN" status >/dev/null 2>&1 && break; sleep 0.2; done
mkdir -p "$OUT/peer"
javac -nowarn -cp "$LIBS/*" -d "$OUT/peer" "$ROOT/bench/peers/kafka-streams/Splitter.java"
mkdir -p "$OUT/flows"

kcreate() { java -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server $BROKERS \
  --create --topic "$1" --partitions $P >/dev/null 2>&1; }

split_flow() { # name source-kind-lines sink-kind out-prefix sync
  cat <<TOML
[flow]
name = "$1"
parallelism = $P
commit_interval_ms = $COMMIT_MS
durability = "$5"

[[source]]
name = "in"
$2

[[operator]]
name = "by-level"
kind = "split"
input = "in"
field = "level"
routes = { INFO = "info", WARNING = "warning", ERROR = "error" }
TOML
  for l in info warning error; do
    printf '\n[[sink]]\nname = "%s"\ninput = "by-level"\n%s\ntopic = "%s.%s"\n' "$l" "$3" "$4" "$l"
  done
}

for r in $(seq 1 "$REPEATS"); do
  echo "== repeat $r: (a) tablinum topics end to end"
  "$BIN" topic create logs$r --partitions $P >/dev/null
  "$BIN" topic produce logs$r --generate "$N" --split "$SPLIT" > "$OUT/raw/a$r-generate.txt" 2>/dev/null
  split_flow a$r-split $'kind = "topic"\ntopic = "logs'$r'"' 'kind = "topic"' a$r sync > "$OUT/flows/a$r-split.toml"
  { printf '[flow]\nname = "a%s-persist"\nparallelism = %s\ncommit_interval_ms = %s\ndurability = "sync"\n' $r $P $COMMIT_MS
    for l in info warning error; do
      "$BIN" topic create a$r.$l --partitions $P >/dev/null
      printf '\n[[source]]\nname = "%s"\nkind = "topic"\ntopic = "a%s.%s"\n' $l $r $l
      printf '\n[[sink]]\nname = "agg-%s"\ninput = "%s"\nkind = "topic"\ntopic = "a%s.aggregate"\n' $l $l $r
    done; } > "$OUT/flows/a$r-persist.toml"
  printf '[flow]\nname = "a%s-check"\nparallelism = %s\n\n[[source]]\nname = "in"\nkind = "topic"\ntopic = "logs%s"\n\n[[sink]]\nname = "aggregate"\ninput = "in"\nkind = "topic"\ntopic = "a%s.aggregate"\n' $r $P $r $r > "$OUT/flows/a$r-check.toml"
  # The persister waits for the splitter's first commits: a long idle bound.
  "$BIN" flow run "$OUT/flows/a$r-persist.toml" --until-idle-ms 10000 > "$OUT/raw/a$r-persist.txt" 2> "$OUT/raw/a$r-persist.err" &
  PERSIST=$!
  "$BIN" flow run "$OUT/flows/a$r-split.toml" --until-idle-ms 2000 > "$OUT/raw/a$r-split.txt" 2> "$OUT/raw/a$r-split.err"
  wait $PERSIST
  "$BIN" flow validate "$OUT/flows/a$r-check.toml" > "$OUT/raw/a$r-validate.txt" || true
  cat "$OUT/raw/a$r-split.txt" "$OUT/raw/a$r-persist.txt" "$OUT/raw/a$r-validate.txt"
  # End to end: from the splitter's first record to the persister's last
  # commit into the aggregate topic.
  awk -v n=$((N * P)) '/span:/ { if (FILENAME ~ /split/) a = $7 + 0; else b = $13 + 0 }
    END { printf "(a) end to end: %d records in %.3f s = %.0f records/s into the aggregate topic\n", n, (b - a) / 1000, n / ((b - a) / 1000) }' \
    "$OUT/raw/a$r-split.txt" "$OUT/raw/a$r-persist.txt" | tee "$OUT/raw/a$r-e2e.txt"

  echo "== repeat $r: (b) Kafka -> Kafka, tablinum"
  kcreate in$r
  "$BIN" topic produce in$r --kafka $BROKERS --generate "$N" --split "$SPLIT" > "$OUT/raw/b$r-generate.txt" 2>/dev/null
  for l in info warning error; do kcreate t$r.$l; kcreate ks$r.$l; done
  kcreate ks$r.dead-letter
  KSRC=$'kind = "kafka"\nbrokers = "'$BROKERS$'"\ntopic = "in'$r$'"\ngroup = "b'$r'"'
  split_flow b$r-tablinum "$KSRC" $'kind = "kafka"\nbrokers = "'$BROKERS'"' t$r sync > "$OUT/flows/b$r-tablinum.toml"
  split_flow b$r-peer "$KSRC" $'kind = "kafka"\nbrokers = "'$BROKERS'"' ks$r sync > "$OUT/flows/b$r-peer.toml"
  "$BIN" flow run "$OUT/flows/b$r-tablinum.toml" --until-idle-ms 2000 > "$OUT/raw/b$r-tablinum.txt" 2> "$OUT/raw/b$r-tablinum.err"
  "$BIN" flow validate "$OUT/flows/b$r-tablinum.toml" > "$OUT/raw/b$r-tablinum-validate.txt" || true
  cat "$OUT/raw/b$r-tablinum.txt" "$OUT/raw/b$r-tablinum-validate.txt"
  echo "== repeat $r: (b) Kafka -> Kafka, Kafka Streams (exactly_once_v2, $(nproc) threads)"
  java -cp "$LIBS/*:$OUT/peer" Splitter $BROKERS in$r ks$r $((N * P)) $COMMIT_MS > "$OUT/raw/b$r-peer.txt" 2> "$OUT/raw/b$r-peer.err"
  "$BIN" flow validate "$OUT/flows/b$r-peer.toml" > "$OUT/raw/b$r-peer-validate.txt" || true
  cat "$OUT/raw/b$r-peer.txt" "$OUT/raw/b$r-peer-validate.txt"
done
