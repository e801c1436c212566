#!/bin/bash
# usage: cg_run.sh BIN TARGET WORKLOAD OUT [LIMIT_MIB]
# Runs one `bench run` under a fresh cgroup v1 memory limit (like the scenario's child).
bin=$1; target=$2; wl=$3; out=$4; lim=${5:-768}
cg=/sys/fs/cgroup/memory/tablinum-ab-$$
mkdir -p $cg
echo $((lim<<20)) > $cg/memory.limit_in_bytes
rm -rf "$out"
bash -c "echo \$\$ > $cg/tasks; exec $bin bench run $wl --target $target --out $out --nosync --cache-bytes 67108864 --quiet" > "$out.log" 2>&1
rc=$?
echo "rc=$rc max_usage=$(cat $cg/memory.max_usage_in_bytes)" >> "$out.log"
sleep 1; rmdir $cg 2>/dev/null
python3 - "$out" <<'PY'
import json,sys
j=json.load(open(sys.argv[1]+'/summary.json'))
r=j.get('reclaim')
line=f"{sys.argv[1]}: ops/s {j['ops_per_sec']:.0f} last {j['last_window_ops_per_sec']:.0f} get p99 {j['ops']['get']['latency_us']['p99']}"
if r:
    b,d=r['before'],r['during']
    line+=f" | before {b['ops_per_sec']:.0f} during {d['ops_per_sec']:.0f} ratio {d['ops_per_sec']/b['ops_per_sec']:.2f} reclaimed {r['reclaimed_bytes_per_s']/2**20:.1f} MiB/s busy {r['busy_s']:.1f}s calls {len(r['runs'])}"
    line+=f" | get p99 b/d {b['ops']['get']['latency_us']['p99']}/{d['ops']['get']['latency_us']['p99']}"
print(line)
PY
