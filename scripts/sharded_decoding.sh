#!/usr/bin/env bash
# One process against N: `srformer evaluate` of one checkpoint on one data file, decoded
#   1. by one process with every core's thread (what a user runs without a launcher),
#   2. by one process with the threads one of N processes gets (the same kernels as 3, so identical by construction),
#   3. by N processes under torchrun,
#   4. by N processes under torchrun, killed with SIGKILL (launcher and workers) once half the documents are written,
#      then started again with the same command.
#   5. `srformer summarize` (decoding only, no scoring) by one process with every core's thread and by N processes.
# It prints the wall times, compares the prediction files byte for byte, and writes OUTPUT/times.json.
#
# Usage: scripts/sharded_decoding.sh CHECKPOINT DATA.jsonl OUTPUT [N] [extra evaluate options...]
#   e.g. scripts/sharded_decoding.sh runs/my-run validation.jsonl runs/sharded 2 --max-source-length 4096
set -euo pipefail
checkpoint=${1:?usage: scripts/sharded_decoding.sh CHECKPOINT DATA.jsonl OUTPUT [N] [evaluate options...]}
data=${2:?usage: scripts/sharded_decoding.sh CHECKPOINT DATA.jsonl OUTPUT [N] [evaluate options...]}
out=${3:?usage: scripts/sharded_decoding.sh CHECKPOINT DATA.jsonl OUTPUT [N] [evaluate options...]}
processes=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
cores=$(nproc)
per_process=$(( cores / processes > 0 ? cores / processes : 1 ))
documents=$(grep -c . "$data")
mkdir -p "$out"
export TOKENIZERS_PARALLELISM=false

evaluate() {  # NAME LAUNCHER... : one evaluate run writing OUT/NAME.json and OUT/NAME.jsonl
  local name=$1; shift
  "$@" evaluate --checkpoint "$checkpoint" --data "$data" --output "$out/$name.json" \
    --predictions "$out/$name.jsonl" --no-progress "${options[@]}" > "$out/$name.log" 2>&1
}
options=("$@")
torchrun=(python -m torch.distributed.run --nproc_per_node "$processes" --master_port 29517 -m srformer.cli.main)
declare -A seconds
timed() {  # NAME THREADS LAUNCHER...
  local name=$1 threads=$2; shift 2
  local start; start=$(date +%s.%N)
  OMP_NUM_THREADS=$threads evaluate "$name" "$@"
  seconds[$name]=$(python -c "import time; print(round(time.time() - $start, 1))")
  echo "$name: ${seconds[$name]} s"
}

timed one-process "$cores" srformer
timed one-process-same-threads "$per_process" srformer
timed "$processes-processes" "$per_process" "${torchrun[@]}"

# 4: killed half way, then the same command again
rm -f "$out/killed.json" "$out/killed.jsonl" "$out/killed.json.partial"
start=$(date +%s.%N)
OMP_NUM_THREADS=$per_process evaluate killed "${torchrun[@]}" &
launcher=$!
batch_lines() { [ -f "$out/killed.json.partial" ] && python - "$out/killed.json.partial" <<'EOF' || echo 0
import json, sys
done = 0
for line in open(sys.argv[1], "rb").read().splitlines()[1:]:
    try:
        done += len(json.loads(line)["summaries"])
    except ValueError:
        pass
print(done)
EOF
}
while [ "$(batch_lines)" -lt $(( documents / 2 )) ]; do
  kill -0 "$launcher" 2>/dev/null || { echo "the run ended before half the documents were written"; exit 1; }
  sleep 0.5
done
pkill -9 -f -- "--output $out/killed.json" || true
wait "$launcher" 2>/dev/null || true
killed_after=$(python -c "import time; print(round(time.time() - $start, 1))")
written=$(batch_lines)
echo "killed after $killed_after s with $written of $documents documents written"
OMP_NUM_THREADS=$per_process evaluate killed "${torchrun[@]}"
seconds[resumed]=$(python -c "import time; print(round(time.time() - $start, 1))")

summarize_timed() {  # NAME THREADS LAUNCHER...
  local name=$1 threads=$2; shift 2
  local start; start=$(date +%s.%N)
  OMP_NUM_THREADS=$threads "$@" summarize --checkpoint "$checkpoint" "$data" --output "$out/$name.jsonl" \
    --no-progress "${options[@]}" > "$out/$name.log" 2>&1
  seconds[$name]=$(python -c "import time; print(round(time.time() - $start, 1))")
  echo "$name: ${seconds[$name]} s"
}
summarize_timed summarize-one-process "$cores" srformer
summarize_timed "summarize-$processes-processes" "$per_process" "${torchrun[@]}"

for name in one-process-same-threads "$processes-processes" killed; do
  if cmp -s "$out/one-process.jsonl" "$out/$name.jsonl"; then same=identical; else same=DIFFERENT; fi
  echo "$name predictions vs one-process: $same"
done
python - "$out" "$processes" "$cores" "$per_process" "$documents" "$killed_after" "$written" \
  "${seconds[one-process]}" "${seconds[one-process-same-threads]}" "${seconds[$processes-processes]}" \
  "${seconds[resumed]}" "${seconds[summarize-one-process]}" "${seconds[summarize-$processes-processes]}" <<'EOF'
import filecmp, json, sys
from pathlib import Path
out = Path(sys.argv[1])
processes, cores, per_process, documents = map(int, sys.argv[2:6])
killed_after, written = float(sys.argv[6]), int(sys.argv[7])
one, one_same, sharded, resumed, summarize_one, summarize_sharded = map(float, sys.argv[8:14])
name = f"{processes}-processes"
def generate_seconds(run):
    return json.loads((out / f"{run}.json").read_text())["seconds"]
record = {
    "documents": documents, "processes": processes, "cores": cores, "threads_per_process": per_process,
    "wall_seconds": {"one process": one, "one process, threads of one of N": one_same, name: sharded,
                     "killed and resumed (both parts)": resumed},
    "summarize_wall_seconds": {"one process": summarize_one, name: summarize_sharded},
    "generate_process_seconds": {"one process": generate_seconds("one-process"),
                                 "one process, threads of one of N": generate_seconds("one-process-same-threads"),
                                 name: generate_seconds(name), "killed and resumed": generate_seconds("killed")},
    "killed_after_seconds": killed_after, "documents_written_when_killed": written,
    "identical_to_one_process": {run: filecmp.cmp(out / "one-process.jsonl", out / f"{run}.jsonl", shallow=False)
                                 for run in ("one-process-same-threads", name, "killed")},
    "summarize_identical": filecmp.cmp(out / "summarize-one-process.jsonl", out / f"summarize-{name}.jsonl",
                                       shallow=False),
    "distinct_predictions": len({json.loads(line)["prediction"] for line in open(out / "one-process.jsonl")}),
    "identical_to_same_threads": {run: filecmp.cmp(out / "one-process-same-threads.jsonl", out / f"{run}.jsonl",
                                                   shallow=False) for run in (name, "killed")},
}
(out / "times.json").write_text(json.dumps(record, indent=2) + "\n")
print(json.dumps(record, indent=2))
EOF
