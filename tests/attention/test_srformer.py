"""Tensor-level tests of the segment-based modules (mostly SRformerCrossAttention): parallel == incremental,
padding, state reordering."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from srformer.attention import step_choice
from srformer.attention.schedule import segment_index
from srformer.attention.state import SRformerCacheLayer
from srformer.attention.variants import build_cross_attention
from srformer.config import SRformerConfig
from tests.tolerance import assert_exact, exact_tolerance


def _module(variant="srformer", segment_size=3, target_length=8, head_dim=4, scale=1.0, **kw):
    torch.manual_seed(0)
    kw.setdefault("raf_linear_init_scale", 1.0)  # a large recurrent term, so errors in it show
    config = SRformerConfig(variant=variant, segment_size=segment_size, target_length=target_length, **kw)
    return build_cross_attention(config, head_dim, scale).double()  # float64: exactness (tests/tolerance.py)


def _inputs(batch, heads, k, q, d, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(batch, heads, k, d, generator=g, dtype=torch.float64)
    values = torch.randn(batch, heads, k, d, generator=g, dtype=torch.float64)
    queries = torch.randn(batch, heads, q, d, generator=g, dtype=torch.float64)
    valid = torch.arange(k)[None, :] < torch.tensor(lengths)[:, None]
    return queries, keys, values, valid


def _incremental(module, queries, state, project_rows=None):
    outs = []
    for t in range(queries.shape[2]):
        out, state = module.step(queries[:, :, t : t + 1], state, position=t, project_rows=project_rows)
        outs.append(out)
    return torch.cat(outs, dim=2), state


def _rows_of(keys, values):
    """A stand-in for the model's projection in the lean layout: look rows up in the full K/V."""

    def project_rows(positions):
        index = positions[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
        return torch.gather(keys, 2, index), torch.gather(values, 2, index)

    return project_rows


@pytest.mark.filterwarnings("ignore:An encoder input has")
@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 3), heads=st.integers(1, 3), d=st.sampled_from([2, 4, 8]), k=st.integers(1, 20),
    q=st.integers(1, 12), s=st.integers(1, 8), target=st.integers(1, 16),
    variant=st.sampled_from(["segmented", "srformer"]),
    data=st.data(),
)
def test_parallel_equals_incremental_for_random_shapes_and_padding(batch, heads, d, k, q, s, target, variant, data):
    lengths = [data.draw(st.integers(1, k)) for _ in range(batch)]
    module = _module(variant, s, target, d, scale=0.5)
    queries, keys, values, valid = _inputs(batch, heads, k, q, d, lengths)
    state = module.init_state(keys, values, valid)
    parallel, final_parallel = module(queries, state)
    incremental, final_incremental = _incremental(module, queries, state)
    assert torch.isfinite(parallel).all()
    # float64, scaled by the output magnitude above 1: random N(0, 1) keys with a full-size RAF init
    # give outputs up to ~50, and the padded and unpadded shapes sum in different orders.
    tol = exact_tolerance(parallel)
    assert (parallel - incremental).abs().max().item() <= tol
    assert torch.equal(final_parallel.last_segment, final_incremental.last_segment)
    # The lean layout fires RAF incrementally from K^T V and projects each segment on demand.
    lean, final_lean = _incremental(module, queries, module.lean(state), _rows_of(keys, values))
    assert (parallel - lean).abs().max().item() <= tol
    assert torch.equal(final_parallel.last_segment, final_lean.last_segment)
    # Padding invariance: each example alone, without padding, gives the same rows.
    for b, n in enumerate(lengths):
        alone_state = module.init_state(keys[b : b + 1, :, :n], values[b : b + 1, :, :n], None)
        alone, _ = module(queries[b : b + 1], alone_state)
        assert (alone - parallel[b : b + 1]).abs().max().item() <= tol


