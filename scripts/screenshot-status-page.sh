#!/usr/bin/env bash
# Takes a headless-Chromium screenshot of the status page of a live
# `tablinum up` under load, as an operator sees it: docs/status-page.png
# (or the path given as $1). Installs Debian's chromium when it is missing.
#
# Runs everything on loopback in a temporary directory (its own data
# directory and credentials file), with a bounded open-loop workload
# (60 s at 400 ops/s), and stops the cluster at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/status-page.png}
grpc=127.0.0.1:17400
http=127.0.0.1:17401

log() { printf 'screenshot: %s\n' "$*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium (Debian package)"
    apt-get update -qq && apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
fi
cargo build --release -q -p tablinum-cli
bin=$PWD/target/release/tablinum

tmp=$(mktemp -d)
up_pid=
cleanup() {
    [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export XDG_CONFIG_HOME=$tmp/config

"$bin" up --data "$tmp/data" --listen "$grpc" --http "$http" >"$tmp/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 100); do
    curl -fs "http://$http/health" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fs "http://$http/health" >/dev/null || { cat "$tmp/up.log" >&2; exit 1; }

"$bin" table create blobs --split g,n,t --cluster "$grpc" >/dev/null
for k in alpha kilo tango; do "$bin" put blobs "$k" "value of $k" --cluster "$grpc" >/dev/null; done

cat >"$tmp/load.toml" <<'EOF'
duration_s = 60
concurrent = 4
mode = "rate"
rate_ops_per_s = 400
report_interval_s = 10
seed = 7
preload_keys = 2_000
# be64 keys up to 2^48: their first two bytes spread writes over every tablet
keys = 281_474_976_710_656
key_generator = "uniform"
value_size_bytes = 4096

[operations]
get = 2
put = 1
scan = 1
EOF
log "running 60 s of load against $grpc (table events, 8 tablets)"
"$bin" bench run "$tmp/load.toml" --target "cluster:$grpc,table=events,tablets=8" \
    --out "$tmp/bench" --quiet &
bench_pid=$!
# The charts need a few samples (one per 5 s); the bench drops its table
# when it ends, so the picture is taken while it runs.
sleep 50

token=$(cat "$tmp/data/admin.token")
mkdir -p "$(dirname "$out")"
# Basic credentials in the URL: the page takes the token as the password.
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1280,900 --screenshot="$PWD/$out" \
    "http://op:$token@$http/" >/dev/null 2>&1
wait "$bench_pid"
log "wrote $out"
