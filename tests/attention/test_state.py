"""State helpers: beam reordering keeps each state tensor's memory layout; the reordering check the mechanisms'
tests share."""

from __future__ import annotations

import torch

from srformer.attention.state import SRformerCacheLayer, reorder_rows
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
