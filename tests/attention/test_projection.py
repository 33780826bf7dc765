"""HeadProjection (:mod:`srformer.attention.projection`): per-head views of a layer's key/value projections, made
when first read."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from srformer.attention.projection import HeadProjection
from srformer.benchmarks.operator_count import count_calls

HEADS, HEAD_DIM, HIDDEN = 4, 8, 16


def _linears(bias: bool) -> tuple[nn.Linear, nn.Linear]:
    torch.manual_seed(0)
    return nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=bias), nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=bias)


def test_from_linear_makes_no_operator_call_and_the_views_are_made_once():
    key, value = _linears(bias=True)
    projection, calls = count_calls(lambda: HeadProjection.from_linear(key, value, HEADS, HEAD_DIM))
    assert projection is not None and sum(calls.values()) == 0
    _, first = count_calls(lambda: (projection.key_weight, projection.value_weight, projection.key_bias,
                                    projection.value_bias))
    _, again = count_calls(lambda: (projection.key_weight, projection.value_weight, projection.key_bias,
                                    projection.value_bias))
    assert sum(first.values()) == 4 and sum(again.values()) == 0


def test_the_views_are_the_weights_per_head_and_follow_in_place_updates():
    key, value = _linears(bias=True)
    projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM).kept()
    torch.testing.assert_close(projection.key_weight, key.weight.reshape(HEADS, HEAD_DIM, HIDDEN), rtol=0, atol=0)
    torch.testing.assert_close(projection.value_bias, value.bias.reshape(HEADS, HEAD_DIM), rtol=0, atol=0)
    with torch.no_grad():
        value.weight.add_(1.0)  # a view: an optimizer step is seen
    torch.testing.assert_close(projection.value_weight, value.weight.reshape(HEADS, HEAD_DIM, HIDDEN), rtol=0, atol=0)


def test_the_gradient_reaches_the_weights_through_the_views():
    key, value = _linears(bias=False)
    projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM)
    assert projection.key_bias is None and projection.value_bias is None
    rows = torch.randn(2, HEADS, 3, HIDDEN)
    keys, values = projection.project(rows)
    (keys.sum() + values.square().sum()).backward()
    assert key.weight.grad is not None and value.weight.grad is not None
    assert key.weight.grad.abs().sum() > 0


def test_a_module_that_is_not_a_plain_linear_has_no_projection():
    key, value = _linears(bias=False)
    assert HeadProjection.from_linear(nn.Sequential(key), value, HEADS, HEAD_DIM) is None


@pytest.mark.parametrize("bias", [False, True], ids=["t5-no-bias", "bart-bias"])
def test_keys_are_the_layers_own_keys_split_into_heads(bias):
    """``keys``: the key projection of encoder rows, head ``h`` its columns ``h·d .. h·d + d - 1``, against a
    float64 per-head product, in a handful of calls."""
    key, value = _linears(bias=bias)
    projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM)
    assert projection is not None
    hidden = torch.randn(2, 5, HIDDEN)
    keys, calls = count_calls(lambda: projection.keys(hidden))
    weight = key.weight.double().view(HEADS, HEAD_DIM, HIDDEN)
    expected = torch.einsum("bnD,hdD->bhnd", hidden.double(), weight)
    if bias:
        expected = expected + key.bias.double().view(1, HEADS, 1, HEAD_DIM)
    assert keys.shape == (2, HEADS, 5, HEAD_DIM) and keys.dtype == key.weight.dtype
    # float32 sums of 16 products: rounding at most about 16·eps·sum|x·w| (4e-6 here)
    torch.testing.assert_close(keys.double(), expected, rtol=1e-5, atol=1e-5)
    assert sum(calls.values()) <= 7


@pytest.mark.parametrize("bias", [False, True], ids=["t5", "bart"])
def test_both_forms_of_the_absorbed_read_are_the_softmax_over_the_rows_keys_and_values_in_float64(bias):
    """``attend_rows`` with the layer's ``W_v`` and a factor per example, and with each example's ``W_v`` with the
    factor folded in (:meth:`HeadProjection.example_values`): the softmax over the chosen rows' own keys and values
    (an independent float64 reference), 0 for an example without a real key, in one call fewer (two with a bias)."""
    key, value = (linear.double() for linear in _linears(bias))
    projection = HeadProjection.from_linear(key, value, HEADS, HEAD_DIM).kept()
    generator = torch.Generator().manual_seed(1)
    rows = torch.randn(2, HEADS, 5, HIDDEN, generator=generator, dtype=torch.float64)
    queries = torch.randn(2, HEADS, 1, HEAD_DIM, generator=generator, dtype=torch.float64)
    mask = torch.tensor([True, True, False, True, False])
    bias_term = torch.zeros(2, HEADS, 1, 5, dtype=torch.float64).masked_fill(~mask, torch.finfo(torch.float32).min)
    has_keys = torch.tensor([1.0, 0.0], dtype=torch.float64).view(2, 1, 1, 1)
    keys = torch.einsum("bhnD,hdD->bhnd", rows, key.weight.view(HEADS, HEAD_DIM, HIDDEN))
    values = torch.einsum("bhnD,hdD->bhnd", rows, value.weight.view(HEADS, HEAD_DIM, HIDDEN))
    if bias:
        keys = keys + key.bias.view(1, HEADS, 1, HEAD_DIM)
        values = values + value.bias.view(1, HEADS, 1, HEAD_DIM)
    weights = torch.softmax((queries @ keys.transpose(-1, -2)).masked_fill(~mask, float("-inf")), dim=-1)
    expected = (weights @ values) * has_keys
    hidden = projection.step_hidden_queries(queries, torch.float64)
    shared, shared_calls = count_calls(lambda: projection.attend_rows(hidden, rows, bias_term, 1.0,
                                                                      has_keys=has_keys))
    folded_values = projection.example_values(has_keys)
    folded, folded_calls = count_calls(lambda: projection.attend_rows(hidden, rows, bias_term, 1.0,
                                                                      example_values=folded_values))
    # a few dozen float64 roundings of sums of at most HIDDEN products: far inside 64 units of the largest value
    tolerance = 64 * torch.finfo(torch.float64).eps * float(values.abs().max() + HIDDEN)
    for output in (shared, folded):
        torch.testing.assert_close(output, expected, rtol=0, atol=tolerance)
    assert sum(shared_calls.values()) - sum(folded_calls.values()) == (3 if bias else 1)
    with pytest.raises(ValueError, match="exactly one"):
        projection.attend_rows(hidden, rows, bias_term, 1.0)
