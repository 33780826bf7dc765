"""The keys not read, estimated through clusters of keys (``tail_clusters``, :mod:`srformer.attention.key_clusters`):
the step and the parallel path against the float64 reference, the clusters, the exact search when every key is read,
padding, no host sync and the same calls at every length, teacher forcing equal to generation, the state's size and
the settings."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.attention import step_choice
from srformer.attention.content import ContentState
from srformer.attention.key_clusters import cluster_keys, cluster_sums
from srformer.attention.knn_loki import LokiKNNState, loki_state
from srformer.attention.projection import HeadProjection
from srformer.attention.step_choice import STEP_KINDS
from srformer.benchmarks.operator_count import OperatorCounter
from srformer.config import SRformerConfig
from tests.attention.rows_cases import (
    HEADS,
    LENGTH,
    SCALE,
    assert_teacher_forcing_reads_what_generation_reads,
    loki_module,
    loki_reference,
    loki_tolerance,
    padded_outputs,
    rows_inputs,
)
from tests.models.conftest import BUILDERS, converted

SETTINGS = [
    {"top_keys": 2, "index_rank": 2, "index_candidates": 6, "tail_clusters": 3},
    {"top_keys": 3, "index_rank": 4, "index_candidates": 50, "tail_clusters": 8},
    {"top_keys": 3, "index_rank": 2, "index_candidates": 6, "index_page": 4, "index_pages": 2, "tail_clusters": 5},
    {"top_keys": 1, "index_rank": 1, "index_candidates": 3, "tail_clusters": 64},  # more clusters than keys
]


@pytest.mark.parametrize("step", STEP_KINDS)
@pytest.mark.parametrize("settings", SETTINGS)
def test_the_step_is_the_reference(settings, step, monkeypatch):
    """In float64, on either route: each key read at its exact score, every other real key at its cluster's mean
    key (the reference clusters the keys on its own), 0 for the empty document."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    module = loki_module(**settings)
    state = module.indexed_state(hidden, valid, projection)
    assert isinstance(state, LokiKNNState) and state.cluster_row_sums is not None
    with torch.no_grad():
        output, _ = module.step(queries, state, position=0)
    expected = loki_reference(hidden, valid, projection, queries, **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)
    assert torch.equal(output[2], torch.zeros_like(output[2]))


@pytest.mark.parametrize("step", STEP_KINDS)
@pytest.mark.parametrize("settings", [{}, *SETTINGS[:3]])
def test_a_step_recording_gradients_is_the_reference_too(settings, step, monkeypatch):
    """With autograd recording (the chosen rows read again so that the gradient reaches them), a step outputs the
    float64 reference's output, the clusters' estimate included, and its gradient reaches the queries."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    settings = settings or {"top_keys": 3, "index_rank": 2, "index_candidates": 6}  # no clusters: the pick's softmax
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    module = loki_module(**settings)
    state = module.indexed_state(hidden, valid, projection)
    queries = queries.clone().requires_grad_(True)
    output, _ = module.step(queries, state, position=0)
    expected = loki_reference(hidden, valid, projection, queries.detach(), **settings)
    assert (output.detach() - expected).abs().max().item() <= loki_tolerance(hidden, projection)
    output[:2].sum().backward()
    assert queries.grad is not None and queries.grad[:2].abs().sum() > 0


@pytest.mark.parametrize("settings", SETTINGS)
def test_the_parallel_path_is_the_reference_and_o_is_a_v(settings):
    """Teacher forcing and training (the projected keys and values, several queries): the reference's output, and
    the attention weights it reports give it exactly (``O = A V``), summing to 1 per query of a real document."""
    hidden, valid, projection, _ = rows_inputs(torch.float64)
    module = loki_module(**settings).double()
    queries = torch.randn(hidden.shape[0], HEADS, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        keys, values = projection.project(hidden[:, None].expand(-1, HEADS, -1, -1))
    state = module.init_state(keys, values, valid)
    assert isinstance(state, ContentState)
    with torch.no_grad():
        output, _ = module(queries, state)
        weights = module.probabilities(queries, state)
    expected = loki_reference(hidden, valid, projection, queries, **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)
    assert (weights @ state.values - output).abs().max().item() <= loki_tolerance(hidden, projection)
    torch.testing.assert_close(weights[:2].sum(-1), torch.ones_like(weights[:2, ..., 0]), rtol=0, atol=1e-12)
    assert (weights[1, ..., :7] == 0).all()  # padding weighs nothing


def test_the_clusters_change_the_output_and_vanish_when_every_key_is_read():
    """Without the clusters the keys not read are dropped (a different output, else the tests above could not tell
    the two apart); with every key read (``K >= k``) the clusters add nothing, to the last bit of the weights."""
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    narrow = {"top_keys": 2, "index_rank": 2, "index_candidates": 6}
    assert (loki_reference(hidden, valid, projection, queries, **narrow)
            - loki_reference(hidden, valid, projection, queries, tail_clusters=4, **narrow)).abs().max() > 1e-3
    every = {"top_keys": LENGTH, "index_rank": 2, "index_candidates": LENGTH}
    with torch.no_grad():
        plain = loki_module(**every).step(queries, loki_module(**every).indexed_state(hidden, valid, projection),
                                          position=0)[0]
        tail = loki_module(tail_clusters=4, **every)
        with_tail = tail.step(queries, tail.indexed_state(hidden, valid, projection), position=0)[0]
    assert (with_tail - plain).abs().max().item() <= loki_tolerance(hidden, projection)


def test_clusters_group_separated_keys_and_skip_padding():
    """Three well-separated groups of keys, each a run of positions (a document's parts), three clusters: each group
    is one cluster; padded positions get ``C``; the sums and counts are each cluster's, padding left out."""
    generator = torch.Generator().manual_seed(0)
    centres = torch.tensor([[10.0, 0.0], [0.0, 10.0], [-10.0, -10.0]], dtype=torch.float64)
    group = torch.arange(30) // 9 % 3  # runs of 9 (the last 3 positions, padding, in the first group)
    points = (centres[group] + 0.1 * torch.randn(30, 2, generator=generator, dtype=torch.float64))[None, None]
    valid = torch.ones(1, 30, dtype=torch.bool)
    valid[0, 27:] = False
    assigned = cluster_keys(points, valid, 3)
    assert (assigned[0, 0, 27:] == 3).all()
    real = assigned[0, 0, :27]
    for g in range(3):
        assert real[group[:27] == g].unique().numel() == 1
    assert real.unique().numel() == 3
    sums, counts = cluster_sums(points, assigned, 3)
    assert sorted(counts[0, 0].tolist()) == [9.0, 9.0, 9.0]
    torch.testing.assert_close(sums.sum(2)[0, 0], points[0, 0, :27].sum(0), rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="tail_clusters"):
        cluster_keys(points, valid, 0)


def test_padding_does_not_change_an_examples_output():
    """Left or right padding of the same real rows: the same output (the clusters are the real keys')."""
    hidden, _, projection, queries = rows_inputs(torch.float64)
    module = loki_module(top_keys=3, index_rank=2, index_candidates=6, index_page=4, index_pages=2, tail_clusters=5)
    outputs = padded_outputs(hidden, lambda rows, valid: module.step(
        queries[:1], loki_state(rows, valid, projection, 2, 4, 5, scale=SCALE), position=0)[0])
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], rtol=0, atol=1e-12)


