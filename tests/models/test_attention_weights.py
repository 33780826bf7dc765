"""``output_attentions=True`` on converted models (eager implementation): one (B, H, q, k) cross-attention
tensor per decoder layer, as transformers returns for the unconverted model.

What each check expects follows the registry's ``Capabilities.attention_weights`` of the setting's mechanism
(:mod:`tests.registry_cases`): weights that are the output's linear map from the values (``O = A V``) are checked
against that map of the mechanism's float64 reference (:mod:`srformer.attention.naive`, fed one-hot values), and
against the layer's own output; weights that are the softmax over the scheduled segment (``srformer``,
``srformer-gated``: ``O = g A V + R``) against that map of ``segmented``'s reference; weights that pool (a
distribution that is not the output's map) for what they are. Every setting: between teacher forcing and
``generate()``'s incremental path. Encoder inputs: 24, 17, 9 and 0 real tokens (an empty row), right and left
padded, in 4-token segments with ``target_length`` 12.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from srformer.config import NAMED_SETTINGS, named_config
from srformer.core import REGISTRY, WEIGHTS_OF_OUTPUT, WEIGHTS_OF_SEGMENT, WEIGHTS_POOLED, mechanism
from srformer.models.convert import cross_attention_modules
from srformer.models.families import describe
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch
from tests.models.test_generation_strategies import generate, teacher_forced
from tests.registry_cases import at_test_size, lean_variants, named_settings, variant_of, with_weights
from tests.tolerance import assert_exact, exact_tolerance, max_difference

SETTINGS = dict(segment_size=4, target_length=12)
LENGTHS = (24, 17, 9, 0)  # 6, 5, 3 segments and an empty row
DECODER_LENGTH = 14  # > target_length: the last positions use the schedule's final column
NAMES = named_settings()  # every variant and ablation
#: Named settings whose weights are the output's linear map from the values, ``O = A V``.
OUTPUT_NAMES = with_weights(WEIGHTS_OF_OUTPUT)
#: Named settings whose weights are the softmax over the scheduled segment, under a term of their own.
SEGMENT_NAMES = with_weights(WEIGHTS_OF_SEGMENT)
LEAN_NAMES = lean_variants()


def weights_kind(name: str) -> str:
    """What named setting ``name``'s weights are (``Capabilities.attention_weights`` of its mechanism)."""
    return REGISTRY[variant_of(name)].capabilities.attention_weights


def without_softmax_part(name: str, module) -> bool:
    """True where weights that are the softmax part of the output have no softmax part to be (``srformer``'s
    ablation I, ``O = O_R``): they are zeros."""
    return weights_kind(name) == WEIGHTS_OF_SEGMENT and not module.has_softmax


@functools.cache
def eager_model(family: str, name: str, lean_cache: bool = False):
    """A float64 eager model converted to a named setting (seeded RAF: lean and standard are one model)."""
    base = BUILDERS[family]("eager")
    torch.manual_seed(1)
    return converted(base, **{**NAMED_SETTINGS[name], **at_test_size(name)}, lean_cache=lean_cache, **SETTINGS)


def encoder_batch(model, *, left: bool = False, lengths=LENGTHS):
    ids, mask = padded_batch(model, lengths=lengths)
    if left:
        for row, n in enumerate(lengths):
            ids[row], mask[row] = ids[row].roll(ids.shape[1] - n), mask[row].roll(ids.shape[1] - n)
    return ids, mask


def projections(module):
    """The (query, key, value, output) projections of a T5-style or BART-style attention module."""
    if hasattr(module, "q"):
        return module.q, module.k, module.v, module.o
    return module.q_proj, module.k_proj, module.v_proj, module.out_proj


