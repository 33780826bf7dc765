"""`srformer train --mixed-precision`, `--gradient-checkpointing`, `--deepspeed`/`--fsdp`/`--report-to`
pass-through to the Trainer, and the one-line report per run."""

from __future__ import annotations

import importlib.util
import json
import math
from argparse import Namespace

import pytest
import torch

from srformer.cli.main import main
from srformer.cli.train_command import mixed_precision
from srformer.data.pairs import load_aclsum
from srformer.training import TrainingSettings, loop
from srformer.training.trainer import training_arguments as training_arguments_of


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
    state = json.loads((output / "checkpoint" / "run_state.json").read_text())
    assert state["settings"]["mixed_precision"] == "bf16" and state["settings"]["gradient_checkpointing"] is True
    arguments = torch.load(output / "checkpoint" / "training_args.bin", weights_only=False)
    assert arguments.bf16 and arguments.activation_checkpointing and arguments.max_steps == 2


@pytest.fixture
def recorded_arguments(monkeypatch):
    """Records the TrainingArguments the Trainer gets, then stops before any training (a stand-in exception)."""
    recorded = []

    class Recorded(Exception):
        pass

    def record(settings, output_dir, *, use_cpu):
        recorded.append(training_arguments_of(settings, output_dir, use_cpu=use_cpu))
        raise Recorded

    monkeypatch.setattr(loop, "training_arguments", record)
    return recorded, Recorded


def test_report_to_reaches_the_training_arguments(train_file, tmp_path, recorded_arguments):
    recorded, stopped = recorded_arguments
    with pytest.raises(stopped):
        main(args_for(train_file, tmp_path / "run", "--report-to", "tensorboard", "--max-steps", "1"))
    assert recorded[0].report_to == ["tensorboard"]
    assert recorded[0].use_cpu and recorded[0].max_steps == 1 and recorded[0].per_device_train_batch_size == 4


def test_an_fsdp_config_reaches_the_training_arguments(tmp_path):
    """FSDP cannot run on a CPU (accelerate shards over GPU processes only), so this checks the hand-over:
    the file given to --fsdp-config becomes the Trainer's FSDP settings."""
    config = tmp_path / "fsdp.json"
    config.write_text(json.dumps({"version": 2, "reshard_after_forward": False, "cpu_offload": True}))
    settings = TrainingSettings(fsdp_config=str(config), max_steps=3)
    assert settings.fsdp
    arguments = training_arguments_of(settings, tmp_path / "run", use_cpu=True)
    assert arguments.fsdp is True and arguments.fsdp_config["reshard_after_forward"] is False
    assert arguments.fsdp_plugin_args["fsdp_version"] == 2 and arguments.fsdp_plugin_args["cpu_offload"] is True
    assert arguments.fsdp_plugin_args["reshard_after_forward"] is False


def test_fsdp_on_a_cpu_is_rejected_before_any_work(train_file, tmp_path, capsys):
    output = tmp_path / "run"
    assert main(args_for(train_file, output, "--fsdp")) == 2
    assert "srformer train: error: --fsdp needs GPUs: this process trains on the CPU" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None, reason="deepspeed is installed")
def test_deepspeed_without_its_package_is_rejected_before_any_work(train_file, tmp_path, capsys):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    output = tmp_path / "run"
    assert main(args_for(train_file, output, "--deepspeed", str(config))) == 2
    assert f"--deepspeed {config} needs the deepspeed package" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--deepspeed", "missing.json"], "TrainingSettings.deepspeed must be the path of a JSON config file"),
    (["--fsdp-config", "missing.json"], "TrainingSettings.fsdp_config must be the path of a JSON config file"),
])
def test_missing_scaling_configs_are_named(train_file, tmp_path, capsys, extra, message):
    assert main(args_for(train_file, tmp_path / "run", *extra)) == 2
    assert message in capsys.readouterr().err


def test_deepspeed_and_fsdp_exclude_each_other(tmp_path):
    config = tmp_path / "c.json"
    config.write_text("{}")
    with pytest.raises(ValueError, match="deepspeed and TrainingSettings.fsdp exclude each other"):
        TrainingSettings(deepspeed=str(config), fsdp=True)


@pytest.mark.parametrize(("flag", "environment", "expected"),
                         [(None, None, "no"), (None, "BF16", "bf16"), ("no", "bf16", "no"), ("bf16", None, "bf16")])
def test_mixed_precision_defaults_to_the_launchers_setting(monkeypatch, flag, environment, expected):
    if environment is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", environment)
    assert mixed_precision(Namespace(mixed_precision=flag)) == expected


def test_a_deepspeed_config_is_handed_to_the_training_arguments_unchanged(tmp_path, monkeypatch):
    """DeepSpeed needs its package and GPUs; on a CPU only the hand-over of the path can be checked."""
    from srformer.training import trainer

    config = tmp_path / "ds.json"
    config.write_text("{}")
    monkeypatch.setattr(trainer, "Seq2SeqTrainingArguments", lambda **kwargs: kwargs)
    kwargs = trainer.training_arguments(TrainingSettings(deepspeed=str(config)), tmp_path / "run", use_cpu=False)
    assert kwargs["deepspeed"] == str(config) and kwargs["fsdp"] is None and kwargs["fsdp_config"] is None
