#!/usr/bin/env python3
"""Session 12: a leaf-cache simulation of peers workload 2 (w2-s12-zipf.txt).

262,144 random keys in leaves of about 15 records, a cache of 6,826 blocks
(the pool's block_count in the runs), a uniform pass of 400,000 gets, then
400,000 Zipf 0.9 gets whose ranks are scattered as the harness scatters
them. Prints the leaf hit rate of the Zipf pass (and of half a uniform
pass) for midpoint-insertion LRU variants. Needs numpy; about a minute.
"""
import numpy as np, collections, sys
n=262144; per_leaf=262144/17540
rng=np.random.default_rng(1)
ranks=np.arange(1,n+1); w=1/ranks**0.9; p=w/w.sum()
key_of_rank=(np.arange(n,dtype=np.uint64)*np.uint64(0x9E3779B97F4A7C15 % (1<<64)))
# scatter: (rank*M) % n using python ints for exactness
M=0x9E3779B97F4A7C15
idx=np.array([(r*M)%n for r in range(n)])
# key index -> position in sorted order: keys random, so sorted position is a random permutation
perm=rng.permutation(n)
N=400000
warm=rng.integers(0,n,N); z=rng.choice(n,size=N,p=p)
class Mid:
    def __init__(s,C,oldpct=37,ghost=0,tlfu=False,win=None):
        s.C=C; s.y=collections.OrderedDict(); s.o=collections.OrderedDict(); s.oldcap=C*oldpct//100
        s.g=collections.OrderedDict(); s.gcap=int(ghost*C); s.tlfu=tlfu; s.f=collections.Counter(); s.cnt=0; s.win=win or 10*C
    def access(s,x):
        if s.tlfu:
            s.f[x]+=1; s.cnt+=1
            if s.cnt>=s.win:
                s.cnt=0
                for k in list(s.f):
                    s.f[k]//=2
                    if not s.f[k]: del s.f[k]
        if x in s.y: s.y.move_to_end(x); return 1
        if x in s.o: del s.o[x]; s.y[x]=1; s.rebal(); return 1
        # miss
        if s.gcap and x in s.g:
            del s.g[x]; s.y[x]=1
        else:
            if s.tlfu and len(s.y)+len(s.o)>=s.C and s.o:
                v=next(iter(s.o))
                if s.f[x]<=s.f[v]:
                    return 0
            s.o[x]=1
        while len(s.y)+len(s.o)>s.C:
            k,_=(s.o if s.o else s.y).popitem(last=False)
            if s.gcap:
                s.g[k]=1
                if len(s.g)>s.gcap: s.g.popitem(last=False)
        s.rebal(); return 0
    def rebal(s):
        while len(s.y)>s.C-s.oldcap:
            k,_=s.y.popitem(last=False); s.o[k]=1; s.o.move_to_end(k,last=False)
def run(per_leaf,C,**kw):
    lo=(perm/per_leaf).astype(int)
    m=Mid(C,**kw)
    for x in lo[warm]: m.access(x)
    hz=sum(m.access(x) for x in lo[idx[z]])/N
    m=Mid(C,**kw)
    for x in lo[warm[:200000]]: m.access(x)
    hu=sum(m.access(x) for x in lo[warm[200000:]])/200000
    return hz,hu
configs=[dict(),dict(oldpct=20),dict(oldpct=10),dict(ghost=0.5),dict(ghost=1.0),dict(oldpct=20,ghost=1.0),dict(tlfu=True),dict(tlfu=True,oldpct=20),dict(tlfu=True,oldpct=5),dict(tlfu=True,win=6826*4)]
for kw in configs:
    hz,hu=run(262144/17540,6826,**kw); print("16K",kw,"zipf %.4f uniform %.4f"%(hz,hu),flush=True)
for kw in [dict(),dict(tlfu=True),dict(tlfu=True,oldpct=20)]:
    hz,hu=run(7.0,13980,**kw); print("8K",kw,"zipf %.4f uniform %.4f"%(hz,hu),flush=True)