def test_segmented_output_only_reads_its_segment():
    module = _module("segmented", segment_size=4, target_length=4)
    queries, keys, values, valid = _inputs(1, 1, 16, 4, 4, [16])
    state = module.init_state(keys, values, valid)
    out, _ = module(queries, state)
    for t in range(4):  # m = 4 = T, so query t attends to segment t
        seg = slice(4 * t, 4 * t + 4)
        expected = torch.softmax(queries[0, 0, t] @ keys[0, 0, seg].T, -1) @ values[0, 0, seg]
        assert_exact(out[0, 0, t], expected, f"step {t}")


def test_recurrent_term_excludes_padding_from_kv_and_norm():
    module = _module("srformer", segment_size=2, target_length=4)
    queries, keys, values, valid = _inputs(1, 1, 8, 4, 4, [6])
    garbage = keys.clone()
    garbage[:, :, 6:] = 1e3
    a, _ = module(queries, module.init_state(keys, values, valid))
    state = module.init_state(keys, values, valid)
    assert_exact(state.key_norm, keys[:, :, :6].pow(2).sum(2).sqrt() + 1e-6, "norm(K)")
    c, _ = module(queries, module.init_state(garbage, values, valid))
    assert_exact(c, a, "garbage in padding")


@pytest.mark.parametrize("variant", ["segmented", "srformer", "xl", "longt5", "linear"])
def test_empty_row_attends_an_empty_memory_and_leaves_other_rows_alone(variant):
    """An all-zero mask row (an empty document) gives the output of an empty memory, 0, on the
    parallel, incremental and lean paths, with finite gradients; the other rows equal running them alone."""
    module = build_cross_attention(
        SRformerConfig(variant=variant, segment_size=3, target_length=6, raf_linear_init_scale=1.0), 4, 0.5
    ).double()
    queries, keys, values, valid = _inputs(3, 2, 8, 7, 4, [8, 0, 5])
    keys.requires_grad_(True)
    state = module.init_state(keys, values, valid)
    parallel, _ = module(queries, state)
    assert torch.isfinite(parallel).all()
    assert torch.equal(parallel[1], torch.zeros_like(parallel[1]))
    parallel.sum().backward()
    assert torch.isfinite(keys.grad).all()
    with torch.no_grad():
        incremental, _ = _incremental(module, queries, state)
        assert_exact(incremental, parallel.detach(), "incremental")
        if variant in ("segmented", "srformer"):
            lean, _ = _incremental(module, queries, module.lean(state), _rows_of(keys, values))
            assert_exact(lean, parallel.detach(), "lean")
        for b, n in ((0, 8), (2, 5)):
            alone_state = module.init_state(keys[b : b + 1, :, :n], values[b : b + 1, :, :n], None)
            alone, _ = module(queries[b : b + 1], alone_state)
            assert_exact(parallel[b : b + 1].detach(), alone, f"row {b} alone")


def test_too_many_segments_warns_or_raises_when_strict():
    _, keys, values, valid = _inputs(1, 1, 12, 1, 4, [12])
    with pytest.warns(UserWarning, match="target_length"):
        _module(segment_size=1, target_length=4).init_state(keys, values, valid)
    with pytest.raises(ValueError, match="segment_size"):
        _module(segment_size=1, target_length=4, strict_schedule=True).init_state(keys, values, valid)


