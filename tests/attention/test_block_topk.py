"""The ``block-topk`` variant: segment ``i(t)`` and the ``r`` other segments of largest ``q . mean(K_j)``, chosen per
query and head (MoBA's top-k block gate), in one softmax. Float64 against its reference and its reductions (full
attention, ``segmented``), its tie rule, its gradient, its settings and its attention weights."""

from __future__ import annotations

import pytest
import torch

from srformer.attention import naive
from srformer.attention.block_topk import BlockTopkState
from srformer.attention.variants import build_cross_attention
from srformer.config import SRformerConfig, named_config
from tests.attention.test_srformer import _incremental, _inputs
from tests.attention.test_variants import _module, _reference
from tests.tolerance import assert_exact

LENGTHS = [13, 8, 5, 1, 0]  # s = 2: 7, 4, 3 and 1 segments, and an empty document


def _left_padded(keys, values, valid, lengths):
    k = valid.shape[1]
    roll = [k - n for n in lengths]
    return (
        torch.stack([torch.roll(keys[b], r, dims=1) for b, r in enumerate(roll)]),
        torch.stack([torch.roll(values[b], r, dims=1) for b, r in enumerate(roll)]),
        torch.stack([torch.roll(valid[b], r) for b, r in enumerate(roll)]),
    )


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,top,block", [(2, 1, None), (2, 2, None), (3, 1, None), (1, 4, None),
                                                    (2, 6, None), (20, 1, None), (4, 3, None), (4, 2, 2), (4, 3, 1),
                                                    (6, 1, 3), (6, 4, 2), (20, 2, 5), (6, 2, 4), (5, 3, 2),
                                                    (3, 2, 8)])
def test_matches_the_reference_in_both_paths_paddings_and_a_later_chunk(segment_size, top, block):
    """Selections of 1 .. m - 1 segments, more segments than steps (s = 1: m = 13 > T = 6), one segment (s = 20);
    selection blocks smaller than a segment (the last segment's last block short or empty), blocks that do not
    divide the segment (each segment's last block shorter), a block larger than the segment (one per segment)."""
    module = _module("block-topk", segment_size, 6, scale=0.5, top_segments=top, block_size=block)
    check_against_the_reference(module, *_inputs(5, 3, 13, 9, 4, LENGTHS), LENGTHS)


def check_against_the_reference(module, queries, keys, values, valid, lengths) -> None:
    """The module against its float64 reference in the parallel path and a later chunk (from position 4),
    incremental == parallel, left padding == right padding, and an empty last document's output 0."""
    state = module.init_state(keys, values, valid)
    parallel, final = module(queries, state)
    assert_exact(parallel, _reference(module, queries, keys, values, valid), "parallel")
    later, _ = module(queries[:, :, 4:], state, start_position=4)
    assert_exact(later, _reference(module, queries[:, :, 4:], keys, values, valid, start_position=4), "later chunk")
    incremental, final_incremental = _incremental(module, queries, state)
    assert_exact(incremental, parallel, "incremental")
    assert torch.equal(final.last_segment, final_incremental.last_segment)
    left_keys, left_values, left = _left_padded(keys, values, valid, lengths)
    assert_exact(module(queries, module.init_state(left_keys, left_values, left))[0], parallel, "left padding")
    assert parallel[-1].abs().max() == 0  # the empty document: an empty memory


@pytest.mark.parametrize("top", [6, 7, 50])
def test_reading_m_minus_1_or_more_other_segments_is_full_attention(top):
    """r >= m - 1 for every example (m = 7 at most): each query reads every segment, one softmax over all keys."""
    module = _module("block-topk", 2, 8, scale=0.5, top_segments=top)
    queries, keys, values, valid = _inputs(5, 2, 13, 8, 4, LENGTHS)
    output, _ = module(queries, module.init_state(keys, values, valid))
    full = naive.full_attention(queries, keys, values, valid, SRformerConfig(variant="full"), scale=0.5)
    assert_exact(output, full, "module vs full")
    assert_exact(_reference(module, queries, keys, values, valid), full, "reference vs full")


def test_fewer_other_segments_than_m_minus_1_is_not_full_attention():
    """The reduction above is not vacuous: with r = 1 the longest example (m = 7) reads 2 of its 7 segments."""
    module = _module("block-topk", 2, 8, scale=0.5, top_segments=1)
    queries, keys, values, valid = _inputs(1, 2, 13, 8, 4, [13])
    output, _ = module(queries, module.init_state(keys, values, valid))
    full = naive.full_attention(queries, keys, values, valid, SRformerConfig(variant="full"), scale=0.5)
    assert (output - full).abs().max() > 1e-3


def test_one_segment_is_segmented_and_full_attention():
    queries, keys, values, valid = _inputs(3, 2, 10, 7, 4, [10, 6, 0])
    segmented = _module("segmented", 20, 6, scale=0.5)
    expected, _ = segmented(queries, segmented.init_state(keys, values, valid))
    for top in (1, 3):
        module = _module("block-topk", 20, 6, scale=0.5, top_segments=top)
        assert_exact(module(queries, module.init_state(keys, values, valid))[0], expected, f"r = {top}")
    full = naive.full_attention(queries, keys, values, valid, SRformerConfig(variant="full"), scale=0.5)
    assert_exact(expected, full, "one segment vs full")


