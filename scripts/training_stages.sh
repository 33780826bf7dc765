# Sourced by the recipe scripts (scripts/bbc_extract.sh, scripts/sumpubmed_extract.sh): stages that skip finished
# work and resume interrupted work, so that a recipe is rerun with the same command after a stop.

# pretrain_stage OUTPUT ARGS...: `srformer pretrain --output OUTPUT ARGS...` unless OUTPUT holds the finished model
# (model.safetensors); continues OUTPUT/checkpoint when an earlier call left one.
pretrain_stage() {
  local output=$1; shift
  [ -f "$output/model.safetensors" ] && return 0
  local resume=(); [ -d "$output/checkpoint" ] && resume=(--resume)
  srformer pretrain --output "$output" "$@" "${resume[@]}"
}

# train_stage OUTPUT STEPS ARGS...: `srformer train --output OUTPUT --max-steps STEPS ARGS...` unless
# OUTPUT/training_summary.json records STEPS steps or more; continues OUTPUT/checkpoint when there is one.
train_stage() {
  local output=$1 steps=$2; shift 2
  local finished
  finished=$(python -c "import json, sys; print(int(json.load(open(sys.argv[1]))['steps'] >= int(sys.argv[2])))" \
    "$output/training_summary.json" "$steps" 2>/dev/null || echo 0)
  [ "$finished" = 1 ] && return 0
  local resume=(); [ -d "$output/checkpoint" ] && resume=(--resume)
  srformer train --output "$output" --max-steps "$steps" "$@" "${resume[@]}"
}
