import sys,collections
c=collections.Counter(); op=None; frames=[]
def flush():
    if op is None: return
    key=None
    for f in frames:
        if 'tablinum_engine' in f or 'tablinum_bench' in f:
            key=f; break
    c[(op, key)]+=1
for line in sys.stdin:
    if 'sys_enter_futex' in line:
        flush(); frames=[]
        op = line.split('op: ')[1].split(',')[0]
    elif line.strip():
        parts=line.split(None,1)
        if len(parts)>1: frames.append(parts[1].strip()[:150])
flush()
for (o,k),n in c.most_common(8): print(n, {'0x00000080':'WAIT','0x00000081':'WAKE'}.get(o,o), k)
