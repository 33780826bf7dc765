"""Operator budgets of ``knn`` and ``block-topk-b4`` decoding: an eager GPU step is launch-bound, so the aten calls
of a step are its cost (:mod:`srformer.benchmarks.operator_count`). Against the unconverted model (full attention)
on a t5-tiny-shaped decoder, at two input lengths: at most 1.25 times full's calls per generated token, a first
step (every layer's state build and one step) of at most 3 times full's that does not grow with the input, and no
host sync beyond full's. The NaN/inf check the shared glue runs at each state build
(:func:`srformer.models.cross_attention.check_finite_state`, one sync per layer) is left out: it is not the
mechanism's."""

from __future__ import annotations

import pytest

import srformer.models.cross_attention as cross_attention
from srformer.benchmarks.operator_count import OperatorCount, count_generation_operators, long_input_model

LENGTHS = (1024, 4096)


@pytest.fixture
def without_the_finite_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cross_attention, "check_finite_state", lambda *args, **kwargs: None)


def _counts(name: str) -> list[OperatorCount]:
    if name == "full":
        model = long_input_model("full", shape="t5-tiny")
    else:
        model = long_input_model(name, shape="t5-tiny", segment_size=16, target_length=16)
    return [count_generation_operators(model, length) for length in LENGTHS]


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.usefixtures("without_the_finite_check")
@pytest.mark.parametrize("name", ["knn", "block-topk-b4"])
def test_a_step_costs_at_most_a_quarter_more_calls_than_full_attention_and_no_host_sync(name):
    full, _ = _counts("full")
    counts = _counts(name)
    for count in counts:
        where = f"{name} at {count.encoder_length} tokens"
        assert count.calls_per_token <= 1.25 * full.calls_per_token, (where, count.per_token_by_operator)
        assert count.first_step_calls <= 3 * full.first_step_calls, (where, count.first_step_by_operator)
        assert count.syncs_per_token <= full.syncs_per_token, where
        assert count.first_step_syncs <= full.first_step_syncs, where
    # nothing of the input's length in the number of calls: the state build and the step are fixed sequences
    assert counts[0].first_step_calls == counts[1].first_step_calls
    assert counts[0].calls_per_token == counts[1].calls_per_token
