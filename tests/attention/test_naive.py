"""The float64 references of :mod:`srformer.attention.naive` against cases derivable by hand.

The modules are compared with these references elsewhere (``test_variants.py``); here the references
themselves are checked: reductions (one segment = full attention), scalar (d = 1) examples whose
RAF firings, norms and softmaxes are written out below, the schedule's skipped segments, padding and
empty documents. Everything is float64 and compared with ``assert_exact`` (tests/tolerance.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from srformer.attention import naive
from srformer.config import SRformerConfig
from tests.tolerance import assert_exact

EPS = 1e-6  # SRformerConfig.norm_eps default


def _tensor(rows, *, batch=1, heads=1) -> torch.Tensor:
    """(batch, heads, len(rows), d) float64 from a list of rows, repeated over batch and heads."""
    single = torch.tensor(rows, dtype=torch.float64)
    return single.expand(batch, heads, *single.shape).clone()


def _random(batch, heads, length, d, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, heads, length, d, generator=g, dtype=torch.float64)


def _config(variant, segment_size=1, target_length=2, **settings):
    return SRformerConfig(variant=variant, segment_size=segment_size, target_length=target_length, **settings)


# ------------------------------------------------------------------ schedule
def test_schedule_helpers_follow_algorithm_1():
    assert [naive.num_segments(n, 4) for n in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    assert [naive.segment_of(t, 3, 6) for t in range(8)] == [0, 0, 1, 1, 2, 2, 2, 2]  # floor(t*3/6), capped at 2
    assert naive.segment_rows(2, 10, 4) == slice(8, 10)  # the last segment is shorter
    assert naive.visited_segments(3, 6) == [0, 1, 2]
    assert naive.visited_segments(3, 1) == [0, 2]  # m > T: i(0) = 0, i(1) = min(3, 2) = 2; segment 1 is skipped


# ------------------------------------------------------------------ full and segmented attention
def test_full_attention_of_equal_keys_is_the_mean_of_the_values():
    keys = _tensor([[0.5, -1.0]] * 3)
    values = _tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    queries = _tensor([[0.7, 0.2]])
    output = naive.full_attention(queries, keys, values, None, _config("full"), scale=0.3)
    assert_exact(output, _tensor([[3.0, 5.0]]), "equal keys: uniform weights")


def test_full_attention_weights_are_the_softmax_of_the_scaled_scores():
    keys, values, queries = _tensor([[1.0], [2.0]]), _tensor([[10.0], [20.0]]), _tensor([[1.5]])
    weights = torch.tensor([math.exp(0.5 * 1.5), math.exp(0.5 * 3.0)], dtype=torch.float64)
    expected = (weights / weights.sum()) @ torch.tensor([10.0, 20.0], dtype=torch.float64)
    output = naive.full_attention(queries, keys, values, None, _config("full"), scale=0.5)
    assert_exact(output, expected.reshape(1, 1, 1, 1), "softmax")


@pytest.mark.parametrize("segment_size", [7, 30])
def test_one_segment_covering_the_input_reduces_segmented_and_srformer_to_full(segment_size):
    """s >= k: one segment, so O_S is full attention; and P_0 = K^T V - K_0^T V_0 = 0, so the RAF input is
    0, its output relu(0 / threshold - 1) = 0 and O_R = 0 (docs/design.md, "Padding")."""
    queries, keys, values = _random(2, 3, 5, 4, 0), _random(2, 3, 7, 4, 1), _random(2, 3, 7, 4, 2)
    valid = torch.tensor([[True] * 7, [True, False, True, True, False, True, True]])
    full = naive.full_attention(queries, keys, values, valid, _config("full"), scale=0.5)
    segmented = naive.segmented_attention(
        queries, keys, values, valid, _config("segmented", segment_size, 4), scale=0.5
    )
    assert_exact(segmented, full, "segmented, one segment")
    parameters = {"raf.linear.weight": _random(1, 1, 4, 4, 3)[0, 0]}
    srformer = naive.srformer_attention(
        queries, keys, values, valid, _config("srformer", segment_size, 4), scale=0.5, parameters=parameters
    )
    assert_exact(srformer, full, "srformer, one segment")


def test_segmented_attention_reads_the_scheduled_segment():
    """s = 1, k = 2, T = 2: position 0 reads key 0 only (output = value 0), position 1 key 1 only."""
    keys, values = _tensor([[1.0], [2.0]]), _tensor([[3.0], [0.5]])
    output = naive.segmented_attention(_tensor([[2.0], [-4.0]]), keys, values, None, _config("segmented"))
    assert_exact(output, _tensor([[3.0], [0.5]]), "one key per segment")


def test_xl_reads_the_previous_segment_too():
    """s = 1, k = 2, T = 2: position 0 has no previous segment (value 0); position 1 reads both keys."""
    keys, values, queries = _tensor([[1.0], [2.0]]), _tensor([[3.0], [0.5]]), _tensor([[2.0], [-4.0]])
    output = naive.xl_attention(queries, keys, values, None, _config("xl"))
    w = torch.softmax(torch.tensor([-4.0, -8.0], dtype=torch.float64), 0)
    assert_exact(output, _tensor([[3.0], [w[0].item() * 3.0 + w[1].item() * 0.5]]), "xl")


def test_longt5_adds_one_mean_token_per_segment():
    """Zero keys give uniform weights: position 0 (segment 0 of [0, 1 | 2, 3]) averages the segment's two
    values and the two global values (the segment means 2 and 10)."""
    keys = _tensor([[0.0]] * 4)
    values = _tensor([[1.0], [3.0], [8.0], [12.0]])
    output = naive.longt5_attention(_tensor([[1.0], [1.0]]), keys, values, None, _config("longt5", 2, 2))
    assert_exact(output, _tensor([[(1.0 + 3.0 + 2.0 + 10.0) / 4], [(8.0 + 12.0 + 2.0 + 10.0) / 4]]), "longt5")


def test_linear_attention_by_hand_and_without_segments():
    """phi(x) = x + 1 for x >= 0: phi(K) = [1, 2], phi(q) = 2, so O = 2 (1*3 + 2*5) / (2 (1 + 2) + eps)."""
    keys, values, queries = _tensor([[0.0], [1.0]]), _tensor([[3.0], [5.0]]), _tensor([[1.0]])
    output = naive.linear_attention(queries, keys, values, None, _config("linear"))
    assert_exact(output, _tensor([[26.0 / (6.0 + EPS)]]), "linear")
    other = naive.linear_attention(queries, keys, values, None, _config("linear", segment_size=64, target_length=9))
    assert_exact(other, output, "segment-free")


# ------------------------------------------------------------------ RAF and srformer
def test_raf_fire_by_hand():
    """leak 1, threshold 0.5: an input 1 fires (y = 1/0.5 - 1 = 1, membrane reset to 0.5); an input 0.25
    stays below (y = -0.5, output 0, no reset)."""
    membrane, out = naive.raf_fire(torch.zeros(1, 2, dtype=torch.float64),
                                   torch.tensor([[1.0, 0.25]], dtype=torch.float64), 1.0, 0.5)
    assert_exact(out, torch.tensor([[1.0, 0.0]], dtype=torch.float64), "output")
    assert_exact(membrane, torch.tensor([[0.5, 0.25]], dtype=torch.float64), "membrane after the soft reset")
    membrane, out = naive.raf_fire(membrane, torch.tensor([[0.0, 0.5]], dtype=torch.float64), 0.5, 0.5)
    # leak 0.5: 0.25 (no fire: y = -0.5), 0.625 (fires: y = 0.25, reset to 0.125)
    assert_exact(out, torch.tensor([[0.0, 0.25]], dtype=torch.float64), "leaky output")
    assert_exact(membrane, torch.tensor([[0.25, 0.125]], dtype=torch.float64), "leaky membrane")


# d = 1, s = 1, T = 2, keys [1, 2], values [3, 0.5], query 2 at positions 0 and 1, W = 1, scale 1:
# K_0 V_0 = 3, K_1 V_1 = 1, K^T V = 4, so P_0 = 1 and P_1 = 3; norm(K) = sqrt(5) + eps; O_S = [3, 0.5].
SCALAR = dict(keys=_tensor([[1.0], [2.0]]), values=_tensor([[3.0], [0.5]]), queries=_tensor([[2.0], [2.0]]))
NORM = math.sqrt(5.0) + EPS


def _scalar_srformer(leak=1.0, threshold=0.5, weight=1.0, **settings):
    parameters = {"raf.linear.weight": torch.tensor([[weight]], dtype=torch.float64),
                  "raf.leak": torch.tensor(leak, dtype=torch.float64),
                  "raf.threshold": torch.tensor(threshold, dtype=torch.float64)}
    if settings.get("ablation") == "no_raf":
        parameters = {}
    if "mix_logit" in settings:
        parameters["mix_logit"] = torch.tensor(settings.pop("mix_logit"), dtype=torch.float64)
        settings["mix_init"] = 0.3  # replaced by the given logit
    output = naive.srformer_attention(
        SCALAR["queries"], SCALAR["keys"], SCALAR["values"], None, _config("srformer", **settings),
        parameters=parameters,
    )
    return output[0, 0, :, 0]


@pytest.mark.parametrize("leak,threshold,raf_outputs", [
    # t=0: x = P_0 = 1 -> mem 1, y = 1/0.5 - 1 = 1, reset to 0.5; t=1: x = P_1 = 3 -> mem 3.5, y = 6
    (1.0, 0.5, [1.0, 6.0]),
    # leak 0.5: t=1 mem = 0.5 * 0.5 + 3 = 3.25, y = 5.5
    (0.5, 0.5, [1.0, 5.5]),
    # threshold 2: t=0 y = 1/2 - 1 < 0, no output and no reset; t=1 mem = 1 + 3 = 4, y = 1
    (1.0, 2.0, [0.0, 1.0]),
])
def test_srformer_by_hand(leak, threshold, raf_outputs):
    expected = torch.tensor([3.0, 0.5], dtype=torch.float64) + _recurrent(*raf_outputs)
    assert_exact(_scalar_srformer(leak, threshold), expected, "O_S + O_R")


def _recurrent(out_0: float, out_1: float) -> torch.Tensor:
    """O_R at positions 0 and 1 of the scalar example for RAF outputs (or P under ablation III) out_0, out_1."""
    return 2.0 * torch.tensor([out_0, out_1], dtype=torch.float64) / NORM


def test_srformer_ablations_and_mix_by_hand():
    o_s = torch.tensor([3.0, 0.5], dtype=torch.float64)
    o_r = _recurrent(1.0, 6.0)  # the RAF outputs of the first case above
    assert_exact(_scalar_srformer(ablation="recurrent_only"), o_r, "(I) O_R only")
    assert_exact(_scalar_srformer(ablation="no_norm"), o_s + o_r * NORM, "(II) no norm(K)")
    assert_exact(_scalar_srformer(ablation="no_raf"), o_s + _recurrent(1.0, 3.0), "(III) P_i itself")
    # (IV) x_j = K_j V_j: t=0 x = 3 -> mem 3, y = 5, reset 2.5; t=1 x = 1 -> mem 3.5, y = 6
    assert_exact(_scalar_srformer(ablation="segment_products"), o_s + _recurrent(5.0, 6.0), "(IV) segment products")
    assert_exact(_scalar_srformer(mix_logit=0.0), 0.5 * o_s + 0.5 * o_r, "Eq. 10 with sigma = 0.5")
    assert_exact(_scalar_srformer(recurrence=False), o_s, "recurrence off")
    # W = 0.5 halves every RAF input: t=0 x = 0.5 -> y = 0, no fire; t=1 mem = 0.5 + 1.5 = 2, y = 3
    assert_exact(_scalar_srformer(weight=0.5), o_s + _recurrent(0.0, 3.0), "W")
    # kv_clamp 2.5: K^T V = 4 -> 2.5, K_0 V_0 = 3 -> 2.5, K_1 V_1 = 1; P_0 = 0, P_1 = 1.5
    # t=0: y = -1, output 0; t=1: mem 1.5, y = 2
    assert_exact(_scalar_srformer(kv_clamp=2.5), o_s + _recurrent(0.0, 2.0), "clamp")


def test_skipped_segments_do_not_fire():
    """s = 1, k = 3, T = 1: position 1 attends segment 2 and the RAF has fired for segments 0 and 2 only.
    keys [1, 1, 1], values [1, 2, 4]: K^T V = 7, P = [6, 5, 3]; leak 1, threshold 1, W = 1:
    t=0: mem 6, y = 5, reset 5; t=1 (segment 2): mem 8, y = 7 (firing for segment 1 would give 12)."""
    keys, values = _tensor([[1.0]] * 3), _tensor([[1.0], [2.0], [4.0]])
    parameters = {"raf.linear.weight": torch.ones(1, 1, dtype=torch.float64),
                  "raf.threshold": torch.tensor(1.0, dtype=torch.float64)}
    output = naive.srformer_attention(
        _tensor([[1.0], [1.0]]), keys, values, None, _config("srformer", 1, 1), parameters=parameters
    )
    norm = math.sqrt(3.0) + EPS
    assert_exact(output, _tensor([[1.0 + 5.0 / norm], [4.0 + 7.0 / norm]]), "skipped segment 1")


# ------------------------------------------------------------------ padding, positions, errors
def _every_reference(queries, keys, values, valid, start_position=0):
    settings = dict(segment_size=2, target_length=5, raf_threshold_init=0.01)
    weight = {"raf.linear.weight": _random(1, 1, 3, 3, 9)[0, 0]}
    return {
        "full": naive.full_attention(queries, keys, values, valid, _config("full", **settings), scale=0.5,
                                     start_position=start_position),
        "segmented": naive.segmented_attention(queries, keys, values, valid, _config("segmented", **settings),
                                               scale=0.5, start_position=start_position),
        "xl": naive.xl_attention(queries, keys, values, valid, _config("xl", **settings), scale=0.5,
                                 start_position=start_position),
        "longt5": naive.longt5_attention(queries, keys, values, valid, _config("longt5", **settings), scale=0.5,
                                         start_position=start_position),
        "linear": naive.linear_attention(queries, keys, values, valid, _config("linear", **settings),
                                         start_position=start_position),
        "srformer": naive.srformer_attention(queries, keys, values, valid, _config("srformer", **settings),
                                             scale=0.5, parameters=weight, start_position=start_position),
    }


def test_padding_anywhere_equals_the_unpadded_example_and_an_empty_example_gives_zero():
    queries, keys, values = _random(3, 2, 6, 3, 4), _random(3, 2, 9, 3, 5), _random(3, 2, 9, 3, 6)
    lengths = [9, 5, 0]
    valid = torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]
    left = torch.stack([torch.roll(valid[b], 9 - n) for b, n in enumerate(lengths)])
    left_keys = torch.stack([torch.roll(keys[b], 9 - n, dims=1) for b, n in enumerate(lengths)])
    left_values = torch.stack([torch.roll(values[b], 9 - n, dims=1) for b, n in enumerate(lengths)])
    garbage_keys = keys.masked_fill(~valid[:, None, :, None], 1e3)  # padding must be ignored, whatever it holds
    right = _every_reference(queries, garbage_keys, values, valid)
    moved = _every_reference(queries, left_keys, left_values, left)
    alone = _every_reference(queries[1:2], keys[1:2, :, :5], values[1:2, :, :5], None)
    for name, output in right.items():
        assert_exact(moved[name], output, f"{name}: left vs right padding")
        assert_exact(alone[name], output[1:2], f"{name}: padded vs alone")
        assert torch.equal(output[2], torch.zeros_like(output[2])), f"{name}: empty example"
        assert output.shape == (3, 2, 6, 3) and output.dtype == torch.float64


def test_start_position_continues_the_schedule():
    queries, keys, values = _random(1, 1, 7, 3, 7), _random(1, 1, 9, 3, 8), _random(1, 1, 9, 3, 9)
    whole = _every_reference(queries, keys, values, None)
    later = _every_reference(queries[:, :, 3:], keys, values, None, start_position=3)
    for name, output in whole.items():
        assert_exact(later[name], output[:, :, 3:], name)


def test_bad_calls_name_the_problem():
    queries, keys, values = _random(1, 1, 2, 3, 0), _random(1, 1, 4, 3, 1), _random(1, 1, 4, 3, 2)
    with pytest.raises(ValueError, match="settings.variant='xl'"):
        naive.segmented_attention(queries, keys, values, None, _config("xl"))
    with pytest.raises(ValueError, match="raf.linear.weight"):
        naive.srformer_attention(queries, keys, values, None, _config("srformer"))
    with pytest.raises(ValueError, match="does not have"):
        naive.srformer_attention(queries, keys, values, None, _config("srformer"),
                                 parameters={"raf.linear.weight": torch.eye(3), "raf.bias": torch.zeros(3)})
    with pytest.raises(ValueError, match="does not have"):
        naive.full_attention(queries, keys, values, None, _config("full"), parameters={"mix_logit": torch.zeros(())})
    with pytest.raises(ValueError, match="key_valid"):
        naive.full_attention(queries, keys, values, torch.ones(1, 5, dtype=torch.bool), _config("full"))
    with pytest.raises(ValueError, match="must agree"):
        naive.full_attention(queries, keys[..., :2], values[..., :2], None, _config("full"))


# ------------------------------------------------------------------ sliding window
def test_window_of_equal_keys_averages_the_values_of_the_window():
    """n = 10, s = 3 (m = 4), T = 4, w = 5: start(t) = 3 i(t) + 1 - 2, cut to 0 .. 9. Equal keys give
    uniform weights, so the output is the mean of the window's values (value j = j)."""
    keys = _tensor([[0.3]] * 10)
    values = _tensor([[float(j)] for j in range(10)])
    queries = _tensor([[1.0]] * 4)
    output = naive.window_attention(queries, keys, values, None, _config("window", 3, 4, window_size=5), scale=0.7)
    # t = 0: rows 0..3 (start -1 cut); t = 1: 2..6; t = 2: 5..9; t = 3: 8..9 (the end cut)
    assert_exact(output, _tensor([[1.5], [4.0], [7.0], [8.5]]), "window means")
    left_padded = torch.cat([torch.zeros(1, 1, 2, 1, dtype=torch.float64), values], dim=2)
    valid = torch.tensor([[False, False] + [True] * 10])
    padded_keys = torch.cat([torch.zeros(1, 1, 2, 1, dtype=torch.float64), keys], dim=2)
    again = naive.window_attention(
        queries, padded_keys, left_padded, valid, _config("window", 3, 4, window_size=5), scale=0.7
    )
    assert_exact(again, output, "left padding")


