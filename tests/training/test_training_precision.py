"""train() with mixed precision (bf16 autocast on CPU, fp16 rejected) and gradient checkpointing."""

from __future__ import annotations

import math

import pytest
import torch

import srformer
from srformer.training import TrainingSettings, train
from tests.tolerance import assert_exact


def converted_model(make_model):
    """The tiny T5 converted to srformer with a large RAF input (W at PyTorch's default scale)."""
    model = make_model()
    return srformer.convert(model, srformer.SRformerConfig(variant="srformer", segment_size=4, target_length=8,
                                                           raf_linear_init_scale=1.0))


def settings_for(**overrides) -> TrainingSettings:
    base = dict(max_steps=4, learning_rate=1e-2, batch_size=4, save_every=100, log_every=1, progress=False, seed=3)
    return TrainingSettings(**{**base, **overrides})


def record_autocast(model) -> list[bool]:
    """Whether CPU autocast was on, at every forward of the decoder."""
    seen: list[bool] = []
    model.decoder.register_forward_pre_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    return seen


def test_bf16_training_runs_under_autocast_and_tracks_float32(make_model, tokenizer, features, tmp_path):
    reference_model = converted_model(make_model)
    reference_autocast = record_autocast(reference_model)
    reference = train(reference_model, tokenizer, features, tmp_path / "fp32", settings_for(), save_final=False)

    model = converted_model(make_model)
    autocast = record_autocast(model)
    result = train(model, tokenizer, features, tmp_path / "bf16", settings_for(mixed_precision="bf16"),
                   save_final=False)

    assert reference_autocast and not any(reference_autocast)
    assert autocast and all(autocast)
    assert all(math.isfinite(loss) for _, loss in result.loss_history)
    assert all(parameter.dtype == torch.float32 for parameter in model.parameters())  # master weights stay fp32
    # Measured: per-step losses within 0.33% of float32 over these 4 steps (RAF fires for 41% of its units).
    for (_, loss16), (_, loss32) in zip(result.loss_history, reference.loss_history, strict=True):
        assert loss16 == pytest.approx(loss32, rel=0.02)
    assert result.loss_history != reference.loss_history  # bf16 really changed the arithmetic

    # The same process may train in float32 again (accelerate's process-wide state is reset).
    again = train(converted_model(make_model), tokenizer, features, tmp_path / "fp32-again", settings_for(),
                  save_final=False)
    assert again.loss_history == reference.loss_history


def test_fp16_on_cpu_is_a_clear_error_before_any_work(make_model, tokenizer, features, tmp_path):
    with pytest.raises(ValueError, match=r"--mixed-precision fp16 needs a CUDA GPU, but this process trains on the "
                                         r"CPU.*Use --mixed-precision bf16"):
        train(make_model(), tokenizer, features, tmp_path / "run", settings_for(mixed_precision="fp16"))
    assert not (tmp_path / "run").exists()


def test_gradient_checkpointing_training_matches_plain_training(make_model, tokenizer, features, tmp_path):
    # float64: the recomputation sums gradient contributions in another order than the plain step, so
    # the runs agree to rounding only (tests/tolerance.py); in float32 that rounding, magnified by
    # AdamW's division by sqrt(v) for near-zero gradients, depends on the CPU (8e-5 relative seen).
    plain = converted_model(make_model).double()
    train(plain, tokenizer, features, tmp_path / "plain", settings_for(), save_final=False)
    checkpointed = converted_model(make_model).double()
    train(checkpointed, tokenizer, features, tmp_path / "gc", settings_for(gradient_checkpointing=True),
          save_final=False)
    assert checkpointed.decoder.gradient_checkpointing and not plain.decoder.gradient_checkpointing
    for (name, a), b in zip(plain.state_dict().items(), checkpointed.state_dict().values(), strict=True):
        assert_exact(b, a, name)


@pytest.mark.parametrize(("kwargs", "field"), [({"mixed_precision": "fp8"}, "mixed_precision"),
                                               ({"gradient_checkpointing": "yes"}, "gradient_checkpointing")])
def test_new_settings_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=f"TrainingSettings.{field} must be"):
        TrainingSettings(**kwargs)
