"""Mechanism-specific tests of ``srformer-gated`` (srformer.attention.srformer_gated): the reduction to segmented
attention with one segment, the stabiliser at large scores, the feature maps and their initialisation, the
settings' checks, the empty document and gradients. The generic matrices (float64 reference, parallel ==
incremental, left padding, a later chunk, beams, models, save/load, bf16) cover it through the registry."""

from __future__ import annotations

import math

import pytest
import torch

from srformer.attention.naive import gated_attention
from srformer.attention.srformer_gated import (
    GatedState,
    other_segments,
    taylor_features,
    taylor_projection_init,
)
from srformer.attention.variants import build_cross_attention
from srformer.config import SRformerConfig
from srformer.core import mechanism
from tests.attention.test_srformer import _incremental, _inputs
from tests.tolerance import assert_exact

FEATURE_MAPS = [{"feature_map": "elu"}, {"feature_map": "taylor"}, {"feature_map": "taylor", "feature_dim": 3}]


def _module(segment_size=3, target_length=8, head_dim=4, scale=0.5, **settings):
    torch.manual_seed(0)
    config = SRformerConfig(
        variant="srformer-gated", segment_size=segment_size, target_length=target_length, **settings
    )
    return build_cross_attention(config, head_dim, scale).double()


def _reference(module, queries, keys, values, valid, start_position=0):
    return gated_attention(
        queries, keys, values, valid, module.settings, scale=module.scale, parameters=module.state_dict(),
        start_position=start_position,
    )


@pytest.mark.parametrize("settings", FEATURE_MAPS, ids=["elu", "taylor", "taylor-3"])
def test_one_segment_is_segmented_attention(settings):
    """s >= k: no other segment, so the memory is empty and the output is ``segmented``'s, in both paths."""
    lengths = [7, 4, 1]
    queries, keys, values, valid = _inputs(3, 2, 7, 6, 4, lengths)
    module = _module(segment_size=8, **settings)
    segmented = build_cross_attention(SRformerConfig(variant="segmented", segment_size=8, target_length=8), 4, 0.5)
    state = module.init_state(keys, values, valid)
    assert not state.memory_kv.any() and not state.memory_key_sum.any()
    expected, _ = segmented(queries, segmented.init_state(keys, values, valid))
    assert_exact(module(queries, state)[0], expected, "parallel")
    assert_exact(_incremental(module, queries, state)[0], expected, "incremental")


@pytest.mark.parametrize("settings", FEATURE_MAPS, ids=["elu", "taylor", "taylor-3"])
def test_large_scores_keep_the_memory_and_match_the_reference(settings):
    """Scores of several hundred, either sign: no overflow, and where the segment's scores are very negative the
    memory (its own scale) takes the weight, as the float64 reference says."""
    queries, keys, values, valid = _inputs(2, 2, 9, 8, 4, [9, 7])
    module = _module(**settings)
    for factor in (60.0, -60.0):
        loud = queries * factor
        state = module.init_state(keys * 10, values, valid)
        output, _ = module(loud, state)
        assert torch.isfinite(output).all()
        assert_exact(output, _reference(module, loud, keys * 10, values, valid), f"x{factor} parallel")
        assert_exact(_incremental(module, loud, state)[0], output, f"x{factor} incremental")


def test_the_output_is_a_convex_mix_of_the_values():
    """Every weight is positive and the normaliser is shared: constant values give that constant back."""
    queries, keys, _, valid = _inputs(2, 2, 10, 8, 4, [10, 5])
    values = torch.full_like(keys, 3.0)
    for settings in FEATURE_MAPS:
        module = _module(**settings)
        output, _ = module(queries, module.init_state(keys, values, valid))
        assert_exact(output, torch.full_like(output, 3.0), str(settings))


def test_the_memory_reads_every_other_segment_and_only_those():
    """A query of segment i: its keys in segment i get the softmax's gradient, every real key elsewhere the
    memory's; padding none."""
    queries, keys, values, valid = _inputs(1, 1, 10, 1, 4, [8])
    keys.requires_grad_(True)
    module = _module(segment_size=3, target_length=8)
    output, _ = module(queries, module.init_state(keys, values, valid))
    output.sum().backward()
    assert keys.grad is not None
    reached = keys.grad[0, 0].abs().sum(-1) > 0
    assert reached.tolist() == [True] * 8 + [False] * 2


def test_other_segments_is_the_total_minus_each_block():
    blocks = torch.rand(2, 5, 3, dtype=torch.float64)
    assert_exact(other_segments(blocks), blocks.sum(1, keepdim=True) - blocks, "five segments")
    assert torch.equal(other_segments(blocks[:, :1]), torch.zeros_like(blocks[:, :1]))


