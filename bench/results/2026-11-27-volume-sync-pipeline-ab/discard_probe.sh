#!/usr/bin/env bash
# Does unlinking a written 128 MiB file stall the device's reads (ext4 mounted
# with `discard`)? fio random 8 KiB reads at depth 24 for 70 s, IOPS logged
# every 100 ms; at 20 s four 128 MiB files are written and fdatasynced, and
# from 30 s on one is unlinked every 5 s (timed). Then the same with
# ftruncate in 8 MiB steps, 20 ms apart, before each unlink.
set -u
cd "$(dirname "$0")"
mode=${1:-unlink}
rm -f f*.bin iops_*.log
fio --name=rr --filename=read.dat --size=4G --rw=randread --bs=8k \
    --ioengine=psync --direct=1 --numjobs=24 --group_reporting --time_based --runtime=70 \
    --write_iops_log=iops_$mode --log_avg_msec=100 > fio_$mode.txt 2>&1 &
sleep 20
for i in 1 2 3 4; do dd if=/dev/urandom of=f$i.bin bs=1M count=128 conv=fdatasync status=none; done
while [ $(date +%s) -lt $(( $(stat -c %Y f4.bin) + 10 )) ]; do sleep 1; done
for i in 1 2 3 4; do
  t0=$(date +%s.%N)
  if [ "$mode" = truncate ]; then
    python3 - f$i.bin <<'PY'
import os, sys, time
p = sys.argv[1]
size = os.path.getsize(p)
with open(p, 'r+b') as f:
    while size > 0:
        size = max(0, size - (8 << 20))
        f.truncate(size)
        time.sleep(0.02)
os.unlink(p)
PY
  else
    rm f$i.bin
  fi
  t1=$(date +%s.%N)
  echo "rm f$i: $(echo "$t1 - $t0" | bc) s at $(date +%T.%N)"
  sleep 5
done
wait
