#!/bin/bash
set -u
RS=/work/main/bench/results/2026-11-27-volume-journal-recycle-ab/run.sh
export BIN=/tmp/bin-rr/tablinum VARIANT=8k-sync
TABLINUM_PILOT_ROCKSDB_RECYCLE_LOG_FILE_NUM=4 TARGETS=rocksdb $RS /tmp/RR1
pkill -f stall_sample.py; pkill -f cpu_sample.sh; pkill -f disk_sample.sh; pkill -f census_sample.sh
TARGETS=tablinum:journal_recycle_segments=8 $RS /tmp/RR2
pkill -f stall_sample.py; pkill -f cpu_sample.sh; pkill -f disk_sample.sh; pkill -f census_sample.sh
TARGETS=rocksdb $RS /tmp/RR3
pkill -f stall_sample.py; pkill -f cpu_sample.sh; pkill -f disk_sample.sh; pkill -f census_sample.sh
echo all-done