def test_cache_layer_reorders_every_state_tensor_across_examples():
    """Beams of one example share the RAF state (it depends on the encoder and t only), so an
    end-to-end beam test cannot see a state left behind; reorder across examples directly."""
    module = _module("srformer", segment_size=2, target_length=6)
    queries, keys, values, valid = _inputs(3, 2, 7, 3, 4, [7, 4, 2])
    state = module.init_state(keys, values, valid)
    _, state = _incremental(module, queries, state)
    layer = SRformerCacheLayer(state, (2, 7, 4), keys.dtype)
    perm = torch.tensor([2, 0, 1])
    layer.reorder_cache(perm)
    for name in ("keys", "values", "positions", "lengths", "num_segments", "last_segment", "raf_readout",
                 "segment_table", "segment_valid", "raf_total", "key_norm"):
        assert torch.equal(getattr(layer.state, name), getattr(state, name)[perm]), name
    # transformers' view: (B, H, k, d) in encoder order, zero at padding, the reordered examples' keys
    assert torch.equal(layer.keys, (keys * valid[:, None, :, None])[perm])
    assert layer.get_seq_length() == 7
    layer.batch_repeat_interleave(2)
    assert layer.state.raf_readout.shape[0] == 6
    assert torch.equal(layer.state.lengths, state.lengths[perm].repeat_interleave(2))
    layer.batch_select_indices(torch.tensor([0, 5]))
    assert torch.equal(layer.state.raf_readout, state.raf_readout[perm][[0, 2]])
    lean = SRformerCacheLayer(module.lean(state), (2, 7, 4), keys.dtype)
    lean.reorder_cache(perm)
    for name in ("positions", "lengths", "last_segment", "raf_total", "key_norm", "membrane", "raf_output"):
        assert torch.equal(getattr(lean.state, name), getattr(module.lean(state), name)[perm]), name


def test_step_after_reordering_uses_the_reordered_state():
    module = _module("srformer", segment_size=2, target_length=6)
    queries, keys, values, valid = _inputs(2, 1, 8, 5, 4, [8, 3])
    state = module.init_state(keys, values, valid)
    _, state = _incremental(module, queries[:, :, :3], state)
    layer = SRformerCacheLayer(state, (1, 8, 4), keys.dtype)
    layer.reorder_cache(torch.tensor([1, 0]))
    swapped, _ = module.step(queries[[1, 0], :, 3:4], layer.state, position=3)
    straight, _ = module.step(queries[:, :, 3:4], state, position=3)
    assert_exact(swapped, straight[[1, 0]], "reordered step")


def test_projecting_values_first_equals_projecting_products():
    """(K_j^T V_j) W^T == K_j^T (V_j W^T): the fast path (no clamp) and the clamped path with a clamp
    too large to bite give the same RAF inputs."""
    queries, keys, values, valid = _inputs(2, 2, 12, 1, 4, [12, 7])
    fast = _module(segment_size=3)
    clamped = _module(segment_size=3, kv_clamp=1e9)
    state = fast.init_state(keys, values, valid)
    a, total_a = fast._raf_inputs(state.keys, state.values)
    b, total_b = clamped._raf_inputs(state.keys, state.values)
    assert_exact(a, b, "RAF inputs")
    assert_exact(total_a, total_b, "W K^T V")


def test_clamped_products_keep_parallel_incremental_and_lean_paths_equal():
    module = _module(segment_size=3, target_length=6, kv_clamp=0.5)
    queries, keys, values, valid = _inputs(2, 2, 14, 9, 4, [14, 8])
    state = module.init_state(keys, values, valid)
    parallel, _ = module(queries, state)
    incremental, _ = _incremental(module, queries, state)
    lean, _ = _incremental(module, queries, module.lean(state), _rows_of(keys, values))
    plain = _module(segment_size=3, target_length=6)
    unclamped, _ = plain(queries, plain.init_state(keys, values, valid))
    assert_exact(incremental, parallel, "incremental")
    assert_exact(lean, parallel, "lean")
    assert (parallel - unclamped).abs().max() > 1e-3  # the clamp changed something


