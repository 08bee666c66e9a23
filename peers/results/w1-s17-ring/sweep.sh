#!/bin/bash
# Row 13 against row 3: Barracuda's W1 log ring size, 3 alternating rounds; fjall and RocksDB once per round.
B=/work/prof/cmp-flush
for r in 1 2 3; do
  $B --workload 1 --scale 0.1 --engines fjall,rocksdb --dir /work/peers-data --json /work/prof/ring/ref-$r.json > /work/prof/ring/ref-$r.log 2>&1
  for n in 8 12 16 24 32 48 64 96 128; do
    $B --workload 1 --scale 0.1 --engines barracuda --barracuda-w1-log-mib $n --dir /work/peers-data --json /work/prof/ring/b$n-$r.json > /work/prof/ring/b$n-$r.log 2>&1
  done
done
echo done
