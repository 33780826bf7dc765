"""State helpers: beam reordering keeps each state tensor's memory layout; the reordering check the mechanisms'
tests share."""

from __future__ import annotations

import torch

from srformer.attention.state import SharedMapping, SRformerCacheLayer, reorder_rows
from tests.attention.test_srformer import _inputs
from tests.attention.test_variants import _module
from tests.tolerance import assert_exact


def test_reorder_rows_is_index_select_with_the_tensors_strides():
    generator = torch.Generator().manual_seed(0)
    index = torch.tensor([2, 0, 0, 1])
    for tensor in (torch.randn(3, 4, 5, generator=generator),
                   torch.randn(3, 4, 6, 5, generator=generator).transpose(-1, -2)):
        rows = reorder_rows(tensor, index)
        assert torch.equal(rows, tensor.index_select(0, index))
        assert rows.stride()[1:] == tensor.stride()[1:]


def test_beam_reordering_keeps_block_topks_transposed_mean_keys():
    queries, keys, values, valid = _inputs(3, 2, 13, 9, 4, [13, 8, 5], seed=1)
    module = _module("block-topk", 4, 8, scale=0.5, top_segments=4, block_size=2)
    state = module.init_state(keys, values, valid)
    assert not state.mean_keys.is_contiguous()  # stored (B, H, d, M·n) in memory, as the gates read it
    layer = SRformerCacheLayer(state, (2, 13, 4), keys.dtype)
    beams = torch.tensor([1, 1, 0])
    layer.reorder_cache(beams)
    reordered = layer.held_state()
    assert reordered.mean_keys.stride() == state.mean_keys.stride()
    assert torch.equal(reordered.mean_keys, state.mean_keys.index_select(0, beams))
    assert torch.equal(module(queries[beams], reordered)[0], module(queries, state)[0][beams])


def check_reordered_state_steps_as_its_rows(module, inputs, beams: torch.Tensor) -> None:
    """Beam reordering (the cache layer's ``reorder_cache``: every state tensor, rows repeated and dropped) gives the
    state of the reordered rows: a step of ``module`` from it equals the reordered step from the original state, at
    every query position of ``inputs`` (``queries, keys, values, valid``)."""
    queries, keys, values, valid = inputs
    state = module.init_state(keys, values, valid)
    layer = SRformerCacheLayer(state, tuple(keys.shape[1:]), keys.dtype)
    layer.reorder_cache(beams)
    reordered = layer.held_state()
    for t in range(queries.shape[2]):
        expected, _ = module.step(queries[:, :, t : t + 1], state, position=t)
        output, _ = module.step(queries[beams, :, t : t + 1], reordered, position=t)
        assert_exact(output, expected[beams], f"position {t}")


def test_a_shared_mapping_maps_a_tensor_once_per_operation():
    """The layers of a cache are mapped one at a time: a tensor several of them hold is mapped once per operation
    (the same ``beam_idx`` object, the same repeat count) and stays shared; another operation, another tensor or a
    tensor changed in place since is mapped again."""
    mapping, calls = SharedMapping(), []

    def reorder(index):
        def fn(tensor):
            calls.append(tensor)
            return tensor.index_select(0, index)
        return fn

    shared, own = torch.arange(12.0).view(3, 4), torch.ones(3, 2)
    beam_idx = torch.tensor([2, 0, 0])
    first = mapping.map(("reorder", beam_idx), shared, reorder(beam_idx))
    assert mapping.map(("reorder", beam_idx), shared, reorder(beam_idx)) is first  # the next layer's: the same
    assert len(calls) == 1 and torch.equal(first, shared[[2, 0, 0]])
    mapping.map(("reorder", beam_idx), own, reorder(beam_idx))
    assert len(calls) == 2
    other = torch.tensor([2, 0, 0])  # equal values, another operation
    assert mapping.map(("reorder", other), shared, reorder(other)) is not first and len(calls) == 3
    assert mapping.map(("repeat", 2), shared, lambda t: t.repeat_interleave(2, 0)) is mapping.map(
        ("repeat", 2), shared, lambda t: t.repeat_interleave(3, 0))  # by value; the second fn is not run
    again = mapping.map(("reorder", beam_idx), shared, reorder(beam_idx))
    shared.add_(1.0)  # changed in place: mapped again
    assert mapping.map(("reorder", beam_idx), shared, reorder(beam_idx)) is not again

