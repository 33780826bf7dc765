"""Pages of low-rank keys (``knn_index="loki"`` with ``index_page``, :mod:`srformer.attention.loki_pages`): the
step against the float64 reference (the keys sorted by their Morton code, the pages of best bound, then
``knn_index="loki"``'s stages among their keys), every page read being the first stage without pages, padding, the
order, no host sync and the same calls at every length, teacher forcing equal to generation, beam search, the
state's size, and the keys of the pages read scored on other channels than the bounds (``index_key_rank``)."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.attention import step_choice
from srformer.attention.knn_loki import LokiKNNState, loki_state
from srformer.attention.loki_pages import page_order
from srformer.attention.projection import HeadProjection
from srformer.attention.step_choice import STEP_KINDS
from srformer.benchmarks.operator_count import OperatorCounter
from srformer.config import SRformerConfig
from tests.attention.rows_cases import (
    SCALE,
    assert_teacher_forcing_reads_what_generation_reads,
    loki_module,
    loki_reference,
    loki_tolerance,
    padded_outputs,
    rows_inputs,
)
from tests.models.conftest import BUILDERS, converted


@pytest.mark.parametrize("step", STEP_KINDS)
@pytest.mark.parametrize(("page", "pages"), [(3, 2), (4, 2), (5, 3), (16, 2), (7, 100)])
@pytest.mark.parametrize("candidates", [3, 12])
@pytest.mark.parametrize("rank", [1, 2])
def test_the_step_is_the_paged_reference(page, pages, candidates, rank, step, monkeypatch):
    """In float64, on either route: the keys the reference reads (its pages from its own Morton codes and bounds,
    then the two stages among their keys), padding and the slots past the last key never read, 0 for the empty
    document."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    settings = {"index_rank": rank, "index_candidates": candidates, "top_keys": 3, "index_page": page,
                "index_pages": pages}
    module = loki_module(**settings)
    state = module.indexed_state(hidden, valid, projection)
    assert isinstance(state, LokiKNNState) and state.paged is not None
    with torch.no_grad():
        output, _ = module.step(queries, state, position=0)
    expected = loki_reference(hidden, valid, projection, queries, **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)
    assert torch.equal(output[2], torch.zeros_like(output[2]))


@pytest.mark.parametrize("step", STEP_KINDS)
@pytest.mark.parametrize(("rank", "key_rank"), [(1, 2), (2, 3), (2, 4), (2, 9), (3, 1)])
def test_keys_scored_on_other_channels_are_the_reference(rank, key_rank, step, monkeypatch):
    """``index_key_rank``: the bounds on the query's ``r`` channels, the keys of the pages read on its ``r'``
    largest (9 is capped at the ``m = 4`` kept; fewer than ``r`` too), in float64 on either route."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    settings = {"index_rank": rank, "index_key_rank": key_rank, "index_candidates": 4, "top_keys": 3,
                "index_page": 4, "index_pages": 3}
    module = loki_module(**settings)
    with torch.no_grad():
        output, _ = module.step(queries, module.indexed_state(hidden, valid, projection), position=0)
    expected = loki_reference(hidden, valid, projection, queries, **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)


def test_many_pages_selected_in_groups_are_the_reference(monkeypatch):
    """On the CPU route with more pages than one ``topk`` reads (1,050 pages of 8, 200 read, whose 1,600 keys hold
    the candidates): both selections go through groups
    (:func:`~srformer.attention.selection.grouped_topk`), and the step is still the float64 reference."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "cpu")
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 8400, 8, generator=generator, dtype=torch.float64)
    valid = torch.ones(2, 8400, dtype=torch.bool)
    valid[1, :700] = False
    _, _, projection, queries = rows_inputs(torch.float64)
    settings = {"index_rank": 2, "index_candidates": 12, "top_keys": 3, "index_page": 8, "index_pages": 200}
    module = loki_module(**settings)
    with torch.no_grad():
        output, _ = module.step(queries[:2], module.indexed_state(hidden, valid, projection), position=0)
    expected = loki_reference(hidden, valid, projection, queries[:2], **settings)
    assert (output - expected).abs().max().item() <= loki_tolerance(hidden, projection)