# ------------------------------------------------------------------ strided
def test_strided_of_equal_keys_averages_the_segment_and_the_strided_values():
    """n = 10, s = 3 (m = 4), T = 4, l = 4: strided positions 3 and 7. Equal keys: the mean over the union."""
    keys = _tensor([[0.3]] * 10)
    values = _tensor([[float(j)] for j in range(10)])
    queries = _tensor([[1.0]] * 4)
    output = naive.strided_attention(queries, keys, values, None, _config("strided", 3, 4, stride=4), scale=0.7)
    # t = 0: {0, 1, 2, 3, 7}; t = 1: {3, 4, 5, 7} (3 once); t = 2: {6, 7, 8, 3}; t = 3: {9, 3, 7}
    assert_exact(output, _tensor([[13 / 5], [19 / 4], [24 / 4], [19 / 3]]), "union means")


# ------------------------------------------------------------------ star (relay)
def test_star_relay_is_the_mean_of_every_key_and_value():
    """d = 1, n = 4, s = 2, T = 2: query t = 0 attends keys 0, 1 and the relay (mean key 1.5, mean value 25)."""
    keys = _tensor([[0.0], [1.0], [2.0], [3.0]])
    values = _tensor([[10.0], [20.0], [30.0], [40.0]])
    queries = _tensor([[1.0]])
    output = naive.star_attention(queries, keys, values, None, _config("star", 2, 2), scale=1.0)
    weights = torch.tensor([math.exp(0.0), math.exp(1.0), math.exp(1.5)], dtype=torch.float64)
    expected = (weights / weights.sum()) @ torch.tensor([10.0, 20.0, 25.0], dtype=torch.float64)
    assert_exact(output, _tensor([[expected.item()]]), "segment plus relay")


