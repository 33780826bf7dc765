#!/usr/bin/env bash
# The three-run generation-cost measurement of docs/benchmarks.md ("Generation cost"): `srformer bench` at
# k=4096 (s=64) and k=1024 (s=16 and 64), batch 8, three times each, one process at a time with one torch
# thread, the load average recorded before and after every run; then the min / median / max ratios.
#
# Usage: scripts/bench_generation_cost.sh OUTPUT_DIR
# Run it on an otherwise idle machine: the ratios move by up to 2x when other jobs share the cores.
set -euo pipefail
out=${1:?usage: scripts/bench_generation_cost.sh OUTPUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export OMP_NUM_THREADS=1
for r in 1 2 3; do
  echo "uptime before: $(uptime)" > "$out/run$r-k4096.uptime.txt"
  srformer bench --output "$out/run$r-k4096" --encoder-lengths 4096 --segment-sizes 64 --batch-sizes 8 \
    --sections step generate --variants full-sdpa segmented srformer srformer-lean
  echo "uptime after:  $(uptime)" >> "$out/run$r-k4096.uptime.txt"
  echo "uptime before: $(uptime)" > "$out/run$r-k1024.uptime.txt"
  srformer bench --output "$out/run$r-k1024" --encoder-lengths 1024 --segment-sizes 16 64 --batch-sizes 8 \
    --sections step generate training --variants full-sdpa segmented srformer srformer-lean
  echo "uptime after:  $(uptime)" >> "$out/run$r-k1024.uptime.txt"
done
python "$here/summarize_bench_runs.py" "$out"/run*/bench.json
