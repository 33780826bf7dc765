"""The ``block-topk`` variant: segment ``i(t)`` and the ``r`` other segments of largest ``q . mean(K_j)``, chosen per
query and head (MoBA's top-k block gate), in one softmax. Float64 against its reference and its reductions (full
attention, ``segmented``), its tie rule, its gradient, its settings and its attention weights. The tests of a decoder
step run each of its two steps (``each_step``: the CPU step and the accelerator step,
:mod:`srformer.attention.step_choice`), and the two are compared on the same states."""

from __future__ import annotations

import pytest
import torch

from srformer.attention import naive, step_choice
from srformer.attention.block_topk import BlockTopkState
from srformer.attention.step_choice import STEP_KINDS
from srformer.attention.variants import build_cross_attention
from srformer.config import SRformerConfig, named_config
from tests.attention.test_srformer import _incremental, _inputs
from tests.attention.test_state import check_reordered_state_steps_as_its_rows
from tests.attention.test_variants import _module, _reference
from tests.models.conftest import (
    BUILDERS,
    check_beam_search_with_a_cache_equals_without,
    converted,
)
from tests.models.test_exactness import check_incremental_equals_parallel_per_row
from tests.tolerance import assert_exact, float32_tolerance, max_difference

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
def test_matches_the_reference_in_both_paths_paddings_and_a_later_chunk(segment_size, top, block, each_step):
    """Selections of 1 .. m - 1 segments, more segments than steps (s = 1: m = 13 > T = 6), one segment (s = 20);
    selection blocks smaller than a segment (the last segment's last block short or empty), blocks that do not
    divide the segment (each segment's last block shorter), a block larger than the segment (one per segment);
    with each decoder step."""
    module = _module("block-topk", segment_size, 6, scale=0.5, top_segments=top, block_size=block)
    check_against_the_reference(module, *_inputs(5, 3, 13, 9, 4, LENGTHS), LENGTHS)


def check_against_the_reference(module, queries, keys, values, valid, lengths) -> None:
    """The module against its float64 reference in the parallel path and a later chunk (from position 4),
    incremental == parallel, left padding == right padding (both paths), and an empty last document's output 0."""
    state = module.init_state(keys, values, valid)
    parallel, final = module(queries, state)
    assert_exact(parallel, _reference(module, queries, keys, values, valid), "parallel")
    later, _ = module(queries[:, :, 4:], state, start_position=4)
    assert_exact(later, _reference(module, queries[:, :, 4:], keys, values, valid, start_position=4), "later chunk")
    incremental, final_incremental = _incremental(module, queries, state)
    assert_exact(incremental, parallel, "incremental")
    assert torch.equal(final.last_segment, final_incremental.last_segment)
    left_keys, left_values, left = _left_padded(keys, values, valid, lengths)
    left_state = module.init_state(left_keys, left_values, left)
    assert_exact(module(queries, left_state)[0], parallel, "left padding")
    assert_exact(_incremental(module, queries, left_state)[0], parallel, "left padding, incremental")
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
def test_equal_gates_choose_the_lower_segment(raise_last, chosen, each_step):
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


def test_bf16_output_is_finite_and_in_the_queries_dtype(each_step):
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


def _integer_inputs(seed):
    """Small integer queries and keys: many equal gates (exact in float32 for blocks of 1, 2 or 4 keys; blocks of 3
    divide and may round, but alike for equal blocks); a different value at every position, so that reading another
    block shows in the output; right padding after LENGTHS."""
    generator = torch.Generator().manual_seed(seed)
    queries, keys, values = (torch.randint(-2, 3, shape, generator=generator).double()
                             for shape in [(5, 2, 9, 4), (5, 2, 13, 4), (5, 2, 13, 4)])
    values = values + torch.arange(13, dtype=torch.float64)[:, None]
    valid = torch.arange(13)[None, :] < torch.tensor(LENGTHS)[:, None]
    return queries, keys, values, valid


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("block", [None, 2, 3])
def test_a_float32_step_with_many_ties_reads_the_blocks_of_the_float64_reference(block, each_step):
    """Integer keys and queries: many equal gates. The float32 step (the accelerator's: order keys with the
    scheduled segment first, one topk, selection.ranked_top; the CPU's: top_positions) and the parallel path read
    the blocks of the float64 reference, so they differ from it by float32 rounding only: the softmax over at most
    20 keys of 4 integer components, their exponentials and the weighted sum round a few times per term
    (float32_tolerance of 64 terms, generous), whatever the padding; an empty document's output is 0."""
    module = _module("block-topk", 4, 6, scale=0.5, top_segments=2, block_size=block)
    queries, keys, values, valid = _integer_inputs(seed=5)
    paddings = {"right": (keys, values, valid), "left": _left_padded(keys, values, valid, LENGTHS)}
    check_float32_reads_the_float64_reference(module, queries, paddings, terms=64)


