"""Unlimiformer's top-k attention (``knn``): what the shared matrices over ``NAMED_SETTINGS`` do not cover (they run
``knn`` at its default 32 keys, which reads every key of their tiny inputs, and ``knn-4``): a few keys against the
float64 reference in both paths, a later chunk and both paddings, the reduction to full attention, the tie rule, the
padding never read, the fixed number of keys a step reads, the attention weights, the gradient of a hard top-k, bf16
and the bad settings. The tests of a decoder step run each of its two steps (``each_step``: the CPU step and the
accelerator step, :mod:`srformer.attention.step_choice`), and the two are compared on the same states."""

from __future__ import annotations

import pytest
import torch

from srformer.attention import naive, step_choice
from srformer.attention.step_choice import STEP_KINDS
from srformer.attention.weights import cross_attention_weights
from srformer.config import SRformerConfig, named_config
from srformer.core import mechanism
from tests.attention.test_block_topk import check_float32_reads_the_float64_reference
from tests.attention.test_srformer import _incremental, _inputs
from tests.attention.test_state import check_reordered_state_steps_as_its_rows
from tests.attention.test_variants import _module, _reference
from tests.models.conftest import (
    BUILDERS,
    check_beam_search_with_a_cache_equals_without,
    converted,
    padded_batch,
)
from tests.models.test_exactness import check_incremental_equals_parallel_per_row
from tests.tolerance import assert_exact


def _left_padded(valid, *tensors):
    """Each example's real rows moved to the end (left padding), for (B, k) ``valid`` and (B, H, k, d) tensors."""
    shifts = [int(valid.shape[1] - row.sum()) for row in valid]
    rolled = [torch.stack([t[b].roll(r, dims=1) for b, r in enumerate(shifts)]) for t in tensors]
    return torch.stack([valid[b].roll(r) for b, r in enumerate(shifts)]), *rolled


@pytest.mark.parametrize("top_keys", [1, 3])
def test_top_keys_match_the_reference_in_both_paths_a_later_chunk_and_both_paddings(top_keys, each_step):
    module = _module("knn", scale=0.5, top_keys=top_keys)
    assert module.top_keys == top_keys
    lengths = [9, 5, 2, 0]
    queries, keys, values, valid = _inputs(4, 2, 9, 7, 4, lengths, seed=5)
    state = module.init_state(keys, values, valid)
    parallel, _ = module(queries, state)
    assert_exact(parallel, _reference(module, queries, keys, values, valid), "parallel")
    later, _ = module(queries[:, :, 4:], state, start_position=4)
    assert_exact(later, _reference(module, queries[:, :, 4:], keys, values, valid, start_position=4), "later chunk")
    assert_exact(_incremental(module, queries, state)[0], parallel, "incremental")
    assert torch.equal(parallel[3], torch.zeros_like(parallel[3]))  # an empty document: output 0
    left, left_keys, left_values = _left_padded(valid, keys, values)
    left_state = module.init_state(left_keys, left_values, left)
    left_output, _ = module(queries, left_state)
    assert_exact(left_output, parallel, "left padding")
    assert_exact(_incremental(module, queries, left_state)[0], parallel, "left padding, incremental")
    assert_exact(left_output, _reference(module, queries, left_keys, left_values, left), "left padding reference")
    assert (parallel[:2] - _module("knn", scale=0.5)(queries, state)[0][:2]).abs().max() > 1e-3  # not all keys


@pytest.mark.parametrize("top_keys", [9, 10, 1000])
def test_all_keys_read_equal_full_attention(top_keys, each_step):
    """The reduction: ``top_keys >= n`` (the longest example has 9 real keys) reads every real key, so the output is
    full attention's softmax over the real keys, in float64 up to rounding, in both paths."""
    module = _module("knn", scale=0.5, top_keys=top_keys)
    queries, keys, values, valid = _inputs(3, 2, 9, 6, 4, [9, 4, 1], seed=3)
    full = naive.full_attention(queries, keys, values, valid, SRformerConfig(variant="full"), scale=0.5)
    state = module.init_state(keys, values, valid)
    assert_exact(module(queries, state)[0], full, "parallel")
    assert_exact(_incremental(module, queries, state)[0], full, "incremental")
    assert module.slots(queries, state)[0].shape[-1] == 9  # clamped to the encoder length


