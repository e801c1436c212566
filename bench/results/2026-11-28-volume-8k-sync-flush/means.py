#!/usr/bin/env python3
"""Request-weighted GET and UPDATE latency means of bench run directories,
over the whole run and over its last two 30-s windows.
usage: means.py RUN_DIR..."""
import csv,sys
for r in sys.argv[1:]:
  for k in ("get","update"):
    rows=[{kk.strip():v.strip() for kk,v in x.items()} for x in csv.DictReader(open(f"{r}/{k}_latencies.csv"))]
    cnt=[float(x["n"]) for x in rows]; mean=[float(x["mean"]) for x in rows]
    m=sum(c*v for c,v in zip(cnt,mean))/sum(cnt)
    last=rows[-2:]
    lm=sum(float(x["n"])*float(x["mean"]) for x in last)/sum(float(x["n"]) for x in last)
    print(f"{r:50s} {k:6s} mean_us={m:7.0f} last60s_us={lm:7.0f} n={sum(cnt):.0f}")
