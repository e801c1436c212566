#!/usr/bin/env bash
# Inline-threshold sweep: value sizes x `inline_value_bytes_max`, tablinum
# only (an engine tuning question, not a comparison with peers), 5 GET :
# 1 UPDATE on pareto keys from empty, nosync, 16 workers, runs interleaved
# and repeated. Usage: bench/scripts/inline-sweep.sh TABLINUM_BIN OUT_DIR [REPEATS]
set -euo pipefail
bin=$1; out=$2; repeats=${3:-2}
mkdir -p "$out"
for r in $(seq 1 "$repeats"); do
  for size in 256 1024 4096; do
    for t in 0 512 4096; do
      w="$out/w-$size.toml"
      cat > "$w" <<TOML
duration_s = 15.0
concurrent = 16
mode = "max"
report_interval_s = 1.0
seed = 20261121
keys = 2000000
key_generator = "pareto"
value_generator = "fixed"
value_size_bytes = $size
[operations]
get = 5
update = 1
TOML
      "$bin" bench run "$w" --target "tablinum:inline_value_bytes_max=$t" \
        --out "$out/v$size-t$t-r$r" --quiet > /dev/null
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, glob, os, statistics as st
out = sys.argv[1]
rows = {}
for d in sorted(glob.glob(os.path.join(out, "v*-t*-r*"))):
    name = os.path.basename(d)
    v, t, r = name.split("-")
    s = json.load(open(os.path.join(d, "summary.json")))
    rows.setdefault((int(v[1:]), int(t[1:])), []).append(
        (s["ops_per_sec"], s["ops"]["get"]["latency_us"]["p99"], s["ops"]["update"]["latency_us"]["p99"], s.get("disk_bytes") or 0))
print("| value bytes | inline_value_bytes_max | ops/s mean | sd % | get p99 us | update p99 us | disk MiB | n |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for (v, t), xs in sorted(rows.items()):
    ops = [x[0] for x in xs]
    sd = st.stdev(ops) / st.mean(ops) * 100 if len(ops) > 1 else float("nan")
    print(f"| {v} | {t} | {st.mean(ops):,.0f} | {sd:.1f} | {st.mean(x[1] for x in xs):,.0f} | {st.mean(x[2] for x in xs):,.0f} | {st.mean(x[3] for x in xs)/2**20:,.0f} | {len(xs)} |")
PY