def test_ties_go_to_the_earlier_position_whatever_the_padding(each_step):
    """Integer keys: positions 1, 2 and 4 tie for the top score 2 (exact products), position 0 scores 1 and position
    3 scores 3. With K = 3 the query reads 3, then the earlier two of the tie, 1 and 2; left padding moves the
    positions and keeps the choice."""
    module = _module("knn", head_dim=2, top_keys=3)
    keys = torch.tensor([[[[1.0, 0.0], [2.0, 0.0], [2.0, 5.0], [3.0, 0.0], [2.0, -1.0]]]], dtype=torch.float64)
    values = torch.arange(10, dtype=torch.float64).view(1, 1, 5, 2)
    queries = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    state = module.init_state(keys, values, None)
    positions, mask = module.slots(queries, state)
    assert positions.tolist() == [[[[1, 2, 3]]]] and mask.all()
    chosen = torch.tensor([1, 2, 3])
    expected = torch.softmax(keys[0, 0, chosen] @ queries[0, 0, 0], dim=0) @ values[0, 0, chosen]
    assert_exact(module(queries, state)[0][0, 0, 0], expected, "ties to the earlier positions")
    assert_exact(module.step(queries, state, position=0)[0][0, 0, 0], expected, "ties, step")
    assert_exact(_reference(module, queries, keys, values, None)[0, 0, 0], expected, "reference tie rule")
    padded_keys = torch.cat([torch.full((1, 1, 2, 2), 2.0, dtype=torch.float64), keys], dim=2)  # ties too, but padding
    padded_values = torch.cat([torch.full((1, 1, 2, 2), 100.0, dtype=torch.float64), values], dim=2)
    valid = torch.tensor([[False, False, True, True, True, True, True]])
    padded = module.init_state(padded_keys, padded_values, valid)
    assert module.slots(queries, padded)[0].tolist() == [[[[3, 4, 5]]]]
    assert_exact(module(queries, padded)[0][0, 0, 0], expected, "left padding")
    assert_exact(module.step(queries, padded, position=0)[0][0, 0, 0], expected, "left padding, step")


def test_padding_is_never_read_even_with_the_largest_scores():
    """Padded keys aligned with the query (scores far above the real keys') are not selected: the example's output
    is the one without its padding, and the padded places of a step are masked."""
    module = _module("knn", top_keys=4)
    queries, keys, values, valid = _inputs(1, 2, 6, 3, 4, [3], seed=1)
    keys[:, :, 3:] = 50.0 * queries[:, :, :1]
    values[:, :, 3:] = 1e6
    output, _ = module(queries, module.init_state(keys, values, valid))
    alone, _ = module(queries, module.init_state(keys[:, :, :3], values[:, :, :3], None))
    assert_exact(output, alone, "padding unread")
    positions, mask = module.slots(queries, module.init_state(keys, values, valid))
    assert positions.shape[-1] == 4 and mask[..., :3].all() and not mask[..., 3:].any()
    assert (positions[..., :3] < 3).all()


def test_a_step_reads_top_keys_keys_whatever_the_encoder_length():
    module = _module("knn", top_keys=4)
    for length in (6, 40):
        queries, keys, values, _ = _inputs(2, 2, length, 1, 4, [length, length], seed=length)
        state = module.init_state(keys, values, None)
        weights = cross_attention_weights(module, queries, keys, state, start_position=0, key_valid=None)
        assert ((weights > 0).sum(-1) == 4).all() and module.slots(queries, state)[0].shape[-1] == 4
        top = torch.topk(torch.matmul(queries, keys.transpose(-1, -2)), 4, dim=-1).indices  # no ties in random data
        assert torch.equal((weights > 0), torch.zeros_like(weights, dtype=torch.bool).scatter(-1, top, True))


def test_weights_are_the_softmax_the_output_takes():
    """The weights (output_attentions) reproduce the output (O = A V) and equal the reference's own weights: the
    reference's output for one-hot values (V = I, d = k) is its weight matrix."""
    module = _module("knn", head_dim=6, scale=0.7, top_keys=2)
    queries, keys, values, valid = _inputs(2, 2, 6, 5, 6, [6, 4], seed=2)
    state = module.init_state(keys, values, valid)
    weights = cross_attention_weights(module, queries, keys, state, start_position=0, key_valid=valid)
    assert_exact(torch.matmul(weights, values), module(queries, state)[0], "O = A V")
    one_hot = torch.eye(6, dtype=torch.float64).expand(2, 2, 6, 6)
    assert_exact(weights, _reference(module, queries, keys, one_hot, valid), "reference weights")
    assert (weights[1, :, :, 4:] == 0).all()  # padding


