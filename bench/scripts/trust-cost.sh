#!/usr/bin/env bash
# What trust costs, side by side in one run with interleaved repeats:
#
#   base  the cluster before authentication and fencing (a binary built from
#         commit f72e052), plaintext
#   auth  this binary: a token checked on every call, epoch fencing,
#         plaintext
#   tls   this binary with TLS on every listener (`tablinum up --tls`)
#
# on two workloads: the volume workload through the cluster
# (bench/workloads/volume-8k-cluster.toml, `bench run --target cluster`)
# and the stream-limit scenario at q = 192 (stream_limit 10 and adaptive).
# Every run starts its own `tablinum up` on loopback; every load is
# bounded in time.
#
# usage: [KINDS="volume stream-limit"] bench/scripts/trust-cost.sh BASE_BIN NEW_BIN OUT [REPEATS]
#   BASE_BIN  e.g. built by: git worktree add /work/base f72e052 &&
#             (cd /work/base && CARGO_TARGET_DIR=/work/target-base cargo build --release -p tablinum-cli)
#   NEW_BIN   target/release/tablinum
set -euo pipefail
cd "$(dirname "$0")/../.."
base=$1
new=$2
out=$3
repeats=${4:-3}
kinds=${KINDS:-volume stream-limit}
has() { case " $kinds " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$out"
log() { printf 'trust-cost: %s\n' "$*" | tee -a "$out/output.txt" >&2; }

log "command: $0 $*"
log "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
log "base: $base ($("$base" --version 2>/dev/null || echo '?')), new: $new at $(git rev-parse HEAD)"

volume() { # variant bin target dir
    "$2" bench run bench/workloads/volume-8k-cluster.toml --target "$3" --out "$4" --quiet
}
stream() { # variant bin extra-args dir
    "$2" bench scenario stream-limit --q 192 --stream-limits 10,adaptive --repeat 1 \
        --duration-s 10 --warmup-s 2 --out "$4" $3 >"$4.log" 2>&1
}

for r in $(seq 1 "$repeats"); do
    # A different order each repeat, so drift on the machine spreads evenly.
    case $((r % 3)) in
        1) order="base auth tls" ;;
        2) order="tls base auth" ;;
        0) order="auth tls base" ;;
    esac
    for v in $order; do
        case $v in
            base) bin=$base target=cluster extra= ;;
            auth) bin=$new target=cluster extra= ;;
            tls) bin=$new target=cluster:tls=1 extra=--tls ;;
        esac
        if has volume; then
            log "repeat $r: volume $v"
            volume "$v" "$bin" "$target" "$out/volume/$v-r$r"
        fi
        if has stream-limit; then
            log "repeat $r: stream-limit q=192 $v"
            mkdir -p "$out/stream-limit"
            stream "$v" "$bin" "$extra" "$out/stream-limit/$v-r$r"
        fi
    done
done

labels() { # kind
    for v in base auth tls; do
        for r in $(seq 1 "$repeats"); do printf '%s=%s ' "$v" "$out/$1/$v-r$r"; done
    done
}
if has volume; then
    # shellcheck disable=SC2046
    "$new" bench compare $(labels volume) --out "$out/volume-compare" | tee -a "$out/output.txt"
fi
has stream-limit && python3 - "$out" "$repeats" <<'EOF' | tee -a "$out/output.txt"
import json, math, sys
out, repeats = sys.argv[1], int(sys.argv[2])
def stats(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd
print("\nstream-limit, q = 192, rows/s (mean of %d runs, sd %%)" % repeats)
print("| setting | base | auth | tls | auth/base (3 sd %) | tls/auth (3 sd %) |")
print("|---|---:|---:|---:|---:|---:|")
for setting in ("10", "adaptive"):
    got = {}
    for v in ("base", "auth", "tls"):
        xs = []
        for r in range(1, repeats + 1):
            d = json.load(open(f"{out}/stream-limit/{v}-r{r}/scenario.json"))
            for c in d["cells"]:
                lim = c["stream_limit"]
                if str(lim) == setting:
                    xs.append(c["rows_per_sec_mean"])
        got[v] = stats(xs)
    def ratio(a, b):
        (ma, sa), (mb, sb) = got[a], got[b]
        r = ma / mb
        return r, 300 * math.sqrt((sa / ma) ** 2 + (sb / mb) ** 2)
    (rab, tab), (rta, tta) = ratio("auth", "base"), ratio("tls", "auth")
    cells = " | ".join(f"{got[v][0]:,.0f} ({100 * got[v][1] / got[v][0]:.1f}%)" for v in ("base", "auth", "tls"))
    print(f"| {setting} | {cells} | {rab:.3f} ({tab:.1f}%) | {rta:.3f} ({tta:.1f}%) |")
EOF
log "done"
