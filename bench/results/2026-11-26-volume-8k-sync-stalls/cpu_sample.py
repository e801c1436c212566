#!/usr/bin/env python3
"""Every 10 s while PID lives: the machine's CPU split (/proc/stat: user,
system, iowait, idle, in % of all cores) and the process's CPU per thread
name (/proc/PID/task/*/stat utime+stime, in % of one core), one line each.
usage: cpu_sample.py PID LOG"""
import os, re, sys, time
from collections import Counter

pid, log = sys.argv[1], sys.argv[2]
hz = os.sysconf("SC_CLK_TCK")

def machine():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f))
    return dict(user=v[0] + v[1], system=v[2] + v[5] + v[6], idle=v[3], iowait=v[4], total=sum(v[:8]))

def threads():
    c = Counter()
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            s = open(f"/proc/{pid}/task/{t}/stat").read()
        except OSError:
            continue
        name = s[s.index("(") + 1 : s.rindex(")")]
        name = re.sub(r"[-_]?\d+$", "", name)
        rest = s[s.rindex(")") + 2 :].split()
        c[name] += int(rest[11]) + int(rest[12])
    return c

t0 = time.time()
m0, c0 = machine(), threads()
with open(log, "a") as out:
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(10)
        try:
            m1, c1 = machine(), threads()
        except OSError:
            break
        tot = m1["total"] - m0["total"] or 1
        split = " ".join(f"{k}={100 * (m1[k] - m0[k]) / tot:.0f}" for k in ("user", "system", "iowait", "idle"))
        per = " ".join(f"{k}={100 * (c1[k] - c0[k]) / hz / 10:.0f}" for k, _ in (c1 - c0).most_common(8))
        out.write(f"t={time.time() - t0:.0f} machine% {split} | threads%1core {per}\n")
        out.flush()
        m0, c0 = m1, c1
