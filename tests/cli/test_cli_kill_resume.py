"""A real interruption: `srformer train` in a subprocess is SIGKILLed after its first checkpoint, then
resumed with --resume; it must end with the weights of an uninterrupted run.

The in-process tests of tests/training/test_training_loop.py stop training with an exception at a
chosen step; this one kills the process at an arbitrary moment (possibly in the middle of writing a
checkpoint), through the command line, with dropout on (so the RNG state must be restored too).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file

from srformer.cli.main import main
from srformer.data.pairs import load_aclsum
from srformer.training import find_checkpoint
from tests.tiny_t5 import save_tiny_t5

MAX_STEPS = 60


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A tiny T5 with dropout 0.1 (an exact match then needs the restored RNG state as well as the weights),
    its Unigram tokenizer and 12 ACLSum papers as train.jsonl."""
    folder = tmp_path_factory.mktemp("base")
    pairs = load_aclsum("train")[:12]
    save_tiny_t5(folder, [p.document for p in pairs] + [p.summary for p in pairs], dropout_rate=0.1)
    rows = [{"document": p.document, "summary": p.summary} for p in pairs]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def train_args(base, output) -> list[str]:
    return ["train", "--model", str(base), "--data", str(base / "train.jsonl"), "--output", str(output),
            "--variant", "srformer", "--segment-size", "16", "--target-length", "32", "--max-source-length", "64",
            "--max-target-length", "32", "--batch-size", "4", "--max-steps", str(MAX_STEPS), "--save-every", "5",
            "--learning-rate", "1e-3", "--seed", "7", "--no-progress"]


@pytest.mark.slow
def test_sigkill_after_a_checkpoint_then_resume_matches_an_uninterrupted_run(base_model, tmp_path, one_thread):
    run = tmp_path / "killed"
    victim = subprocess.Popen([sys.executable, "-m", "srformer.cli.main", *train_args(base_model, run)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoint" / "trainer_state.json").is_file():
            assert victim.poll() is None, victim.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    assert victim.returncode == -signal.SIGKILL  # killed, not finished
    assert not (run / "training_summary.json").exists()
    saved = find_checkpoint(run)  # the kill may land inside a checkpoint write: the last complete one is used
    killed_at = json.loads((saved / "trainer_state.json").read_text())["global_step"]
    assert 5 <= killed_at < MAX_STEPS
    print(f"killed after step {killed_at} of {MAX_STEPS}")

    assert main([*train_args(base_model, run), "--resume"]) == 0
    reference = tmp_path / "uninterrupted"
    assert main(train_args(base_model, reference)) == 0

    resumed_weights = load_file(run / "model.safetensors")
    reference_weights = load_file(reference / "model.safetensors")
    assert resumed_weights.keys() == reference_weights.keys()
    difference = max((resumed_weights[k] - reference_weights[k]).abs().max().item() for k in reference_weights)
    print(f"max |resumed - uninterrupted| = {difference}")
    assert difference == 0  # resume replays the same operations on the same machine: bit-identical
    summaries = [json.loads((d / "training_summary.json").read_text()) for d in (run, reference)]
    assert summaries[0]["steps"] == summaries[1]["steps"] == MAX_STEPS
    assert summaries[0]["final_loss"] == summaries[1]["final_loss"]
    assert summaries[0]["tokens_seen"] == summaries[1]["tokens_seen"]
