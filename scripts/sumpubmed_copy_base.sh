#!/usr/bin/env bash
# The SumPubMed copy base of scripts/sumpubmed_grid.sh and scripts/sumpubmed_extract.sh: bart-tiny taught to copy
# 512-token windows of the training papers (`srformer pretrain --objective-mix copy=1.0`, 3,000 steps, about 64 min
# of one CPU thread). Skipped when BASE holds the finished model; an interrupted run resumes from its checkpoint.
#
# Usage: scripts/sumpubmed_copy_base.sh SUMPUBMED_DIR BASE
set -euo pipefail
data=${1:?usage: scripts/sumpubmed_copy_base.sh SUMPUBMED_DIR BASE}
base=${2:?usage: scripts/sumpubmed_copy_base.sh SUMPUBMED_DIR BASE}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
resume=(); [ -d "$base/checkpoint" ] && resume=(--resume)
if [ ! -f "$base/model.safetensors" ]; then
  srformer pretrain --data "$data/train.jsonl" --model bart-tiny --output "$base" --max-source-length 512 \
    --vocab-size 8000 --objective-mix copy=1.0 --curriculum-start 8 --curriculum-hold 0.1 --curriculum-end 0.7 \
    --max-steps 3000 --batch-size 16 --learning-rate 1e-3 --warmup-steps 100 --eval-documents 32 \
    --eval-every 250 --save-every 100 --seed 0 --no-progress "${resume[@]}"
fi
