"""A generation state built block by block (streamed) equals the one built from every key at once (float64), and
generation with it is unchanged; mechanisms whose state holds the keys build it as before."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import srformer.models.cross_attention as cross_attention
from srformer.attention.variants import build_cross_attention
from srformer.config import NAMED_SETTINGS, named_config
from srformer.core import REGISTRY, keeps_own_attention
from tests.attention.test_srformer import _incremental, _inputs, _rows_of
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config
from tests.tolerance import assert_exact, float32_tolerance

#: Named settings with a streamed build: the lean layouts of segmented and the srformer family, and linear.
STREAMED = [name for name, s in NAMED_SETTINGS.items() if s["variant"] in ("segmented", "srformer", "linear")]


def _module(name: str, lean: bool):
    torch.manual_seed(0)
    config = named_config(name, segment_size=3, target_length=8, raf_linear_init_scale=1.0, raf_threshold_init=1e-2,
                          lean_cache=lean and name != "linear")
    return build_cross_attention(config, 4, 0.5).double().eval()


def _blocks(keys, values):
    return lambda start, end: (keys[:, :, start:end], values[:, :, start:end])


def _assert_same_state(streamed, whole, what):
    assert type(streamed) is type(whole), what
    for field in dataclasses.fields(whole):
        a, b = getattr(streamed, field.name), getattr(whole, field.name)
        if isinstance(b, torch.Tensor) and b.is_floating_point():
            assert_exact(a, b, f"{what}: {field.name}")
        elif isinstance(b, torch.Tensor):
            assert torch.equal(a, b), f"{what}: {field.name}"


@pytest.mark.parametrize("block", [1, 4, 7, 64])
@pytest.mark.parametrize("name", STREAMED)
def test_the_streamed_state_equals_the_state_of_all_keys(name, block):
    module = _module(name, lean=True)
    queries, keys, values, valid = _inputs(3, 2, 11, 10, 4, [11, 6, 1])
    streamed = module.streamed_state(_blocks(keys, values), 11, valid, block)
    whole = module.init_state(keys, values, valid) if name == "linear" else module.init_lean_state(keys, values, valid)
    _assert_same_state(streamed, whole, f"{name}, blocks of {block}")
    rows = None if name == "linear" else _rows_of(keys, values)
    assert_exact(_incremental(module, queries, streamed, rows)[0], _incremental(module, queries, whole, rows)[0], name)


def test_an_all_padded_batch_streams_to_the_empty_state():
    module = _module("srformer", lean=True)
    _, keys, values, _ = _inputs(2, 2, 6, 1, 4, [6, 6])
    valid = torch.zeros(2, 6, dtype=torch.bool)
    streamed = module.streamed_state(_blocks(keys, values), 6, valid, 4)
    _assert_same_state(streamed, module.init_lean_state(keys, values, valid), "all padded")


@pytest.mark.parametrize("name", [n for n in REGISTRY if not keeps_own_attention(n) and n not in ("linear",)])
def test_a_state_that_holds_keys_is_not_streamed(name):
    module = _module(name, lean=False)
    _, keys, values, valid = _inputs(1, 2, 6, 1, 4, [6])
    assert module.streamed_state(_blocks(keys, values), 6, valid, 4) is None


@pytest.mark.parametrize("variant,lean", [("srformer", True), ("segmented", True), ("linear", False)])
def test_generation_with_a_streamed_state_is_unchanged(family, variant, lean, monkeypatch):
    base = BUILDERS[family]()
    ids, mask = padded_batch(base, lengths=(24, 17, 9))
    torch.manual_seed(3)
    model = converted(base, variant=variant, segment_size=4, target_length=12, lean_cache=lean)
    config = plain_generation_config(model, max_new_tokens=6, min_new_tokens=6, num_beams=2,
                                     output_scores=True, return_dict_in_generate=True)
    monkeypatch.setattr(cross_attention, "STREAM_BLOCK", 5)
    with torch.no_grad():
        streamed = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        for layer in streamed.past_key_values.cross_attention_cache.layers:
            assert layer.state.is_lean
        monkeypatch.setattr(type(next(m for m in model.modules() if hasattr(m, "configured"))), "streamed_state",
                            lambda *args, **kwargs: None)
        whole = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(streamed.sequences, whole.sequences)
    # generate() returns its scores in float32: the float64 scores of both runs (equal to rounding) round to float32
    # numbers at most one float32 rounding apart
    tolerance = float32_tolerance(whole.sequences_scores, terms=2)
    assert (streamed.sequences_scores - whole.sequences_scores).abs().max() <= tolerance
