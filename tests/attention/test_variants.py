"""Tensor-level tests of every named variant (baselines, ablations, Eq. 10 mix) against its float64
per-query reference written from the equations (:mod:`srformer.attention.naive`, through the registry),
plus parallel == incremental, padding invariance, lean layout and state reordering."""

from __future__ import annotations

import pytest
import torch

from srformer.attention.state import SRformerCacheLayer
from srformer.attention.variants import build_cross_attention
from srformer.config import LEAN_VARIANTS, named_config
from srformer.core import mechanism
from tests.attention.test_srformer import _incremental, _inputs, _rows_of
from tests.registry_cases import at_test_size, named_settings
from tests.tolerance import assert_exact, exact_tolerance, float32_tolerance

NAMES = named_settings()


def _module(name, segment_size=3, target_length=8, head_dim=4, scale=1.0, **kw):
    torch.manual_seed(0)
    kw.setdefault("raf_linear_init_scale", 1.0)
    kw.setdefault("raf_threshold_init", 1e-2)
    config = named_config(name, segment_size=segment_size, target_length=target_length, **{**at_test_size(name), **kw})
    # float64: exactness (tests/tolerance.py); eval: routing's centroids stay fixed (their update: test_content.py)
    return build_cross_attention(config, head_dim, scale).double().eval()


def _reference(module, queries, keys, values, valid, start_position=0):
    """The variant's float64 per-query reference (srformer.attention.naive, found through the registry),
    with the module's own settings, scale and learned tensors."""
    entry = mechanism(module.settings.variant)
    return entry.reference(
        queries, keys, values, valid, module.settings, scale=module.scale, parameters=module.state_dict(),
        start_position=start_position,
    )


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,target_length", [(3, 8), (2, 4), (20, 8)])
@pytest.mark.parametrize("name", NAMES)
def test_parallel_incremental_lean_and_padding_match_the_reference(name, segment_size, target_length):
    """(2, 4) has more segments than steps (skipped segments); (20, 8) is one segment per example."""
    module = _module(name, segment_size, target_length, scale=0.5)
    lengths = [11, 6, 1]
    queries, keys, values, valid = _inputs(3, 2, 11, 10, 4, lengths)
    state = module.init_state(keys, values, valid)
    parallel, final = module(queries, state)
    tol = exact_tolerance(parallel)
    assert (parallel - _reference(module, queries, keys, values, valid)).abs().max().item() <= tol
    later, _ = module(queries[:, :, 4:], state, start_position=4)  # positions 4.. (a chunk after a prefix)
    assert (later - _reference(module, queries[:, :, 4:], keys, values, valid, start_position=4)).abs().max() <= tol
    incremental, final_incremental = _incremental(module, queries, state)
    assert (parallel - incremental).abs().max().item() <= tol
    assert torch.equal(final.last_segment, final_incremental.last_segment)
    if module.settings.variant in LEAN_VARIANTS:
        lean, _ = _incremental(module, queries, module.lean(state), _rows_of(keys, values))
        assert (parallel - lean).abs().max().item() <= tol
    left = torch.stack([torch.roll(valid[b], 11 - n) for b, n in enumerate(lengths)])  # left padding
    left_keys = torch.stack([torch.roll(keys[b], 11 - n, dims=1) for b, n in enumerate(lengths)])
    left_values = torch.stack([torch.roll(values[b], 11 - n, dims=1) for b, n in enumerate(lengths)])
    left_output, _ = module(queries, module.init_state(left_keys, left_values, left))
    assert (parallel - left_output).abs().max().item() <= tol
    assert (left_output - _reference(module, queries, left_keys, left_values, left)).abs().max().item() <= tol


def test_xl_memory_segment_gets_no_gradient_and_the_current_one_does():
    module = _module("xl", segment_size=2, target_length=4)
    queries, keys, values, _ = _inputs(1, 1, 4, 4, 4, [4])
    keys.requires_grad_(True)
    values.requires_grad_(True)
    output, _ = module(queries[:, :, 3:4], module.init_state(keys, values, None), start_position=3)  # segment 1
    output.sum().backward()
    assert keys.grad[0, 0, :2].abs().sum() == 0 and values.grad[0, 0, :2].abs().sum() == 0  # memory: segment 0
    assert keys.grad[0, 0, 2:].abs().sum() > 0 and values.grad[0, 0, 2:].abs().sum() > 0
    with torch.no_grad():  # the no-gradient path (one copy of the keys) gives the same output
        again, _ = module(queries[:, :, 3:4], module.init_state(keys, values, None), start_position=3)
    assert_exact(again, output, "no-gradient path")


def test_longt5_global_tokens_carry_gradient_to_every_segment():
    module = _module("longt5", segment_size=2, target_length=4)
    queries, keys, values, _ = _inputs(1, 1, 6, 1, 4, [6])
    keys.requires_grad_(True)
    module(queries, module.init_state(keys, values, None))[0].sum().backward()
    assert (keys.grad[0, 0].abs().sum(-1) > 0).all()


