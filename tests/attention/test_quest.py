"""The ``quest`` variant: segment ``i(t)`` and the ``r`` leaves of largest Quest bound (optionally within the ``p``
best groups of leaves), per query and head, in one softmax. What the shared matrices over ``NAMED_SETTINGS`` do not
cover (they run ``quest`` at its defaults, which read every key of their tiny inputs): small budgets against the
float64 reference in both paths, a later chunk and both paddings; the bound; the reductions to full attention;
the tie rule; the state that reads rows of the encoder output, through ``generate()`` with beams; settings."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import srformer
from srformer.attention import naive, quest, step_choice
from srformer.attention.projection import HeadProjection
from srformer.attention.quest import (
    QuestCrossAttention,
    QuestRowsState,
    QuestState,
    _bounds_matrix,
    key_bounds,
    outward_bfloat16,
    rows_at,
    similarity_order,
    upper_bound,
)
from srformer.config import SRformerConfig, named_config
from srformer.models.memory_estimate import estimate_decode_memory
from tests.attention.rows_cases import assert_generation_matches
from tests.attention.test_block_topk import check_against_the_reference
from tests.attention.test_srformer import _inputs
from tests.attention.test_variants import _module, _reference
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config
from tests.tolerance import assert_exact

LENGTHS = [23, 13, 8, 5, 1, 0]  # several leaves and groups, one leaf, one key, an empty document


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("segment_size,leaf,top,group,groups", [
    (2, 2, 1, None, None), (3, 2, 2, None, None), (4, 3, 2, None, None), (1, 1, 3, None, None),
    (5, 4, 1, None, None), (20, 2, 2, None, None), (3, 2, 2, 2, 1), (2, 3, 2, 2, 2), (4, 2, 3, 3, 1),
    (2, 1, 4, 4, 2), (6, 4, 1, 1, 2), (3, 5, 2, 8, 1), (4, 2, 2, 4, 2), (2, 1, 3, 2, 3),
])
def test_matches_the_reference_in_both_paths_paddings_and_a_later_chunk(segment_size, leaf, top, group, groups,
                                                                         each_step):
    """One level and two; leaves smaller than, equal to, not dividing and larger than the segment; one group per
    leaf and one group for every leaf; more segments than steps (s = 1); the CPU's and the accelerator's tree
    build; the last two run the accelerator's group leaf step (the second at its bound, ``(p - 1)·g + 1 - s/b =
    r``)."""
    module = _module("quest", segment_size, 6, scale=0.5, leaf_size=leaf, top_leaves=top, group_size=group,
                     top_groups=groups)
    check_against_the_reference(module, *_inputs(6, 3, 23, 9, 4, LENGTHS), LENGTHS)


@pytest.mark.parametrize("group,groups", [(None, None), (2, 50), (100, 1)])
def test_a_budget_of_every_leaf_is_full_attention(group, groups):
    """``r`` at least the number of leaves (and ``p`` at least the number of groups): every real key once."""
    module = _module("quest", 3, 8, scale=0.5, leaf_size=2, top_leaves=12, group_size=group, top_groups=groups)
    queries, keys, values, valid = _inputs(6, 2, 23, 8, 4, LENGTHS)
    output, _ = module(queries, module.init_state(keys, values, valid))
    assert_exact(output, naive.full_attention(queries, keys, values, valid, SRformerConfig("full"), scale=0.5),
                 "every leaf read")


def test_a_small_budget_is_not_full_attention_and_groups_change_the_choice():
    queries, keys, values, valid = _inputs(6, 2, 23, 8, 4, LENGTHS)
    full = naive.full_attention(queries, keys, values, valid, SRformerConfig("full"), scale=0.5)
    outputs = []
    for group, groups in ((None, None), (2, 1)):
        module = _module("quest", 3, 8, scale=0.5, leaf_size=2, top_leaves=1, group_size=group, top_groups=groups)
        outputs.append(module(queries, module.init_state(keys, values, valid))[0])
        assert (outputs[-1][0] - full[0]).abs().max() > 1e-3
    assert (outputs[0][0] - outputs[1][0]).abs().max() > 1e-6


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_the_bound_is_at_least_every_product_and_attained_by_a_one_key_block(size, dims, seed):
    """``sum_c max(q_c·min_c, q_c·max_c) >= q . k`` for every key of the block (Quest, Sec. 3), with equality for
    a block of one key."""
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(1, 1, 4 * size, dims, generator=generator, dtype=torch.float64)
    query = torch.randn(1, 1, 3, dims, generator=generator, dtype=torch.float64)
    low, high, _ = key_bounds(keys, torch.ones(1, 4 * size, dtype=torch.bool), size)
    bounds = upper_bound(query, low, high)  # (1, 1, 3, 4)
    products = (query @ keys.transpose(-1, -2)).view(1, 1, 3, 4, size)
    assert (bounds[..., None] >= products - 1e-12).all()
    if size == 1:
        assert torch.allclose(bounds, products[..., 0])


def test_equal_bounds_choose_the_earlier_leaf(each_step):
    """Two leaves outside the segment with the same keys (so the same bound): the earlier one is read, in the
    parallel path and by the decoder step."""
    keys = torch.zeros(1, 1, 6, 2, dtype=torch.float64)
    keys[0, 0, 2:4] = torch.tensor([1.0, 0.0])
    keys[0, 0, 4:6] = torch.tensor([1.0, 0.0])
    values = torch.zeros_like(keys)
    values[0, 0, 2:4, 0] = 1.0
    values[0, 0, 4:6, 1] = 1.0
    queries = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    module = _module("quest", 2, 8, head_dim=2, leaf_size=2, top_leaves=1)
    state = module.init_state(keys, values, None)
    output, _ = module(queries, state)  # t = 0 reads segment 0 (positions 0-1)
    assert output[0, 0, 0, 0] > 0 and output[0, 0, 0, 1] == 0
    assert_exact(output, _reference(module, queries, keys, values, None), "tie")
    assert_exact(module.step(queries, state, position=0)[0], output, "tie, step")


@pytest.mark.parametrize("segment_size,leaf,top,group,groups,group_step", [
    (4, 2, 3, None, None, False), (4, 3, 2, None, None, False), (4, 2, 3, 2, 2, False), (3, 2, 5, 3, 1, False),
    (6, 1, 4, 4, 3, False), (4, 1, 4, 3, 3, False), (4, 2, 2, 4, 2, True), (2, 1, 3, 2, 3, True),
    (4, 1, 3, 3, 3, True), (2, 2, 2, 2, 2, True),
])
@pytest.mark.parametrize("route", ["masked", "gathered"])
def test_the_two_steps_give_the_same_output_on_the_same_state_with_ties(segment_size, leaf, top, group, groups,
                                                                        group_step, route, monkeypatch):
    """Keys of -1, 0 and 1 (many leaves and groups with equal bounds) and distinct values: the CPU step and the
    accelerator step read the same rows at every position (a tie settled otherwise moves the output by O(1)), with
    padding, an empty document, leaves that do and do not divide the segment, one level and two. ``group_step``:
    the accelerator runs the group leaf step (``(p - 1)·g + 1 - s/b >= r``; three of them at that bound, and one
    just past it that keeps the general step), scoring every slot or (``gathered``) the chosen groups' slots only;
    the example of 6 tokens has fewer candidates than ``r``, so the gathered route picks a slot of its segment
    again, and must not read it twice."""
    monkeypatch.setattr(quest, "GATHER_SLOTS_RATIO_EAGER", 0 if route == "gathered" else 10**9)
    generator = torch.Generator().manual_seed(3)
    lengths = [23, 17, 6, 0]
    queries, _, values, valid = _inputs(4, 2, 23, 9, 4, lengths)
    keys = torch.randint(-1, 2, (4, 2, 23, 4), generator=generator).to(torch.float64)
    queries = torch.randint(-2, 3, queries.shape, generator=generator).to(torch.float64)
    module = _module("quest", segment_size, 9, scale=0.5, leaf_size=leaf, top_leaves=top, group_size=group,
                     top_groups=groups)
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")  # the state that carries both steps' fields
    state = module.init_state(keys, values, valid)
    steps: list[int] = []
    monkeypatch.setattr(QuestCrossAttention, "group_leaf_step", _counting(QuestCrossAttention.group_leaf_step, steps))
    outputs = {}
    for kind in step_choice.STEP_KINDS:
        monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
        outputs[kind] = torch.cat([module.step(queries[:, :, t:t + 1], state, position=t)[0] for t in range(9)], 2)
    assert len(steps) == (9 if group_step else 0)
    assert_exact(outputs["accelerator"], outputs["cpu"], "accelerator step vs CPU step")
    assert_exact(outputs["cpu"], module(queries, state)[0], "CPU step vs parallel path")
    assert outputs["accelerator"][-1].abs().max() == 0


def test_one_matching_key_is_found_where_a_mean_key_misses_it():
    """The reason for the bound: one key that matches the query among keys that point away. Its leaf's mean
    key points away (``block-topk``'s gate misses it); its bound does not."""
    keys = torch.zeros(1, 1, 12, 2, dtype=torch.float64)
    keys[0, 0, 4:8, 1] = 1.0  # leaf 1: a plain match for the query's second channel
    keys[0, 0, 8:12, 0] = -3.0  # leaf 2: three keys far from the query, one that matches it strongly
    keys[0, 0, 11] = torch.tensor([0.0, 4.0])
    values = torch.eye(12, 2, dtype=torch.float64)[None, None]
    queries = torch.tensor([[[[0.0, 1.0]]]], dtype=torch.float64)
    module = _module("quest", 4, 8, head_dim=2, leaf_size=4, top_leaves=1)
    state = module.init_state(keys, values, None)
    rows, allowed = module.select(queries, state, torch.zeros(1, 1, dtype=torch.long))
    assert set(rows[allowed].tolist()) == {0, 1, 2, 3, 8, 9, 10, 11}
    block = _module("block-topk", 4, 8, head_dim=2, top_segments=1)
    blocks, _ = block.select_segments(queries, block.init_state(keys, values, None), torch.zeros(1, 1,
                                                                                              dtype=torch.long))
    assert blocks[0, 0, 0].tolist() == [0, 1]  # the mean key picks leaf 1


def test_gradient_reaches_the_read_keys_only():
    module = _module("quest", 3, 8, scale=0.5, leaf_size=2, top_leaves=1)
    queries, keys, values, valid = _inputs(1, 1, 12, 1, 4, [12])
    keys.requires_grad_(True)
    values.requires_grad_(True)
    output, _ = module(queries, module.init_state(keys, values, valid))
    output.sum().backward()
    rows, allowed = module.select(queries, module.init_state(keys.detach(), values.detach(), valid),
                                  torch.zeros(1, 1, dtype=torch.long))
    read = set(rows[allowed].tolist())
    touched = {j for j in range(12) if values.grad[0, 0, j].abs().sum() > 0}
    assert touched == read and len(read) == 5  # the segment's 3 keys and one leaf of 2


def test_attention_weights_are_the_distribution_the_output_is_computed_with():
    module = _module("quest", 3, 8, scale=0.5, leaf_size=2, top_leaves=2, group_size=2, top_groups=1)
    queries, keys, values, valid = _inputs(6, 2, 23, 8, 4, LENGTHS)
    state = module.init_state(keys, values, valid)
    weights = module.attention_weights(queries, keys, state, valid, start_position=0)
    assert_exact(weights @ values, module(queries, state)[0], "A V")
    assert (weights[:, :, :, :][~valid[:, None, None, :].expand_as(weights)] == 0).all()


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_generate_reading_encoder_rows_equals_the_standard_state(family, each_step):
    """Greedy and beam search from the state that reads rows of the encoder output (``rows_min_keys=1``) give the
    standard state's tokens and scores (the absorbed form is exact up to rounding); the state keeps no keys."""
    model = converted(BUILDERS[family](), variant="quest", segment_size=4, target_length=8, leaf_size=2,
                      top_leaves=2, group_size=2, top_groups=2)
    ids, mask = padded_batch(model)
    generations = assert_generation_matches(model, ids, mask, reference={"rows_min_keys": None},
                                            through={"rows_min_keys": 1}, tolerance=1e-4, max_new_tokens=8)
    states = [type(rows.past_key_values.cross_attention_cache.layers[0].state) for rows in generations]
    assert states == [QuestRowsState, QuestRowsState]


@pytest.mark.parametrize("family", ["t5", "bart"])
@pytest.mark.parametrize("rows_min_keys", [1, None], ids=["encoder-rows", "keys"])
@pytest.mark.parametrize("groups", [False, True, "gathered"], ids=["one-level", "groups", "groups-gathered"])
def test_the_leaf_steps_generate_the_cpu_steps_tokens(family, rows_min_keys, groups, monkeypatch):
    """Segments of whole leaves (s = 4, b = 2), one level or groups of 2 (p = 3): on an accelerator the leaf step
    (``QuestCrossAttention.leaf_step``) or the group leaf step runs, from a state of whole segments, and greedy and
    beam search give the CPU step's tokens, and its scores up to float32 rounding, in both layouts (the bounds of
    each layout are the same on both devices)."""
    grouping = {"group_size": 2, "top_groups": 3} if groups else {}
    monkeypatch.setattr(quest, "GATHER_SLOTS_RATIO_EAGER", 0 if groups == "gathered" else 10**9)
    model = converted(BUILDERS[family](), variant="quest", segment_size=4, target_length=8, leaf_size=2,
                      top_leaves=2, **grouping)
    srformer.set_runtime_options(model, rows_min_keys=rows_min_keys)
    ids, mask = padded_batch(model)
    steps = []
    step = "group_leaf_step" if groups else "leaf_step"
    monkeypatch.setattr(QuestCrossAttention, step, _counting(getattr(QuestCrossAttention, step), steps))
    for beams in (1, 3):
        config = plain_generation_config(model, max_new_tokens=8, num_beams=beams, output_scores=True,
                                         return_dict_in_generate=True)
        outputs = {}
        for kind in step_choice.STEP_KINDS:
            monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
            with torch.no_grad():
                outputs[kind] = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        state = outputs["accelerator"].past_key_values.cross_attention_cache.layers[0].state
        rows = state.positions.shape[1]
        assert rows % 4 == 0  # whole segments of whole leaves, each row's bias per leaf (per slot with groups)
        assert state.row_bias.shape[1:] == ((*state.leaf_order.shape[1:], 2) if groups else (rows // 2, 2))
        assert torch.equal(outputs["accelerator"].sequences, outputs["cpu"].sequences)
        for a, b in zip(outputs["accelerator"].scores, outputs["cpu"].scores, strict=True):
            finite = torch.isfinite(b)
            assert torch.equal(finite, torch.isfinite(a))
            assert (a[finite] - b[finite]).abs().max().item() <= 1e-4
    assert steps, "the leaf step did not run"


def _counting(method, calls):
    def wrapper(*args, **kwargs):
        calls.append(1)
        return method(*args, **kwargs)
    return wrapper


def test_short_inputs_keep_the_standard_state(each_step):
    model = converted(BUILDERS["t5"](), variant="quest", segment_size=4, target_length=8)
    ids, mask = padded_batch(model)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True,
                             generation_config=plain_generation_config(model, max_new_tokens=2))
    assert type(out.past_key_values.cross_attention_cache.layers[0].state) is QuestState


def test_settings_defaults_bad_values_and_the_memory_estimate():
    config = named_config("quest")
    assert (config.resolved_leaf_size(), config.resolved_top_leaves(), config.group_size,
            config.resolved_top_groups(), config.resolved_rows_min_keys()) == (16, 16, None, 16, 16384)
    for name in ("leaf_size", "top_leaves", "group_size", "top_groups", "rows_min_keys"):
        with pytest.raises(ValueError, match=name):
            SRformerConfig(variant="quest", **{name: 0})
    model_config = BUILDERS["t5"]().config
    standard = estimate_decode_memory(SRformerConfig("quest", rows_min_keys=10**6), model_config, 1, 65536,
                                      torch.float32)
    rows = estimate_decode_memory(SRformerConfig("quest"), model_config, 1, 65536, torch.float32)
    assert rows.states < standard.states / 4
    # an accelerator projects a layer's keys for the bounds at once (MAX_BOUNDS_CHUNKS = 1): the gathered encoder
    # rows and the keys in the compute dtype and float32, beside the standard state's one layer of keys and values
    heads, d, width = model_config.num_heads, model_config.d_kv, model_config.d_model
    projection = 65536 * (heads * d * (4 + 4) + width * 4)
    assert rows.transient >= projection > standard.transient


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(1e-3, 1e3))
def test_half_bounds_are_rounded_outward_and_still_bound(seed, spread):
    """The rows layout keeps leaves' bounds in bfloat16: each maximum rounded up, each minimum down, at any
    magnitude float32 holds."""
    generator = torch.Generator().manual_seed(seed)
    low = torch.randn(2, 3, 5, 4, generator=generator) * spread
    high = low + torch.rand(2, 3, 5, 4, generator=generator) * spread
    bounds = torch.cat([high, low], dim=-1)
    half = outward_bfloat16(bounds)
    assert half.dtype == torch.bfloat16
    assert (half[..., :4].float() >= high).all() and (half[..., 4:].float() <= low).all()
    # one bfloat16 step (2^-7 relative, 8 bits of precision) at most, rounding and the outward step together
    assert ((half.float() - bounds).abs() <= 2.0 ** -7 * bounds.abs() + 1e-38).all()
    beyond = bounds * 1e30  # past float16's range, within bfloat16's
    wide = outward_bfloat16(beyond)
    assert wide.isfinite().all() and (wide[..., :4].float() >= beyond[..., :4]).all()
    assert (wide[..., 4:].float() <= beyond[..., 4:]).all()


@pytest.mark.parametrize("batch,heads", [(1, 1), (2, 3)])
def test_rows_at_reads_the_same_rows_on_either_device(batch, heads, each_step):
    """The CPU's ``index_select`` of flattened rows and the accelerator's ``gather``: each tensor's rows at the
    index, one head's or many, repeated and in any order."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(batch, heads, 7, 5, generator=generator)
    index = torch.randint(0, 7, (batch, heads, 11), generator=generator)
    for tensor, read in zip((rows, -rows), rows_at(index, rows, -rows), strict=True):
        expected = torch.stack([torch.stack([tensor[b, h, index[b, h]] for h in range(heads)]) for b in range(batch)])
        assert torch.equal(read, expected)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(-140, 127), st.sampled_from([torch.float32, torch.float64]))
def test_half_bounds_are_the_nearest_bfloat16_outward(seed, exponent, dtype):
    """Each maximum becomes the least bfloat16 at or above it and each minimum the greatest at or below it (no
    bfloat16 lies between the value and its bound), bit for bit, from float32 (the integer route on its bits) and
    from float64 (a value just above a bfloat16, such as 1 + 1e-12, rounds up, though float32 would round it to 1):
    zeros of both signs, subnormals, infinities and values at every float32 exponent."""
    generator = torch.Generator().manual_seed(seed)
    bounds = (torch.randn(4, 64, 8, generator=generator, dtype=torch.float64) * 2.0 ** exponent).to(dtype)
    bounds[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")], dtype=dtype)[:, None]
    bounds[1, 0] = 1.0 + 1e-12 if dtype == torch.float64 else 1.0
    bounds[1, 1] = -1.0 - 1e-12 if dtype == torch.float64 else -1.0
    half = outward_bfloat16(bounds)
    value = half.to(dtype)
    toward_inf = torch.nextafter(half, torch.full_like(half, float("inf"))).to(dtype)
    toward_minus_inf = torch.nextafter(half, torch.full_like(half, float("-inf"))).to(dtype)
    high, low = bounds[..., :4], bounds[..., 4:]
    assert (value[..., :4] >= high).all() and ((value[..., :4] == high) | (toward_minus_inf[..., :4] < high)).all()
    assert (value[..., 4:] <= low).all() and ((value[..., 4:] == low) | (toward_inf[..., 4:] > low)).all()
    assert half.is_contiguous()


@pytest.mark.parametrize("grouping", [{}, {"group_size": 2, "top_groups": 3}], ids=["one-level", "groups"])
def test_the_estimate_covers_every_field_of_an_accelerators_rows_state(grouping, monkeypatch):
    """Built where the whole-leaf steps run (the step forced to the accelerator's), a rows state of an unpadded
    48-token input holds at most the estimate's bytes per layer, and the estimate is not loose by more than the
    tree's empty slots and the step's index tables of one segment (a tenth here)."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    model = converted(BUILDERS["t5"](), variant="quest", segment_size=4, target_length=8, leaf_size=2,
                      top_leaves=2, rows_min_keys=1, **grouping)
    ids = torch.randint(3, 90, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), return_dict_in_generate=True,
                             generation_config=plain_generation_config(model, max_new_tokens=2))
    states = [layer.state for layer in out.past_key_values.cross_attention_cache.layers]
    assert all(type(state) is QuestRowsState and state.row_bias.shape[1] for state in states)
    config = SRformerConfig("quest", segment_size=4, target_length=8, leaf_size=2, top_leaves=2, rows_min_keys=1,
                            **grouping)
    estimate = estimate_decode_memory(config, model.config, 1, 48, torch.float64).states  # a float64 model
    # beside the per-example numbers the estimate leaves out (lengths, segments, the last segment, slot)
    held = sum(state.nbytes() - 4 * 8 for state in states)
    assert 0.9 * estimate <= held <= estimate, (held, estimate)


