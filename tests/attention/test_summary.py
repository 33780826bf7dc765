"""Mechanism-specific tests of the segment-free summaries (``srformer.attention.summary`` and its variants):
reductions to full attention, the variable-length rules, the attention weights against the output, the
settings' checks. The generic matrices (float64 reference, parallel == incremental, padding, reordering,
models, save/load, bf16) cover them through the registry (tests/attention/test_variants.py, tests/models)."""

from __future__ import annotations

import math

import pytest
import torch

from srformer.attention import naive
from srformer.attention.variants import build_cross_attention
from srformer.config import named_config
from tests.attention.test_srformer import _inputs
from tests.tolerance import assert_exact, float32_tolerance


def _module(name, head_dim=4, scale=0.5, **settings):
    torch.manual_seed(0)
    return build_cross_attention(named_config(name, **settings), head_dim, scale).double()


def _left_padded(keys, values, valid, lengths):
    """The same examples with their real positions moved to the end (left padding)."""
    width = valid.shape[1]
    shift = [width - n for n in lengths]
    return (torch.stack([torch.roll(keys[b], s, dims=1) for b, s in enumerate(shift)]),
            torch.stack([torch.roll(values[b], s, dims=1) for b, s in enumerate(shift)]),
            torch.stack([torch.roll(valid[b], s) for b, s in enumerate(shift)]))


def _output(module, queries, keys, values, valid):
    return module(queries, module.init_state(keys, values, valid))[0]


def _weights_times_values(module, queries, keys, values, valid):
    """``A V`` with ``A`` the module's ``output_attentions`` weights over the encoder positions."""
    weights = module.attention_weights(queries, keys, module.init_state(keys, values, valid), valid)
    return torch.matmul(weights, values)


# ------------------------------------------------------------------ linformer
def test_linformer_with_identity_projections_is_full_attention_in_either_padding():
    """E = F = I with r = N = n: every example has exactly N real positions (padded to 7 on either side)."""
    module = _module("linformer", projected_length=5, max_source_length=5)
    with torch.no_grad():
        module.key_projection.copy_(torch.eye(5))
        module.value_projection.copy_(torch.eye(5))
    queries, keys, values, valid = _inputs(2, 2, 7, 3, 4, [5, 5])
    expected = naive.full_attention(queries, keys, values, valid, named_config("full"), scale=0.5)
    assert_exact(_output(module, queries, keys, values, valid), expected, "right padded")
    assert_exact(_output(module, queries, *_left_padded(keys, values, valid, [5, 5])), expected, "left padded")


def test_linformer_reads_the_first_n_columns_and_rejects_longer_inputs():
    """A padded width above N is fine while no example has more than N real positions (left padding puts
    them past column N); N + 1 real positions raise, naming the setting."""
    module = _module("linformer", projected_length=3, max_source_length=6)
    queries, keys, values, valid = _inputs(2, 2, 9, 3, 4, [6, 2])
    left_keys, left_values, left = _left_padded(keys, values, valid, [6, 2])
    reference = naive.linformer_attention(queries, keys, values, valid, module.settings, scale=0.5,
                                          parameters=module.state_dict())
    assert_exact(_output(module, queries, left_keys, left_values, left), reference, "width 9 > N = 6")
    with pytest.raises(ValueError, match="max_source_length"):
        module.init_state(keys, values, torch.ones_like(valid))  # 9 real positions


def test_linformer_weights_times_values_are_the_output():
    """``A = P F`` over the encoder positions: ``A V = O`` exactly, also with left padding and an empty row."""
    module = _module("linformer", projected_length=3, max_source_length=8)
    lengths = [8, 3, 0]
    queries, keys, values, valid = _inputs(3, 2, 8, 4, 4, lengths)
    left_keys, left_values, left = _left_padded(keys, values, valid, lengths)
    output = _output(module, queries, left_keys, left_values, left)
    assert_exact(_weights_times_values(module, queries, left_keys, left_values, left), output, "A V")
    assert output[2].abs().max() == 0  # the empty document: output and weights 0


def test_linformer_settings_are_checked_defaulted_and_saved():
    config = named_config("linformer")
    assert (config.resolved_projected_length(), config.resolved_max_source_length()) == (256, 4096)
    config = named_config("linformer", projected_length=8, max_source_length=100)
    assert type(config).from_dict(config.to_dict()) == config
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="projected_length"):
            named_config("linformer", projected_length=bad)
    with pytest.raises(ValueError, match="max_source_length.*variant='linformer'"):
        named_config("segmented", max_source_length=100)
    module = _module("linformer", projected_length=8, max_source_length=100)
    assert module.key_projection.shape == module.value_projection.shape == (8, 100)