def test_the_step_makes_no_host_sync_and_the_same_calls_at_every_length(monkeypatch):
    """On the accelerator route: no host sync, the same operator calls whatever ``k`` (views included): the
    clusters' estimate takes 37 more than ``knn-loki-pages``' step (the read rows' positions and clusters, the read
    keys' scores taken out of their clusters, the clusters' scores, the weights, the products, the views between
    each head's and each example's batches), in place of its softmax over the rows read."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    hidden, valid, projection, queries = rows_inputs(torch.float32)
    totals = {}
    for clusters in (None, 6):
        module = loki_module(top_keys=4, index_rank=2, index_candidates=8, index_page=4, index_pages=2,
                             tail_clusters=clusters)
        counts = []
        for repeat in (1, 4):
            state = loki_state(hidden.repeat(1, repeat, 1), valid.repeat(1, repeat), projection, 2, 4, clusters,
                               scale=SCALE)
            module.step(queries, state, position=0)
            with torch.no_grad(), OperatorCounter() as counter:
                module.step(queries, state, position=0)
            assert counter.syncs == 0, counter.calls
            counts.append(counter.total)
        assert counts[0] == counts[1], counts
        totals[clusters] = counts[0]
    assert totals[None] == 25 and totals[6] == 25 + 37, totals


def test_the_state_keeps_a_small_fraction_of_full_attentions_cache():
    """t5-small's shape (8 heads of 64) at 65,536 tokens, pages of 16 and 1,024 clusters shared by the heads: at
    most 0.25x full attention's float32 keys and values (the aim), the clusters adding under 0.011x (each
    position's cluster, once for all heads, and the clusters' sums of rows, once for all heads)."""
    heads, head_dim, length = 8, 64, 65536
    key = torch.nn.Linear(512, heads * head_dim, bias=False)
    value = torch.nn.Linear(512, heads * head_dim, bias=False)
    projection = HeadProjection.from_linear(key, value, heads, head_dim)
    assert projection is not None
    hidden = torch.randn(1, length, 512)
    plain = loki_state(hidden, None, projection, 12, 16, scale=SCALE)
    state = loki_state(hidden, None, projection, 12, 16, 1024, scale=SCALE)
    assert state.cluster_row_sums is not None and state.cluster_row_sums.shape == (1, 1024, 512)
    assert state.cluster_of is not None and state.cluster_of.shape == (1, length)
    full_cache = 2 * heads * length * head_dim * 4
    assert (state.nbytes() - plain.nbytes()) <= 0.011 * full_cache, (state.nbytes() - plain.nbytes()) / full_cache
    assert state.nbytes() <= 0.25 * full_cache, state.nbytes() / full_cache


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_teacher_forcing_reads_what_generation_reads(family):
    """A float64 model that reads 2 keys and estimates the rest through 3 clusters: greedy generation's scores
    equal the teacher-forced forward pass's; beam search runs."""
    model = converted(BUILDERS[family](), variant="knn", top_keys=2, knn_index="loki", index_min_keys=1,
                      index_rank=2, index_candidates=4, index_page=3, index_pages=2, tail_clusters=3)
    assert_teacher_forcing_reads_what_generation_reads(model)


def test_settings_are_named_and_checked():
    config = srformer.named_config("knn-loki-tail")
    assert config.knn_index == "loki" and config.index_page == 16 and config.tail_clusters == 1024
    with pytest.raises(ValueError, match="tail_clusters"):
        SRformerConfig("knn", knn_index="loki", tail_clusters=0)
    with pytest.raises(ValueError, match="knn_index='loki'"):
        SRformerConfig("knn", tail_clusters=8)
