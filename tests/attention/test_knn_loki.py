"""``knn`` through low-rank keys first (``knn_index="loki"``, :mod:`srformer.attention.knn_loki`): the step and the
parallel path against the float64 reference (Loki's first stage, then the exact top ``K`` of the candidates), the
exact search when every key is a candidate, padding, an empty document, no host sync and the same calls at every
length, teacher forcing equal to generation, beam search, the state's size and the settings."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.attention import step_choice
from srformer.attention.knn import KNNCrossAttention
from srformer.attention.knn_loki import LokiKNNState, loki_basis, loki_state, stored_channels
from srformer.attention.projection import HeadProjection
from srformer.attention.step_choice import STEP_KINDS
from srformer.benchmarks.operator_count import OperatorCounter
from srformer.config import SRformerConfig
from tests.attention.rows_cases import (
    BATCH,
    HEAD_DIM,
    HEADS,
    LENGTH,
    SCALE,
    assert_generation_equals_the_exact_search,
    assert_teacher_forcing_reads_what_generation_reads,
    loki_module,
    loki_reference,
    loki_tolerance,
    padded_outputs,
    rows_inputs,
)
from tests.models.conftest import BUILDERS, converted, padded_batch


@pytest.mark.parametrize("step", STEP_KINDS)
@pytest.mark.parametrize("rank", [1, 2, 4])
@pytest.mark.parametrize("candidates", [3, 12, 50])
@pytest.mark.parametrize("top_keys", [1, 3])
def test_the_step_is_the_two_stage_reference(rank, candidates, top_keys, step, monkeypatch):
    """In float64, with either route's gathers (the CPU's ``index_select`` of flat rows, advanced indexing
    elsewhere): the same keys as the reference's two stages (``C`` best scores on the ``r`` principal channels the
    query weighs most, then the top ``K`` of them by exact score), padding never read, 0 for the empty document;
    ``C >= k`` or ``r = d`` is the exact search."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    settings = {"index_rank": rank, "index_candidates": candidates, "top_keys": top_keys}
    module = loki_module(**settings)
    state = module.indexed_state(hidden, valid, projection)
    assert isinstance(state, LokiKNNState) and state.rows is hidden
    with torch.no_grad():
        output, same = module.step(queries, state, position=0)
    assert same is state
    expected = loki_reference(hidden, valid, projection, queries, **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)
    assert torch.equal(output[2], torch.zeros_like(output[2]))


def test_a_long_input_selected_in_groups_is_the_reference(monkeypatch):
    """On the CPU route with more keys than one ``topk`` reads (3,000, padded on the left in the second example):
    the first stage's selection goes through groups (:func:`~srformer.attention.selection.grouped_topk`), and the
    step is still the float64 reference."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "cpu")
    hidden = torch.randn(2, 3000, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    valid = torch.ones(2, 3000, dtype=torch.bool)
    valid[1, :900] = False
    _, _, projection, queries = rows_inputs(torch.float64)
    settings = {"index_rank": 2, "index_candidates": 300, "top_keys": 3}
    module = loki_module(**settings)
    with torch.no_grad():
        output, _ = module.step(queries[:2], module.indexed_state(hidden, valid, projection), position=0)
    expected = loki_reference(hidden, valid, projection, queries[:2], **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)


def test_a_narrow_first_stage_changes_what_is_read():
    """The reference's stages matter: with one direction and few candidates the keys read are not the exact
    search's for some query (else the tests above could not tell the two apart)."""
    hidden, valid, projection, queries = rows_inputs(torch.float64, seed=1)
    loki = loki_reference(hidden, valid, projection, queries, index_rank=1, index_candidates=3, top_keys=3)
    exact = loki_reference(hidden, valid, projection, queries, index_rank=HEAD_DIM, index_candidates=LENGTH,
                       top_keys=3)
    assert (loki - exact).abs().max().item() > 1e-3


def test_the_basis_is_the_principal_directions_of_the_real_keys():
    """Against the eigenvectors and eigenvalues of the real keys' centred covariance, per example and head; padded
    keys, whatever their values, change nothing."""
    generator = torch.Generator().manual_seed(3)
    keys = torch.randn(2, 3, 30, 5, generator=generator, dtype=torch.float64)
    valid = torch.ones(2, 30, dtype=torch.bool)
    valid[1, 20:] = False
    basis, scales = loki_basis(keys, valid, 2)
    keys[1, :, 20:] = 1e3  # padding
    again, same_scales = loki_basis(keys, valid, 2)
    assert torch.allclose(again.abs(), basis.abs(), rtol=0, atol=1e-9)
    assert torch.allclose(same_scales, scales, rtol=1e-12, atol=0)
    for b in range(2):
        for h in range(3):
            real = keys[b, h][valid[b]]
            centred = real - real.mean(0)
            values, vectors = torch.linalg.eigh(centred.T @ centred)
            # the same directions (an eigenvector's sign is free), the spread along them
            assert torch.allclose((vectors[:, -2:].T @ basis[b, h]).abs(), torch.eye(2, dtype=torch.float64),
                                  atol=1e-9)
            assert torch.allclose(scales[b, h], values[-2:].sqrt(), rtol=1e-12, atol=0)


