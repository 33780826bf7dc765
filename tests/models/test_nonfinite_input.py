"""NaN/inf reaching SRformer cross attention: a ValueError naming the layer and the fixes, checked
once per sequence and layer (never per decoding step)."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutput

import srformer.models.cross_attention as cross_attention
from srformer.models import cross_attention_modules
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch

SETTINGS = dict(variant="srformer", segment_size=8, target_length=12)


def encoder_output(model, ids, mask) -> torch.Tensor:
    with torch.no_grad():
        return model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state


def run_decoder(model, hidden, mask, dec):
    with torch.no_grad():
        return model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                     decoder_input_ids=dec, use_cache=False).logits


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", ["real", "padding"])
def test_non_finite_encoder_output_is_rejected_naming_the_layer(family, bad, where):
    model = converted(BUILDERS[family](), **SETTINGS)
    ids, mask = padded_batch(model)  # real lengths 24, 17, 9
    dec = decoder_inputs(model, ids.shape[0], 6)
    hidden = encoder_output(model, ids, mask)
    position = 3 if where == "real" else 20  # example 2 is padding from position 9 on
    hidden[2, position, 5] = bad
    with pytest.raises(
        ValueError,
        match=r"SRformer cross attention of decoder layer 0: the encoder output holds 1 NaN/inf value\(s\) of "
        r"\d+.*encoder diverged or overflowed.*bf16 or float32 instead of fp16.*--mixed-precision",
    ):
        run_decoder(model, hidden, mask, dec)


def test_overflowing_key_value_projection_is_rejected(family):
    model = converted(BUILDERS[family](dtype=torch.float32), **SETTINGS)  # overflows float32's range
    ids, mask = padded_batch(model)
    hidden = encoder_output(model, ids, mask)
    hidden[0, 0] = torch.finfo(torch.float32).max / 4  # finite
    _, _, layer0 = cross_attention_modules(model)[0]
    with torch.no_grad():
        (layer0.k if family == "t5" else layer0.k_proj).weight.mul_(100.0)  # its projection overflows
    with pytest.raises(ValueError, match=r"decoder layer 0: the projected encoder keys/values overflowed to NaN/inf"):
        run_decoder(model, hidden, mask, decoder_inputs(model, ids.shape[0], 6))


def test_overflowing_recurrent_state_is_rejected_with_the_clamp_fix(family):
    model = converted(BUILDERS[family](dtype=torch.float32), **SETTINGS)  # overflows float32's range
    ids, mask = padded_batch(model)
    hidden = encoder_output(model, ids, mask) * 1e19  # keys/values ~1e19: finite; K^T V ~1e38+: overflows
    with pytest.raises(ValueError, match=r"decoder layer 0: the recurrent state .* overflowed to NaN/inf "
                                         r"\(RAF threshold 0\.001, leak 1\)\. Set SRformerConfig\(kv_clamp=2\.0\)"):
        run_decoder(model, hidden, mask, decoder_inputs(model, ids.shape[0], 6))


def test_raf_threshold_trained_to_zero_is_named(family):
    """The RAF threshold is a free parameter; training can drive it to zero (seen with threshold 1e-3
    and learning rate 1e-3 after three steps), and membrane / threshold is then infinite."""
    model = converted(BUILDERS[family](), **SETTINGS)
    _, _, layer1 = cross_attention_modules(model)[1]
    with torch.no_grad():
        layer1.srformer.raf.threshold.zero_()
    ids, mask = padded_batch(model)
    message = (
        r"SRformer cross attention of decoder layer 1: the recurrent state .* \(RAF threshold 0, leak 1\): "
        r"the learnable RAF threshold has been trained to zero or below.*Lower the learning rate"
    )
    with pytest.raises(ValueError, match=message), torch.no_grad():
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_inputs(model, ids.shape[0], 6))


def test_finite_inputs_pass_and_the_check_runs_once_per_sequence_and_layer(family, monkeypatch):
    calls = []
    original = cross_attention.check_finite_state

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(cross_attention, "check_finite_state", counting)
    model = converted(BUILDERS[family](), **SETTINGS)
    ids, mask = padded_batch(model)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, num_beams=2)
    assert out.shape[1] >= 9
    assert len(calls) == 2  # two decoder layers, one check each for the whole generate() call


def test_the_error_reports_the_raf_neuron_without_a_torch_warning_when_gradients_are_on(family):
    """The error path reads the RAF threshold and leak, parameters that require grad: during training (grad
    enabled) that must raise the ValueError alone, not also torch's requires_grad-to-scalar UserWarning."""
    model = converted(BUILDERS[family](), **SETTINGS).train()
    _, _, layer0 = cross_attention_modules(model)[0]
    with torch.no_grad():
        layer0.srformer.raf.threshold.zero_()
    ids, mask = padded_batch(model)
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # torch gives this warning once per process unless told otherwise
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            message = r"decoder layer 0: the recurrent state .* \(RAF threshold 0, leak 1\)"
            with pytest.raises(ValueError, match=message):
                model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_inputs(model, ids.shape[0], 6))
    finally:
        torch.set_warn_always(warn_always)
    assert not [str(w.message) for w in caught if "requires_grad" in str(w.message)]


