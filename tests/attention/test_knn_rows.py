"""``knn`` searching the encoder output's rows in torch (``knn_index="rows"``, :mod:`srformer.attention.knn_rows`):
the exact search's keys and output (ties to the earlier position, padding, an empty document), generation equal to
the exact ``knn`` with greedy and beam search, one copy of the rows for every layer after a beam reorder, no host
sync, the state's bytes, the memory estimate and the settings."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.attention import knn as knn_module
from srformer.attention import step_choice
from srformer.attention.knn import KNNCrossAttention, KNNState
from srformer.attention.knn_rows import RowsKNNState, rows_state
from srformer.attention.step_choice import STEP_KINDS
from srformer.benchmarks.generation import cross_attention_cache_bytes
from srformer.benchmarks.operator_count import OperatorCounter
from srformer.config import SRformerConfig
from srformer.models.memory_estimate import estimate_decode_memory
from tests.attention.rows_cases import (
    HEAD_DIM,
    HEADS,
    LENGTH,
    assert_generation_equals_the_exact_search,
    padded_outputs,
    rows_inputs,
)
from tests.models.conftest import BUILDERS, converted, padded_batch, plain_generation_config


def _module(**settings) -> KNNCrossAttention:
    return KNNCrossAttention(SRformerConfig("knn", segment_size=4, **settings), HEAD_DIM, scale=0.5)


def _exact_output(hidden, valid, projection, queries, top_keys):
    """The exact search's step over every position's projected keys and values (float64 reference path)."""
    exact = _module(top_keys=top_keys)
    with torch.no_grad():
        keys, values = projection.project(hidden[:, None].expand(-1, HEADS, -1, -1))
        output, _ = exact.step(queries, exact.init_state(keys, values, valid), position=0)
    return output


@pytest.mark.parametrize("step", STEP_KINDS)
@pytest.mark.parametrize("tied", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("top_keys", [1, 6, 50])
def test_the_rows_step_is_the_exact_search(top_keys, tied, step, monkeypatch):
    """In float64, with either selection (the CPU's ``topk`` and host check, or the order keys run elsewhere), the
    same output as the exact ``knn`` (which keeps the projected keys and values): the same keys read, ties settled
    toward the earlier position (``ties``: most scores equal, the values not), padding never read, and 0 for the
    empty document."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", step)
    hidden, valid, projection, queries = rows_inputs(torch.float64, tied=tied)
    module = _module(top_keys=top_keys, knn_index="rows", index_min_keys=1)
    state = module.indexed_state(hidden, valid, projection)
    assert isinstance(state, RowsKNNState) and state.rows is hidden  # held, not copied
    with torch.no_grad():
        output, same = module.step(queries, state, position=0)
    assert same is state
    expected = _exact_output(hidden, valid, projection, queries, top_keys)
    tolerance = 64 * torch.finfo(torch.float64).eps * float(hidden.abs().max()) * float(
        projection.value_weight.abs().sum(-1).max() + 1)
    assert (output - expected).abs().max().item() <= tolerance
    assert torch.equal(output[2], torch.zeros_like(output[2]))  # the empty document reads nothing


def test_padding_does_not_change_an_examples_output():
    """Left or right padding of the same real rows: the same output (positions are compared among real rows)."""
    hidden, _, projection, queries = rows_inputs(torch.float64)
    module = _module(top_keys=5, knn_index="rows", index_min_keys=1)
    outputs = padded_outputs(hidden, lambda rows, valid: module.step(
        queries[:1], rows_state(rows, valid, projection), position=0)[0])
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], rtol=0, atol=1e-12)


