"""Atomic checkpoint files: save/find/load round trip and leftovers of interrupted saves."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from srformer.training import find_checkpoint, load_checkpoint, save_checkpoint


@pytest.fixture
def prepared(make_model):
    """An accelerator with a prepared tiny model and AdamW; yields ``(accelerator, model)``."""
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model


def test_find_checkpoint_on_missing_or_empty_dir(tmp_path):
    assert find_checkpoint(tmp_path / "nope") is None
    assert find_checkpoint(tmp_path) is None
    (tmp_path / ".checkpoint-tmp-3").mkdir()
    (tmp_path / "checkpoint").mkdir()  # incomplete: no trainer_state.json
    assert find_checkpoint(tmp_path) is None


def test_round_trip_restores_weights_and_state(tmp_path, prepared):
    accelerator, model = prepared
    state = {"step": 4, "epoch": 1, "batches_seen_in_epoch": 2, "elapsed_seconds": 1.5,
             "loss_history": [[2, 3.0], [4, 2.5]], "settings": {"seed": 0}}
    path = save_checkpoint(accelerator, tmp_path, state)
    assert path == tmp_path / "checkpoint" == find_checkpoint(tmp_path)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    assert load_checkpoint(accelerator, path) == state
    for name, value in model.state_dict().items():
        assert torch.equal(value, saved[name]), name


def test_second_save_replaces_first_and_cleans_leftovers(tmp_path, prepared):
    accelerator, _ = prepared
    save_checkpoint(accelerator, tmp_path, {"step": 1})
    (tmp_path / ".checkpoint-tmp-7").mkdir()
    (tmp_path / ".checkpoint-old").mkdir()  # stale: `checkpoint` is complete
    save_checkpoint(accelerator, tmp_path, {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert load_checkpoint(accelerator, find_checkpoint(tmp_path))["step"] == 2


def test_only_old_checkpoint_is_used_and_then_replaced(tmp_path, prepared):
    accelerator, _ = prepared
    save_checkpoint(accelerator, tmp_path, {"step": 1})
    (tmp_path / "checkpoint").rename(tmp_path / ".checkpoint-old")  # killed between the two renames
    assert find_checkpoint(tmp_path) == tmp_path / ".checkpoint-old"
    assert load_checkpoint(accelerator, find_checkpoint(tmp_path))["step"] == 1
    save_checkpoint(accelerator, tmp_path, {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_invalid_state_raises_before_touching_disk(tmp_path, prepared):
    accelerator, _ = prepared
    with pytest.raises(ValueError, match="step"):
        save_checkpoint(accelerator, tmp_path, {"epoch": 0})
    with pytest.raises(TypeError):
        save_checkpoint(accelerator, tmp_path, {"step": 1, "bad": object()})
    assert not any(tmp_path.iterdir())
    with pytest.raises(FileNotFoundError):
        load_checkpoint(accelerator, tmp_path)
