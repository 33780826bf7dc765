#!/usr/bin/env bash
# The long-input picks on one CUDA device, sized for a short loan (docs/long-inputs.md, "Long-input benchmark"):
#   0. the fused Triton kernels (gathered products, the clusters' assignment) against their torch forms at
#      t5-small's sizes, 65,536 and 262,144 tokens, batch 8 (scripts/gpu_kernel_check.py; kernels.jsonl; a failure
#      is reported and the sections go on);
#   1. eager, bfloat16, batch 1, at 16,384 / 65,536 / 262,144 tokens: full, segmented, knn-loki-pages (the long-input
#      pick), knn-loki-tail (the pick plus clusters for the keys it does not read), knn-loki (the pick without pages),
#      knn-rows, srformer, knn, block-topk-b4, quest-tree and quest-b2 (time per token, time to the first token, peak
#      memory);
#   2. compiled (static cache, CUDA graphs), bfloat16, batch 8 at 262,144 tokens: full, knn-loki-pages,
#      knn-loki-tail and knn-loki;
#   3. compiled, bfloat16, batch 1 at 1,048,576 tokens: full, knn-loki-pages, knn-loki-tail and knn-loki;
#   4. eager, bfloat16, batch 1, LED-base's shape (allenai/led-base-16384, its own encoder reading the input whole)
#      at 16,384 tokens: full, knn-loki-pages, knn-rows and segmented.
# Random weights, t5-small-shaped in sections 1-3 (synthetic: costs only). Needs torch and transformers only: run
# from a checkout (PYTHONPATH=src is set here), no install, no matplotlib (the PNGs are then left out). Each long-bench call
# appends to its long_input.json as it measures and a rerun resumes there, so a call stopped by a time limit keeps
# what it finished; the sections run in the order above.
#
# Usage: scripts/gpu_long_bench.sh OUTPUT_ROOT [DEVICE]
#   DEVICE: cuda (default). A dry run elsewhere: LENGTHS="1024 2048" BATCH_LENGTH=1024 LONGEST=2048 FAMILY_LENGTH=1024
#   and DEVICE cpu.
set -euo pipefail
root=${1:?usage: scripts/gpu_long_bench.sh OUTPUT_ROOT [DEVICE]}
device=${2:-cuda}
read -r -a lengths <<< "${LENGTHS:-16384 65536 262144}"
batch_length=${BATCH_LENGTH:-262144}
longest=${LONGEST:-1048576}
family_length=${FAMILY_LENGTH:-16384}
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
bench() { python -c "import sys; from srformer.cli.main import main; sys.exit(main())" long-bench "$@"; }
common=(--device "$device" --dtype bfloat16 --new-tokens 16 --end-to-end)

mkdir -p "$root"
if [ "$device" = cuda ]; then
  python scripts/gpu_kernel_check.py --device cuda > "$root/kernels.jsonl" \
    || echo "gpu_long_bench: the fused kernels differ from their torch forms (see $root/kernels.jsonl)" >&2
fi

bench --output "$root/eager" "${common[@]}" --lengths "${lengths[@]}" \
  --variants full segmented knn-loki-pages knn-loki-tail knn-loki knn-rows srformer knn block-topk-b4 quest-tree \
  quest-b2
compiled=(--compiled --variants full knn-loki-pages knn-loki-tail knn-loki)
bench --output "$root/compiled-batch8" "${common[@]}" "${compiled[@]}" --batch-size 8 --lengths "$batch_length"
bench --output "$root/compiled-1m" "${common[@]}" "${compiled[@]}" --lengths "$longest"
bench --output "$root/led-base" "${common[@]}" --shape led-base --lengths "$family_length" \
  --variants full knn-loki-pages knn-rows segmented
