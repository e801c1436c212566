#!/usr/bin/env python3
"""Per run: ops/s overall and last 180 s, GET/UPDATE p99/p99.9 (HDR, whole
run), max, and how many 30-s windows had a max over 200 ms / 500 ms.
usage: windows.py RUN_DIR..."""
import csv, json, sys

def rows(path):
    with open(path) as f:
        r = csv.reader(f, skipinitialspace=True)
        head = next(r)
        return [dict(zip(head, map(float, row))) for row in r if row]

print("| run | ops/s | last 180 s | GET p99 / p99.9 µs | UPDATE p99 / p99.9 µs | GET / UPDATE max ms | windows max > 200 ms (GET / UPDATE) | > 500 ms |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for d in sys.argv[1:]:
    j = json.load(open(f"{d}/summary.json"))
    g, u = rows(f"{d}/get_latencies.csv"), rows(f"{d}/update_latencies.csv")
    gl, ul = j["ops"]["get"]["latency_us"], j["ops"]["update"]["latency_us"]
    c = lambda rs, t: sum(1 for r in rs if r["max"] > t * 1000)
    print(f"| {d.rstrip('/').split('/')[-1]} | {j['ops_per_sec']:,.0f} | {j['last_window_ops_per_sec']:,.0f} "
          f"| {gl['p99']:,} / {gl['p99_9']:,} | {ul['p99']:,} / {ul['p99_9']:,} "
          f"| {gl['max']/1000:,.0f} / {ul['max']/1000:,.0f} "
          f"| {c(g,200)} / {c(u,200)} of {len(g)} | {c(g,500)} / {c(u,500)} |")