def test_taylor_features_give_the_second_order_expansion_of_exp():
    """phi(x) . phi(y) = 1 + a + a^2 / 2 with a = x . y / sqrt(D') (Arora et al. 2024)."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 5, generator=g, dtype=torch.float64)
    a = (x @ y) / math.sqrt(5)
    assert taylor_features(x).shape == (1 + 5 + 25,)
    assert_exact(taylor_features(x) @ taylor_features(y), 1 + a + a * a / 2, "kernel")


@pytest.mark.parametrize("feature_dim,head_dim", [(3, 4), (4, 4), (6, 4)])
def test_taylor_projection_starts_as_the_softmax_scores_on_the_first_coordinates(feature_dim, head_dim):
    """At initialisation the Taylor kernel's ``a`` is ``scale * q . k`` over the first min(D', d) coordinates."""
    module = _module(head_dim=head_dim, scale=0.5, feature_map="taylor", feature_dim=feature_dim)
    assert module.projection is not None
    assert torch.equal(module.projection.detach(), taylor_projection_init(feature_dim, head_dim, 0.5).double())
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, head_dim, generator=g, dtype=torch.float64)
    used = min(feature_dim, head_dim)
    a = 0.5 * (q[:used] @ k[:used])
    # the projection is initialised in float32 (as every parameter), so the kernel agrees to float32 rounding
    torch.testing.assert_close(module.features(q) @ module.features(k), 1 + a + a * a / 2, rtol=1e-6, atol=0.0)


def test_elu_has_no_parameters_and_taylor_trains_its_projection():
    assert not list(_module().parameters())
    module = _module(feature_map="taylor", feature_dim=3)
    queries, keys, values, valid = _inputs(2, 2, 9, 5, 4, [9, 6])
    output, _ = module(queries, module.init_state(keys, values, valid))
    output.square().sum().backward()
    assert module.projection is not None and module.projection.grad is not None
    assert torch.isfinite(module.projection.grad).all() and module.projection.grad.abs().max() > 0


def test_state_sizes_follow_the_feature_map():
    queries, keys, values, valid = _inputs(2, 2, 10, 1, 4, [10, 4])
    taylor = {"feature_map": "taylor"}
    sizes = [({}, 4), (taylor, 1 + 16 + 256), ({**taylor, "feature_dim": 40}, 1 + 40 + 1600)]
    for settings, size in sizes:
        state = _module(**settings).init_state(keys, values, valid)
        assert isinstance(state, GatedState)
        assert state.memory_kv.shape == (2, 4, 2, size, 4) and state.memory_key_sum.shape == (2, 4, 2, size)


def test_an_empty_document_gives_zero():
    """An all-masked row: output 0 in both paths; the other example is unaffected."""
    queries, keys, values, valid = _inputs(2, 2, 7, 5, 4, [7, 0])
    for settings in FEATURE_MAPS:
        module = _module(**settings)
        state = module.init_state(keys, values, valid)
        output, _ = module(queries, state)
        assert torch.equal(output[1], torch.zeros_like(output[1]))
        assert torch.equal(_incremental(module, queries, state)[0][1], torch.zeros_like(output[1]))
        assert_exact(output[:1], _reference(module, queries[:1], keys[:1], values[:1], valid[:1]), str(settings))


def test_bf16_stays_finite():
    queries, keys, values, valid = _inputs(2, 2, 10, 6, 4, [10, 3])
    for settings in FEATURE_MAPS:
        module = _module(**settings).to(torch.bfloat16)
        state = module.init_state(keys.bfloat16(), values.bfloat16(), valid)
        output, _ = module(queries.bfloat16() * 30, state)
        step, _ = _incremental(module, queries.bfloat16() * 30, state)
        assert output.dtype == torch.bfloat16 and torch.isfinite(output).all() and torch.isfinite(step).all()


@pytest.mark.parametrize(
    "settings,named",
    [
        ({"feature_dim": 0, "feature_map": "taylor"}, "feature_dim"),
        ({"feature_dim": -2, "feature_map": "taylor"}, "feature_dim"),
        ({"feature_map": "relu"}, "feature_map"),
        ({"feature_dim": 8}, "feature_dim"),  # the elu map has no projection
    ],
)
def test_bad_settings_name_the_setting(settings, named):
    with pytest.raises(ValueError, match=named):
        SRformerConfig(variant="srformer-gated", **settings)


def test_settings_round_trip_and_the_reference_checks_its_parameters():
    config = SRformerConfig(variant="srformer-gated", feature_map="taylor", feature_dim=5)
    assert config.settings.to_dict() == {"feature_map": "taylor", "feature_dim": 5}
    assert config.resolved_feature_dim() == 5
    assert SRformerConfig(variant="srformer-gated").resolved_feature_map() == "elu"
    queries, keys, values, valid = _inputs(1, 1, 4, 1, 4, [4])
    with pytest.raises(ValueError, match="projection"):
        mechanism("srformer-gated").reference(queries, keys, values, valid, config)
    with pytest.raises(ValueError, match="projection"):
        gated_attention(queries, keys, values, valid, SRformerConfig(variant="srformer-gated"),
                        parameters={"projection": torch.zeros(2, 4)})
