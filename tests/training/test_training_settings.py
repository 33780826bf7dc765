"""Validation of TrainingSettings."""

from __future__ import annotations

import pytest

from srformer.training import TrainingSettings


def test_defaults_are_valid_and_serializable():
    settings = TrainingSettings()
    assert settings.max_steps == 1000
    assert settings.to_dict()["learning_rate"] == 5e-4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 2.5}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"time_budget_seconds": 0}, "time_budget_seconds"),
        ({"time_budget_seconds": float("inf")}, "time_budget_seconds"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": "1e-3"}, "learning_rate"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"warmup_steps": 11, "max_steps": 10}, "warmup_steps"),
        ({"batch_size": 0}, "batch_size"),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps"),
        ({"max_grad_norm": -1.0}, "max_grad_norm"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm"),
        ({"save_every": 0}, "save_every"),
        ({"log_every": 0}, "log_every"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"progress": "yes"}, "progress"),
    ],
)
def test_invalid_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TrainingSettings(**kwargs)


def test_zero_grad_norm_disables_clipping_and_is_valid():
    assert TrainingSettings(max_grad_norm=0.0, time_budget_seconds=5).max_grad_norm == 0.0


def test_zero_finetuning_steps_are_allowed_and_negative_ones_are_named():
    """``finetune_steps = 0`` ("convert+0") scores a converted model without fine-tuning, in every settings class
    that shares :class:`FineTuning`; a negative value raises naming the class and the setting."""
    from srformer.experiments.aclsum import ComparisonSettings
    from srformer.experiments.compare import CompareSettings
    from srformer.probe.runner import ProbeSettings
    from srformer.training.settings_base import FineTuning

    for settings_class in (FineTuning, ProbeSettings, CompareSettings, ComparisonSettings):
        assert settings_class(finetune_steps=0).finetune_steps == 0
        with pytest.raises(ValueError, match=rf"{settings_class.__name__}\.finetune_steps must be >= 0, got -1"):
            settings_class(finetune_steps=-1)
