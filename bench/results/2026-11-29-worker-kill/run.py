#!/usr/bin/env python3
"""A worker SIGKILLed mid-run (issue "Dataflow", item 8 (e) and its target:
0 lost, 0 duplicated, throughput back to >= 90 % within 10 s).

One `tablinum up` (manager + tablet server), topic `logs` with 8 partitions
filled by the generator, the report's splitter submitted with `tablinum flow
submit` (8 tasks, three topic sinks, sync, commit every 1000 ms) and run by
two `tablinum worker` processes. Once a third of the input is through, one
worker is SIGKILLed and a replacement started at once. The committed input
position of every task is sampled from the manager's /metrics every 250 ms;
throughput is its rise over a 2 s window. Every run must validate exact.

    run.py BIN OUT [RECORDS_PER_PARTITION] [REPEATS]
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

BIN = os.path.realpath(sys.argv[1])
OUT = os.path.realpath(sys.argv[2])
N = int(sys.argv[3]) if len(sys.argv) > 3 else 50000
REPEATS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
P = 8
GRPC = "127.0.0.1:7620"
HTTP = "127.0.0.1:7621"
SAMPLE_S = 0.25
WINDOW_S = 2.0
KILL_AT = 1 / 3
RUN_LIMIT_S = 600

os.makedirs(OUT, exist_ok=True)
ENV = dict(os.environ, XDG_CONFIG_HOME=os.path.join(OUT, "home"), TABLINUM_CLUSTER=GRPC)
DATA = os.path.join(OUT, "data")


def cli(*args):
    r = subprocess.run([BIN, *args], env=ENV, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"tablinum {' '.join(args)}: {r.stderr}")
    return r.stdout


def positions(token, flow, known):
    """The committed input positions of every task, summed; a task between
    holders (no report yet) counts at the highest position seen."""
    req = urllib.request.Request(f"http://{HTTP}/metrics", headers={"Authorization": f"Bearer {token}"})
    text = urllib.request.urlopen(req, timeout=5).read().decode()
    pat = re.compile(r'^tablinum_flow_task_position\{flow="%s",task="(\d+)",worker="[^"]*"\} (\S+)$' % re.escape(flow))
    for m in map(pat.match, text.splitlines()):
        if m:
            t = int(m.group(1))
            known[t] = max(known.get(t, 0.0), float(m.group(2)))
    return sum(known.values())


def worker(name):
    cfg = os.path.join(OUT, f"{name}.toml")
    with open(cfg, "w") as f:
        f.write(
            f'[worker]\nid = "{name}"\nmanager = "{GRPC}"\n'
            f'cluster_secret_file = "{DATA}/cluster.secret"\nroot = "{OUT}/files"\n'
            "heartbeat_interval_ms = 500\n"
        )
    log = open(os.path.join(OUT, f"{name}.log"), "w")
    return subprocess.Popen([BIN, "worker", "--config", cfg], env=ENV, stdout=log, stderr=log)


def flow_toml(name, topic):
    sinks = "".join(
        f'\n[[sink]]\nname = "{l}"\ninput = "by-level"\nkind = "topic"\ntopic = "{name}.{l}"\n'
        for l in ("info", "warning", "error")
    )
    return (
        f'[flow]\nname = "{name}"\nparallelism = {P}\ncommit_interval_ms = 1000\ndurability = "sync"\n\n'
        f'[[source]]\nname = "in"\nkind = "topic"\ntopic = "{topic}"\n\n'
        '[[operator]]\nname = "by-level"\nkind = "split"\ninput = "in"\nfield = "level"\n'
        'routes = { INFO = "info", WARNING = "warning", ERROR = "error" }\n' + sinks
    )


def rate_at(samples, t):
    """Records/s over the WINDOW_S before t (samples: [(t, position)])."""
    inside = [s for s in samples if t - WINDOW_S <= s[0] <= t]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def main():
    with open(os.path.join(OUT, "machine.txt"), "w") as f:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        model = next(l for l in open("/proc/cpuinfo") if l.startswith("model name")).split(":")[1].strip()
        f.write(
            f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\ncommit: {commit}\n"
            f"cpu: {os.cpu_count()} x {model}\nkernel: {os.uname().release}\n"
            f"records per partition: {N}; partitions: {P}; commit interval: 1000 ms, sync; repeats: {REPEATS}\n"
        )
    up_log = open(os.path.join(OUT, "up.log"), "w")
    up = subprocess.Popen(
        [BIN, "up", "--data", DATA, "--listen", GRPC, "--http", HTTP, "--sservers", "0"],
        env=ENV, stdout=up_log, stderr=up_log,
    )
    workers = {}
    rows = []
    try:
        for _ in range(100):
            if subprocess.run([BIN, "status"], env=ENV, capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        token = open(os.path.join(DATA, "admin.token")).read().strip()
        workers = {"w1": worker("w1"), "w2": worker("w2")}
        for r in range(1, REPEATS + 1):
            topic, name = f"logs{r}", f"kill{r}"
            cli("topic", "create", topic, "--partitions", str(P))
            cli("topic", "produce", topic, "--generate", str(N))
            total = N * P
            path = os.path.join(OUT, f"{name}.toml")
            with open(path, "w") as f:
                f.write(flow_toml(name, topic))
            print(f"== repeat {r}: {total} records, 2 workers, one killed at {KILL_AT:.0%}", flush=True)
            cli("flow", "submit", path)
            t0 = time.monotonic()
            samples, kill_t, killed, known = [], None, None, {}
            while time.monotonic() - t0 < RUN_LIMIT_S:
                t = time.monotonic() - t0
                pos = positions(token, name, known)
                samples.append((t, pos))
                if kill_t is None and pos >= total * KILL_AT:
                    killed = sorted(workers)[0]
                    workers[killed].send_signal(signal.SIGKILL)
                    workers[killed].wait()
                    del workers[killed]
                    kill_t = time.monotonic() - t0
                    repl = f"w{r}r"
                    workers[repl] = worker(repl)
                    print(f"  t={kill_t:.1f} s: SIGKILLed {killed} at position {pos:.0f}; started {repl}", flush=True)
                if pos >= total:
                    break
                time.sleep(SAMPLE_S)
            end_t = samples[-1][0]
            with open(os.path.join(OUT, f"{name}-samples.csv"), "w") as f:
                f.write("t_s,position\n" + "".join(f"{t:.3f},{p:.0f}\n" for t, p in samples))
            before = [rate_at(samples, t) for t, _ in samples if kill_t - 6 <= t <= kill_t]
            before = [x for x in before if x]
            pre = sorted(before)[len(before) // 2] if before else 0.0
            recovered = None
            for t, _ in samples:
                if t <= kill_t + WINDOW_S:
                    continue
                x = rate_at(samples, t)
                if x is not None and x >= 0.9 * pre:
                    recovered = t - kill_t
                    break
            v = cli("flow", "validate", path)
            m = re.search(r"expected (\d+), received (\d+), lost (\d+), duplicated (\d+)", v)
            exact = "NOT EXACT" not in v and "EXACT" in v
            row = {
                "variant": "e-worker-kill",
                "system": "tablinum",
                "records": total,
                "records_per_sec": round(total / end_t),
                "pre_kill_records_per_sec": round(pre),
                "recovered_90pct_after_s": None if recovered is None else round(recovered, 2),
                "killed_at_s": round(kill_t, 2),
                "lost": int(m.group(3)),
                "duplicated": int(m.group(4)),
                "exact": exact,
                "durability": "sync",
                "commit_interval_ms": 1000,
            }
            rows.append(row)
            print("  " + json.dumps(row), flush=True)
            print("  " + v.strip().splitlines()[-1], flush=True)
            cli("flow", "stop", name)
            for t in (topic, f"{name}.info", f"{name}.warning", f"{name}.error"):
                cli("topic", "drop", t, "--yes")
    finally:
        for w in workers.values():
            w.kill()
        up.send_signal(signal.SIGTERM)
        up.wait()
        shutil.rmtree(DATA, ignore_errors=True)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
