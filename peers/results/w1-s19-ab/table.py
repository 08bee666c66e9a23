import json,sys,glob,statistics as st
P=sys.argv[1]; labels=sys.argv[2:]
def load(f):
    d=json.load(open(f)); out={}
    for col in d:
        for r in col['rows']:
            if r['value'] is not None: out.setdefault(col['engine'],{})[r['row']]=r['value']
    return out
data={}
for l in labels+['peers']:
    for f in sorted(glob.glob(f"{P}-{l}-*.json")):
        for eng,rows in load(f).items():
            key=l if eng=='barracuda' else eng
            for row,v in rows.items(): data.setdefault(key,{}).setdefault(row,[]).append(v)
rows=list(data[labels[0]].keys())
others=[k for k in data if k not in labels]
print("| row | "+" | ".join(labels)+" | best other | "+" | ".join(f"{l}/best" for l in labels)+" |")
for row in rows:
    meds={l:st.median(data[l][row]) for l in labels if row in data[l]}
    ob=[(st.median(data[o][row]),o) for o in others if row in data[o]]
    best=min(ob) if ob else (None,'')
    def f(v): return f"{v:.1f}" if v<1e6 else f"{v/1048576:.2f}MiB"
    cells=[f"{f(meds[l])} ({f(min(data[l][row]))}-{f(max(data[l][row]))})" for l in labels if l in meds]
    rat=[f"{meds[l]/best[0]:.2f}x" if best[0] else "" for l in labels if l in meds]
    print(f"| {row} | "+" | ".join(cells)+f" | {f(best[0]) if best[0] else ''} {best[1]} | "+" | ".join(rat)+" |")
