#!/usr/bin/env bash
# The SumPubMed grid of docs/results.md from nothing: the copy base, then `srformer compare` of every pick against
# full attention on the 300 validation papers. Both steps resume where an earlier call stopped (finished cells are
# skipped, an interrupted stage continues from its last checkpoint), so rerun the same command after a stop.
#
# Usage: scripts/sumpubmed_grid.sh SUMPUBMED_DIR OUTPUT_ROOT
#   SUMPUBMED_DIR holds train.jsonl and validation.jsonl (fields id, document, summary).
# Wall time on one CPU thread: the base about 64 min; the grid's full-attention fine-tune 5.2 s a step (52 min)
# (600 steps), each cell 150 steps plus decoding 300 papers.
set -euo pipefail
data=${1:?usage: scripts/sumpubmed_grid.sh SUMPUBMED_DIR OUTPUT_ROOT}
root=${2:?usage: scripts/sumpubmed_grid.sh SUMPUBMED_DIR OUTPUT_ROOT}
base=$root/pretrain-sumpubmed-copy
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$(dirname "$0")/sumpubmed_copy_base.sh" "$data" "$base"
srformer compare --train-data "$data/train.jsonl" --test-data "$data/validation.jsonl" \
  --output "$root/compare-sumpubmed" --model "$base" --base-steps 600 --base-learning-rate 5e-4 \
  --finetune-steps 150 --variants full segmented srformer knn block-topk-b4 block-topk linear --segment-sizes 64 --ablations \
  --reference full --seeds 0 --max-source-length 4096 --setting encoder_window=512 --setting window_overlap=0 \
  --max-target-length 512 --target-length 512 --max-new-tokens 512 --eval-batch-size 16 --no-progress
