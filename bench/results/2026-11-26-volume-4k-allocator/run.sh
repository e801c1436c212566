#!/usr/bin/env bash
# The allocator under a memory limit: 600 s runs of the long 4 KB nosync
# shape (workload.toml), each in its own 768 MiB cgroup, memory every 10 s
# beside them. GLIBC_BIN is main before this change (glibc malloc),
# JEMALLOC_BIN the same with jemalloc built in (feature `jemalloc`); both
# release builds with `peers`.
# usage: run.sh GLIBC_BIN JEMALLOC_BIN OUT_DIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
cg_run=$here/../2026-11-24-volume-gc-pace-sweep/cg_run.sh
tools=$here/../2026-11-26-volume-4k-queued-delete-ab   # mem_sample_ab.sh, windows.py
glibc=$1; jem=$2; out=$3; wl=$here/workload.toml
mkdir -p "$out"
# 1. The glibc binary with two malloc arenas, then with jemalloc preloaded
#    (Debian libjemalloc2 5.3.0).
"$tools/mem_sample_ab.sh" 1260 "$out/memory-preload.log" &
MALLOC_ARENA_MAX=2 "$cg_run" "$glibc" tablinum "$wl" "$out/arena2" 768
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 "$cg_run" "$glibc" tablinum "$wl" "$out/jemalloc" 768
wait
# 2. Built in, side by side with RocksDB (whose C++ allocates through the
#    same malloc as the rest of the process), interleaved.
"$tools/mem_sample_ab.sh" 2520 "$out/memory-builtin.log" &
"$cg_run" "$jem" tablinum "$wl" "$out/jem-tablinum" 768
"$cg_run" "$jem" rocksdb "$wl" "$out/jem-rocksdb" 768
"$cg_run" "$glibc" tablinum "$wl" "$out/glibc-tablinum" 768
"$cg_run" "$glibc" rocksdb "$wl" "$out/glibc-rocksdb" 768
wait
# 3. One more pair, glibc first.
"$tools/mem_sample_ab.sh" 1260 "$out/memory-pair3.log" &
"$cg_run" "$glibc" tablinum "$wl" "$out/glibc-tablinum-2" 768
"$cg_run" "$jem" tablinum "$wl" "$out/jem-tablinum-2" 768
wait
python3 "$tools/windows.py" "$out"/{glibc-tablinum,glibc-tablinum-2,jem-tablinum,jem-tablinum-2,arena2,jemalloc,glibc-rocksdb,jem-rocksdb}