def install_captures(model, *, retain_output_grad: bool = False):
    """Forward hooks recording, per decoder layer, its cross attention's projected queries, keys and values
    (B, H, n, d), its attention output before the output projection (B, H, q, d) and its scale; with
    ``retain_output_grad`` the output's gradient is retained (``output_flat``, the tensor the hook saw)."""
    captured: list[dict] = []
    handles = []
    for _, _, module in cross_attention_modules(model):
        record: dict = {}
        captured.append(record)
        shape = describe(module)
        heads, head_dim = shape.num_heads, shape.head_dim

        def keep(name, record=record, heads=heads, head_dim=head_dim):
            def hook(_, inputs, output):
                tensor = inputs[0] if name == "output" else output
                if name == "output" and retain_output_grad:
                    tensor.retain_grad()
                    record["output_flat"] = tensor
                record[name] = tensor.view(tensor.shape[0], tensor.shape[1], heads, head_dim).transpose(1, 2)
            return hook

        for name, projection in zip(("queries", "keys", "values", "output"), projections(module), strict=True):
            handles.append(projection.register_forward_hook(keep(name)))
        record["scale"] = shape.scale
    return captured, handles


def run_with_captures(model, ids, mask, dec, **kwargs):
    """A teacher-forced pass without gradients, with :func:`install_captures`' records."""
    captured, handles = install_captures(model)
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return out, captured


def reference_weights(name: str, module, record, mask) -> torch.Tensor:
    """The float64 weights of layer ``module`` (its mechanism module, ``.srformer``) for named setting ``name``: the
    linear map from the values of a float64 reference (:mod:`srformer.attention.naive`, written from the equations,
    one example, head and position at a time), read off one block of one-hot values at a time. The reference is the
    mechanism's own where its weights are the output's map, ``segmented``'s where they are the softmax over the
    scheduled segment."""
    config = module.settings
    if weights_kind(name) == WEIGHTS_OF_SEGMENT:
        config = named_config("segmented", segment_size=config.segment_size, target_length=config.target_length)
    parameters = dict(module.state_dict()) if config.variant == module.settings.variant else None
    queries, keys = record["queries"], record["keys"]
    head_dim, length = keys.shape[-1], keys.shape[2]
    weights = torch.zeros(*queries.shape[:3], length, dtype=torch.float64)
    for start in range(0, length, head_dim):
        columns = range(start, min(start + head_dim, length))
        values = torch.zeros_like(keys, dtype=torch.float64)
        for column, position in enumerate(columns):
            values[:, :, position, column] = 1.0
        output = mechanism(config.variant).reference(queries, keys, values, mask.bool(), config, scale=record["scale"],
                                                     parameters=parameters)
        weights[..., start:start + len(columns)] = output[..., :len(columns)]
    return weights


def mechanism_modules(model):
    """The mechanism module (``.srformer``) of every decoder layer."""
    return [module.srformer for _, _, module in cross_attention_modules(model)]


