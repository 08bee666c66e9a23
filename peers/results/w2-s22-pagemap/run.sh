cd /work/main
for i in 1 2 3 4 5 6; do
  peers/target/release/compare --workload 2 --w2-compact --engines barracuda --dir target/peers-data > /tmp/pm$i.log 2>&1 &
  while ! grep -q "page cache of its" /tmp/pm$i.log; do sleep 0.1; done
  sleep 2
  P=$(pgrep -f "compare --child barracuda" | tail -1)
  python3 /tmp/pm.py $P > /tmp/pm$i.txt 2>&1
  wait
done
