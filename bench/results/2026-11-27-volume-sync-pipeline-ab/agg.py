import glob, sys, collections
mode = sys.argv[1]
b = collections.Counter()
for f in glob.glob(f'iops_{mode}_iops.*.log'):
    for line in open(f):
        t, v = line.split(',')[:2]
        b[int(t) // 100] += int(v)
ts = sorted(b)
# IOPS per 100-ms bucket summed across jobs (each job's value is its IOPS)
vals = [b[t] for t in ts]
import statistics
print('median', statistics.median(vals))
low = [(t/10, b[t]) for t in ts if b[t] < 0.6 * statistics.median(vals)]
print('buckets < 60% of median:', low[:60])