def test_channels_and_query_map_hold_each_product_with_a_positive_query_value():
    """For any query, the ``r`` largest of the ``2m`` mapped components pick the ``r`` channels of largest
    ``|x_i| s_i``, each value positive, and the channels' rows they index hold ``x_i c_ji`` once multiplied: the
    sum over them is the score on those channels."""
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    state = loki_state(hidden, valid, projection, 1, scale=SCALE)  # m = 2 of d = 4 kept, one read
    keys = projection.keys(hidden)
    vectors, scales = loki_basis(keys, valid, 2)
    mapped = queries.reshape(BATCH * HEADS, 1, HEAD_DIM) @ state.query_map[:, :, :4]  # (B·H, 1, 2m)
    top = mapped.topk(1, dim=-1)
    assert (top.values > 0).all()
    channels = state.channels.view(BATCH * HEADS, 4, LENGTH)  # (B·H, 2m, k)
    rough = (top.values * channels[torch.arange(BATCH * HEADS)[:, None, None], top.indices][:, 0]).squeeze(1)
    rotated = (queries @ vectors).reshape(BATCH * HEADS, 2)  # x_i per (example, head)
    weight = rotated.abs() * scales.reshape(BATCH * HEADS, 2)
    channel = weight.argmax(-1)
    on_channels = (keys @ vectors).reshape(BATCH * HEADS, LENGTH, 2)
    expected = rotated.gather(-1, channel[:, None]) * on_channels.gather(
        -1, channel[:, None, None].expand(-1, LENGTH, 1))[..., 0]
    real = valid.repeat_interleave(HEADS, dim=0)
    torch.testing.assert_close(rough[real], expected[real], rtol=1e-12, atol=1e-12)
    padded = ~real & real.any(-1, keepdim=True)  # an empty document has no basis to speak of: it reads nothing
    assert padded.any() and (rough[padded] < -1e15).all()  # padding scores last


def test_padding_does_not_change_an_examples_output():
    """Left or right padding of the same real rows: the same output."""
    hidden, _, projection, queries = rows_inputs(torch.float64)
    module = loki_module(top_keys=3, index_rank=2, index_candidates=6)
    outputs = padded_outputs(hidden, lambda rows, valid: module.step(
        queries[:1], loki_state(rows, valid, projection, 2, scale=SCALE), position=0)[0])
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], rtol=0, atol=1e-12)


def test_the_step_makes_no_host_sync_and_the_same_calls_at_every_length(monkeypatch):
    """On either device's route (one step for both): no host sync, the same operator calls whatever ``k``."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    hidden, valid, projection, queries = rows_inputs(torch.float32)
    module = loki_module(top_keys=4, index_rank=2, index_candidates=8)
    totals = []
    for repeat in (1, 4):
        state = loki_state(hidden.repeat(1, repeat, 1), valid.repeat(1, repeat), projection, 2, scale=SCALE)
        module.step(queries, state, position=0)  # the module's index tensors, made once per batch size
        with torch.no_grad(), OperatorCounter() as counter:
            module.step(queries, state, position=0)
        assert counter.syncs == 0, counter.calls
        totals.append(counter.total)
    assert totals[0] == totals[1] == 22, totals  # 21, and 1 for the value projection's bias (add)


def test_the_state_keeps_a_small_fraction_of_full_attentions_cache():
    """Beyond the encoder output: the channels (bfloat16, ``2m = 48`` per head and position for r = 12), the query
    map, the order keys and the mask; t5-small's shape (8 heads of 64) at 16,384 tokens: under 0.25x full
    attention's float32 keys and values (0.21x: the channels 0.19x, the query map 1.1 MiB)."""
    heads, head_dim, length = 8, 64, 16384
    key = torch.nn.Linear(512, heads * head_dim, bias=False)
    value = torch.nn.Linear(512, heads * head_dim, bias=False)
    projection = HeadProjection.from_linear(key, value, heads, head_dim)
    assert projection is not None
    state = loki_state(torch.randn(1, length, 512), None, projection, 12, scale=SCALE)
    assert stored_channels(12, head_dim) == 24
    assert state.channels.dtype == torch.bfloat16 and state.channels.shape == (heads * 48, length)
    full_cache = 2 * heads * length * head_dim * 4
    assert state.nbytes() <= 0.25 * full_cache, state.nbytes() / full_cache


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_teacher_forcing_reads_what_generation_reads(family):
    """A float64 model whose first stage drops keys (one direction, four candidates of each input's 9-13 tokens):
    greedy generation's scores equal the teacher-forced forward pass's, which runs the same two stages; beam
    search runs and its best sequence is scored the same way."""
    model = converted(BUILDERS[family](), variant="knn", top_keys=2, knn_index="loki", index_min_keys=1,
                      index_rank=1, index_candidates=4)
    assert_teacher_forcing_reads_what_generation_reads(model)


def test_settings_are_named_and_checked():
    assert srformer.named_config("knn-loki").knn_index == "loki"
    for name in ("index_rank", "index_candidates"):
        with pytest.raises(ValueError, match=name):
            SRformerConfig("knn", knn_index="loki", **{name: 0})
    hidden, valid, projection, _ = rows_inputs(torch.float32)
    late = KNNCrossAttention(SRformerConfig("knn", segment_size=4, knn_index="loki", index_min_keys=41), HEAD_DIM)
    assert late.indexed_state(hidden, valid, projection) is None  # the padded length decides


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_beam_search_with_every_key_a_candidate_is_the_exact_search(family):
    """``C >= k``: greedy and beam search (float64 models) give the exact ``knn``'s tokens and scores, so the
    state's per-example mapping under beam reorders keeps each beam's low-rank keys and basis with its rows."""
    model = converted(BUILDERS[family](), variant="knn", top_keys=3)
    ids, mask = padded_batch(model)
    assert_generation_equals_the_exact_search(model, ids, mask, knn_index="loki", index_min_keys=1, index_rank=1,
                                              index_candidates=ids.shape[1])
