#!/usr/bin/env python3
"""Per run of a volume sitting: mean device reads/s, read MB/s, writes/s and
write MB/s over the whole run and over its last ~180 s, from the 10-s samples
that ../2026-11-27-volume-value-cache-ab/disk_sample.sh writes.
usage: disk_means.py scenario-disk.log"""
import collections
import sys

KEYS = ("reads_per_s", "read_mb_per_s", "writes_per_s", "write_mb_per_s")
runs = collections.OrderedDict()
for line in open(sys.argv[1]):
    sample = dict(kv.split("=", 1) for kv in line.split())
    runs.setdefault(sample["run"], []).append(sample)
print("| run | samples | " + " | ".join(KEYS) + " | last ~180 s: " + " | ".join(KEYS) + " |")
print("|---|---:|" + "---:|" * (2 * len(KEYS)))
for run, samples in runs.items():
    # The last sample of a run may straddle the next run's start: drop it.
    last = samples[-19:-1]

    def mean(rows, key):
        return sum(int(r[key]) for r in rows) / len(rows)

    cells = [f"{mean(samples, k):,.0f}" for k in KEYS] + [f"{mean(last, k):,.0f}" for k in KEYS]
    print(f"| {run} | {len(samples)} | " + " | ".join(cells) + " |")