# ------------------------------------------------------------------ fastformer
def test_fastformer_is_the_query_times_the_additive_summaries():
    """d = 2, two keys. w_k = 0: beta uniform, K_g and V_g the means. w_k = (2 sqrt(2), 0): beta ∝ exp(2 k_j[0])."""
    keys = _tensor([[1.0, 0.0], [0.0, 2.0]])
    values = _tensor([[4.0, 1.0], [2.0, 3.0]])
    queries = _tensor([[0.5, -1.0]])
    config = _config("fastformer")
    output = naive.fastformer_attention(queries, keys, values, None, config, scale=0.3)
    assert_exact(output, _tensor([[0.5 * 0.5 * 3.0, -1.0 * 1.0 * 2.0]]), "uniform beta")
    weight = torch.tensor([2 * math.sqrt(2), 0.0], dtype=torch.float64)
    output = naive.fastformer_attention(queries, keys, values, None, config, parameters={"key_weight": weight})
    beta = torch.tensor([math.exp(2.0), 1.0], dtype=torch.float64) / (math.exp(2.0) + 1.0)
    global_key, global_value = beta @ keys[0, 0], beta @ values[0, 0]
    assert_exact(output, (queries[0, 0, 0] * global_key * global_value).view(1, 1, 1, 2), "learned w_k")
    with pytest.raises(ValueError, match="does not have"):
        naive.fastformer_attention(queries, keys, values, None, config, parameters={"raf.leak": weight})