def test_the_rows_state_keeps_bfloat16_leaf_bounds_and_the_estimate_counts_them():
    """The leaves' bounds take 2 bytes per number, with groups and without; the estimate counts them so: one level
    of leaves of 2 keeps ``2·(k/2)·d`` bfloat16 bounds per head and layer (half of float32 keys and values), the
    compaction order, and the accelerator step's tables (each leaf's index and rank term, each row's float32 bias
    and encoder row); the estimate counts every field of an accelerator's state (built here by forcing the step)."""
    model_config = BUILDERS["t5"]().config
    flat = named_config("quest-b2", segment_size=64, target_length=128)
    k = 262144
    layers, heads, d = model_config.num_decoder_layers, model_config.num_heads, model_config.d_kv
    estimate = estimate_decode_memory(flat, model_config, 1, k, torch.float32).states
    values = heads * d * (model_config.d_model + 1) * 4  # the example's float32 W_v and b_v
    assert estimate == layers * (2 * heads * (k // 2) * 2 * d + k * 8 + (k // 2) * (16 + 1) + k * 12 + 129 * 8
                                 + values)
    assert estimate <= 0.52 * layers * 2 * heads * k * d * 4
    model = converted(BUILDERS["t5"](), variant="quest", segment_size=4, target_length=8, leaf_size=2,
                      top_leaves=2, rows_min_keys=1)
    ids, mask = padded_batch(model)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True,
                             generation_config=plain_generation_config(model, max_new_tokens=2))
    state = out.past_key_values.cross_attention_cache.layers[0].state
    assert type(state) is QuestRowsState and state.leaf_bounds.dtype == torch.bfloat16