def test_gradient_flows_through_the_selected_keys_only():
    """A hard top-k: the choice has no gradient, the softmax over the chosen keys has. One query, K = 2: the two
    chosen keys and values get gradient, the others none; the query gets gradient."""
    module = _module("knn", top_keys=2)
    queries, keys, values, _ = _inputs(1, 1, 6, 1, 4, [6], seed=4)
    for tensor in (queries, keys, values):
        tensor.requires_grad_(True)
    chosen = module.slots(queries, module.init_state(keys, values, None))[0][0, 0, 0].tolist()
    module(queries, module.init_state(keys, values, None))[0].pow(2).sum().backward()
    others = [j for j in range(6) if j not in chosen]
    assert torch.isfinite(queries.grad).all() and queries.grad.abs().sum() > 0
    for grad in (keys.grad[0, 0], values.grad[0, 0]):
        assert (grad[chosen].abs().sum(-1) > 0).all() and (grad[others] == 0).all()
    assert not list(module.parameters())


def test_a_padded_state_passes_the_gradient_to_the_real_values_only():
    """The state zeroes the values at padding (for the accelerator step's empty documents) in a form autograd
    follows: built from values that require gradient, the real positions get it, the padded ones none."""
    module = _module("knn", top_keys=2)
    queries, keys, values, valid = _inputs(2, 2, 6, 3, 4, [6, 3], seed=6)
    values.requires_grad_(True)
    module(queries, module.init_state(keys, values, valid))[0].pow(2).sum().backward()
    assert torch.isfinite(values.grad).all() and values.grad[0].abs().sum() > 0
    assert (values.grad[1, :, 3:] == 0).all() and values.grad[1, :, :3].abs().sum() > 0


def test_in_bf16_matches_the_reference_on_the_same_rounded_inputs():
    """bf16 queries, keys and values (a bf16 model): the keys are chosen in float32 from the bf16 numbers (their
    products are exact in float32, the sums of d = 4 of them within 2**-22 relatively), so the float64 reference
    given the same numbers chooses alike (no two scores of this data are that close); the output then differs only
    by bf16 rounding of the scores, probabilities and the weighted sum: a few units of 2**-8 relative to the values
    (8 allowed)."""
    queries, keys, values, valid = _inputs(2, 2, 8, 5, 4, [8, 5], seed=7)
    low = [t.to(torch.bfloat16) for t in (queries, keys, values)]
    bf16 = _module("knn", top_keys=3).to(torch.bfloat16)
    output, _ = bf16(low[0], bf16.init_state(low[1], low[2], valid))
    assert output.dtype == torch.bfloat16 and torch.isfinite(output).all()
    reference = _reference(bf16, *[t.double() for t in low], valid)
    assert (output.double() - reference).abs().max().item() <= 8 * 2.0**-8 * values.abs().max().item()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast the choice is made in float32 as well
        autocast_output, _ = bf16(low[0], bf16.init_state(low[1], low[2], valid))
    assert torch.isfinite(autocast_output).all()


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_beam_search_with_a_cache_equals_without_at_few_keys(family, each_step):
    model = converted(BUILDERS[family](), variant="knn", top_keys=2)
    ids, mask = padded_batch(model)
    check_beam_search_with_a_cache_equals_without(model, ids, mask)


def test_settings_default_registry_entry_and_bad_values():
    config = named_config("knn")
    assert config.top_keys is None and config.resolved_top_keys() == 32
    assert named_config("knn-4").resolved_top_keys() == 4
    assert SRformerConfig(variant="knn", top_keys=7).settings.to_dict() == {
        "top_keys": 7, "knn_index": None, "index_min_keys": None, "index_lists": None, "index_probes": None,
        "index_rank": None, "index_candidates": None, "index_page": None, "index_pages": None,
        "index_key_rank": None, "tail_clusters": None}
    entry = mechanism("knn")
    assert entry.capabilities.segment_free and not entry.capabilities.training_time_saving
    assert entry.state_size.startswith("2·k·d")
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match="top_keys"):
            SRformerConfig(variant="knn", top_keys=bad)
    with pytest.raises(ValueError, match="top_keys"):
        SRformerConfig(variant="segmented", top_keys=4)