# ------------------------------------------------------------------ linformer
def test_linformer_with_identity_projections_is_full_attention_and_rows_by_hand():
    """E = F = I (r = N = n): the projected keys/values are the keys/values themselves, so the output is full
    attention. d = 1, n = 2, E = [[1, 1]], F = [[1, -1]]: one row, K~ = k0 + k1, V~ = v0 - v1, output V~."""
    queries, keys, values = _random(2, 2, 3, 4, 0), _random(2, 2, 5, 4, 1), _random(2, 2, 5, 4, 2)
    identity = {"key_projection": torch.eye(5), "value_projection": torch.eye(5)}
    output = naive.linformer_attention(queries, keys, values, None, _config("linformer"), scale=0.5,
                                       parameters=identity)
    assert_exact(output, naive.full_attention(queries, keys, values, None, _config("full"), scale=0.5), "E = F = I")
    one_row = {"key_projection": torch.tensor([[1.0, 1.0, 7.0]]), "value_projection": torch.tensor([[1.0, -1.0, 7.0]])}
    output = naive.linformer_attention(_tensor([[3.0]]), _tensor([[1.0], [2.0]]), _tensor([[5.0], [2.0]]), None,
                                       _config("linformer"), parameters=one_row)
    assert_exact(output, _tensor([[3.0]]), "one row: softmax of one logit is 1, V~ = 5 - 2")
    with pytest.raises(ValueError, match="max_source_length"):  # 4 real positions, N = 3 columns
        naive.linformer_attention(_tensor([[3.0]]), _tensor([[1.0]] * 4), _tensor([[1.0]] * 4), None,
                                  _config("linformer"), parameters=one_row)
    with pytest.raises(ValueError, match="key_projection"):
        naive.linformer_attention(queries, keys, values, None, _config("linformer"))


