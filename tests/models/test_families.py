"""The decoding step's projections of a converted module (:mod:`srformer.models.families`): one ``mm`` (``addmm``
with a bias) with a transposed weight view kept between steps, the same numbers as the ``nn.Linear`` whatever
happens to the weight."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from srformer.benchmarks.operator_count import count_calls
from tests.models.conftest import BUILDERS, converted


def _module_and_linears(family: str):
    model = converted(BUILDERS[family](), variant="segmented", segment_size=4, target_length=8)
    if family == "t5":
        module = model.decoder.block[0].layer[1].EncDecAttention
        return module, (module.q, module.o)
    module = model.model.decoder.layers[0].encoder_attn
    return module, (module.q_proj, module.out_proj)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_a_step_projection_is_the_linear_and_one_call_once_its_view_is_kept(family):
    module, linears = _module_and_linears(family)
    rows = torch.randn(3, linears[0].in_features, dtype=torch.float64)
    with torch.no_grad():
        for linear in linears:
            torch.testing.assert_close(module._step_linear(linear, rows), linear(rows), rtol=0, atol=0)
            _, calls = count_calls(lambda linear=linear: module._step_linear(linear, rows))
            assert sum(calls.values()) == 1, calls  # mm, or addmm with BART's bias
            _, calls = count_calls(lambda linear=linear: linear(rows))
            assert sum(calls.values()) == 2, calls  # the linear's own: the transpose again, then the product


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_a_kept_view_follows_every_change_of_the_weight(family):
    """An in-place update (an optimizer step), a new tensor (``weight.data = ...``, ``load_state_dict`` with
    ``assign``), a dtype change: each step after it projects with the weight as it is then."""
    module, (query, _) = _module_and_linears(family)
    rows = torch.randn(2, query.in_features, dtype=torch.float64)
    with torch.no_grad():
        module._step_linear(query, rows)
        query.weight.mul_(2.0)
        torch.testing.assert_close(module._step_linear(query, rows), query(rows), rtol=0, atol=0)
        query.weight.data = torch.randn_like(query.weight)
        torch.testing.assert_close(module._step_linear(query, rows), query(rows), rtol=0, atol=0)
        query.float()
        single = rows.float()
        projected = module._step_linear(query, single)
        assert projected.dtype == torch.float32
        torch.testing.assert_close(projected, query(single), rtol=0, atol=0)


def test_with_autograd_recording_the_step_projection_is_the_linear_and_carries_the_gradient():
    module, (query, _) = _module_and_linears("t5")
    rows = torch.randn(2, query.in_features, dtype=torch.float64)
    module._step_linear(query, rows).sum().backward()
    assert query.weight.grad is not None and torch.equal(query.weight.grad, rows.sum(0).expand_as(query.weight))


def test_another_module_in_place_of_a_linear_is_called_as_it_is():
    module, (query, _) = _module_and_linears("t5")
    wrapped = nn.Sequential(query)
    rows = torch.randn(2, query.in_features, dtype=torch.float64)
    with torch.no_grad():
        _, calls = count_calls(lambda: module._step_linear(wrapped, rows))
        torch.testing.assert_close(module._step_linear(wrapped, rows), query(rows), rtol=0, atol=0)
    assert sum(calls.values()) == 2