def test_ablation_parameters_follow_the_ablation():
    assert _module("ablation-III").raf is None  # no RAF, no W
    assert _module("srformer").raf is not None and _module("srformer").mix_logit is None
    sigma = _module("srformer-sigma", mix_init=0.25).mix_logit
    assert abs(torch.sigmoid(sigma).item() - 0.25) <= float32_tolerance(0.25, terms=1)  # the logit is stored in float32
    for name in ("segmented", "xl", "longt5", "linear"):
        assert not list(_module(name).parameters()), name


@pytest.mark.parametrize("name", NAMES)
def test_cache_layer_reorders_every_state_tensor(name):
    module = _module(name, segment_size=2, target_length=6)
    queries, keys, values, valid = _inputs(3, 2, 7, 3, 4, [7, 4, 2])
    state = module.init_state(keys, values, valid)
    _, state = _incremental(module, queries, state)
    states = [state] + ([module.lean(state)] if module.settings.variant in LEAN_VARIANTS else [])
    perm = torch.tensor([2, 0, 1])
    for original in states:
        layer = SRformerCacheLayer(original, (2, 7, 4), keys.dtype)
        layer.reorder_cache(perm)
        held = {f: v for f, v in vars(original).items() if isinstance(v, torch.Tensor)}
        assert len(held) >= 4
        for field, tensor in held.items():
            assert torch.equal(getattr(layer.state, field), tensor[perm]), field
        swapped, _ = module.step(
            queries[perm][:, :, 2:3], layer.state, position=2, project_rows=_rows_of(keys[perm], values[perm])
        )
        straight, _ = module.step(queries[:, :, 2:3], original, position=2, project_rows=_rows_of(keys, values))
        assert_exact(swapped, straight[perm], "reordered step")


def test_bad_variant_settings_name_the_argument():
    with pytest.raises(ValueError, match="ablation"):
        named_config("srformer", ablation="no_such_thing")
    with pytest.raises(ValueError, match="variant='srformer'"):
        named_config("xl", ablation="no_norm")
    with pytest.raises(ValueError, match="mix_init"):
        named_config("srformer", mix_init=1.5)
    with pytest.raises(ValueError, match="recurrent_only"):
        named_config("ablation-I", mix_init=0.5)
    with pytest.raises(ValueError, match="lean_cache"):
        named_config("longt5", lean_cache=True)
    with pytest.raises(ValueError, match="Unknown variant name"):
        named_config("no-such-variant")


@pytest.mark.parametrize("name", ["srformer", "ablation-III", "ablation-IV"])
def test_clamped_products_match_the_reference(name):
    """``kv_clamp`` (Appendix A.3's clamp of K^T V and every K_j^T V_j, before W) on the parallel path."""
    module = _module(name, segment_size=2, target_length=6, kv_clamp=0.5)
    queries, keys, values, valid = _inputs(2, 2, 9, 7, 4, [9, 5])
    output, _ = module(queries, module.init_state(keys, values, valid))
    assert_exact(output, _reference(module, queries, keys, values, valid), "clamped")
    unclamped = _module(name, segment_size=2, target_length=6)
    assert (output - unclamped(queries, unclamped.init_state(keys, values, valid))[0]).abs().max() > 1e-3


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,window_size", [(3, 3), (3, 4), (3, 5), (3, 8), (2, 7), (4, 4), (4, 9)])
def test_window_of_any_size_matches_the_reference_in_both_paths_and_paddings(segment_size, window_size):
    """Windows that do not cover whole segments (per-position masks inside the edge blocks), even and odd."""
    module = _module("window", segment_size, 6, scale=0.5, window_size=window_size)
    lengths = [11, 6, 1, 0]
    queries, keys, values, valid = _inputs(4, 2, 11, 9, 4, lengths)
    parallel, _ = module(queries, module.init_state(keys, values, valid))
    tol = exact_tolerance(parallel)
    assert (parallel - _reference(module, queries, keys, values, valid)).abs().max().item() <= tol
    incremental, _ = _incremental(module, queries, module.init_state(keys, values, valid))
    assert (parallel - incremental).abs().max().item() <= tol
    left = torch.stack([torch.roll(valid[b], 11 - n) for b, n in enumerate(lengths)])
    left_keys = torch.stack([torch.roll(keys[b], 11 - n, dims=1) for b, n in enumerate(lengths)])
    left_values = torch.stack([torch.roll(values[b], 11 - n, dims=1) for b, n in enumerate(lengths)])
    left_output, _ = module(queries, module.init_state(left_keys, left_values, left))
    assert (left_output - parallel).abs().max().item() <= tol


def test_window_of_one_segment_is_segmented_attention():
    queries, keys, values, valid = _inputs(2, 2, 10, 8, 4, [10, 7])
    window = _module("window", 3, 6, window_size=3)
    segmented = _module("segmented", 3, 6)
    expected, _ = segmented(queries, segmented.init_state(keys, values, valid))
    assert_exact(window(queries, window.init_state(keys, values, valid))[0], expected, "w = s")


