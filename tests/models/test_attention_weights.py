"""``output_attentions=True`` on converted models (eager implementation): one (B, H, q, k) cross-attention
tensor per decoder layer, as transformers returns for the unconverted model.

The weights are checked against a float64 per-query reference written here from the definitions
(the schedule ``i(t) = min(floor(t m / T), m - 1)`` over each example's real tokens, the softmax over the
attended keys, LongT5's global tokens spread over their segments), against the layer's own output
(``O_S = A V`` for the softmax variants, ``O = A V`` for ``linear``), and between teacher forcing and
``generate()``'s incremental path. Encoder inputs: 24, 17, 9 and 0 real tokens (an empty row), right
and left padded, in 4-token segments with ``target_length`` 12.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from srformer.attention import naive
from srformer.config import NAMED_SETTINGS
from srformer.models.convert import cross_attention_modules
from srformer.models.families import attention_scale_of, head_dim_of
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch
from tests.models.test_generation_strategies import generate, teacher_forced
from tests.tolerance import assert_exact, exact_tolerance, max_difference

SETTINGS = dict(segment_size=4, target_length=12)
LENGTHS = (24, 17, 9, 0)  # 6, 5, 3 segments and an empty row
DECODER_LENGTH = 14  # > target_length: the last positions use the schedule's final column
NAMES = [name for name in NAMED_SETTINGS if name != "full"]  # every variant and ablation
# content-based variants (reformer, routing, knn): their weights are checked against their reference in test_content.py
# and test_knn.py
#: Variants whose weights are not a softmax over scheduled encoder positions (reference_weights does not cover them;
#: the summaries are checked against their own definitions in tests/attention/test_summary.py).
SUMMARY_NAMES = ("linformer", "performer", "compressed", "inducing")
SOFTMAX_NAMES = [
    name for name in NAMES
    if name not in ("linear", "fastformer", "ablation-I", "reformer", "routing", "knn", "knn-4", *SUMMARY_NAMES)
]
#: Weights ``A = P F`` with a learned real ``F`` (``linformer``): signed, rows need not sum to 1 (documented).
SIGNED_NAMES = ("linformer",)
LEAN_NAMES = ["segmented", "srformer", "linear", "fastformer"]


@functools.cache
def eager_model(family: str, name: str, lean_cache: bool = False):
    """A float64 eager model converted to a named setting (seeded RAF: lean and standard are one model)."""
    base = BUILDERS[family]("eager")
    torch.manual_seed(1)
    return converted(base, **NAMED_SETTINGS[name], lean_cache=lean_cache, **SETTINGS)


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
        heads, head_dim = getattr(module, "n_heads", None) or module.num_heads, head_dim_of(module)

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
        record["scale"] = attention_scale_of(module)
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


def reference_weights(name: str, queries, keys, mask, scale: float) -> torch.Tensor:
    """Float64 per-query weights written from the definitions, one example and position at a time."""
    settings = {**NAMED_SETTINGS[name], **SETTINGS}
    variant, s, target = settings["variant"], settings["segment_size"], settings["target_length"]
    batch, heads, q, _ = queries.shape
    weights = torch.zeros(batch, heads, q, keys.shape[2], dtype=torch.float64)
    for b in range(batch):
        real = mask[b].nonzero().flatten().tolist()  # the example's real positions, in order
        if not real:
            continue  # an empty memory: no weights
        m = -(-len(real) // s)
        segments = [real[j * s:(j + 1) * s] for j in range(m)]
        for t in range(q):
            i = min(t * m // target, m - 1)
            if variant == "block-topk":  # per head: i and the r other blocks (default: segments) of largest
                # q . mean key (ties: the earlier block); a block is block_size positions of one segment
                top, size = settings.get("top_segments", 3), settings.get("block_size", s)
                others = [segment[start:start + size] for j, segment in enumerate(segments) if j != i
                          for start in range(0, len(segment), size)]
                for h in range(heads):
                    gates = [float(scale * keys[b, h, block].mean(dim=0) @ queries[b, h, t]) for block in others]
                    chosen = sorted(range(len(others)), key=lambda j: (-gates[j], j))[:top]
                    read = segments[i] + sum((others[j] for j in chosen), [])
                    weights[b, h, t, read] = torch.softmax(scale * keys[b, h, read] @ queries[b, h, t], dim=0)
                continue
            if variant == "quest":  # 16 leaves of 16 (quest-tree: 64 of 2) besides the segment: every real key here
                attended = real
            else:
                attended = segments[i] + (segments[i - 1] if variant in ("xl", "compressive") and i > 0 else [])
            if variant == "window":  # w = 3s real positions starting at i*s + floor(s/2) - floor(w/2), cut at the ends
                start = i * s + s // 2 - (3 * s) // 2
                attended = real[max(start, 0):start + 3 * s]
            if variant == "strided":  # the segment and every s-th real position (p mod s = s - 1), each once
                attended = segments[i] + [j for p, j in enumerate(real) if p % s == s - 1 and j not in segments[i]]
            if variant == "bigbird":  # the segment, the first g = 2s real positions and r = 3 seeded random segments
                blocks = [i, *naive.bigbird_random_blocks(0, i, m, 2 * s, s, 3)]
                attended = sorted(set(real[:2 * s]).union(*(segments[j] for j in blocks)))
            if variant == "adaptive":  # compacted positions at most S = 2s outside the segment, cut at the ends
                compacted = range(max(i * s - 2 * s, 0), min((i + 1) * s + 2 * s, len(real)))
                attended = [real[p] for p in compacted]
            logits = torch.stack([(scale * keys[b, :, j] * queries[b, :, t]).sum(-1) for j in attended], dim=-1)
            if variant == "adaptive":  # + log m_z(x): z = S / 2 = s (span_init 0.5), R = s, x from the segment
                distance = torch.tensor([max(i * s - p, p - (i * s + s - 1), 0) for p in compacted], dtype=logits.dtype)
                logits = logits + torch.log(((s + s - distance) / s).clamp(0, 1))
            if variant == "star":  # one relay token: the mean of every real key
                relay_key = keys[b, :, real].mean(dim=1)  # (H, d)
                logits = torch.cat([logits, scale * (relay_key * queries[b, :, t]).sum(-1, keepdim=True)], dim=-1)
            if variant == "longt5":
                global_keys = torch.stack([keys[b, :, segment].mean(dim=1) for segment in segments], dim=1)
                logits = torch.cat([logits, scale * (global_keys * queries[b, :, t, None]).sum(-1)], dim=-1)
            if variant == "compressive":  # c = 4 = s: one mean row per segment before the memory, j <= i - 2
                older = segments[: max(i - 1, 0)]
                if older:
                    mean_keys = torch.stack([keys[b, :, segment].mean(dim=1) for segment in older], dim=1)
                    logits = torch.cat([logits, scale * (mean_keys * queries[b, :, t, None]).sum(-1)], dim=-1)
            if variant == "bp":  # span nodes of the partition (k = 2), each the mean of its segments' real keys
                nodes = [sum(segments[j * 2**level:(j + 1) * 2**level], []) for level, j in naive.bp_partition(i, m, 2)]
                node_keys = torch.stack([keys[b, :, node].mean(dim=1) for node in nodes], dim=1)
                logits = torch.cat([logits, scale * (node_keys * queries[b, :, t, None]).sum(-1)], dim=-1)
            probabilities = torch.softmax(logits, dim=-1)  # (H, n [+ m])
            for column, j in enumerate(attended):
                weights[b, :, t, j] += probabilities[:, column]
            if variant == "star":  # the relay's probability spread evenly over every real position
                for j in real:
                    weights[b, :, t, j] += probabilities[:, len(attended)] / len(real)
            if variant == "compressive":  # each row's probability spread evenly over its segment
                for g, segment in enumerate(segments[: max(i - 1, 0)]):
                    for j in segment:
                        weights[b, :, t, j] += probabilities[:, len(attended) + g] / len(segment)
            if variant == "bp":  # each node's probability spread evenly over its positions
                for g, node in enumerate(nodes):
                    for j in node:
                        weights[b, :, t, j] += probabilities[:, len(attended) + g] / len(node)
            if variant == "longt5":
                for g, segment in enumerate(segments):
                    for j in segment:
                        weights[b, :, t, j] += probabilities[:, len(attended) + g] / len(segment)
    return weights


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
@pytest.mark.parametrize("name", SOFTMAX_NAMES)
def test_weights_equal_a_per_query_reference_from_the_layers_queries_and_keys(family, name, left):
    model = eager_model(family, name)
    ids, mask = encoder_batch(model, left=left)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    out, captured = run_with_captures(model, ids, mask, dec, output_attentions=True)
    for layer, (weights, record) in enumerate(zip(out.cross_attentions, captured, strict=True)):
        expected = reference_weights(name, record["queries"], record["keys"], mask, record["scale"])
        assert_exact(weights, expected, f"{family} {name} layer {layer}")


@pytest.mark.parametrize("name", NAMES)
def test_rows_sum_to_one_over_the_attended_keys_and_are_zero_at_padding_and_empty_rows(family, name):
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
        if name in SIGNED_NAMES:
            continue
        assert (weights >= 0).all()
        if name == "ablation-I":  # no softmax term: zeros, documented
            assert torch.equal(weights, torch.zeros_like(weights))
        elif name == "linear":  # S / (S + eps): below 1 by eps / S, S = phi(q) . sum phi(k) > 0
            assert (sums[real_rows] < 1).all() and (sums[real_rows] > 1 - 1e-6).all()
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


@pytest.mark.parametrize("name", ["segmented", "xl", "longt5", "linear", "srformer-sigma"])
def test_weights_times_values_give_the_layers_softmax_output(family, name):
    """``O_S = A V`` (``linear``: ``O = A V``) with ``V`` the layer's values at the encoder positions: the
    weights are the distribution the output was computed with, not a look-alike. ``srformer-sigma`` is
    checked with its recurrent term removed: ``(O - (1 - sigma) O_R) / sigma`` is not observable, so its
    mixing weight is set to 1 (``sigma = sigmoid(large)``) in a copy, leaving ``O = A V``."""
    model = eager_model(family, name)
    if name == "srformer-sigma":
        model = copy.deepcopy(model)
        for _, _, module in cross_attention_modules(model):
            module.srformer.mix_logit.data.fill_(1e4)  # sigma = 1 in float64: O = O_S
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


#: Named settings whose output is ``g * A V`` plus a term that does not depend on ``A``, ``g`` a gate per query in
#: (0, 1] that does not depend on ``A`` either (``srformer-gated``: the softmax part's share of the shared normaliser).
GATED = [name for name in NAMES if NAMED_SETTINGS[name]["variant"] == "srformer-gated"]
#: Named settings whose output is ``c * A V`` plus a term that does not depend on ``A`` (``c`` = 1, or sigma).
SOFTMAX_TIMES_VALUES = [name for name in NAMES if name not in ("fastformer", "compressed", "ablation-I", *GATED)]


@pytest.mark.parametrize("name", NAMES)
def test_returned_weights_carry_the_gradient_of_the_loss(family, name):
    """``cross_attentions[i].retain_grad()`` then ``backward()``: the weights are the autograd nodes the output
    is computed from, so their gradient is d(loss)/d(A): ``c * dL/dO V^T`` where ``O = c A V + R`` (every
    mechanism whose output is weights times values, ``srformer``'s ``O_S``); for ``fastformer``
    (``O = Q * (A K) * (A V)``) its own product rule; ``compressed`` (row probabilities recovered from ``A``) a
    finite, non-zero gradient. Ablation I has no softmax term: its zero weights are constants, outside the graph."""
    model = copy.deepcopy(eager_model(family, name))
    ids, mask = encoder_batch(model, left=True)
    dec = decoder_inputs(model, ids.shape[0], DECODER_LENGTH)
    out, captured = backward_through_weights(model, ids, mask, dec)
    for layer, (weights, record) in enumerate(zip(out.cross_attentions, captured, strict=True)):
        where = f"{family} {name} layer {layer}"
        if name == "ablation-I":
            assert not weights.requires_grad and not weights.any(), where
            continue
        assert weights.grad is not None, where
        assert torch.isfinite(weights.grad).all() and weights.grad.abs().max() > 0, where
        gradient, values = record["output_grad"], record["values"]
        if name in SOFTMAX_TIMES_VALUES:
            factor = 1.0
            if name == "srformer-sigma":
                module = next(module for i, (_, _, module) in enumerate(cross_attention_modules(model)) if i == layer)
                factor = float(torch.sigmoid(module.srformer.mix_logit.detach()))
            assert_exact(weights.grad, factor * torch.matmul(gradient, values.transpose(-1, -2)), where)
        elif name in GATED:  # d(loss)/d(A) = g * dL/dO V^T, one factor g per query row
            expected = torch.matmul(gradient, values.transpose(-1, -2))
            gate = (weights.grad * expected).sum(-1, keepdim=True) / (expected * expected).sum(-1, keepdim=True)
            assert bool((gate > 0).all() and (gate <= 1 + 1e-12).all() and (gate < 1).any()), where
            assert_exact(weights.grad, gate * expected, where)
        elif name == "fastformer":
            queries, keys = record["queries"], record["keys"]
            pooled_keys, pooled_values = torch.matmul(weights, keys), torch.matmul(weights, values)
            expected = (torch.matmul(gradient * queries * pooled_values, keys.transpose(-1, -2))
                        + torch.matmul(gradient * queries * pooled_keys, values.transpose(-1, -2)))
            assert_exact(weights.grad, expected.detach(), where)


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
