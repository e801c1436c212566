#!/usr/bin/env bash
# A single-node Kafka 4.4.0 broker (KRaft: broker and controller in one JVM)
# on loopback, from Maven Central jars: no container, no download of a
# Kafka distribution.
#
#   scripts/kafka-broker.sh fetch            # the jars into the cache only
#   scripts/kafka-broker.sh start DIR [PORT] # format DIR, start, wait for the port;
#                                            # prints the bootstrap address (127.0.0.1:PORT)
#   scripts/kafka-broker.sh stop DIR         # stop the broker started in DIR
#
# Jars are cached in ${TABLINUM_CACHE:-$HOME/.cache/tablinum}/kafka-4.4.0/libs
# (126 MB; fetched once, ~10 s). Needs Java 17+ and Maven: without them it
# fails and says so (tests that need the broker fail, they never skip).
# PORT defaults to 19092; the controller listens on PORT+1. The broker's log
# is DIR/broker.log, its pid DIR/broker.pid; it runs until stopped.
set -euo pipefail

KAFKA_VERSION=4.4.0
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${TABLINUM_CACHE:-$HOME/.cache/tablinum}/kafka-$KAFKA_VERSION
LIBS=$CACHE/libs

die() { echo "kafka-broker.sh: $*" >&2; exit 1; }

need_tools() {
  command -v java >/dev/null 2>&1 || die "java not found: install a JDK 17+ (apt-get install openjdk-17-jdk-headless)"
  command -v mvn >/dev/null 2>&1 || die "mvn not found: install Maven (apt-get install maven)"
}

fetch() {
  need_tools
  if [ -f "$CACHE/complete" ]; then return 0; fi
  mkdir -p "$CACHE"
  rm -rf "$LIBS.tmp"
  echo "kafka-broker.sh: fetching Kafka $KAFKA_VERSION jars into $LIBS" >&2
  mvn -q -B -f "$HERE/kafka/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS.tmp" >&2 || die "mvn could not fetch the Kafka jars (see above)"
  rm -rf "$LIBS"
  mv "$LIBS.tmp" "$LIBS"
  touch "$CACHE/complete"
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  local dir=$1 port=${2:-19092}
  local cport=$((port + 1))
  fetch
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/broker.pid" ] && kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null; then
    die "a broker already runs from $dir (pid $(cat "$dir/broker.pid"))"
  fi
  port_open "$port" && die "port $port is taken"
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
  cat > "$dir/log4j2.properties" <<'PROPS'
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=FILE
appender.file.type=File
appender.file.name=FILE
appender.file.fileName=${sys:kafka.logs.dir}/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=%d %p %c{1}: %m%n
PROPS
  if [ ! -f "$dir/data/meta.properties" ]; then
    local id
    id=$(java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid)
    java -cp "$LIBS/*" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" \
      >"$dir/format.log" 2>&1 || die "formatting the storage failed: $dir/format.log"
  fi
  nohup java -Xmx1g -Dkafka.logs.dir="$dir" \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" >"$dir/broker.log" 2>&1 &
  echo $! > "$dir/broker.pid"
  for _ in $(seq 1 600); do
    if port_open "$port"; then
      echo "127.0.0.1:$port"
      return 0
    fi
    kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null || die "the broker exited: $dir/broker.log"
    sleep 0.1
  done
  die "the broker did not open port $port in 60 s: $dir/broker.log"
}

stop() {
  local dir=$1
  [ -f "$dir/broker.pid" ] || return 0
  local pid
  pid=$(cat "$dir/broker.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$dir/broker.pid"; return 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/broker.pid"
}

case "${1:-}" in
  fetch) fetch ;;
  start) [ $# -ge 2 ] || die "usage: $0 start DIR [PORT]"; start "$2" "${3:-19092}" ;;
  stop) [ $# -ge 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 fetch | start DIR [PORT] | stop DIR" ;;
esac