# ------------------------------------------------------------------ performer
def test_performer_with_two_opposite_features_by_hand():
    """d = 1, W = [[1], [-1]], scale 1, eps negligible (1e-300): phi(x) . phi(y) = e^{-c} e^{-x^2/2 - y^2/2}
    (e^{x + y} + e^{-x - y}), so the query's factors cancel and O = sum_j w_j v_j / sum_j w_j with
    w_j = cosh(x + y_j) e^{-y_j^2/2}."""
    x, ys, vs = 0.3, [0.5, -1.0], [2.0, -4.0]
    output = naive.performer_attention(
        _tensor([[x]]), _tensor([[y] for y in ys]), _tensor([[v] for v in vs]), None,
        _config("performer", norm_eps=1e-300), parameters={"random_features": torch.tensor([[1.0], [-1.0]])},
    )
    w = [math.cosh(x + y) * math.exp(-y * y / 2) for y in ys]
    assert_exact(output, _tensor([[(w[0] * vs[0] + w[1] * vs[1]) / (w[0] + w[1])]]), "two features")
    with pytest.raises(ValueError, match="random_features"):
        naive.performer_attention(_tensor([[x]]), _tensor([[0.5]]), _tensor([[1.0]]), None, _config("performer"))


# ------------------------------------------------------------------ compressed
def test_compressed_mean_pooling_with_a_partial_last_block_by_hand():
    """d = 1, c = 2, n = 3 at the initial weights (mean pooling, zero bias): rows (k0 + k1) / 2 and k2 / 2 (the
    last block reads a zero past the end), values alike; query 1, scale 1."""
    keys, values = _tensor([[1.0], [3.0], [6.0]]), _tensor([[10.0], [20.0], [40.0]])
    config = _config("compressed", compression_stride=2)
    output = naive.compressed_attention(_tensor([[1.0]]), keys, values, None, config)
    weights = torch.tensor([math.exp(2.0), math.exp(3.0)], dtype=torch.float64)  # rows 2 and 3
    expected = (weights / weights.sum()) @ torch.tensor([15.0, 20.0], dtype=torch.float64)
    assert_exact(output, _tensor([[expected.item()]]), "two rows")


