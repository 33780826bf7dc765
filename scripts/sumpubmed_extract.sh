#!/usr/bin/env bash
# The oracle-extract recipe on SumPubMed (docs/pretraining.md, "Teaching what to copy"): a base that copies, taught
# what to copy by oracle-extract targets, then scored against the abstracts. Every step resumes where an earlier call
# stopped (a finished step is skipped, an interrupted one continues from its last checkpoint), so rerun the same
# command after a stop.
#
# Usage: scripts/sumpubmed_extract.sh SUMPUBMED_DIR OUTPUT_ROOT [EXTRACT_STEPS]
#   SUMPUBMED_DIR holds train.jsonl and validation.jsonl (fields id, document, summary).
# Steps:
#   1. the copy base (as scripts/sumpubmed_grid.sh): bart-tiny taught to copy 512-token windows, 3,000 steps;
#   2. oracle targets of the 2,000 training papers from their first 4,096 tokens (about 0.3 s a paper);
#   3. the base fine-tuned with full attention on the oracle targets (first 4,096 tokens in windows of 512);
#   4. `srformer evaluate` of that model on the 300 validation papers against their abstracts (reading check and
#      baselines in the metrics).
set -euo pipefail
data=${1:?usage: scripts/sumpubmed_extract.sh SUMPUBMED_DIR OUTPUT_ROOT [EXTRACT_STEPS]}
root=${2:?usage: scripts/sumpubmed_extract.sh SUMPUBMED_DIR OUTPUT_ROOT [EXTRACT_STEPS]}
steps=${3:-600}
base=$root/pretrain-sumpubmed-copy
extract=$root/extract-oracle
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

"$(dirname "$0")/sumpubmed_copy_base.sh" "$data" "$base"

srformer oracle-targets --data "$data/train.jsonl" --output "$root/train-oracle.jsonl" --tokenizer "$base" \
  --max-source-length 4096 --no-progress

finished=$(python -c "import json, sys; print(int(json.load(open(sys.argv[1]))['steps'] >= $steps))" \
  "$extract/training_summary.json" 2>/dev/null || echo 0)
if [ "$finished" != 1 ]; then
  resume=(); [ -d "$extract/checkpoint" ] && resume=(--resume)
  srformer train --model "$base" --data "$root/train-oracle.jsonl" --output "$extract" --variant full \
    --setting encoder_window=512 --setting window_overlap=0 --max-source-length 4096 --max-target-length 512 \
    --batch-size 4 --max-steps "$steps" --learning-rate 5e-4 --warmup-steps 50 --save-every 25 --seed 0 \
    --no-progress "${resume[@]}"
fi

srformer evaluate --checkpoint "$extract" --data "$data/validation.jsonl" \
  --output "$root/extract-oracle-validation.json" --predictions "$root/extract-oracle-validation.jsonl" \
  --max-new-tokens 512 --batch-size 16 --no-repeat-ngram-size 3 --no-progress
