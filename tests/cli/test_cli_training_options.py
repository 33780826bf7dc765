"""`srformer train --mixed-precision` and `--gradient-checkpointing`, and the one-line report per run."""

from __future__ import annotations

import json
import math
from argparse import Namespace

import pytest

from srformer.cli.main import main
from srformer.cli.train_command import mixed_precision
from srformer.data.pairs import load_aclsum


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [{"document": p.document, "summary": p.summary} for p in load_aclsum("train")[:8]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def args_for(train_file, output, *extra) -> list[str]:
    return ["train", "--model", "t5-tiny", "--data", str(train_file), "--output", str(output), "--variant", "srformer",
            "--segment-size", "16", "--target-length", "32", "--max-source-length", "64", "--max-target-length", "16",
            "--vocab-size", "300", "--batch-size", "4", "--no-progress", *extra]


def test_fp16_on_a_cpu_is_rejected_before_any_work(train_file, tmp_path, capsys):
    output = tmp_path / "run"
    assert main(args_for(train_file, output, "--mixed-precision", "fp16")) == 2
    assert ("srformer train: error: --mixed-precision fp16 needs a CUDA GPU, but this process trains on the CPU"
            in capsys.readouterr().err)
    assert not output.exists()


def test_bf16_with_gradient_checkpointing_trains_and_reports_once(train_file, tmp_path, capsys):
    output = tmp_path / "run"
    assert main(args_for(train_file, output, "--mixed-precision", "bf16", "--gradient-checkpointing",
                         "--max-steps", "2")) == 0
    assert capsys.readouterr().out.count("trained srformer for 2 steps") == 1
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["steps"] == 2 and math.isfinite(summary["final_loss"])
    state = json.loads((output / "checkpoint" / "trainer_state.json").read_text())
    assert state["settings"]["mixed_precision"] == "bf16" and state["settings"]["gradient_checkpointing"] is True


@pytest.mark.parametrize(("flag", "environment", "expected"),
                         [(None, None, "no"), (None, "BF16", "bf16"), ("no", "bf16", "no"), ("bf16", None, "bf16")])
def test_mixed_precision_defaults_to_the_launchers_setting(monkeypatch, flag, environment, expected):
    if environment is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", environment)
    assert mixed_precision(Namespace(mixed_precision=flag)) == expected