def test_the_step_makes_no_host_sync_and_the_same_calls_at_every_length(monkeypatch):
    """Off the CPU (the CPU's selection reads whether a tie at the cut is left out: free there)."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", "accelerator")
    hidden, valid, projection, queries = rows_inputs(torch.float32)
    module = _module(top_keys=4, knn_index="rows", index_min_keys=1)
    totals = []
    for length in (LENGTH, 4 * LENGTH):
        rows = hidden.repeat(1, length // LENGTH, 1)
        state = rows_state(rows, valid.repeat(1, length // LENGTH), projection)
        module.step(queries, state, position=0)  # the module's index tensors, made once per batch size
        with torch.no_grad(), OperatorCounter() as counter:
            module.step(queries, state, position=0)
        assert counter.syncs == 0, counter.calls
        totals.append(counter.total)
    assert totals[0] == totals[1] <= 21, totals  # 18, and 3 for the value projection's bias (view, mul, add)


def test_short_inputs_take_the_exact_state_and_bad_settings_are_named():
    hidden, valid, projection, _ = rows_inputs(torch.float32)
    assert _module(knn_index="rows").indexed_state(hidden, valid, projection) is None  # 40 tokens < 16,384
    assert _module(knn_index="rows", index_min_keys=41).indexed_state(hidden, valid, projection) is None
    assert isinstance(_module(knn_index="rows", index_min_keys=40).indexed_state(hidden, valid, projection),
                      RowsKNNState)  # the padded length decides
    with pytest.raises(ValueError, match="`knn_index` must be None .* 'rows'"):
        SRformerConfig("knn", knn_index="row")


def test_the_rows_need_no_faiss(monkeypatch):
    monkeypatch.setattr(knn_module, "faiss_available", lambda: False)
    model = converted(BUILDERS["t5"](), variant="knn", knn_index="rows", index_min_keys=1)
    assert srformer.SRformerConfig.from_dict(model.config.srformer).knn_index == "rows"


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_generate_through_the_rows_equals_the_exact_search(family):
    """Greedy and beam search (float64 models, 3 keys per query and head out of each input's real tokens) give the
    exact ``knn``'s tokens and scores; after beam reorders every layer still reads one tensor of rows."""
    model = converted(BUILDERS[family](), variant="knn", top_keys=3)
    ids, mask = padded_batch(model)
    generations = assert_generation_equals_the_exact_search(model, ids, mask, knn_index="rows", index_min_keys=1)
    for beams, rows in zip((1, 3), generations, strict=True):
        states = [layer.state for layer in rows.past_key_values.cross_attention_cache.layers]
        assert all(isinstance(state, RowsKNNState) for state in states)
        assert all(state.rows is states[0].rows for state in states)  # one copy for every layer
        assert states[0].rows.shape[0] == ids.shape[0] * beams


def test_the_state_counts_its_own_tensors_and_the_memory_estimate():
    model = converted(BUILDERS["bart"](), variant="knn", knn_index="rows", index_min_keys=1)
    ids, mask = padded_batch(model)
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        from transformers.modeling_outputs import BaseModelOutput

        output = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=encoded), attention_mask=mask,
                                generation_config=plain_generation_config(model, max_new_tokens=3,
                                                                          return_dict_in_generate=True))
    states = [layer.state for layer in output.past_key_values.cross_attention_cache.layers]
    assert all(isinstance(state, RowsKNNState) for state in states)
    batch, length = mask.shape
    assert states[0].nbytes() == batch * length * (8 + 8) + batch * (3 * 8 + 8)  # order term, mask; 3 longs, flag
    per_layer = sum(state.nbytes() for state in states)
    assert cross_attention_cache_bytes(output.past_key_values, encoded) == per_layer + encoded.numel() * 8

    shape = model.config
    long = 1 << 18
    exact = estimate_decode_memory(SRformerConfig("knn"), shape, 1, long, torch.bfloat16)
    rows = estimate_decode_memory(SRformerConfig("knn", knn_index="rows"), shape, 1, long, torch.bfloat16)
    layers = shape.decoder_layers
    assert rows.states == layers * long * (8 + 4)  # no keys or values: the order term and the mask per layer
    assert rows.states < exact.states / 10  # 12 bytes per position and layer against 4·d_model (d_model = 32)
    short = estimate_decode_memory(SRformerConfig("knn", knn_index="rows"), shape, 1, 1000, torch.bfloat16)
    assert short == estimate_decode_memory(SRformerConfig("knn"), shape, 1, 1000, torch.bfloat16)


def test_an_exact_state_is_still_built_for_several_positions():
    """A multi-token chunk (assisted decoding) rebuilds the exact state: the rows step takes one position."""
    hidden, valid, projection, queries = rows_inputs(torch.float32)
    module = _module(knn_index="rows", index_min_keys=1)
    state = module.indexed_state(hidden, valid, projection)
    assert state is not None and state.is_lean
    with pytest.raises(ValueError, match="one position at a time"):
        module.step(queries.expand(-1, -1, 2, -1), state, position=0)
    keys, values = projection.project(hidden[:, None].expand(-1, HEADS, -1, -1))
    assert isinstance(module.init_state(keys.detach(), values.detach(), valid), KNNState)