def _integer_inputs(shape_keys, lengths, queries_length, seed):
    """Small integers: many equal scores, exact in float32 and float64 alike; a different value at every position
    (so that reading another key shows in the output); right padding after ``lengths``."""
    batch, heads, k, d = shape_keys
    generator = torch.Generator().manual_seed(seed)
    queries, keys, values = (torch.randint(-2, 3, shape, generator=generator).double()
                             for shape in [(batch, heads, queries_length, d), shape_keys, shape_keys])
    values = values + torch.arange(k, dtype=torch.float64)[:, None]
    valid = torch.arange(k)[None, :] < torch.tensor(lengths)[:, None]
    return queries, keys, values, valid


def test_a_float32_step_with_many_ties_reads_the_keys_of_the_float64_reference(each_step):
    """Integer keys and queries: many equal scores. The float32 step (the accelerator's: order keys and one topk,
    selection.ranked_top; the CPU's: top_positions) and the float32 parallel path read the keys of the float64
    reference (ties to the earlier position, padding never, however it is placed), so they differ from it by float32
    rounding only: the scores are exact, the softmax over K = 3 keys and the sum of 3 weighted values round a few
    times (float32_tolerance of 16 terms, generous); an empty document's step output is 0."""
    module = _module("knn", scale=0.5, top_keys=3)
    lengths = [11, 6, 2, 0]
    queries, keys, values, valid = _integer_inputs((4, 2, 11, 4), lengths, 5, seed=11)
    mask, left_keys, left_values = _left_padded(valid, keys, values)
    paddings = {"right": (keys, values, valid), "left": (left_keys, left_values, mask)}
    check_float32_reads_the_float64_reference(module, queries, paddings, terms=16)  # the empty document: row 3


@pytest.mark.parametrize("top_keys", [1, 3, 12])
def test_the_two_steps_give_the_same_output_on_the_same_state(top_keys, monkeypatch):
    """The CPU step and the accelerator step on one float64 state: integer data with many tied scores, padding on
    the right and on the left, an empty document, ``K`` below and above the real lengths; equal to float64
    rounding at every position (``exact_tolerance``: they differ only in the order of their sums)."""
    module = _module("knn", scale=0.5, top_keys=top_keys)
    lengths = [11, 6, 2, 0]
    queries, keys, values, valid = _integer_inputs((4, 2, 11, 4), lengths, 6, seed=3)
    for what, (mask, k, v) in {"right": (valid, keys, values), "left": _left_padded(valid, keys, values)}.items():
        state = module.init_state(k, v, mask)
        outputs = {}
        for kind in STEP_KINDS:
            monkeypatch.setattr(step_choice, "STEP_OVERRIDE", kind)
            outputs[kind] = _incremental(module, queries, state)[0]
        assert_exact(outputs["accelerator"], outputs["cpu"], what)
        assert_exact(outputs["cpu"], module(queries, state)[0], f"{what}, parallel")
        assert torch.equal(outputs["accelerator"][3], torch.zeros_like(outputs["accelerator"][3]))


def test_a_reordered_state_steps_as_its_rows(each_step):
    """Beam reordering (the cache layer's reorder_cache: every state tensor, rows repeated and dropped) gives the
    state of the reordered rows: a step from it equals the reordered step from the original state."""
    check_reordered_state_steps_as_its_rows(_module("knn", scale=0.5, top_keys=3),
                                            _inputs(3, 2, 9, 4, 4, [9, 4, 0], seed=8), torch.tensor([1, 1, 2]))


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_in_a_model_incremental_equals_parallel_and_padding_does_not_matter(family, each_step):
    """A converted model reading 2 keys per query and head: generation's step (each step) gives the teacher-forced
    logits of a padded batch, and each row alone those of the batch."""
    check_incremental_equals_parallel_per_row(converted(BUILDERS[family](), variant="knn", top_keys=2))


def test_the_accelerator_step_compiles_to_one_graph_and_equals_eager():
    """torch.compile (fullgraph, aot_eager) of the float32 accelerator step (order keys, their CPU scalar floor, the
    index tensors made in the graph): no graph break or host sync, and eager's output (the same float32 ops)."""
    module = _module("knn", top_keys=3).float()
    queries, keys, values, valid = (t.float() if t.is_floating_point() else t
                                    for t in _inputs(3, 2, 11, 2, 4, [11, 6, 0], seed=9))
    state = module.init_state(keys, values, valid)
    compiled = torch.compile(module.accelerator_step, fullgraph=True, backend="aot_eager")
    try:
        for t in range(2):
            query = queries[:, :, t : t + 1]
            assert torch.equal(compiled(query, state), module.accelerator_step(query, state))
    finally:
        torch._dynamo.reset()