# ------------------------------------------------------------------ performer
def test_performer_features_are_orthogonal_blocks_drawn_from_the_seed():
    from srformer.attention.performer import orthogonal_random_features

    features = orthogonal_random_features(10, 4, seed=3).double()  # blocks of 4, 4, 2 rows
    for block in (features[:4], features[4:8], features[8:]):
        gram = block @ block.T
        off_diagonal = gram - torch.diag(torch.diagonal(gram))
        # float32 rows of norm ~2: products rounded at 2**-24 relative, 4 terms (tests/tolerance.py)
        assert off_diagonal.abs().max() <= float32_tolerance(gram.abs().max(), terms=4)
    assert torch.equal(features, orthogonal_random_features(10, 4, seed=3).double())
    assert not torch.equal(features, orthogonal_random_features(10, 4, seed=4).double())
    module = _module("performer", random_feature_seed=3, num_random_features=10)
    assert torch.equal(module.random_features, features)
    assert _module("performer").random_features.shape == (4 * 2, 4)  # d ceil(ln d) = 4 * 2 at d = 4


def test_performer_features_estimate_the_softmax_kernel_without_bias():
    """phi(x) . phi(y) / m estimates exp(x . y) (Lemma 1). With w ~ N(0, I_d) one term has relative variance
    exp(|x + y|^2) - 1, so the mean of m terms has relative standard deviation sigma = sqrt((exp(|x + y|^2) - 1) / m)
    (orthogonal blocks only lower it, Sec. 2.4); the m / d = 5000 independent blocks make the mean Gaussian to
    good approximation, and 6 sigma is exceeded with probability about 2e-9. Directions biased by an unsigned QR
    were off by 10% here (an error this test catches: 6 sigma is 4%)."""
    from srformer.attention.performer import orthogonal_random_features

    m = 20000
    features = orthogonal_random_features(m, 4, seed=0).double()
    x = torch.tensor([0.3, -0.2, 0.5, 0.1], dtype=torch.float64)
    for y in ([0.4, 0.1, -0.3, 0.2], [-0.5, 0.2, 0.1, -0.4], [0.0, 0.6, 0.2, 0.3]):
        y = torch.tensor(y, dtype=torch.float64)
        estimate = (torch.exp(features @ x - x @ x / 2) @ torch.exp(features @ y - y @ y / 2)).item() / m
        exact = math.exp(x @ y)
        sigma = math.sqrt((math.exp((x + y) @ (x + y)) - 1) / m)
        assert abs(estimate / exact - 1) <= 6 * sigma, (estimate, exact, sigma)


def test_performer_keeps_its_saved_features_over_its_seed():
    """The features are a persistent buffer: a state dict holding other features (another torch version's
    draw, say) is what a reloaded module computes with, and the output follows it."""
    module = _module("performer")
    queries, keys, values, valid = _inputs(2, 2, 6, 3, 4, [6, 4])
    state = module.state_dict()
    assert "random_features" in state
    state["random_features"] = state["random_features"].flip(0) * 0.5
    reloaded = _module("performer")
    reloaded.load_state_dict(state)
    assert torch.equal(reloaded.random_features, state["random_features"])
    expected = naive.performer_attention(queries, keys, values, valid, module.settings, scale=0.5, parameters=state)
    assert_exact(_output(reloaded, queries, keys, values, valid), expected, "reloaded features")


def test_performer_is_padding_invariant_with_huge_padded_keys_and_its_weights_give_the_output():
    """Padded keys of 1e4 would overflow exp() if they entered the stabiliser or the sums; the weights are
    the normalised kernel (O = A V, rows summing to 1)."""
    module = _module("performer")
    lengths = [6, 2, 0]
    queries, keys, values, valid = _inputs(3, 2, 6, 3, 4, lengths)
    keys = keys.masked_fill(~valid[:, None, :, None], 1e4)
    expected = naive.performer_attention(queries, keys, values, valid, module.settings, scale=0.5,
                                         parameters=module.state_dict())
    output = _output(module, queries, keys, values, valid)
    assert torch.isfinite(output).all()
    assert_exact(output, expected, "huge padding")
    assert_exact(_weights_times_values(module, queries, keys, values, valid), output, "A V")
    weights = module.attention_weights(queries, keys, module.init_state(keys, values, valid), valid)
    assert_exact(weights.sum(-1)[:2], torch.ones_like(weights.sum(-1)[:2]), "rows sum to 1")