def _tied_inputs(raise_last: float):
    """One head, s = 2, three segments: segments 1 and 2 hold the same keys (equal gates for every query) unless
    ``raise_last`` moves segment 2's keys towards the query; their values differ."""
    rows = [[0.3, -0.2], [0.1, 0.4], [1.0, 0.5], [-0.5, 0.2], [1.0, 0.5], [-0.5, 0.2]]
    keys = torch.tensor(rows, dtype=torch.float64)
    keys[4:] += raise_last
    values = torch.arange(12, dtype=torch.float64).view(6, 2)
    query = torch.tensor([0.7, 0.9], dtype=torch.float64)
    return query.view(1, 1, 1, 2), keys.view(1, 1, 6, 2), values.view(1, 1, 6, 2)


@pytest.mark.parametrize("raise_last,chosen", [(0.0, 1), (0.25, 2)])
def test_equal_gates_choose_the_lower_segment(raise_last, chosen):
    """t = 0 reads segment 0 and one other: with equal gates segment 1 (the lower index), else the larger gate."""
    module = _module("block-topk", 2, 8, head_dim=2, top_segments=1)
    queries, keys, values = _tied_inputs(raise_last)
    state = module.init_state(keys, values, None)
    blocks, valid = module.select_segments(queries, state, torch.zeros(1, 1, dtype=torch.long))
    assert blocks.tolist() == [[[[0, chosen]]]] and valid.all()
    read = [0, 1, 2 * chosen, 2 * chosen + 1]
    expected = torch.softmax(keys[0, 0, read] @ queries[0, 0, 0], dim=0) @ values[0, 0, read]
    assert_exact(module(queries, state)[0][0, 0, 0], expected, "tie")
    assert_exact(module.step(queries, state, position=0)[0][0, 0, 0], expected, "tie, step")
    assert_exact(_reference(module, queries, keys, values, None)[0, 0, 0], expected, "tie, reference")


def test_the_choice_is_per_head_and_does_not_depend_on_the_batch():
    module = _module("block-topk", 2, 8, scale=0.5, top_segments=2)
    queries, keys, values, valid = _inputs(4, 4, 13, 9, 4, LENGTHS[:4], seed=3)
    state = module.init_state(keys, values, valid)
    segments = torch.zeros(4, 9, dtype=torch.long)
    blocks, _ = module.select_segments(queries, state, segments)
    assert (blocks[0, 0] != blocks[0, 1]).any()  # two heads of one query read different segments
    together, _ = module(queries, state)
    for b, n in enumerate(LENGTHS[:4]):  # each example alone, without padding: the same output
        alone, _ = module(queries[b : b + 1], module.init_state(keys[b : b + 1, :, :n], values[b : b + 1, :, :n], None))
        assert_exact(together[b : b + 1], alone, f"example {b}")


def test_gradient_reaches_the_selected_segments_only():
    """A hard top-r: the keys and values of the segments not chosen get no gradient, the chosen ones do."""
    module = _module("block-topk", 2, 8, top_segments=2)
    queries, keys, values, _ = _inputs(1, 1, 12, 1, 4, [12], seed=1)
    keys.requires_grad_(True)
    values.requires_grad_(True)
    state = module.init_state(keys, values, None)
    blocks, _ = module.select_segments(queries, state, torch.zeros(1, 1, dtype=torch.long))  # t = 0: segment 0
    module(queries, state)[0].sum().backward()
    read = {2 * j + u for j in blocks.flatten().tolist() for u in (0, 1)}
    assert len(read) == 6
    for grad in (keys.grad, values.grad):
        assert ((grad[0, 0].abs().sum(-1) > 0).tolist()) == [p in read for p in range(12)]
    assert isinstance(state, BlockTopkState) and not state.mean_keys.requires_grad


def test_bf16_output_is_finite_and_in_the_queries_dtype():
    module = build_cross_attention(named_config("block-topk", segment_size=2, target_length=8, top_segments=2), 4, 0.5)
    queries, keys, values, valid = (t.to(torch.bfloat16) if t.is_floating_point() else t
                                    for t in _inputs(5, 2, 13, 9, 4, LENGTHS))
    parallel, state = module(queries, module.init_state(keys, values, valid))
    step, _ = module.step(queries[:, :, :1], state, position=0)
    assert parallel.dtype == step.dtype == torch.bfloat16
    assert torch.isfinite(parallel).all() and torch.isfinite(step).all()


