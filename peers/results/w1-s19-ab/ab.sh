#!/bin/bash
# usage: ab.sh ROUNDS PREFIX "label|binary|args" ... ; one lmdb,fjall,rocksdb run per round (new binary)
# tables: python3 ../w1-s18-idle/table.py PREFIX old new (in the directory of the JSON files)
R=$1; P=$2; shift 2
D=/work/prof/s19/ab
for r in $(seq 1 $R); do
  for spec in "$@"; do
    IFS='|' read -r l b a <<< "$spec"
    $b --workload 1 --scale 0.1 --engines barracuda --dir /work/peers-data --json $D/$P-$l-$r.json $a > $D/$P-$l-$r.log 2>&1
  done
  /work/prof/s19/compare-new --workload 1 --scale 0.1 --engines lmdb,fjall,rocksdb --dir /work/peers-data --json $D/$P-peers-$r.json > /dev/null 2>&1
done