# ------------------------------------------------------------------ inducing
def test_inducing_points_pool_then_attend_by_hand():
    """d = 1, one inducing point 0: P is uniform, so the single row is the mean key and value and the output is
    the mean value. Two points far apart (+-50, scale 1) pick the largest and the smallest key."""
    keys, values = _tensor([[1.0], [2.0], [4.0]]), _tensor([[3.0], [6.0], [12.0]])
    config = _config("inducing")
    output = naive.inducing_attention(_tensor([[0.7]]), keys, values, None, config,
                                      parameters={"inducing_points": torch.zeros(1, 1)})
    assert_exact(output, _tensor([[7.0]]), "one uniform point: the mean value")
    output = naive.inducing_attention(_tensor([[1.0]]), keys, values, None, config,
                                      parameters={"inducing_points": torch.tensor([[50.0], [-50.0]])})
    weights = torch.tensor([math.exp(4.0), math.exp(1.0)], dtype=torch.float64)  # rows: key 4 (value 12), key 1 (3)
    expected = (weights / weights.sum()) @ torch.tensor([12.0, 3.0], dtype=torch.float64)
    # P puts exp(-100) or less on the other keys: a relative change below 1e-40, far under the tolerance
    assert_exact(output, _tensor([[expected.item()]]), "two extreme points")
