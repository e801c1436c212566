#!/usr/bin/env python3
"""Times fdatasync after each append, as a group commit leader does, on a
file prepared one of three ways:
  overwrite  - the file's blocks written once before (a recycled segment)
  keep-size  - blocks reserved with fallocate(FALLOC_FL_KEEP_SIZE), size 0
               (main's preallocated write segment: every append grows the
               size over unwritten extents)
  append     - a plain new file (blocks allocated at writeback)
usage: syncprobe.py MODE DIR SECONDS WRITE_BYTES  -> one summary line"""
import os, sys, time, ctypes

mode, d, secs, wbytes = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
size = 2 << 30
path = os.path.join(d, f"probe-{mode}.dat")
if os.path.exists(path):
    os.unlink(path)
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
if mode == "overwrite":
    chunk = b"\0" * (1 << 20)
    for _ in range(size >> 20):
        os.write(fd, chunk)
    os.fsync(fd)
    os.lseek(fd, 0, os.SEEK_SET)
elif mode == "keep-size":
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, 1, 0, size) != 0:  # FALLOC_FL_KEEP_SIZE = 1
        sys.exit(f"fallocate: errno {ctypes.get_errno()}")
    os.fsync(fd)
elif mode != "append":
    sys.exit(f"unknown mode {mode}")
buf = os.urandom(wbytes)
lat = []
end = time.monotonic() + secs
written = 0
while time.monotonic() < end and written + wbytes <= size:
    os.write(fd, buf)
    written += wbytes
    t = time.perf_counter()
    os.fdatasync(fd)
    lat.append((time.perf_counter() - t) * 1e6)
os.close(fd)
os.unlink(path)
lat.sort()
n = len(lat)
print(f"mode={mode} write_bytes={wbytes} syncs={n} mean_us={sum(lat)/n:.0f} "
      f"p50_us={lat[n//2]:.0f} p90_us={lat[int(n*.9)]:.0f} p99_us={lat[int(n*.99)]:.0f} max_us={lat[-1]:.0f}")