@pytest.mark.parametrize("variant", ["srformer", "knn"])
def test_a_deferred_check_raises_the_same_error_at_the_next_step(family, variant, monkeypatch):
    """On an accelerator the check's flag reaches the host without a sync and is read at the layer's next step
    (cross_attention.finite_check_mode); forced here on the CPU: generating one token does not check, a second
    step raises the error the immediate check gives."""
    monkeypatch.setattr(cross_attention, "FINITE_CHECK_OVERRIDE", "deferred")
    model = converted(BUILDERS[family](), **{**SETTINGS, "variant": variant})
    ids, mask = padded_batch(model)
    hidden = encoder_output(model, ids, mask)
    hidden[1, 3, 5] = float("nan")

    def generate(tokens: int):
        with torch.no_grad():
            return model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=hidden.clone()),
                                  attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens)

    assert generate(1).shape[1] == 2  # the documented gap: one token is not checked
    with pytest.raises(ValueError, match=r"decoder layer 0: the encoder output holds 1 NaN/inf value"):
        generate(3)
    hidden[1, 3, 5] = 0.0
    assert generate(3).shape[1] == 4  # finite: no error at any step


def test_the_check_is_deferred_on_accelerators_only():
    assert cross_attention.finite_check_mode(torch.device("cpu")) == "now"
    assert cross_attention.finite_check_mode(torch.device("cuda")) == "deferred"
    assert cross_attention.finite_check_mode(torch.device("meta")) == "deferred"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_the_state_check_finds_one_bad_element_in_any_field_in_four_calls(bad, dtype, each_step):
    """The build's check (``_all_finite``), on either device's route: one NaN or infinite element in any of several
    fields of mixed dtypes makes it false, every finite set true (values near float32's largest too), and on an
    accelerator it makes the same four operator calls for two fields or five."""
    from srformer.benchmarks.operator_count import count_calls

    fields = [torch.randn(3, 4), torch.randn(7).bfloat16(), torch.randn(2, 2, dtype=torch.float64),
              torch.full((5,), 3e38), torch.randn(6).to(dtype)]
    assert bool(cross_attention._all_finite(fields))
    for index in range(len(fields)):
        spoiled = [field.clone() for field in fields]
        spoiled[index].view(-1)[-1] = bad
        assert not bool(cross_attention._all_finite(spoiled)), index
    if each_step == "accelerator":
        _, two = count_calls(lambda: cross_attention._all_finite(fields[:2]))
        _, five = count_calls(lambda: cross_attention._all_finite(fields))
        assert sum(two.values()) == sum(five.values()) == 4