@pytest.mark.parametrize("leaves,group", [(37, 4), (64, 16), (5, 8), (1, 1)])
def test_the_tree_orders_leaves_alike_on_the_cpu_and_on_an_accelerator(leaves, group, monkeypatch):
    """The two formulations of the principal-direction tree (einsum on the CPU, batched products over all nodes on
    an accelerator) give the same order in float64, with empty slots and a padded leaf, for every head."""
    generator = torch.Generator().manual_seed(leaves)
    centres = torch.randn(2, 3, leaves, 5, generator=generator, dtype=torch.float64)
    real = torch.ones(2, leaves, dtype=torch.bool)
    real[1, leaves // 2:] = False
    orders = {}
    for kind in step_choice.STEP_KINDS:
        monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
        orders[kind] = similarity_order(centres, real, group)
    assert torch.equal(orders["cpu"], orders["accelerator"])
    assert sorted(orders["cpu"][0, 0].tolist()) == list(range(orders["cpu"].shape[-1]))


@pytest.mark.parametrize("scale", [0.0, 1e6], ids=["identical-centres", "large-centres"])
def test_the_trees_agree_where_a_node_has_no_spread_or_float32_would_overflow_unscaled(scale, monkeypatch):
    """The accelerator's route takes the 4th power of each node's covariance at once, scaled by its largest entry:
    identical centres (a covariance of 0: every projection 0, the stable order kept) and centres of 1e6 in float32
    (an unscaled 4th power of their covariance would overflow) order as the CPU's normalised iterations do."""
    generator = torch.Generator().manual_seed(3)
    centres = (torch.randn(1, 2, 48, 6, generator=generator) * scale + 5.0).float()
    real = torch.ones(1, 48, dtype=torch.bool)
    real[0, 40:] = False
    orders = {}
    for kind in step_choice.STEP_KINDS:
        monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
        orders[kind] = similarity_order(centres, real, 4)
    assert torch.equal(orders["cpu"], orders["accelerator"])
    if scale == 0.0:  # no spread: the real leaves keep their positions, the empty slots follow
        assert orders["cpu"][0, 0].tolist() == list(range(orders["cpu"].shape[-1]))


def test_a_state_built_for_the_cpu_step_keeps_no_step_fields_and_is_refused_by_the_accelerator_step(monkeypatch):
    """On the CPU the accelerator step's fields are empty (beam search reorders nothing more there); stepping such
    a state with the accelerator step is refused by name instead of reading empty tables."""
    module = _module("quest", 3, 6, scale=0.5, leaf_size=2, top_leaves=2, group_size=2, top_groups=1)
    queries, keys, values, valid = _inputs(2, 2, 11, 6, 4, [11, 5])
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "cpu")
    state = module.init_state(keys, values, valid)
    assert state.slot_leaf.shape[-1] == 0 and state.step_segment.shape[-1] == 0
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    with pytest.raises(ValueError, match="built for the CPU step"):
        module.step(queries[:, :, :1], state, position=0)


