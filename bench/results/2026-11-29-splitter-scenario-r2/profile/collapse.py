import re,collections,sys
samples=[];cur=None
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    if not line.startswith('\t') and not line.startswith('     '):
        if cur: samples.append(cur)
        cur=[line.split()[0],[]]
    elif cur is not None:
        cur[1].append(line.strip())
if cur: samples.append(cur)
tot=len(samples)
by=collections.Counter()
pat=re.compile(sys.argv[2] if len(sys.argv)>2 else r'tablinum_(engine|server|flow|client|proto)')
for comm,fr in samples:
    if comm not in('tablinum','tablinum-client'): continue
    key=None
    for f in fr:
        if pat.search(f):
            key=re.sub(r'^[0-9a-f]+ ','',f)[:120]; break
    by[(comm,key)]+=1
print("total samples",tot, collections.Counter(c for c,_ in samples).most_common(4))
for (c,k),n in by.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 45): print(f"{100*n/tot:5.1f}% {c:16} {k}")