def test_window_blocks_by_hand():
    from srformer.attention.window import window_blocks

    # s = 3, w = 5: start = 3i + 1 - 2 = 3i - 1, so positions 3i - 1 .. 3i + 3
    assert window_blocks(3, 5) == [(-1, [False, False, True]), (0, [True, True, True]), (1, [True, False, False])]
    assert window_blocks(4, 12) == [(-1, [True] * 4), (0, [True] * 4), (1, [True] * 4)]  # the default 3s
    assert window_blocks(4, 4) == [(0, [True] * 4)]


def test_window_size_is_checked_and_saved():
    with pytest.raises(ValueError, match="window_size"):
        named_config("window", segment_size=4, window_size=3)  # smaller than a segment
    with pytest.raises(ValueError, match="window_size"):
        named_config("segmented", window_size=8)  # another variant
    with pytest.raises(ValueError, match="window_size"):
        named_config("window", window_size=7.5)
    config = named_config("window", segment_size=4, window_size=9)
    assert config.resolved_window_size() == 9 and named_config("window", segment_size=4).resolved_window_size() == 12
    assert type(config).from_dict(config.to_dict()) == config


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,stride", [(3, 2), (3, 5), (2, 7), (4, 4), (1, 3), (4, 2)])
def test_strided_of_any_stride_matches_the_reference_in_both_paths_and_paddings(segment_size, stride):
    """Strides below, equal to and above the segment size (strided positions inside the scheduled segment
    are attended once)."""
    module = _module("strided", segment_size, 6, scale=0.5, stride=stride)
    lengths = [11, 6, 1, 0]
    queries, keys, values, valid = _inputs(4, 2, 11, 9, 4, lengths)
    parallel, _ = module(queries, module.init_state(keys, values, valid))
    tol = exact_tolerance(parallel)
    assert (parallel - _reference(module, queries, keys, values, valid)).abs().max().item() <= tol
    incremental, _ = _incremental(module, queries, module.init_state(keys, values, valid))
    assert (parallel - incremental).abs().max().item() <= tol
    left = torch.stack([torch.roll(valid[b], 11 - n) for b, n in enumerate(lengths)])
    left_keys = torch.stack([torch.roll(keys[b], 11 - n, dims=1) for b, n in enumerate(lengths)])
    left_values = torch.stack([torch.roll(values[b], 11 - n, dims=1) for b, n in enumerate(lengths)])
    left_output, _ = module(queries, module.init_state(left_keys, left_values, left))
    assert (left_output - parallel).abs().max().item() <= tol


def test_strided_keys_carry_gradient_to_every_strided_position_only():
    module = _module("strided", 2, 8, stride=3)
    queries, keys, values, _ = _inputs(1, 1, 9, 1, 4, [9])
    keys.requires_grad_(True)
    module(queries, module.init_state(keys, values, None))[0].sum().backward()  # t = 0: segment 0
    touched = keys.grad[0, 0].abs().sum(-1) > 0
    assert touched.tolist() == [True, True, True, False, False, True, False, False, True]  # 0, 1 and 2, 5, 8


def test_stride_is_checked_and_saved():
    with pytest.raises(ValueError, match="stride"):
        named_config("strided", stride=1)
    with pytest.raises(ValueError, match="stride"):
        named_config("strided", segment_size=1)  # the default stride would be 1
    with pytest.raises(ValueError, match="stride"):
        named_config("window", stride=4)
    config = named_config("strided", segment_size=4, stride=6)
    assert config.resolved_stride() == 6 and named_config("strided", segment_size=4).resolved_stride() == 4
    assert type(config).from_dict(config.to_dict()) == config


def test_star_relay_carries_gradient_to_every_real_position():
    module = _module("star", 2, 8)
    queries, keys, values, valid = _inputs(2, 1, 7, 1, 4, [7, 4])
    values.requires_grad_(True)
    module(queries, module.init_state(keys, values, valid))[0].sum().backward()
    assert (values.grad[0, 0].abs().sum(-1) > 0).all()  # every position through the relay
    assert (values.grad[1, 0, :4].abs().sum(-1) > 0).all() and (values.grad[1, 0, 4:] == 0).all()  # not padding


def test_fastformer_with_a_learned_key_weight_matches_the_reference_and_trains_it():
    module = _module("fastformer")
    with torch.no_grad():
        module.key_weight.copy_(torch.tensor([1.5, -2.0, 0.5, 3.0], dtype=torch.float64))
    lengths = [11, 6, 1, 0]
    queries, keys, values, valid = _inputs(4, 2, 11, 5, 4, lengths)
    parallel, _ = module(queries, module.init_state(keys, values, valid))
    assert_exact(parallel, _reference(module, queries, keys, values, valid), "learned w_k")
    incremental, _ = _incremental(module, queries, module.init_state(keys, values, valid))
    assert_exact(incremental, parallel, "incremental")
    keys.requires_grad_(True)
    module(queries, module.init_state(keys, values, valid))[0].sum().backward()
    assert torch.isfinite(module.key_weight.grad).all() and module.key_weight.grad.abs().sum() > 0
    assert torch.isfinite(keys.grad).all() and (keys.grad[3] == 0).all()  # the empty row: finite, no gradient