def _dense_reference(module, queries, state):
    """The parallel path as one masked softmax over all M*s compacted keys (the formulation before
    per-query segment blocks): same function, O(q*k*d) per head instead of O(q*s*d)."""
    batch, max_segments, heads, s, d = state.keys.shape
    keys = state.keys.permute(0, 2, 1, 3, 4).reshape(batch, heads, max_segments * s, d)
    values = state.values.permute(0, 2, 1, 3, 4).reshape(batch, heads, max_segments * s, d)
    q = queries.shape[2]
    segments = segment_index(torch.arange(q), state.num_segments, module.settings.target_length)  # (B, q)
    key_segment = torch.arange(max_segments * s) // s
    valid = state.segment_valid.reshape(batch, 1, max_segments * s)
    allowed = (key_segment == segments[:, :, None]) & valid
    variant = module.settings.variant
    if variant == "xl":
        keys, values = torch.cat([keys, keys.detach()], 2), torch.cat([values, values.detach()], 2)
        allowed = torch.cat([allowed, (key_segment == segments[:, :, None] - 1) & valid], 2)
    if variant == "longt5":
        keys, values = torch.cat([keys, state.global_keys], 2), torch.cat([values, state.global_values], 2)
        allowed = torch.cat([allowed, state.global_valid[:, None, :].expand(-1, q, -1)], 2)
    output = torch.nn.functional.scaled_dot_product_attention(
        queries, keys, values, attn_mask=allowed[:, None], scale=module.scale
    )
    if module.has_recurrence:
        every = torch.einsum("bhqd,bmhde->bhqme", queries, state.raf_readout)  # Q_t . out_j for every j
        pick = segments[:, None, :, None, None].expand(batch, heads, q, 1, d)
        output = module._combine(output, torch.take_along_dim(every, pick, dim=3)[:, :, :, 0])
    return output


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("variant", ["segmented", "srformer", "xl", "longt5"])
def test_per_query_segment_blocks_equal_a_dense_masked_softmax_with_gradients(variant):
    """Training pays for its segment only (each query gathers its own (H, s, d) block): outputs and
    gradients (queries, keys, values, RAF parameters) equal the dense masked softmax over all keys."""
    module = _module(variant, segment_size=3, target_length=7, scale=0.5)
    queries, keys, values, valid = _inputs(3, 2, 11, 9, 4, [11, 7, 2])
    weights = torch.randn(3, 2, 9, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    inputs = [queries.requires_grad_(True), keys.requires_grad_(True), values.requires_grad_(True)]
    parameters = [p for p in module.parameters()]

    def output_and_gradients(forward):
        output = forward(queries, module.init_state(keys, values, valid))
        return output.detach(), torch.autograd.grad((output * weights).sum(), inputs + parameters)

    blocks, block_gradients = output_and_gradients(lambda q, state: module(q, state)[0])
    dense, dense_gradients = output_and_gradients(lambda q, state: _dense_reference(module, q, state))
    assert_exact(blocks, dense, "output")
    for name, a, b in zip(["queries", "keys", "values"] + [n for n, _ in module.named_parameters()],
                          block_gradients, dense_gradients, strict=True):
        assert_exact(a, b, f"gradient of {name}")


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("settings", [
    {}, {"ablation": "no_raf"}, {"ablation": "segment_products"}, {"ablation": "no_norm"}, {"kv_clamp": 0.5},
    {"raf_neuron": "two_sided"},
    {"target_length": 2},  # more segments than T: the schedule skips segments, RAF fires only where visited
])
@pytest.mark.parametrize("segment_size", [2, 5])  # d = 4: fewer positions per segment than d, and more
@pytest.mark.parametrize("route", ["cpu", "accelerator"])
def test_state_built_without_autograd_equals_the_autograd_build(settings, segment_size, route, monkeypatch):
    """The no-grad build on either route (the CPU's: norm(K) summed segment by segment, W and x_j formed in the
    scan's loop; the accelerator's: batched, W on the values, one scan call) and the autograd build (RAF scan, then
    the factor) give the same state at every segment a query reads; the no-grad build's slots after an example's
    last segment (read by no query) are 0."""
    monkeypatch.setattr(step_choice, "STEP_OVERRIDE", route)
    settings = {"target_length": 8, **settings}
    module = _module("srformer", segment_size=segment_size, **settings)
    _, keys, values, valid = _inputs(3, 2, 13, 1, 4, [13, 6, 0])
    with torch.no_grad():
        fast = module.init_state(keys, values, valid)
    tracked = module.init_state(keys.clone().requires_grad_(True), values, valid)
    for name in ("raf_total", "key_norm"):
        assert_exact(getattr(fast, name), getattr(tracked, name).detach(), name)
    visited = module._visited(fast.num_segments, fast.raf_readout.shape[1])[:, :, None, None, None]
    assert_exact(fast.raf_readout * visited, tracked.raf_readout.detach() * visited, "raf_readout")
    trailing = torch.arange(visited.shape[1])[None, :] >= fast.num_segments[:, None]
    assert trailing.any()  # the padded examples have slots after their last segment
    in_place = module.raf is not None and not module.raf.two_sided  # the paper neuron's in-place loop zeroes them
    if in_place and bool((visited.sum(1).flatten() == fast.num_segments).all()):
        assert fast.raf_readout[trailing].abs().max() == 0


def test_state_build_keeps_gradients_of_the_neuron_when_w_and_the_inputs_are_frozen():
    """Autograd is chosen when any RAF parameter is trained, not only W or the keys/values: a frozen W with
    plain keys/values still gives the leak and threshold a gradient (the no-grad build would drop it)."""
    module = _module("srformer", segment_size=2)
    module.raf.linear.weight.requires_grad_(False)
    queries, keys, values, valid = _inputs(2, 2, 10, 6, 4, [10, 7])
    output, _ = module(queries, module.init_state(keys, values, valid))
    leak, threshold = torch.autograd.grad(output.square().sum(), [module.raf.leak, module.raf.threshold])
    assert leak.abs() > 0 and threshold.abs() > 0


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
def test_lean_layout_projects_once_per_segment_change(variant):
    """Eager lean steps project the segment's encoder rows only when some row's segment changes, and
    reuse the kept keys/values/readout otherwise (same outputs as the standard layout)."""
    module = _module(variant, segment_size=3, target_length=12)
    queries, keys, values, valid = _inputs(2, 2, 12, 14, 4, [12, 9])
    state = module.init_state(keys, values, valid)
    calls = []
    rows = _rows_of(keys, values)

    def counting_rows(positions):
        calls.append(positions)
        return rows(positions)

    lean, _ = _incremental(module, queries, module.lean(state), counting_rows)
    standard, _ = _incremental(module, queries, state)
    assert_exact(lean, standard, "lean with reuse")
    table = state.segment_table[:, torch.clamp(torch.arange(14), max=12)]  # (B, q) i(t)
    changes = 1 + int((table[:, 1:] != table[:, :-1]).any(dim=0).sum())  # the first step, then every change
    assert len(calls) == changes < 14


@pytest.mark.parametrize("settings", [
    {"variant": "segmented"}, {}, {"ablation": "no_raf"}, {"ablation": "segment_products"}, {"ablation": "no_norm"},
    {"kv_clamp": 0.5},
])
@pytest.mark.parametrize("padded", [False, True])
def test_lean_state_built_directly_equals_the_lean_of_the_standard_state(settings, padded):
    """init_lean_state (no segment-major copy; K^T V in one matmul, then W) gives the state and the steps of
    lean(init_state(...)): every field to the float64 tolerance, and the same outputs over every step."""
    settings = {"variant": "srformer", **settings}
    module = _module(segment_size=3, target_length=6, **settings)
    lengths = [13, 7, 0] if padded else [13, 13, 13]
    queries, keys, values, valid = _inputs(3, 2, 13, 8, 4, lengths)
    key_valid = valid if padded else None
    direct = module.init_lean_state(keys, values, key_valid)
    converted = module.lean(module.init_state(keys, values, key_valid))
    assert type(direct) is type(converted)
    for field in dataclasses.fields(converted):
        a, b = getattr(direct, field.name), getattr(converted, field.name)
        if a is None or b is None:
            assert a is None and b is None, field.name
        elif a.is_floating_point():
            assert_exact(a, b, field.name)
        else:
            assert torch.equal(a, b), field.name
    rows = _rows_of(keys, values)
    direct_output, _ = _incremental(module, queries, direct, rows)
    converted_output, _ = _incremental(module, queries, converted, rows)
    assert_exact(direct_output, converted_output, "lean steps")


def _projection_layout(tensor):
    """(B, H, k, d) keys or values in the memory a transformers projection leaves: (B, k, H, d) rows."""
    return tensor.transpose(1, 2).contiguous().transpose(1, 2)


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("settings", [{}, {"ablation": "no_raf"}, {"ablation": "segment_products"}, {"kv_clamp": 0.5}])
def test_state_built_from_donated_projections_equals_init_state_and_reuses_their_memory(settings):
    """s = d = 4 and k = 12 (three segments): the readouts take exactly the keys' projection memory, so the
    donated build writes them there; the state is init_state's to float64 rounding."""
    module = _module("srformer", segment_size=4, target_length=8, **settings)
    _, keys, values, valid = _inputs(3, 2, 12, 1, 4, [12, 7, 0])
    keys, values = _projection_layout(keys), _projection_layout(values)
    with torch.no_grad():
        expected = module.init_state(keys.clone(), values.clone(), valid)
        donated = keys.clone()
        state = module.init_state_from_donated(donated, values.clone(), valid)
    assert state.raf_readout.untyped_storage().data_ptr() == donated.untyped_storage().data_ptr()
    for field in dataclasses.fields(expected):
        a, b = getattr(expected, field.name), getattr(state, field.name)
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            assert_exact(b, a, field.name)
        elif isinstance(a, torch.Tensor):
            assert torch.equal(a, b), field.name


@pytest.mark.parametrize("case", ["other size", "not projection memory", "autograd"])
def test_donated_projections_that_cannot_hold_the_readouts_are_left_alone(case):
    """A donation the readouts do not fit exactly (s != d), memory not laid out as a projection's, or a build
    under autograd allocates the readouts as init_state does and leaves the donated keys unchanged."""
    module = _module("srformer", segment_size=2 if case == "other size" else 4, target_length=8)
    _, keys, values, valid = _inputs(2, 2, 12, 1, 4, [12, 9])
    if case != "not projection memory":
        keys, values = _projection_layout(keys), _projection_layout(values)
    donated = keys.clone().requires_grad_(case == "autograd")
    with torch.set_grad_enabled(case == "autograd"):
        state = module.init_state_from_donated(donated, values, valid)
        expected = module.init_state(keys, values, valid)
    assert state.raf_readout.untyped_storage().data_ptr() != donated.untyped_storage().data_ptr()
    assert torch.equal(donated.detach(), keys)
    assert_exact(state.raf_readout.detach(), expected.raf_readout.detach(), "raf_readout")


@pytest.mark.filterwarnings("ignore:An encoder input has")
@pytest.mark.parametrize("settings", [{}, {"ablation": "no_raf"}, {"raf_neuron": "two_sided"}])
@pytest.mark.parametrize("grad", [False, True])
def test_an_input_of_more_segments_than_t_keeps_one_readout_per_visitable_segment(settings, grad):
    """M = 11 segments (k = 21, s = 2) and T = 4: positions 0..4 visit at most 5 segments, so the state keeps 5
    readout slots, not 11; every position's output (parallel and incremental, both builds) equals the float64
    reference, which fires the neuron over the visited segments of all 11."""
    from srformer.attention import naive

    module = _module("srformer", segment_size=2, target_length=4, **settings)
    queries, keys, values, valid = _inputs(3, 2, 21, 7, 4, [21, 12, 5])
    with torch.set_grad_enabled(grad):
        state = module.init_state(keys.clone().requires_grad_(grad), values, valid)
        parallel, _ = module(queries, state)
        incremental, _ = _incremental(module, queries, state)
    assert state.raf_readout.shape[1] == 5 and state.readout_slot.shape == (3, 11)
    parameters = {name: p.detach() for name, p in module.named_parameters()}
    expected = naive.srformer_attention(queries, keys, values, valid, module.settings, parameters=parameters)
    assert_exact(parallel.detach(), expected, "parallel")
    assert_exact(incremental.detach(), expected, "incremental")
