"""`srformer train` with two CPU processes (gloo), under `accelerate launch` and `torchrun`.

One run is started by ``accelerate launch --multi_gpu --num_processes 2``, stopped by its time
budget after its first optimizer step (with a checkpoint), and resumed by ``torchrun
--nproc_per_node 2 ... --resume``. It must end with the weights, loss history and token counts of a
single-process run over the same global batches: batch 2 per process x 2 processes against batch 2 x
gradient accumulation 2 in one process. The model has no dropout, so both see identical arithmetic.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum
from tests.tiny_t5 import save_tiny_t5

# The weights must be bit-identical. Both runs see the same two micro-batches per step (the same examples, so
# the same padded shapes and kernels). One process accumulates g1/2 + g2/2 (the loss of each is halved, and
# scaling by a power of two is exact in backward); two processes all-reduce g1 + g2, a sum of two operands
# that does not depend on order, and halve it. Both are the same float32 numbers (barring subnormals), so
# clipping, AdamW and the schedule (the same on every process) give the same weights.


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """A dropout-free tiny T5 and a Unigram tokenizer trained on 16 ACLSum papers, plus their data."""
    folder = tmp_path_factory.mktemp("base")
    pairs = load_aclsum("train")[:16]
    save_tiny_t5(folder, [p.document for p in pairs] + [p.summary for p in pairs], dropout_rate=0.0)
    with open(folder / "train.jsonl", "w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps({"document": pair.document, "summary": pair.summary}) + "\n")
    return folder


def train_args(base: Path, output: Path) -> list[str]:
    return [
        "train", "--model", str(base), "--data", str(base / "train.jsonl"), "--output", str(output),
        "--variant", "srformer", "--segment-size", "16", "--target-length", "32", "--max-source-length", "64",
        "--max-target-length", "24", "--batch-size", "2", "--max-steps", "4", "--save-every", "2",
        "--learning-rate", "1e-3", "--no-progress",
    ]


def losses(checkpoint: Path) -> list[tuple[int, float]]:
    """The (step, loss) entries of a checkpoint's Trainer log history."""
    log_history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return [(entry["step"], entry["loss"]) for entry in log_history if "loss" in entry]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(launcher: list[str], args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    completed = subprocess.run([sys.executable, "-m", *launcher, "-m", "srformer.cli.main", *args], env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return completed


@pytest.mark.slow
def test_two_processes_with_resume_equal_one_process_on_the_same_global_batch(base_model, tmp_path):
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    # Equality by construction, on any CPU: every run uses one thread (as the launched processes do), so each
    # micro-batch's float32 gradient is the same sequence of operations in both setups; the two halves then
    # meet in one addition (commutative in IEEE arithmetic) and a division by 2 (exact).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*train_args(base_model, single), "--gradient-accumulation-steps", "2"]) == 0
    finally:
        torch.set_num_threads(threads)

    accelerate = ["accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                  "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    first = launch(accelerate, [*train_args(base_model, ddp), "--time-budget", "1e-6"])
    assert first.stdout.count("trained srformer for 1 steps") == 1  # one report, from the main process
    summary = json.loads((ddp / "training_summary.json").read_text())
    assert (summary["steps"], summary["stopped_by"]) == (1, "time_budget")
    checkpoint = ddp / "checkpoint"
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 1
    assert {p.name for p in checkpoint.glob("rng_state*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}

    torchrun = ["torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    second = launch(torchrun, [*train_args(base_model, ddp), "--resume"])
    assert second.stdout.count("trained srformer for 4 steps") == 1

    expected = json.loads((single / "training_summary.json").read_text())
    got = json.loads((ddp / "training_summary.json").read_text())
    # Every example seen once in 4 global steps of 4 examples, counted over both processes.
    assert got["tokens_seen"] == expected["tokens_seen"] and got["epochs"] == expected["epochs"] == 1.0
    # Loss windows (log_every=10 > max_steps) are closed by every checkpoint (save_every=2) and by the end: the
    # single run logs the means of steps 1-2 and 3-4; the interrupted run also closed a window when its time
    # budget stopped it after step 1, so it logs step 1, step 2 and the mean of steps 3-4.
    history = losses(checkpoint)
    reference_history = losses(single / "checkpoint")
    assert [s for s, _ in history] == [1, 2, 4] and [s for s, _ in reference_history] == [2, 4]
    (_, step1), (_, step2), (_, steps3to4) = history
    assert (step1 + step2) / 2 == pytest.approx(reference_history[0][1], rel=1e-6)
    assert steps3to4 == pytest.approx(reference_history[1][1], rel=1e-6)

    weights, reference = load_file(ddp / "model.safetensors"), load_file(single / "model.safetensors")
    initial = load_file(base_model / "model.safetensors")
    assert weights.keys() == reference.keys()
    difference = max((weights[k] - reference[k]).abs().max().item() for k in weights)
    moved = max((reference[k] - initial[k]).abs().max().item() for k in initial)
    print(f"max |DDP - single process| = {difference:.3g}; training moved the weights by {moved:.3g}")
    assert difference == 0
    assert moved > 1e-4  # training really moved the weights
