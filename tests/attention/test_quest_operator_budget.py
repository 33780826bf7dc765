"""The eager cost of ``quest-tree``'s generation, counted in aten operator calls (each a kernel launch or a dispatcher
trip on a GPU, whatever the input length: ``srformer.benchmarks.operator_count``), on a t5-tiny-shaped model.

A decoding step is a fixed sequence of batched operations (:meth:`QuestCrossAttention.step`): its count does not grow
with the input, stays within a small factor of full attention's, and syncs the host no more often than full
attention. The state build loops only over the levels of the leaves' tree (``log`` of the input length)."""

from __future__ import annotations

import pytest
import torch

import srformer
from srformer.benchmarks.operator_count import OperatorCount, count_generation_operators, long_input_model

#: Two input lengths whose groups outnumber ``quest-tree``'s 64 chosen ones (so both steps run the group stage).
SHORT, LONG = 2048, 8192
#: Levels the leaves' tree gains from SHORT to LONG (4·times the leaves: 2 levels).
EXTRA_LEVELS = 2
#: Operator calls per tree level and decoder layer, at most (a level is about twenty batched operations).
CALLS_PER_LEVEL = 30
#: Per generated token, at most this many times full attention's calls (full calls one sdpa per layer; the step
#: ranks its slots, reads its leaves' rows and calls one sdpa). Measured here 1.18 with the standard state and 1.24
#: reading encoder rows (on t5-small: 634.5 and 670.5 calls against full's 511, i.e. 1.24 and 1.31); 3.0, and growing
#: with the input, before the step was one batched sequence.
PER_TOKEN_FACTOR = 1.25


def _count(name: str, length: int, rows_min_keys: int | None = None) -> OperatorCount:
    torch.manual_seed(0)
    model = long_input_model(name, shape="t5-tiny", segment_size=16, target_length=16)
    if rows_min_keys is not None:
        srformer.set_runtime_options(model, rows_min_keys=rows_min_keys)
    return count_generation_operators(model, length)


@pytest.fixture(scope="module")
def full() -> OperatorCount:
    return _count("full", SHORT)


@pytest.mark.parametrize("rows_min_keys", [None, 1], ids=["standard", "encoder-rows"])
def test_quest_tree_step_and_build_do_not_grow_with_the_input(full: OperatorCount, rows_min_keys: int | None):
    short, long = (_count("quest-tree", length, rows_min_keys) for length in (SHORT, LONG))
    layers = 2  # t5-tiny's decoder layers
    assert long.calls_per_token == short.calls_per_token  # no growth with the input
    assert short.calls_per_token <= PER_TOKEN_FACTOR * full.calls_per_token
    # the first step (build + one step) grows with the tree's depth only
    assert 0 <= long.first_step_calls - short.first_step_calls <= layers * EXTRA_LEVELS * CALLS_PER_LEVEL
    assert short.first_step_calls <= 6 * full.first_step_calls
    # no host sync beyond full attention's (the selection's ties are settled on the device)
    for count in (short, long):
        assert count.syncs_per_token == full.syncs_per_token
        assert count.first_step_syncs == full.first_step_syncs