def test_the_keys_channels_change_what_is_read():
    """The reference's ``r'`` matters: scoring the keys of the pages read on four channels instead of one changes
    the keys read for some query (else the test above could not tell the two apart)."""
    torch.manual_seed(0)  # the projection's weights
    hidden, valid, projection, queries = rows_inputs(torch.float64, seed=1)
    settings = {"index_rank": 1, "index_candidates": 3, "top_keys": 3, "index_page": 4, "index_pages": 3}
    wide = loki_reference(hidden, valid, projection, queries, index_key_rank=4, **settings)
    narrow = loki_reference(hidden, valid, projection, queries, **settings)
    assert (wide - narrow).abs().max().item() > 1e-3


def test_pages_change_what_is_read():
    """The reference's pages matter: with two pages of three keys read, the keys read differ from those without
    pages for some query (else the test above could not tell the two apart)."""
    torch.manual_seed(0)  # the projection's weights
    hidden, valid, projection, queries = rows_inputs(torch.float64, seed=1)
    settings = {"index_rank": 2, "index_candidates": 12, "top_keys": 3}
    paged = loki_reference(hidden, valid, projection, queries, index_page=3, index_pages=2, **settings)
    flat = loki_reference(hidden, valid, projection, queries, **settings)
    assert (paged - flat).abs().max().item() > 1e-3


def test_every_page_read_is_the_first_stage_without_pages():
    """``P·b >= k``: the same output as ``knn_index="loki"`` without pages."""
    hidden, valid, projection, queries = rows_inputs(torch.float64)
    settings = {"index_rank": 2, "index_candidates": 6, "top_keys": 3}
    with torch.no_grad():
        state = loki_state(hidden, valid, projection, 2, scale=SCALE)
        flat = loki_module(**settings).step(queries, state, position=0)[0]
        module = loki_module(index_page=4, index_pages=10, **settings)
        paged = module.step(queries, module.indexed_state(hidden, valid, projection), position=0)[0]
    torch.testing.assert_close(paged, flat, rtol=0, atol=1e-12)


def test_the_order_sorts_by_interleaved_levels():
    """Levels cut at the real values' octiles (here -2, -0.5, -0.5, 0.5, 0.5, 2, 2 for the real values 2, -2, 0.5,
    -0.5, 2: levels 5, 0, 3, 1, 5), the largest-variance channel's bits first in the code (codes 34, 0, 10, 2, 34);
    ties keep the encoder order; padded positions come last, and their values do not move the cuts."""
    whitened = torch.zeros(1, 1, 2, 6, dtype=torch.float64)
    whitened[0, 0, 1] = torch.tensor([2.0, -2.0, 0.5, -0.5, 2.0, -2.0])  # the largest variance is the last channel
    valid = torch.tensor([[True, True, True, True, True, False]])
    order = page_order(whitened, valid)[0, 0].tolist()
    assert order == [1, 3, 2, 0, 4, 5]
    whitened[0, 0, 1, 5] = -100.0  # padding
    assert page_order(whitened, valid)[0, 0].tolist() == order


def test_padding_does_not_change_an_examples_output():
    """Left or right padding of the same real rows: the same output (the real keys' order, pages and bounds do
    not depend on the padding)."""
    hidden, _, projection, queries = rows_inputs(torch.float64)
    module = loki_module(top_keys=3, index_rank=2, index_candidates=6, index_page=4, index_pages=2)
    outputs = padded_outputs(hidden, lambda rows, valid: module.step(
        queries[:1], loki_state(rows, valid, projection, 2, 4, scale=SCALE), position=0)[0])
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], rtol=0, atol=1e-12)


