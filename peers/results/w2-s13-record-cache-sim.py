#!/usr/bin/env python3
"""Session 13: workload 2 (w2-s12-cache-sim.py model) with a record cache beside the block cache.
A share of the pool memory becomes an LRU of records (argv[1] bytes each, default 600), fed either with the
records read from a block while it was cached when the block is evicted (evict) or with records read twice
while their block is cached (second). Prints the uniform and Zipf hit rates per share. Needs numpy; minutes."""
import numpy as np, collections, sys
n=262144; nleaf=17540; per_leaf=n/nleaf
rng=np.random.default_rng(1)
ranks=np.arange(1,n+1); w=1/ranks**0.9; p=w/w.sum()
M=0x9E3779B97F4A7C15
idx=np.array([(r*M)%n for r in range(n)])
perm=rng.permutation(n)
N=400000
warm=rng.integers(0,n,N); z=rng.choice(n,size=N,p=p)
leaf=(perm/per_leaf).astype(int)
class Mid:
    def __init__(s,C,oldpct=37):
        s.C=C; s.y=collections.OrderedDict(); s.o=collections.OrderedDict(); s.oldcap=C*oldpct//100
    def access(s,x):
        # returns (hit, evicted list)
        if x in s.y: s.y.move_to_end(x); return 1,[]
        if x in s.o: del s.o[x]; s.y[x]=1; s.rebal(); return 1,[]
        s.o[x]=1; ev=[]
        while len(s.y)+len(s.o)>s.C:
            k,_=(s.o if s.o else s.y).popitem(last=False); ev.append(k)
        s.rebal(); return 0,ev
    def rebal(s):
        while len(s.y)>s.C-s.oldcap:
            k,_=s.y.popitem(last=False); s.o[k]=1; s.o.move_to_end(k,last=False)
def run_pair(blocks,recs,mode):
    # one cache over the uniform pass, then the Zipf pass, as the harness
    seq_u=warm; seq_z=idx[z]
    bcM=Mid(blocks); rc=collections.OrderedDict(); touched=collections.defaultdict(set)
    out=[]
    for part in (seq_u,seq_z):
        hits=0
        for k in part:
            if recs and k in rc:
                rc.move_to_end(k); hits+=1; continue
            l=leaf[k]
            h,ev=bcM.access(l)
            hits+=h
            if recs:
                if mode=='evict':
                    touched[l].add(k)
                    for e in ev:
                        for r in touched.pop(e,()):
                            rc[r]=1; rc.move_to_end(r)
                            if len(rc)>recs: rc.popitem(last=False)
                else:
                    if h and k in touched[l]:
                        rc[k]=1; rc.move_to_end(k)
                        if len(rc)>recs: rc.popitem(last=False)
                    touched[l].add(k)
                    for e in ev: touched.pop(e,None)
        out.append(hits/len(part))
    return out
B=6826
rec_bytes=float(sys.argv[1]) if len(sys.argv)>1 else 600
for share in [0,0.1,0.2,0.3,0.5]:
    blocks=int(B*(1-share)); recs=int(B*share*8192/rec_bytes)
    for mode in (['evict','second'] if share else ['none']):
        u,zz=run_pair(blocks,recs,mode)
        print(f"share {share:.1f} blocks {blocks} recs {recs} {mode}: uniform {u:.4f} zipf {zz:.4f}",flush=True)
