#!/usr/bin/env bash
# The oracle-extract recipe on BBC News (docs/pretraining.md, "Teaching what to copy"), at the shapes of
# results/compare/bbc-long: 768 source tokens read in windows of 256, summaries up to 352 tokens. Every step resumes
# where an earlier call stopped, so rerun the same command after a stop.
#
# Usage: [BASE=bart-mini] scripts/bbc_extract.sh BBC_ALL_JSONL OUTPUT_ROOT [EXTRACT_STEPS] [ABSTRACT_STEPS]
#   BBC_ALL_JSONL: the BBC News Summary corpus as one file (fields id, document, summary), split by id 80/10/10.
#   BASE: bart-tiny (the default) or bart-mini; ABSTRACT_STEPS=0 leaves out steps 4 and its evaluation.
# Steps:
#   1. the base: bart-tiny, span + copy on the training articles (as results/compare/bbc-long, step 1), read in
#      windows of 256; or bart-mini from random weights on the copy/passage mix at 128 tokens, read in windows of 128;
#   2. oracle targets of the training articles from their first 768 tokens;
#   3. the base fine-tuned with full attention on the oracle targets;
#   4. that model fine-tuned on the reference summaries (sentences in document order, scripts/bbc_order_summaries.py);
#   5. `srformer evaluate` of the models of steps 3 and 4 on the 252 test articles.
set -euo pipefail
all=${1:?usage: scripts/bbc_extract.sh BBC_ALL_JSONL OUTPUT_ROOT [EXTRACT_STEPS] [ABSTRACT_STEPS]}
root=${2:?usage: scripts/bbc_extract.sh BBC_ALL_JSONL OUTPUT_ROOT [EXTRACT_STEPS] [ABSTRACT_STEPS]}
extract_steps=${3:-1000}
abstract_steps=${4:-1000}
split=(--split-by-id train=0.8,validation=0.1,test=0.1)
base_model=${BASE:-bart-tiny}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
case $base_model in
  bart-tiny)
    base=$root/pretrain-bbc-stage1 window=256
    pretrain=(--model bart-tiny --max-source-length 256 --vocab-size 4000 --objective-mix span=0.5,copy=0.5
      --curriculum-start 8 --curriculum-hold 0.1 --curriculum-end 0.7 --max-steps 3000 --batch-size 16
      --learning-rate 1e-3 --warmup-steps 100 --eval-every 250 --save-every 100) ;;
  bart-mini)
    base=$root/pretrain-bbc-mini window=128
    pretrain=(--model bart-mini --max-source-length 128 --max-target-length 128 --vocab-size 4000
      --objective-mix copy=0.3,passage=0.7 --curriculum-start 8 --curriculum-hold 0.05 --curriculum-end 0.5
      --max-steps 2400 --batch-size 32 --learning-rate 5e-4 --warmup-steps 200 --eval-every 400 --save-every 200) ;;
  *) echo "BASE must be bart-tiny or bart-mini, not $base_model" >&2; exit 2 ;;
esac
mkdir -p "$root"
shapes=(--variant full --setting encoder_window=$window --max-source-length 768 --max-target-length 352)

. "$(dirname "$0")/training_stages.sh"
pretrain_stage "$base" --data "$all" "${split[@]}" --split train "${pretrain[@]}" --eval-documents 32 --seed 0 \
  --no-progress

srformer oracle-targets --data "$all" "${split[@]}" --split train --output "$root/train-oracle.jsonl" \
  --tokenizer "$base" --max-source-length 768 --no-progress
[ -f "$root/ordered.jsonl" ] || python scripts/bbc_order_summaries.py "$all" "$root/ordered.jsonl"

stage() {  # MODEL DATA OUTPUT STEPS [extra train options]: train unless finished, resuming a checkpoint
  local model=$1 data=$2 output=$3 steps=$4; shift 4
  train_stage "$output" "$steps" --model "$model" --data "$data" "${shapes[@]}" --batch-size 8 --learning-rate 5e-4 \
    --warmup-steps 50 --save-every 50 --seed 0 --no-progress "$@"
}
stage "$base" "$root/train-oracle.jsonl" "$root/extract" "$extract_steps"
for model in extract; do
  srformer evaluate --checkpoint "$root/$model" --data "$root/ordered.jsonl" "${split[@]}" --split test \
    --output "$root/$model-test.json" --predictions "$root/$model-test.jsonl" --max-new-tokens 352 \
    --batch-size 16 --no-repeat-ngram-size 3 --no-progress
done
[ "$abstract_steps" -gt 0 ] || exit 0
stage "$root/extract" "$root/ordered.jsonl" "$root/extract-then-abstract" "$abstract_steps" "${split[@]}" \
  --split train
srformer evaluate --checkpoint "$root/extract-then-abstract" --data "$root/ordered.jsonl" "${split[@]}" --split test \
  --output "$root/extract-then-abstract-test.json" --predictions "$root/extract-then-abstract-test.jsonl" \
  --max-new-tokens 352 --batch-size 16 --no-repeat-ngram-size 3 --no-progress
