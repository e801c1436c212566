#!/usr/bin/env bash
# Every 10 s while a volume scenario runs: the device's reads and writes
# completed per second and MB/s (/proc/diskstats of vda), and which run
# is on (the newest run directory under OUT_ROOT).
# usage: disk_sample.sh OUT_ROOT LOG
root=$1; log=$2; t0=$(date +%s)
read -r r0 rs0 w0 ws0 < <(awk '$3=="vda"{print $4, $6, $8, $10}' /proc/diskstats)
while pgrep -f "bench scenario volume" >/dev/null; do
  sleep 10
  read -r r1 rs1 w1 ws1 < <(awk '$3=="vda"{print $4, $6, $8, $10}' /proc/diskstats)
  run=$(ls -td "$root"/*/*/ 2>/dev/null | head -1 | xargs -r basename)
  echo "t=$(( $(date +%s) - t0 )) run=$run reads_per_s=$(( (r1 - r0) / 10 )) read_mb_per_s=$(( (rs1 - rs0) * 512 / 10000000 )) writes_per_s=$(( (w1 - w0) / 10 )) write_mb_per_s=$(( (ws1 - ws0) * 512 / 10000000 ))"
  r0=$r1; rs0=$rs1; w0=$w1; ws0=$ws1
done >> "$log"