def test_the_leaf_steps_bounds_operand_is_the_same_from_either_layout():
    """``_bounds_matrix``: one ``as_strided`` of the stored layout (a transposed view of (B, H, 2d, L)), and a
    transpose and reshape of any other layout (a contiguous copy), give the same (B·H, 2d, L) operand."""
    stored = torch.randn(2, 3, 8, 5).transpose(-1, -2)  # (B, H, L, 2d) as the state keeps it
    copy = stored.contiguous()
    expected = stored.transpose(-1, -2).reshape(6, 8, 5)
    for bounds in (stored, copy, stored[1:]):
        torch.testing.assert_close(_bounds_matrix(bounds), expected[-bounds.shape[0] * 3:], rtol=0, atol=0)


@pytest.mark.parametrize("bias", [True, False], ids=["value-bias", "no-bias"])
@pytest.mark.parametrize("grouping", [{}, {"group_size": 2, "top_groups": 3}], ids=["one-level", "groups"])
def test_the_rows_step_is_softmax_attention_over_the_rows_it_selects_in_float64(grouping, bias, each_step):
    """Reading rows of the encoder output (the absorbed form, either step) gives, at every decoder position, the
    softmax attention of the query over the projected keys and values of the rows :meth:`select` chooses from
    that state (its leaves' bounds are bfloat16, so the choice may differ from a standard state's at a near-tie):
    float64, left padding, an empty document (output 0), the projections' biases (BART's) or none (T5's)."""
    batch, heads, length, hidden_size, head_dim, scale = 3, 2, 40, 8, 4, 0.5
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(batch, length, hidden_size, generator=generator, dtype=torch.float64)
    valid = torch.ones(batch, length, dtype=torch.bool)
    valid[1, :7] = False  # left padding
    valid[2] = False  # an empty document
    key = torch.nn.Linear(hidden_size, heads * head_dim, bias=bias, dtype=torch.float64)
    value = torch.nn.Linear(hidden_size, heads * head_dim, bias=bias, dtype=torch.float64)
    with torch.no_grad():
        for parameter in (*key.parameters(), *value.parameters()):
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    projection = HeadProjection.from_linear(key, value, heads, head_dim)
    assert projection is not None
    module = QuestCrossAttention(SRformerConfig("quest", segment_size=4, target_length=8, leaf_size=2, top_leaves=2,
                                                rows_min_keys=1, **grouping), head_dim, scale=scale)
    with torch.no_grad():
        state = module.indexed_state(hidden, valid, projection)
        assert isinstance(state, QuestRowsState)
        keys, values = projection.project(hidden[:, None].expand(-1, heads, -1, -1))  # (B, H, k, d)
        for position in range(10):
            queries = torch.randn(batch, heads, 1, head_dim, generator=generator, dtype=torch.float64)
            output = module.step(queries, state, position=position)[0]
            rows, allowed = module.select(queries, state, module._segments(state, position, 1))  # (B, H, 1, S)
            at = state.positions.gather(1, rows.view(batch, -1)).view(batch, heads, -1, 1).expand(-1, -1, -1, head_dim)
            logits = (queries * keys.gather(2, at)).sum(-1, keepdim=True).transpose(-1, -2) * scale  # (B, H, 1, S)
            weights = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
            expected = weights @ values.gather(2, at)
            torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)
            assert torch.equal(output[2], torch.zeros_like(output[2]))