def test_attention_weights_are_the_distribution_the_output_is_computed_with():
    """``A V`` (values in encoder order) equals the output; rows sum to 1, zero at padding and for the empty row."""
    module = _module("block-topk", 2, 8, scale=0.5, top_segments=2)
    queries, keys, values, valid = _inputs(5, 2, 13, 9, 4, LENGTHS)
    keys, values, valid = _left_padded(keys, values, valid, LENGTHS)
    state = module.init_state(keys, values, valid)
    output, _ = module(queries[:, :, 3:], state, start_position=3)
    weights = module.attention_weights(queries[:, :, 3:], keys, state, valid, start_position=3)
    assert_exact(torch.matmul(weights, values), output, "A V")
    assert torch.equal(weights * ~valid[:, None, None, :], torch.zeros_like(weights))
    sums = weights.sum(-1)
    assert_exact(sums[:4], torch.ones_like(sums[:4]), "row sums")
    assert sums[4].abs().max() == 0
    blocks, _ = module.select_segments(queries[:, :, 3:], state, state.segment_table[:, 3:9])  # i(t), t = 3 .. 8
    read = [sum(min(2, 13 - 2 * j) for j in row) for row in blocks[0].flatten(0, 1).tolist()]  # 13 = 6 * 2 + 1
    assert (weights[0] > 0).sum(-1).flatten().tolist() == read  # m = 7, r = 2: three segments, the last one short


def test_top_segments_is_checked_and_saved():
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="top_segments"):
            named_config("block-topk", top_segments=bad)
    with pytest.raises(ValueError, match="top_segments"):
        named_config("segmented", top_segments=2)  # a setting of another variant
    config = named_config("block-topk", segment_size=4, top_segments=5)
    assert config.resolved_top_segments() == 5 and named_config("block-topk").resolved_top_segments() == 3
    assert type(config).from_dict(config.to_dict()) == config


def test_a_block_of_one_segment_is_the_default_and_smaller_blocks_choose_differently():
    """``block_size = s`` is the default layout exactly; ``b = 1`` (each key gated by itself) reads other keys."""
    queries, keys, values, valid = _inputs(5, 2, 13, 9, 4, LENGTHS, seed=2)
    default = _module("block-topk", 4, 8, scale=0.5, top_segments=2)
    expected, _ = default(queries, default.init_state(keys, values, valid))
    same = _module("block-topk", 4, 8, scale=0.5, top_segments=2, block_size=4)
    assert torch.equal(same(queries, same.init_state(keys, values, valid))[0], expected)
    single = _module("block-topk", 4, 8, scale=0.5, top_segments=8, block_size=1)
    state = single.init_state(keys, values, valid)
    batch, segments, heads, s, d = state.keys.shape
    assert torch.equal(state.mean_keys, state.keys.permute(0, 2, 1, 3, 4).reshape(batch, heads, segments * s, d))
    assert (single(queries, state)[0] - expected).abs().max() > 1e-3


@pytest.mark.parametrize("top", [6, 7, 40])
def test_reading_every_other_block_is_full_attention(top):
    """13 keys in segments of 4 (4, 4, 4, 1 real) cut into blocks of 2: 7 blocks hold a real key, so besides the
    scheduled segment's there are at most 6, and r >= 6 reads every key."""
    module = _module("block-topk", 4, 8, scale=0.5, top_segments=top, block_size=2)
    queries, keys, values, valid = _inputs(5, 2, 13, 8, 4, LENGTHS)
    output, _ = module(queries, module.init_state(keys, values, valid))
    full = naive.full_attention(queries, keys, values, valid, SRformerConfig(variant="full"), scale=0.5)
    assert_exact(output, full, "module vs full")


def test_block_size_is_checked_and_saved():
    for bad in (0, -2, 1.5, "2"):
        with pytest.raises(ValueError, match="block_size"):
            named_config("block-topk", segment_size=4, block_size=bad)
    config = named_config("block-topk", segment_size=8, block_size=3)
    assert config.resolved_block_size() == 3 and named_config("block-topk", segment_size=8).resolved_block_size() == 8
    assert named_config("block-topk", segment_size=4, block_size=9).resolved_block_size() == 4  # one per segment
    assert type(config).from_dict(config.to_dict()) == config
    module = _module("block-topk", 8, 8, top_segments=2, block_size=3)
    state = module.init_state(*_inputs(2, 2, 13, 4, 4, [13, 7])[1:])
    assert state.blocks_per_segment == 3  # 3 + 3 + 2 positions
    assert state.block_real.tolist() == [[True] * 5 + [False], [True] * 3 + [False] * 3]  # 13 = 8 + 5, 7


def test_attention_weights_with_blocks_are_the_distribution_the_output_is_computed_with():
    module = _module("block-topk", 4, 8, scale=0.5, top_segments=3, block_size=2)
    queries, keys, values, valid = _inputs(5, 2, 13, 9, 4, LENGTHS)
    keys, values, valid = _left_padded(keys, values, valid, LENGTHS)
    state = module.init_state(keys, values, valid)
    output, _ = module(queries, state)
    weights = module.attention_weights(queries, keys, state, valid)
    assert_exact(torch.matmul(weights, values), output, "A V")
    assert torch.equal(weights * ~valid[:, None, None, :], torch.zeros_like(weights))
