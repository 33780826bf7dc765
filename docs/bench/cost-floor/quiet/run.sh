cd /tmp/bench
for r in 1 2 3; do
  echo "uptime before: $(uptime)" > run$r-k4096-s64.uptime.txt
  OMP_NUM_THREADS=1 /work/main/.venv/bin/srformer bench --output /tmp/bench/run$r-k4096 --encoder-lengths 4096 --segment-sizes 64 --batch-sizes 8 --sections step generate --variants full-sdpa segmented srformer srformer-lean > run$r-k4096.log 2>&1
  echo "uptime after:  $(uptime)" >> run$r-k4096-s64.uptime.txt
  echo "uptime before: $(uptime)" > run$r-k1024.uptime.txt
  OMP_NUM_THREADS=1 /work/main/.venv/bin/srformer bench --output /tmp/bench/run$r-k1024 --encoder-lengths 1024 --segment-sizes 16 64 --batch-sizes 8 --sections step generate training --variants full-sdpa segmented srformer srformer-lean > run$r-k1024.log 2>&1
  echo "uptime after:  $(uptime)" >> run$r-k1024.uptime.txt
  date
done
