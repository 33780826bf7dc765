#!/usr/bin/env bash
# An LED-shaped summarizer of SumPubMed at 4,096 tokens, made as LED was made (docs/pretraining.md, "A long encoder
# from a short one"): the oracle recipe's bart-mini (scripts/sumpubmed_extract.sh with BASE=bart-mini, read in
# windows of 128) made into an LED (its positions 0-127 repeated across 4,096, local attention in windows of 128),
# fine-tuned on oracle targets of the first 4,096 tokens with the LED's own encoder reading them whole, then scored
# on the 300 validation papers. Every step resumes where an earlier call stopped, so rerun the same command after a
# stop.
#
# Usage: [SOURCE_LENGTH=N] scripts/sumpubmed_led.sh SUMPUBMED_DIR BART_BASE OUTPUT_ROOT [STEPS]
#   SUMPUBMED_DIR holds train.jsonl and validation.jsonl (fields id, document, summary); BART_BASE is the bart-mini
#   oracle model (OUTPUT_ROOT/extract-mini-2048 of scripts/sumpubmed_extract.sh); SOURCE_LENGTH the tokens the LED
#   reads (default 4096); STEPS of fine-tuning, batch 4 (default 300).
# Measured on one CPU thread beside one other job: the oracle targets about 12 minutes, 300 steps 3,907 s (about 13 s
# a step).
set -euo pipefail
usage="usage: [SOURCE_LENGTH=N] scripts/sumpubmed_led.sh SUMPUBMED_DIR BART_BASE OUTPUT_ROOT [STEPS]"
data=${1:?$usage}
bart=${2:?$usage}
root=${3:?$usage}
steps=${4:-300}
source_length=${SOURCE_LENGTH:-4096}
for part in train validation; do
  if [ ! -f "$data/$part.jsonl" ]; then
    echo "$data/$part.jsonl not found: SUMPUBMED_DIR must hold train.jsonl and validation.jsonl" >&2
    exit 2
  fi
done
if [ ! -f "$bart/config.json" ]; then
  echo "$bart/config.json not found: BART_BASE must be a BART checkpoint folder (scripts/sumpubmed_extract.sh's)" >&2
  exit 2
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$root"
. "$(dirname "$0")/training_stages.sh"
led=$root/led-from-bart oracle=$root/train-oracle-$source_length.jsonl model=$root/led-$source_length

[ -f "$led/config.json" ] || srformer led-from-bart --checkpoint "$bart" --output "$led" \
  --max-positions "$source_length" --attention-window 128 --position-period 128

srformer oracle-targets --data "$data/train.jsonl" --output "$oracle" --tokenizer "$led" \
  --max-source-length "$source_length" --no-progress

train_stage "$model" "$steps" --model "$led" --data "$oracle" --variant full --max-source-length "$source_length" \
  --max-target-length 512 --batch-size 4 --learning-rate 5e-4 --warmup-steps 50 --save-every 25 --seed 0 \
  --no-progress

srformer evaluate --checkpoint "$model" --data "$data/validation.jsonl" --output "$model-validation.json" \
  --predictions "$model-validation.jsonl" --max-source-length "$source_length" --max-new-tokens 512 \
  --batch-size 16 --no-repeat-ngram-size 3 --no-progress