def check_float32_reads_the_float64_reference(module, queries, paddings, *, terms: int) -> None:
    """For each padding (name -> float64 ``(keys, values, valid)``): the float32 step and parallel path from a
    float32 state are within ``float32_tolerance`` of ``terms`` terms of the float64 reference, and the last
    example (an empty document) steps to 0."""
    for what, (k, v, mask) in paddings.items():
        expected = _reference(module, queries, k, v, mask)
        state = module.init_state(k.float(), v.float(), mask)
        step, _ = _incremental(module, queries.float(), state)
        parallel, _ = module(queries.float(), state)
        for output in (step, parallel):
            assert output.dtype == torch.float32
            assert max_difference(output.double(), expected) <= float32_tolerance(expected, terms), what
        assert torch.equal(step[-1], torch.zeros_like(step[-1]))


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,top,block", [(2, 1, None), (4, 2, 2), (4, 9, 1), (5, 3, 2), (6, 2, 4)])
def test_the_two_steps_give_the_same_output_on_the_same_state(segment_size, top, block, monkeypatch):
    """The CPU step and the accelerator step on one float64 state: integer data with many tied gates, padding on the
    right and on the left, an empty document, blocks that divide the segment or not, ``r`` below and above the other
    blocks' number; equal to float64 rounding at every position (``exact_tolerance``: they differ only in the
    order of their sums), and the same segment recorded."""
    module = _module("block-topk", segment_size, 6, scale=0.5, top_segments=top, block_size=block)
    queries, keys, values, valid = _integer_inputs(seed=7)
    left = _left_padded(keys, values, valid, LENGTHS)
    for what, (k, v, mask) in {"right": (keys, values, valid), "left": left}.items():
        state = module.init_state(k, v, mask)
        outputs, finals = {}, {}
        for kind in STEP_KINDS:
            monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
            outputs[kind], finals[kind] = _incremental(module, queries, state)
        assert_exact(outputs["accelerator"], outputs["cpu"], what)
        assert_exact(outputs["cpu"], module(queries, state)[0], f"{what}, parallel")
        assert torch.equal(finals["accelerator"].last_segment, finals["cpu"].last_segment)
        assert torch.equal(outputs["accelerator"][-1], torch.zeros_like(outputs["accelerator"][-1]))


@pytest.mark.filterwarnings("ignore:An encoder input has")
def test_a_reordered_state_steps_as_its_rows(each_step):
    """Beam reordering (the cache layer's reorder_cache: every state tensor, rows repeated and dropped) gives the
    state of the reordered rows: a step from it equals the reordered step from the original state."""
    check_reordered_state_steps_as_its_rows(_module("block-topk", 4, 8, scale=0.5, top_segments=2, block_size=2),
                                            _inputs(3, 2, 13, 6, 4, [13, 5, 0], seed=4), torch.tensor([0, 0, 2]))


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_in_a_model_incremental_equals_parallel_padding_does_not_matter_and_beams_reorder(family, each_step):
    """A converted model reading its segment and one block of 2 besides (segments of 4): generation's step (each
    step) gives the teacher-forced logits of a padded batch, each row alone those of the batch, and beam search with
    a cache the sequences without."""
    model = converted(BUILDERS[family](), variant="block-topk", segment_size=4, target_length=12, top_segments=1,
                      block_size=2)
    ids, mask = check_incremental_equals_parallel_per_row(model)
    check_beam_search_with_a_cache_equals_without(model, ids, mask)


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("block", [2, 3])
def test_the_accelerator_step_compiles_to_one_graph_and_equals_eager(block):
    """torch.compile (fullgraph, aot_eager) of the float32 accelerator step (order keys, their CPU scalar floor, the
    index tables made in the graph; blocks that divide the segment or not): no graph break or host sync, and
    eager's output (the same float32 ops)."""
    module = _module("block-topk", 4, 6, top_segments=2, block_size=block).float()
    queries, keys, values, valid = (t.float() if t.is_floating_point() else t for t in _inputs(5, 2, 13, 2, 4, LENGTHS))
    state = module.init_state(keys, values, valid)
    compiled = torch.compile(module.accelerator_step, fullgraph=True, backend="aot_eager")
    try:
        for t in range(2):
            segment = state.segment_table[:, t]
            query = queries[:, :, t : t + 1]
            assert torch.equal(compiled(query, state, segment), module.accelerator_step(query, state, segment))
    finally:
        torch._dynamo.reset()
