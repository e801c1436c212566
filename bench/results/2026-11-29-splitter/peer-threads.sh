#!/usr/bin/env bash
# Kafka Streams' best configuration on this machine: the same splitter with
# 1, 2 and 4 stream threads on one input (8 partitions x N records), each
# into its own output topics, each validated.
#   bench/results/2026-11-29-splitter/peer-threads.sh BIN OUT [N]
set -euo pipefail
BIN=$(realpath "$1"); OUT=$2; N=${3:-50000}
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../.." && pwd)
P=8; GRPC=127.0.0.1:7640; KPORT=19292; BROKERS=127.0.0.1:$KPORT
mkdir -p "$OUT/raw" "$OUT/peer" "$OUT/flows"; OUT=$(realpath "$OUT")
export XDG_CONFIG_HOME=$OUT/home TABLINUM_CLUSTER=$GRPC
LIBS=${TABLINUM_CACHE:-$HOME/.cache/tablinum}/kafka-4.4.0/libs
cleanup() { [ -n "${UP_PID:-}" ] && kill "$UP_PID" 2>/dev/null || true; bash "$ROOT/scripts/kafka-broker.sh" stop "$OUT/kafka" || true; }
trap cleanup EXIT
"$BIN" up --data "$OUT/data" --listen $GRPC --http 127.0.0.1:7641 --sservers 0 > "$OUT/up.log" 2>&1 &
UP_PID=$!
bash "$ROOT/scripts/kafka-broker.sh" start "$OUT/kafka" $KPORT
for _ in $(seq 100); do "$BIN" status >/dev/null 2>&1 && break; sleep 0.2; done
javac -nowarn -cp "$LIBS/*" -d "$OUT/peer" "$ROOT/bench/peers/kafka-streams/Splitter.java"
kcreate() { java -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server $BROKERS --create --topic "$1" --partitions $P >/dev/null 2>&1; }
kcreate in
"$BIN" topic produce in --kafka $BROKERS --generate "$N" > "$OUT/raw/generate.txt" 2>/dev/null
for t in 1 2 4; do
  for l in info warning error dead-letter; do kcreate ks$t.$l; done
  printf '[flow]\nname = "ks%s"\nparallelism = %s\n\n[[source]]\nname = "in"\nkind = "kafka"\nbrokers = "%s"\ntopic = "in"\ngroup = "v"\n' $t $P $BROKERS > "$OUT/flows/ks$t.toml"
  for l in info warning error; do printf '\n[[sink]]\nname = "%s"\ninput = "in"\nkind = "kafka"\nbrokers = "%s"\ntopic = "ks%s.%s"\n' $l $BROKERS $t $l >> "$OUT/flows/ks$t.toml"; done
  java -cp "$LIBS/*:$OUT/peer" Splitter $BROKERS in ks$t $((N * P)) 1000 $t > "$OUT/raw/ks$t.txt" 2> "$OUT/raw/ks$t.err"
  "$BIN" flow validate "$OUT/flows/ks$t.toml" > "$OUT/raw/ks$t-validate.txt" || true
  echo "threads $t: $(cat "$OUT/raw/ks$t.txt") $(tail -1 "$OUT/raw/ks$t-validate.txt")"
done
