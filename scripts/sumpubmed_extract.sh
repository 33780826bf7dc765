#!/usr/bin/env bash
# The oracle-extract recipe on SumPubMed (docs/pretraining.md, "Teaching what to copy"): a base that copies, taught
# what to copy by oracle-extract targets, then scored against the abstracts. Every step resumes where an earlier call
# stopped (a finished step is skipped, an interrupted one continues from its last checkpoint), so rerun the same
# command after a stop.
#
# Usage: [BASE=bart-mini] [SOURCE_LENGTH=N] [SEED=N] scripts/sumpubmed_extract.sh SUMPUBMED_DIR OUTPUT_ROOT [EXTRACT_STEPS]
#   SUMPUBMED_DIR holds train.jsonl and validation.jsonl (fields id, document, summary).
#   BASE: bart-tiny (the default) or bart-mini; SOURCE_LENGTH: the tokens the encoder reads (default 4096 for
#   bart-tiny, 2048 for bart-mini); EXTRACT_STEPS: steps of the oracle stage, batch 4 (default 600 for bart-tiny,
#   900 for bart-mini); SEED: the seed of the bart-mini base's weights and data order and of the oracle stage
#   (default 0; another seed is another base: give it its own OUTPUT_ROOT).
# Steps:
#   1. the base: bart-tiny taught to copy 512-token windows, 3,000 steps (as scripts/sumpubmed_grid.sh), read in
#      windows of 512; or bart-mini from random weights on the copy/passage mix at 128 tokens, 2,000 steps, read in
#      windows of 128;
#   2. oracle targets of the 2,000 training papers from their first SOURCE_LENGTH tokens (about 0.2 s a paper);
#   3. the base fine-tuned with full attention on the oracle targets (first SOURCE_LENGTH tokens);
#   4. `srformer evaluate` of that model on the 300 validation papers against their abstracts (reading check and
#      baselines in the metrics).
# Measured for bart-mini on two CPU threads (OMP_NUM_THREADS=2): the base 2,876 s; the oracle targets about 7 min;
# the oracle stage at 2,048 tokens about 4 s a step.
set -euo pipefail
usage="usage: [BASE=bart-mini] [SOURCE_LENGTH=N] [SEED=N] scripts/sumpubmed_extract.sh SUMPUBMED_DIR OUTPUT_ROOT [EXTRACT_STEPS]"
data=${1:?$usage}
root=${2:?$usage}
base_model=${BASE:-bart-tiny}
seed=${SEED:-0}
case $base_model in
  bart-tiny)
    source_length=${SOURCE_LENGTH:-4096} steps=${3:-600}
    base=$root/pretrain-sumpubmed-copy extract=$root/extract-oracle oracle=$root/train-oracle.jsonl
    window=(--setting encoder_window=512 --setting window_overlap=0) ;;
  bart-mini)
    source_length=${SOURCE_LENGTH:-2048} steps=${3:-900}
    base=$root/pretrain-mini extract=$root/extract-mini-$source_length oracle=$root/train-oracle-$source_length.jsonl
    window=(--setting encoder_window=128) ;;
  *) echo "BASE must be bart-tiny or bart-mini, not $base_model" >&2; exit 2 ;;
esac
for part in train validation; do
  if [ ! -f "$data/$part.jsonl" ]; then
    echo "$data/$part.jsonl not found: SUMPUBMED_DIR must hold train.jsonl and validation.jsonl" >&2
    exit 2
  fi
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$root"
. "$(dirname "$0")/training_stages.sh"

if [ "$base_model" = bart-tiny ]; then
  "$(dirname "$0")/sumpubmed_copy_base.sh" "$data" "$base"
else
  pretrain_stage "$base" --data "$data/train.jsonl" --model bart-mini --max-source-length 128 \
    --max-target-length 128 --vocab-size 8000 --objective-mix copy=0.3,passage=0.7 --curriculum-start 8 \
    --curriculum-hold 0.05 --curriculum-end 0.5 --max-steps 2000 --batch-size 32 --learning-rate 5e-4 \
    --warmup-steps 200 --eval-documents 32 --eval-every 400 --save-every 200 --seed "$seed" --no-progress
fi

srformer oracle-targets --data "$data/train.jsonl" --output "$oracle" --tokenizer "$base" \
  --max-source-length "$source_length" --no-progress

train_stage "$extract" "$steps" --model "$base" --data "$oracle" --variant full "${window[@]}" \
  --max-source-length "$source_length" --max-target-length 512 --batch-size 4 --learning-rate 5e-4 \
  --warmup-steps 50 --save-every 25 --seed "$seed" --no-progress

srformer evaluate --checkpoint "$extract" --data "$data/validation.jsonl" --output "$extract-validation.json" \
  --predictions "$extract-validation.jsonl" --max-new-tokens 512 --batch-size 16 --no-repeat-ngram-size 3 \
  --no-progress