def test_the_step_makes_no_host_sync_and_the_same_calls_at_every_length(monkeypatch):
    """On the accelerator route: no host sync, the same operator calls whatever ``k``: 25 (views included; 24 and
    the value bias's add), 3 more than without pages (the page stage's eight calls, two of them fused channel sums,
    the second through a view of the page-major channels, in place of the first stage's ``embedding_bag`` with its
    index arithmetic and views)."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    hidden, valid, projection, queries = rows_inputs(torch.float32)
    module = loki_module(top_keys=4, index_rank=2, index_candidates=8, index_page=4, index_pages=2)
    totals = []
    for repeat in (1, 4):
        state = loki_state(hidden.repeat(1, repeat, 1), valid.repeat(1, repeat), projection, 2, 4, scale=SCALE)
        module.step(queries, state, position=0)
        with torch.no_grad(), OperatorCounter() as counter:
            module.step(queries, state, position=0)
        assert counter.syncs == 0, counter.calls
        totals.append(counter.total)
    assert totals[0] == totals[1], totals
    assert totals[0] == 25, totals
    module = loki_module(top_keys=4, index_rank=2, index_key_rank=4, index_candidates=8, index_page=4, index_pages=2)
    module.step(queries, state, position=0)
    with torch.no_grad(), OperatorCounter() as counter:
        module.step(queries, state, position=0)
    assert counter.syncs == 0 and counter.total == 27, counter.calls  # the bounds' channels: two slices


def test_the_state_keeps_a_small_fraction_of_full_attentions_cache():
    """t5-small's shape (8 heads of 64) at 65,536 tokens, pages of 16: the channels in page order (0.19x), the
    page bounds, the slots' positions and the query map stay under 0.25x full attention's float32 keys and
    values."""
    heads, head_dim, length = 8, 64, 65536
    key = torch.nn.Linear(512, heads * head_dim, bias=False)
    value = torch.nn.Linear(512, heads * head_dim, bias=False)
    projection = HeadProjection.from_linear(key, value, heads, head_dim)
    assert projection is not None
    state = loki_state(torch.randn(1, length, 512), None, projection, 12, 16, scale=SCALE)
    assert state.paged is not None and state.paged.shape == (heads, length // 16, 48, 16)
    assert state.channels.shape == (heads, 48, length // 16, 1)
    full_cache = 2 * heads * length * head_dim * 4
    assert state.nbytes() <= 0.25 * full_cache, state.nbytes() / full_cache


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_teacher_forcing_reads_what_generation_reads(family):
    """A float64 model whose pages drop keys (pages of 3, two read): greedy generation's scores equal the
    teacher-forced forward pass's, which reads the same pages; beam search runs."""
    model = converted(BUILDERS[family](), variant="knn", top_keys=2, knn_index="loki", index_min_keys=1,
                      index_rank=2, index_candidates=4, index_page=3, index_pages=2)
    assert_teacher_forcing_reads_what_generation_reads(model)


def test_teacher_forcing_reads_what_generation_reads_with_the_keys_channels():
    """The same with the keys of the pages read scored on more channels than the bounds."""
    model = converted(BUILDERS["t5"](), variant="knn", top_keys=2, knn_index="loki", index_min_keys=1,
                      index_rank=1, index_key_rank=3, index_candidates=3, index_page=3, index_pages=2)
    assert_teacher_forcing_reads_what_generation_reads(model)


def test_settings_are_named_and_checked():
    config = srformer.named_config("knn-loki-pages")
    assert config.knn_index == "loki" and config.index_page == 16 and config.index_pages == 256
    lean = srformer.named_config("knn-loki-pages-c64")
    assert (lean.index_page, lean.index_pages, lean.index_candidates, lean.index_key_rank) == (16, 256, 64, 24)
    with pytest.raises(ValueError, match="index_key_rank"):  # it scores the keys of pages: pages are needed
        SRformerConfig("knn", knn_index="loki", index_key_rank=24)
    with pytest.raises(ValueError, match="index_key_rank"):
        SRformerConfig("knn", knn_index="loki", index_page=16, index_key_rank=0)
    for name in ("index_page", "index_pages"):
        with pytest.raises(ValueError, match=name):
            SRformerConfig("knn", knn_index="loki", **{name: 0})
    with pytest.raises(ValueError, match="index_pages"):  # two pages of 16 cannot be sure to hold 32 keys
        SRformerConfig("knn", knn_index="loki", index_page=16, index_pages=2)
