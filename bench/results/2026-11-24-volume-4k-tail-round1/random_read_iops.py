import os, sys, threading, time, random, mmap
path='/tmp/rr.bin'; size=os.path.getsize(path)
def run(bs, secs=8, threads=24):
    fd=os.open(path, os.O_RDONLY|os.O_DIRECT)
    n=[0]*threads; stop=time.time()+secs
    def w(i):
        buf=mmap.mmap(-1, bs)
        r=random.Random(i)
        while time.time()<stop:
            off=r.randrange(0, size//4096 - 4)*4096
            os.preadv(fd,[buf],off); n[i]+=1
    ts=[threading.Thread(target=w,args=(i,)) for i in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    tot=sum(n); print(f"bs={bs}: {tot/secs:.0f} IOPS, {tot*bs/secs/1e6:.0f} MB/s", flush=True)
for bs in (4096, 8192, 4096, 8192): run(bs)
