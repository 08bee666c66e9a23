import os,struct,sys,collections
pid=int(sys.argv[1])
maps=open(f'/proc/{pid}/maps').read().splitlines()
arena=None
for l in maps:
    a,b=[int(x,16) for x in l.split()[0].split('-')]
    if b-a==64<<20 and len(l.split())<6:
        arena=(a,b)
if not arena:
    # largest anonymous mapping
    best=max(((int(l.split()[0].split('-')[1],16)-int(l.split()[0].split('-')[0],16)),l) for l in maps if len(l.split())<6)
    a,b=[int(x,16) for x in best[1].split()[0].split('-')]; arena=(a,b)
a,b=arena
n=(b-a)//4096
f=open(f'/proc/{pid}/pagemap','rb'); f.seek(a//4096*8); data=f.read(n*8)
pfns=[]
for i in range(n):
    e=struct.unpack_from('<Q',data,i*8)[0]
    pfns.append(e & ((1<<55)-1) if e>>63 else None)
present=[p for p in pfns if p]
contig=sum(1 for i in range(1,n) if pfns[i] and pfns[i-1] and pfns[i]==pfns[i-1]+1)
# colours of 16 KiB chunk starts: pfn mod 32 (128 KiB period)
starts=[pfns[i] for i in range(0,n,4) if pfns[i]]
col=collections.Counter(p%32 for p in starts)
print(f"arena {(b-a)>>20} MiB present {len(present)} contiguous-next {contig/(n-1):.3f} chunk-start colours used {len(col)}/32 top share {max(col.values())/len(starts):.3f}")