@pytest.mark.parametrize("name", NAMES)
def test_one_cross_attention_tensor_per_layer_shaped_as_the_unconverted_model(family, name):
    model = eager_model(family, name)
    plain = BUILDERS[family]("eager")
    ids, mask = encoder_batch(model)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
        reference = plain(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    assert len(out.cross_attentions) == len(reference.cross_attentions) == 2  # the tiny models' decoder layers
    for weights, expected in zip(out.cross_attentions, reference.cross_attentions, strict=True):
        assert weights.shape == expected.shape == (ids.shape[0], 4, DECODER_LENGTH, ids.shape[1])
        assert weights.dtype == expected.dtype
    assert len(out.decoder_attentions) == len(reference.decoder_attentions)  # the model's own self attention


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("name", OUTPUT_NAMES + SEGMENT_NAMES)
def test_weights_equal_the_references_map_from_the_values(family, name, left):
    """The weights are the float64 reference's linear map from the values (:func:`reference_weights`), from the
    layer's own queries and keys; a setting without a softmax term (``srformer``'s ablation I) returns zeros."""
    model = eager_model(family, name)
    ids, mask = encoder_batch(model, left=left)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    out, captured = run_with_captures(model, ids, mask, dec, output_attentions=True)
    layers = zip(out.cross_attentions, captured, mechanism_modules(model), strict=True)
    for layer, (weights, record, module) in enumerate(layers):
        if without_softmax_part(name, module):
            assert torch.equal(weights, torch.zeros_like(weights))
            continue
        assert_exact(weights, reference_weights(name, module, record, mask), f"{family} {name} layer {layer}")


@pytest.mark.parametrize("name", NAMES)
def test_rows_sum_to_one_over_the_attended_keys_and_are_zero_at_padding_and_empty_rows(family, name):
    """Every setting: no weight at padding or in an empty row. Weights that are a softmax over the scheduled segment
    or that pool are distributions (zeros without a softmax term); the rows of weights that are the output's map from
    the values are that map's (``linear``'s sum to ``S / (S + eps)``, ``linformer``'s are signed), checked whole by
    :func:`test_weights_equal_the_references_map_from_the_values`."""
    model = eager_model(family, name)
    ids, mask = encoder_batch(model, left=True)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    real_rows = torch.tensor(LENGTHS) > 0
    for weights in out.cross_attentions:
        assert torch.equal(weights * (mask == 0)[:, None, None, :], torch.zeros_like(weights)), "weight at padding"
        sums = weights.sum(dim=-1)
        assert torch.equal(sums[~real_rows], torch.zeros_like(sums[~real_rows])), "an empty row has weights"
        if weights_kind(name) == WEIGHTS_OF_OUTPUT:
            continue
        assert (weights >= 0).all()
        if without_softmax_part(name, mechanism_modules(model)[0]):  # ablation I: zeros, documented
            assert torch.equal(weights, torch.zeros_like(weights))
        else:
            assert max_difference(sums[real_rows], torch.ones_like(sums[real_rows])) <= exact_tolerance(1.0)


@pytest.mark.parametrize("name", ["segmented", "srformer", "xl"])
def test_weights_are_zero_outside_the_scheduled_segments(family, name):
    """Query ``t`` of an example with ``m`` segments attends only to segment ``i(t)`` (``xl``: and ``i(t) - 1``)."""
    model = eager_model(family, name)
    ids, mask = encoder_batch(model)  # right padded: segment j holds positions 4j .. 4j + 3
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    positions = torch.arange(ids.shape[1])
    for row, length in enumerate(LENGTHS[:-1]):
        m = -(-length // 4)
        for t in range(DECODER_LENGTH):
            i = min(t * m // 12, m - 1)
            first = 4 * (i - 1) if name == "xl" and i > 0 else 4 * i
            inside = (positions >= first) & (positions < min(4 * i + 4, length))
            for weights in out.cross_attentions:
                assert torch.equal(weights[row, :, t, ~inside], torch.zeros_like(weights[row, :, t, ~inside]))
                assert (weights[row, :, t, inside] > 0).all()


@pytest.mark.parametrize("name", OUTPUT_NAMES)
def test_weights_times_values_give_the_layers_output(family, name):
    """``O = A V`` with ``V`` the layer's values at the encoder positions: the weights are the map the output was
    computed with, not a look-alike."""
    _check_output_is_weights_times_values(family, name, eager_model(family, name))


def test_srformer_sigma_weights_times_values_give_its_softmax_output(family):
    """``srformer-sigma``'s ``O_S = A V``, with its recurrent term removed: ``(O - (1 - sigma) O_R) / sigma`` is not
    observable, so its mixing weight is set to 1 (``sigma = sigmoid(large)``) in a copy, leaving ``O = A V``."""
    model = copy.deepcopy(eager_model(family, "srformer-sigma"))
    for module in mechanism_modules(model):
        module.mix_logit.data.fill_(1e4)  # sigma = 1 in float64: O = O_S
    _check_output_is_weights_times_values(family, "srformer-sigma", model)


def _check_output_is_weights_times_values(family, name, model):
    ids, mask = encoder_batch(model, left=True)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    out, captured = run_with_captures(model, ids, mask, dec, output_attentions=True)
    for layer, (weights, record) in enumerate(zip(out.cross_attentions, captured, strict=True)):
        assert_exact(record["output"], torch.matmul(weights, record["values"]), f"{family} {name} layer {layer}")


@pytest.mark.parametrize("name", NAMES)
def test_outputs_are_the_same_with_and_without_attention_weights(family, name):
    """With ``output_attentions`` the output is computed from the returned weights (``output_from_weights``): the
    same function as the fast path, so equal up to float64 rounding, in teacher forcing and in ``generate()``."""
    model = eager_model(family, name)
    ids, mask = encoder_batch(model)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec)
        with_weights = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    assert_exact(with_weights.logits, plain.logits, f"{family} {name} logits")
    assert plain.cross_attentions is None and len(with_weights.cross_attentions) == 2
    generated = generate(model, ids, mask, output_scores=True)
    generated_with_weights = generate(model, ids, mask, output_scores=True, output_attentions=True)
    assert torch.equal(generated.sequences, generated_with_weights.sequences)
    for a, b in zip(generated.scores, generated_with_weights.scores, strict=True):
        # generate() reports float32 scores: one float32 rounding of float64 values that agree to ~1e-15
        torch.testing.assert_close(b, a, rtol=2 * torch.finfo(torch.float32).eps, atol=0.0)


def backward_through_weights(model, ids, mask, dec):
    """A teacher-forced pass with ``output_attentions=True`` and a loss with random coefficients on the logits;
    every returned cross-attention tensor retains its gradient."""
    captured, handles = install_captures(model, retain_output_grad=True)
    try:
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    for weights in out.cross_attentions:
        if weights.requires_grad:
            weights.retain_grad()
    coefficients = torch.randn(out.logits.shape, generator=torch.Generator().manual_seed(5), dtype=out.logits.dtype)
    (out.logits * coefficients).sum().backward()
    for record in captured:  # the gradient of the attention output, (B, H, q, d)
        flat = record["output_flat"].grad
        record["output_grad"] = flat.view(*flat.shape[:2], *record["output"].shape[1:2], -1).transpose(1, 2)
    return out, captured


@pytest.mark.parametrize("name", NAMES)
def test_returned_weights_carry_the_gradient_of_the_loss(family, name):
    """``cross_attentions[i].retain_grad()`` then ``backward()``: the weights are the autograd nodes the output
    is computed from, so their gradient is d(loss)/d(A), as the kind of weights says: ``dL/dO V^T`` where
    ``O = A V``; ``g * dL/dO V^T`` where ``O = g A V + R``, one factor ``g`` in (0, 1] per query row (``srformer``:
    1, or sigma with the Eq. 10 mix; ``srformer-gated``: the softmax part's share of the shared normaliser); for
    pooling weights a finite, non-zero gradient (``fastformer``'s product rule:
    :func:`test_fastformer_weights_carry_the_product_rule_gradient`). A setting without a softmax term (ablation I)
    returns zero weights, constants outside the graph."""
    model = copy.deepcopy(eager_model(family, name))
    ids, mask = encoder_batch(model, left=True)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    out, captured = backward_through_weights(model, ids, mask, dec)
    layers = zip(out.cross_attentions, captured, mechanism_modules(model), strict=True)
    for layer, (weights, record, module) in enumerate(layers):
        where = f"{family} {name} layer {layer}"
        if without_softmax_part(name, module):
            assert not weights.requires_grad and not weights.any(), where
            continue
        assert weights.grad is not None, where
        assert torch.isfinite(weights.grad).all() and weights.grad.abs().max() > 0, where
        expected = torch.matmul(record["output_grad"], record["values"].transpose(-1, -2))
        if weights_kind(name) == WEIGHTS_OF_OUTPUT:
            assert_exact(weights.grad, expected, where)
        elif weights_kind(name) == WEIGHTS_OF_SEGMENT:  # d(loss)/d(A) = g * dL/dO V^T, one factor g per query row
            gate = (weights.grad * expected).sum(-1, keepdim=True) / (expected * expected).sum(-1, keepdim=True)
            assert bool((gate > 0).all() and (gate <= 1 + 1e-12).all()), where
            assert_exact(weights.grad, gate * expected, where)
        else:
            assert weights_kind(name) == WEIGHTS_POOLED


def test_fastformer_weights_carry_the_product_rule_gradient(family):
    """``fastformer``'s output is ``O = Q * (A K) * (A V)``: d(loss)/d(A) by the product rule."""
    model = copy.deepcopy(eager_model(family, "fastformer"))
    ids, mask = encoder_batch(model, left=True)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    out, captured = backward_through_weights(model, ids, mask, dec)
    for layer, (weights, record) in enumerate(zip(out.cross_attentions, captured, strict=True)):
        gradient, queries, keys, values = record["output_grad"], record["queries"], record["keys"], record["values"]
        pooled_keys, pooled_values = torch.matmul(weights, keys), torch.matmul(weights, values)
        expected = (torch.matmul(gradient * queries * pooled_values, keys.transpose(-1, -2))
                    + torch.matmul(gradient * queries * pooled_keys, values.transpose(-1, -2)))
        assert_exact(weights.grad, expected.detach(), f"{family} fastformer layer {layer}")


def _lean_or_standard():
    return [(name, False) for name in NAMES] + [(name, True) for name in LEAN_NAMES]


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("name,lean_cache", _lean_or_standard())
def test_generate_weights_equal_teacher_forced_weights(family, name, lean_cache, left):
    """``generate(output_attentions=True, return_dict_in_generate=True)`` reports one (B, H, 1, k) tensor per
    step and layer from the incremental path; stacked over the steps they equal one teacher-forced pass."""
    model = eager_model(family, name, lean_cache)
    ids, mask = encoder_batch(model, left=left)
    out = generate(model, ids, mask, output_attentions=True)
    reference = teacher_forced(model, ids, mask, out.sequences, output_attentions=True).cross_attentions
    assert len(out.cross_attentions) == out.sequences.shape[1] - 1
    assert all(len(step) == len(reference) for step in out.cross_attentions)
    for layer, expected in enumerate(reference):
        stepwise = torch.cat([step[layer] for step in out.cross_attentions], dim=2)
        assert stepwise.shape == expected.shape
        # float64 model, float64 state (accumulation_dtype) and float64 weights (generate() casts only the
        # logits it reports to float32): the two paths differ by float64 rounding alone
        assert_exact(stepwise, expected, f"{family} {name} lean={lean_cache} layer {layer}")


@pytest.mark.parametrize("name", ["srformer", "segmented", "xl", "longt5", "linear"])
def test_static_cache_generate_weights_equal_teacher_forced_weights(family, name):
    """With ``cache_implementation="static"`` the step's position is a 0-d tensor on the device."""
    model = eager_model(family, name)
    ids, mask = encoder_batch(model)
    out = generate(model, ids, mask, output_attentions=True, cache_implementation="static")
    reference = teacher_forced(model, ids, mask, out.sequences, output_attentions=True).cross_attentions
    for layer, expected in enumerate(reference):
        stepwise = torch.cat([step[layer] for step in out.cross_attentions], dim=2)
        assert_exact(stepwise, expected, f"{family} {name} static layer {layer}")


def test_config_output_attentions_also_returns_the_weights(family):
    """Set in the config (not passed as a keyword), ``output_attentions`` reaches transformers' output
    recorders but not the attention modules; converted layers read the config too. (T5's decoder keeps a copy
    of the model config, so the flag is set on it as well, as the unconverted T5 needs.)"""
    model = copy.deepcopy(eager_model(family, "srformer"))
    for config in (model.config, model.get_decoder().config):
        config.output_attentions = True
    ids, mask = encoder_batch(model)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec)
        explicit = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    assert len(out.cross_attentions) == 2
    for weights, expected in zip(out.cross_attentions, explicit.cross_attentions, strict=True):
        assert torch.equal(weights, expected)
