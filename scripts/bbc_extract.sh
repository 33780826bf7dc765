#!/usr/bin/env bash
# The oracle-extract recipe on BBC News (docs/pretraining.md, "Teaching what to copy"), at the shapes of
# results/compare/bbc-long: 768 source tokens read in windows of 256, summaries up to 352 tokens. Every step resumes
# where an earlier call stopped, so rerun the same command after a stop.
#
# Usage: scripts/bbc_extract.sh BBC_ALL_JSONL OUTPUT_ROOT [EXTRACT_STEPS] [ABSTRACT_STEPS]
#   BBC_ALL_JSONL: the BBC News Summary corpus as one file (fields id, document, summary), split by id 80/10/10.
# Steps:
#   1. the base: bart-tiny, span + copy on the training articles (as results/compare/bbc-long, step 1);
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
base=$root/pretrain-bbc-stage1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
shapes=(--variant full --setting encoder_window=256 --max-source-length 768 --max-target-length 352)
mkdir -p "$root"

resume=(); [ -d "$base/checkpoint" ] && resume=(--resume)
if [ ! -f "$base/model.safetensors" ]; then
  srformer pretrain --data "$all" "${split[@]}" --split train --model bart-tiny --output "$base" \
    --max-source-length 256 --vocab-size 4000 --objective-mix span=0.5,copy=0.5 --curriculum-start 8 \
    --curriculum-hold 0.1 --curriculum-end 0.7 --max-steps 3000 --batch-size 16 --learning-rate 1e-3 \
    --warmup-steps 100 --eval-documents 32 --eval-every 250 --save-every 100 --seed 0 --no-progress "${resume[@]}"
fi

srformer oracle-targets --data "$all" "${split[@]}" --split train --output "$root/train-oracle.jsonl" \
  --tokenizer "$base" --max-source-length 768 --no-progress
[ -f "$root/ordered.jsonl" ] || python scripts/bbc_order_summaries.py "$all" "$root/ordered.jsonl"

stage() {  # MODEL DATA OUTPUT STEPS [extra train options]: train unless finished, resuming a checkpoint
  local model=$1 data=$2 output=$3 steps=$4; shift 4
  local finished
  finished=$(python -c "import json, sys; print(int(json.load(open(sys.argv[1]))['steps'] >= $steps))" \
    "$output/training_summary.json" 2>/dev/null || echo 0)
  if [ "$finished" != 1 ]; then
    local resume=(); [ -d "$output/checkpoint" ] && resume=(--resume)
    srformer train --model "$model" --data "$data" --output "$output" "${shapes[@]}" --batch-size 8 \
      --max-steps "$steps" --learning-rate 5e-4 --warmup-steps 50 --save-every 50 --seed 0 --no-progress \
      "$@" "${resume[@]}"
  fi
}
stage "$base" "$root/train-oracle.jsonl" "$root/extract" "$extract_steps"
for model in extract; do
  srformer evaluate --checkpoint "$root/$model" --data "$root/ordered.jsonl" "${split[@]}" --split test \
    --output "$root/$model-test.json" --predictions "$root/$model-test.jsonl" --max-new-tokens 352 \
    --batch-size 16 --no-repeat-ngram-size 3 --no-progress
done
stage "$root/extract" "$root/ordered.jsonl" "$root/extract-then-abstract" "$abstract_steps" "${split[@]}" \
  --split train
srformer evaluate --checkpoint "$root/extract-then-abstract" --data "$root/ordered.jsonl" "${split[@]}" --split test \
  --output "$root/extract-then-abstract-test.json" --predictions "$root/extract-then-abstract-test.jsonl" \
  --max-new-tokens 352 --batch-size 16 --no-repeat-ngram-size 3 --no-progress
