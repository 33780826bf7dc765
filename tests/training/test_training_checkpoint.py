"""Atomic checkpoints: the swap of srformer.training.checkpoint, and a kill inside the Trainer's own save."""

from __future__ import annotations

import json

import pytest
import torch

from srformer.training import SRformerTrainer, TrainingSettings, find_checkpoint, train
from srformer.training.checkpoint import publish_checkpoint, remove_stale_temporaries, staging_dir


def write_checkpoint(folder, step: int):
    """A minimal complete checkpoint directory (the two state files find_checkpoint requires)."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "run_state.json").write_text(json.dumps({"step": step}))
    return folder


def step_of(folder) -> int:
    return json.loads((folder / "trainer_state.json").read_text())["global_step"]


def test_find_checkpoint_on_missing_empty_or_incomplete_dirs(tmp_path):
    assert find_checkpoint(tmp_path / "nope") is None
    assert find_checkpoint(tmp_path) is None
    (tmp_path / ".checkpoint-tmp-3").mkdir()
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "trainer_state.json").write_text("{}")  # no run_state.json: incomplete
    assert find_checkpoint(tmp_path) is None


def test_publish_replaces_the_previous_checkpoint(tmp_path):
    publish_checkpoint(write_checkpoint(staging_dir(tmp_path, 1) / "checkpoint-1", 1), tmp_path)
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint" and step_of(tmp_path / "checkpoint") == 1
    (tmp_path / ".checkpoint-old").mkdir()  # stale: `checkpoint` is complete
    publish_checkpoint(write_checkpoint(staging_dir(tmp_path, 2) / "checkpoint-2", 2), tmp_path)
    remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert step_of(find_checkpoint(tmp_path)) == 2


def test_only_old_checkpoint_is_used_and_then_replaced(tmp_path):
    write_checkpoint(tmp_path / ".checkpoint-old", 1)  # killed between the two renames
    assert find_checkpoint(tmp_path) == tmp_path / ".checkpoint-old"
    publish_checkpoint(write_checkpoint(tmp_path / ".checkpoint-tmp-2" / "checkpoint-2", 2), tmp_path)
    remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert step_of(find_checkpoint(tmp_path)) == 2


def test_an_incomplete_directory_is_never_published(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model.safetensors").write_bytes(b"\0")
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        publish_checkpoint(tmp_path / "half", tmp_path)
    assert find_checkpoint(tmp_path) is None


class SimulatedKill(RuntimeError):
    """Stands in for a process killed while the Trainer writes a checkpoint."""


def test_kill_inside_the_trainers_save_keeps_the_previous_checkpoint(make_model, tokenizer, features, tmp_path,
                                                                      monkeypatch):
    settings = TrainingSettings(max_steps=6, learning_rate=1e-2, batch_size=4, save_every=2, log_every=1,
                                progress=False, seed=3)
    reference = make_model()
    train(reference, tokenizer, features, tmp_path / "full", settings, save_final=False)

    original = SRformerTrainer._save_optimizer_and_scheduler
    calls = {"n": 0}

    def dies_on_second_save(self, output_dir):
        calls["n"] += 1
        if calls["n"] == 2:  # the model files of step 4 are written, its optimizer state is not
            raise SimulatedKill(output_dir)
        original(self, output_dir)

    monkeypatch.setattr(SRformerTrainer, "_save_optimizer_and_scheduler", dies_on_second_save)
    run = tmp_path / "split"
    with pytest.raises(SimulatedKill):
        train(make_model(), tokenizer, features, run, settings, save_final=False)
    monkeypatch.undo()
    assert (run / ".checkpoint-tmp-4" / "checkpoint-4" / "model.safetensors").is_file()  # the half-written save
    assert step_of(find_checkpoint(run)) == 2

    resumed = make_model(seed=11)
    train(resumed, tokenizer, features, run, settings, resume=True, save_final=False)
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint"]
    assert step_of(run / "checkpoint") == 6
