set -x
cd /tmp/bench/r
S=/work/main/.venv/bin/srformer
export OMP_NUM_THREADS=1
/work/main/.venv/bin/python /work/main/docs/bench/cost-floor/stop20/pipeline_decode.py /tmp/pipe/aclsum/full --output /tmp/bench/r/pipeline_decode.json > pipeline_decode.log 2>&1
for r in 1 2 3; do
  echo "uptime before: $(uptime)" > run$r-k4096.uptime.txt
  $S bench --output /tmp/bench/r/run$r-k4096 --encoder-lengths 4096 --segment-sizes 64 --batch-sizes 8 --sections step generate --variants full-sdpa segmented srformer srformer-lean > run$r-k4096.log 2>&1
  echo "uptime after:  $(uptime)" >> run$r-k4096.uptime.txt
  echo "uptime before: $(uptime)" > run$r-k1024.uptime.txt
  $S bench --output /tmp/bench/r/run$r-k1024 --encoder-lengths 1024 --segment-sizes 16 64 --batch-sizes 8 --sections step generate training --variants full-sdpa segmented srformer srformer-lean > run$r-k1024.log 2>&1
  echo "uptime after:  $(uptime)" >> run$r-k1024.uptime.txt
  date
done
echo done > /tmp/bench/r/DONE
