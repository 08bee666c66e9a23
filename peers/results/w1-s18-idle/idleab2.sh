#!/bin/bash
# usage: idleab2.sh ROUNDS PREFIX "label|envs|args" ... ; one lmdb,fjall,rocksdb run per round
R=$1; P=$2; shift 2
B=/work/main/peers/target/release/compare
for r in $(seq 1 $R); do
  for spec in "$@"; do
    IFS='|' read -r l e a <<< "$spec"
    env $e $B --workload 1 --scale 0.1 --engines barracuda --dir /work/peers-data --json /work/prof/s18/$P-$l-$r.json $a > /work/prof/s18/$P-$l-$r.log 2>&1
  done
  $B --workload 1 --scale 0.1 --engines lmdb,fjall,rocksdb --dir /work/peers-data --json /work/prof/s18/$P-peers-$r.json > /dev/null 2>&1
done