def test_performer_settings_are_checked():
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="num_random_features"):
            named_config("performer", num_random_features=bad)
    with pytest.raises(ValueError, match="random_feature_seed"):
        named_config("performer", random_feature_seed=-1)
    with pytest.raises(ValueError, match="random_feature_seed.*variant='performer'"):
        named_config("linformer", random_feature_seed=1)
    assert named_config("performer", random_feature_seed=0).resolved_feature_seed() == 0


# ------------------------------------------------------------------ compressed
def test_compressed_with_stride_one_and_identity_is_full_attention():
    module = _module("compressed", compression_stride=1)  # initial W = I / 1, b = 0: every key and value itself
    lengths = [7, 4]
    queries, keys, values, valid = _inputs(2, 2, 7, 3, 4, lengths)
    expected = naive.full_attention(queries, keys, values, valid, named_config("full"), scale=0.5)
    assert_exact(_output(module, queries, *_left_padded(keys, values, valid, lengths)), expected, "c = 1")


def test_compressed_learned_convolutions_and_partial_last_blocks_match_the_reference():
    """n = 7, 5, 3, 1 and 0 real positions with c = 3: full, partial and single-position last blocks, an empty
    document; learned (random) weights and biases; right and left padding."""
    module = _module("compressed", compression_stride=3)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn_like(parameter))
    lengths = [7, 5, 3, 1, 0]
    queries, keys, values, valid = _inputs(5, 2, 7, 3, 4, lengths)
    expected = naive.compressed_attention(queries, keys, values, valid, module.settings, scale=0.5,
                                          parameters=module.state_dict())
    assert_exact(_output(module, queries, keys, values, valid), expected, "right padded")
    assert_exact(_output(module, queries, *_left_padded(keys, values, valid, lengths)), expected, "left padded")
    state = module.init_state(keys, values, valid)
    assert state.summary_valid.sum(dim=1).tolist() == [3, 2, 1, 1, 0]  # ceil(n / 3)
    with pytest.raises(ValueError, match="lean cache layout is not implemented"):
        module.lean(state)


def test_compressed_weights_spread_each_row_over_its_blocks_real_positions():
    """With mean pooling and c = n (one block) every query gives each real position 1/n; padding gets 0."""
    module = _module("compressed", compression_stride=4)
    queries, keys, values, valid = _inputs(2, 1, 6, 2, 4, [4, 3])
    left_keys, left_values, left = _left_padded(keys, values, valid, [4, 3])
    weights = module.attention_weights(queries, left_keys, module.init_state(left_keys, left_values, left), left)
    expected = left.to(torch.float64)[:, None, None, :] / left.sum(dim=1).to(torch.float64)[:, None, None, None]
    assert_exact(weights, expected.expand_as(weights), "one block each")


def test_compressed_settings_are_checked():
    assert named_config("compressed").resolved_compression_stride() == 3
    for bad in (0, 2.0, False):
        with pytest.raises(ValueError, match="compression_stride"):
            named_config("compressed", compression_stride=bad)
    with pytest.raises(ValueError, match="compression_stride.*variant='compressed'"):
        named_config("linformer", compression_stride=2)
    with pytest.raises(ValueError, match="lean_cache"):
        named_config("compressed", lean_cache=True)


# ------------------------------------------------------------------ inducing
def test_inducing_weights_give_the_output_and_rows_sum_to_one():
    module = _module("inducing", num_inducing_points=3)
    lengths = [6, 2, 0]
    queries, keys, values, valid = _inputs(3, 2, 6, 3, 4, lengths)
    left_keys, left_values, left = _left_padded(keys, values, valid, lengths)
    output = _output(module, queries, left_keys, left_values, left)
    expected = naive.inducing_attention(queries, keys, values, valid, module.settings, scale=0.5,
                                        parameters=module.state_dict())
    assert_exact(output, expected, "left padded")
    assert_exact(_weights_times_values(module, queries, left_keys, left_values, left), output, "A V")
    weights = module.attention_weights(queries, left_keys, module.init_state(left_keys, left_values, left), left)
    assert_exact(weights.sum(-1)[:2], torch.ones_like(weights.sum(-1)[:2]), "rows sum to 1")
    assert (weights >= 0).all() and weights[2].abs().max() == 0


def test_inducing_settings_are_checked():
    assert named_config("inducing").resolved_inducing_points() == 32
    assert _module("inducing", num_inducing_points=5).inducing_points.shape == (5, 4)
    for bad in (0, 3.0, True):
        with pytest.raises(ValueError, match="num_inducing_points"):
            named_config("inducing", num_inducing_points=bad)
    with pytest.raises(ValueError, match="num_inducing_points.*variant='inducing'"):
        named_config("performer", num_inducing_points=4)
