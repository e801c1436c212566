#!/usr/bin/env python3
"""Catches process-wide stalls while a volume scenario runs.

Every 100 ms: each thread of the run's process (the one in its memory
cgroup) that is asleep (state S or D), with its kernel stack
(/proc/PID/task/TID/stack, root only). Waiting for a read is the normal
state of a worker. Each sample writes one line: how many threads wait for
anything else (a futex, memory reclaim, a kernel lock), and how many of
those are workers in a futex. A sample with at least MIN_BLOCKED such
threads is also written out whole (thread names, stacks grouped with their
counts), so a stall shows where the threads wait.
With DUMP_DIR, the first DUMPS_MAX samples (30 s apart) in which at least
MIN_BLOCKED workers wait in a futex also get every thread's user stack
(gdb attached in batch mode; the process pauses ~1 s for it) in
DUMP_DIR/stall-T.txt, which names the lock they wait for.
usage: stall_sample.py OUT_ROOT LOG [MIN_BLOCKED [DUMP_DIR]]
"""
import collections, glob, os, subprocess, sys, time

root, log = sys.argv[1], sys.argv[2]
min_blocked = int(sys.argv[3]) if len(sys.argv) > 3 else 8
dump_dir = sys.argv[4] if len(sys.argv) > 4 else None
DUMPS_MAX = 3
dumps, last_dump = 0, -1e9
t0 = time.time()


def running():
    return subprocess.run(["pgrep", "-f", "bench scenario volume"],
                          capture_output=True).returncode == 0


def run_pid():
    for cg in glob.glob("/sys/fs/cgroup/memory/tablinum-bench-*/cgroup.procs"):
        try:
            with open(cg) as f:
                line = f.readline().strip()
            if line:
                return int(line)
        except OSError:
            pass
    return None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


with open(log, "a") as out:
    while running():
        time.sleep(0.1)
        pid = run_pid()
        if pid is None:
            continue
        main = read(f"/proc/{pid}/comm").strip()  # workers carry the process's name
        blocked = []
        for task in glob.glob(f"/proc/{pid}/task/*"):
            stat = read(task + "/stat")
            # state is the field after the parenthesised name
            r = stat.rfind(")")
            if r < 0 or stat[r + 2:r + 3] not in ("D", "S"):
                continue
            name = read(task + "/comm").strip()
            frames = [l.split()[-1] for l in read(task + "/stack").splitlines() if l.strip()]
            stack = " < ".join(f.split("+")[0] for f in frames[:24])
            if name == main and "pread64" in stack and "shrink" not in stack \
                    and "reclaim" not in stack and "writeback" not in stack:
                continue  # a worker waiting for its read
            blocked.append((name, stack))
        futex = sum(1 for n, s in blocked if n == main and "futex" in s)
        out.write(f"t={time.time() - t0:.1f} pid={pid} blocked={len(blocked)} worker_futex={futex}\n")
        if len(blocked) >= min_blocked:
            by_stack = collections.Counter(s for _, s in blocked)
            names = collections.Counter(n for n, _ in blocked)
            out.write("  threads: " + ", ".join(f"{n}×{c}" for n, c in names.most_common()) + "\n")
            for s, c in by_stack.most_common(4):
                out.write(f"  {c}× {s}\n")
            out.flush()
        now = time.time() - t0
        if dump_dir and futex >= min_blocked and dumps < DUMPS_MAX and now - last_dump >= 30:
            dumps, last_dump = dumps + 1, now
            with open(f"{dump_dir}/stall-{now:.0f}.txt", "w") as d:
                subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 25"],
                               stdout=d, stderr=subprocess.STDOUT, timeout=120)
            out.write(f"t={now:.1f} dumped stall-{now:.0f}.txt\n")
