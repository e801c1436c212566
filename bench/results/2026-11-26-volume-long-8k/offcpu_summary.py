#!/usr/bin/env python3
"""Summarises an offcpu.bt log (../2026-11-26-volume-4k-allocator/offcpu.bt):
the sleeps of threads other than the idle background workers, grouped into
episodes (sleeps that end within 50 ms of each other), each with how many
threads slept, how long, who woke the first one and where they slept.
usage: offcpu_summary.py LOG"""
import re
import sys
from collections import Counter

HEAD = re.compile(r"(\d+) tid=(\d+) comm=(\S+) off_ms=(\d+) waker=(\d+)/(.*)")
recs, cur = [], None
for line in open(sys.argv[1]):
    m = HEAD.match(line)
    if m:
        cur = dict(t=int(m[1]), tid=int(m[2]), comm=m[3], ms=int(m[4]), waker=m[6], stack=[])
        recs.append(cur)
    elif cur is not None and line.strip():
        cur["stack"].append(line.strip().split("+")[0])
# Background pool threads park 200 ms at a time when idle: not stalls.
recs = [r for r in recs if not (r["comm"].startswith("tablinum-bg") and r["ms"] <= 250)]
recs.sort(key=lambda r: r["t"])
episodes = []
for r in recs:
    if episodes and r["t"] - episodes[-1][-1]["t"] <= 50:
        episodes[-1].append(r)
    else:
        episodes.append([r])
t0 = recs[0]["t"] if recs else 0
print(f"{len(recs)} sleeps > threshold in {len(episodes)} episodes")
print("t_s  threads  max_ms  comms  first-waker  where (kernel frames 3-5)")
for ep in episodes:
    comms = Counter(r["comm"] for r in ep)
    where = Counter("<".join(r["stack"][2:5]) for r in ep).most_common(1)[0][0]
    first = min(ep, key=lambda r: r["t"] - r["ms"])
    print(f"{(ep[0]['t'] - t0) / 1000:7.1f}  {len(ep):3d}  {max(r['ms'] for r in ep):5d}  "
          f"{dict(comms)}  {first['waker']}  {where}")
