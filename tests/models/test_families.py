"""The family entries as conversion reads them (:func:`srformer.models.families.describe`: a module's family and
sizes, and the refusals), and the decoding step's projections of a converted module: one ``mm`` (``addmm`` with a
bias) with a transposed weight view kept between steps, the same numbers as the ``nn.Linear`` whatever happens to the
weight."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from srformer import SRformerConfig, convert
from srformer.benchmarks.operator_count import count_calls
from srformer.models import cross_attention_modules
from srformer.models.families import describe
from tests.models.conftest import BUILDERS, LONG_BUILDERS, converted

# (heads, head size, softmax scale) of each test model's cross attention, read from its config
EXPECTED_SIZES = {
    "t5": lambda c: (c.num_heads, c.d_kv, 1.0),
    "longt5": lambda c: (c.num_heads, c.d_kv, 1.0),
}


def _expected(config):
    if config.model_type in EXPECTED_SIZES:
        return EXPECTED_SIZES[config.model_type](config)
    heads = config.decoder_attention_heads
    head_dim = config.d_model // heads
    return heads, head_dim, head_dim ** -0.5


@pytest.mark.parametrize("name", [*BUILDERS, *LONG_BUILDERS])
def test_describe_reads_every_cross_attention_module_by_its_family_entry(name):
    model = {**BUILDERS, **LONG_BUILDERS}[name]()
    found = cross_attention_modules(model)
    layers = getattr(model.config, "num_decoder_layers", None) or model.config.decoder_layers
    assert len(found) == layers
    for _, _, module in found:
        shape = describe(module)
        assert shape is not None and shape.family.name == model.config.model_type
        assert (shape.num_heads, shape.head_dim) == _expected(model.config)[:2]
        assert shape.scale == pytest.approx(_expected(model.config)[2], rel=1e-12)
        query = getattr(module, shape.family.projections[0])
        assert shape.query_weight is query.weight


def test_describe_refuses_a_module_of_no_family_and_one_without_int_sizes():
    assert describe(nn.Linear(2, 2)) is None
    module = cross_attention_modules(BUILDERS["bart"]())[0][2]
    module.num_heads = 4.0
    with pytest.raises(TypeError, match="num_heads"):
        describe(module)


def test_a_model_whose_cross_attention_is_of_no_family_is_refused_and_left_unchanged():
    model = BUILDERS["bart"]()
    layer = model.model.decoder.layers[0]
    layer.encoder_attn = nn.Linear(2, 2)  # a cross attention of a class srformer does not convert
    classes = [type(module) for module in model.modules()]
    with pytest.raises(ValueError, match=r"cross-attention classes \['Linear'\]"):
        convert(model, SRformerConfig("srformer"))
    assert [type(module) for module in model.modules()] == classes
    assert type(model.config).__name__ == "BartConfig" and getattr(model.config, "srformer", None) is None


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
