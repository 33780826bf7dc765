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


# ------------------------------------------------------------------ reformer
def test_reformer_attends_the_keys_of_the_querys_lsh_bucket():
    """d = 2, b = 2, R = (1, 0)^T: h(x) = argmax([x_0, -x_0]), bucket 0 for x_0 > 0 and 1 for x_0 < 0.
    Keys (1, 0), (-1, 0), (2, 1) fall in buckets 0, 1, 0; chunks of 64 hold them all."""
    keys = _tensor([[1.0, 0.0], [-1.0, 0.0], [2.0, 1.0]])
    values = _tensor([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]])
    config = _config("reformer", num_buckets=2)
    rotations = {"rotations": torch.tensor([[[1.0], [0.0]]], dtype=torch.float64)}
    queries = _tensor([[1.0, 1.0], [-3.0, 0.5]])  # buckets 0 and 1
    output = naive.reformer_attention(queries, keys, values, None, config, scale=0.5, parameters=rotations)
    weights = torch.tensor([math.exp(0.5 * 1.0), math.exp(0.5 * 3.0)], dtype=torch.float64)
    first = (weights / weights.sum()) @ torch.tensor([[10.0, 1.0], [30.0, 3.0]], dtype=torch.float64)
    assert_exact(output, torch.stack([first, torch.tensor([20.0, 2.0], dtype=torch.float64)]).view(1, 1, 2, 2))
    # a query whose bucket holds no real key reads its two chunks unmasked: with key 1 padded, both real keys
    valid = torch.tensor([[True, False, True]])
    alone = naive.reformer_attention(queries[:, :, 1:], keys, values, valid, config, parameters=rotations)
    full = naive.full_attention(queries[:, :, 1:], keys, values, valid, _config("full"))
    assert_exact(alone, full, "empty bucket: its chunks")
    with pytest.raises(ValueError, match="rotations"):
        naive.reformer_attention(queries, keys, values, None, config)


def test_reformer_chunks_cut_a_bucket_at_two_chunks_and_place_an_empty_bucket_at_its_insertion_point():
    """Four keys in bucket 0 (x_0 > 0), w = 1: sorted places 0..3 are positions 0..3. A bucket-0 query reads
    chunks 0 and 1 (keys 0, 1); a bucket-1 query (no key) has start = 4, chunk min(4, 3) = 3: key 3 alone."""
    keys = _tensor([[1.0, 0.0], [2.0, 1.0], [1.0, -1.0], [3.0, 0.5]])
    values = _tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0], [7.0, -7.0]])
    queries = _tensor([[1.0, 2.0], [-1.0, 0.0]])
    rotations = {"rotations": torch.tensor([[[1.0], [0.0]]], dtype=torch.float64)}
    config = _config("reformer", num_buckets=2, chunk_size=1)
    output = naive.reformer_attention(queries, keys, values, None, config, scale=0.5, parameters=rotations)
    weights = torch.tensor([math.exp(0.5 * 1.0), math.exp(0.5 * 4.0)], dtype=torch.float64)
    first = (weights / weights.sum()) @ torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    assert_exact(output, torch.stack([first, torch.tensor([7.0, -7.0], dtype=torch.float64)]).view(1, 1, 2, 2))


def test_reformer_rounds_combine_by_their_log_normalisers():
    """Round 0 splits on x_0 (keys 0 and 2 with the query), round 1 on x_1 (keys 1 and 2, the query has x_1 > 0).
    sum_r exp(L_r - logsumexp L) O_r with O_r = sum_{j in P_r} e^{s_j} v_j / e^{L_r} is
    sum_r sum_{j in P_r} e^{s_j} v_j / sum_r e^{L_r}: one softmax over the keys of both rounds, key 2 twice."""
    keys = _tensor([[1.0, -1.0], [-1.0, 2.0], [2.0, 1.0]])
    values = _tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    queries = _tensor([[1.0, 1.0]])
    rotations = {"rotations": torch.tensor([[[1.0], [0.0]], [[0.0], [1.0]]], dtype=torch.float64)}
    config = _config("reformer", num_buckets=2, hash_rounds=2)
    output = naive.reformer_attention(queries, keys, values, None, config, scale=0.3, parameters=rotations)
    weights = torch.tensor([1.0, math.exp(0.3), 2 * math.exp(0.9)], dtype=torch.float64)  # scores 0, 0.3, 0.9
    assert_exact(output, _tensor([((weights / weights.sum()) @ values[0, 0]).tolist()]), "two rounds")
    one_round = {"rotations": rotations["rotations"][:1]}
    single = naive.reformer_attention(queries, keys, values, None, _config("reformer", num_buckets=2),
                                      scale=0.3, parameters=one_round)
    assert_exact(single, naive.full_attention(queries, keys[:, :, [0, 2]], values[:, :, [0, 2]], None,
                                              _config("full"), scale=0.3), "round 0 alone")


# ------------------------------------------------------------------ routing
def test_routing_attends_the_w_keys_of_the_querys_nearest_centroid():
    """Centroids (1, 0) and (0, 1). Unit keys of (3, 0.1), (0.2, 5), (-1, 0) lie at squared distances about
    0.001, 1.92, 4 from centroid 0 and 1.93, 0.002, 2 from centroid 1. w = 2: cluster 0 = keys {0, 1}, cluster 1 =
    keys {1, 0} (key 2 is in none); w = 1: {0} and {1}. Query (2, 1) goes to centroid 0, query (0, 1) to centroid 1."""
    keys = _tensor([[3.0, 0.1], [0.2, 5.0], [-1.0, 0.0]])
    values = _tensor([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]])
    centroids = {"centroids": torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)}
    queries = _tensor([[2.0, 1.0], [0.0, 1.0]])
    config = _config("routing", num_clusters=2, cluster_size=2)
    output = naive.routing_attention(queries, keys, values, None, config, scale=0.5, parameters=centroids)
    first = torch.tensor([math.exp(0.5 * 6.1), math.exp(0.5 * 5.4)], dtype=torch.float64)
    second = torch.tensor([math.exp(0.5 * 0.1), math.exp(0.5 * 5.0)], dtype=torch.float64)
    expected = torch.stack([(first / first.sum()) @ values[0, 0, :2], (second / second.sum()) @ values[0, 0, :2]])
    assert_exact(output, expected.view(1, 1, 2, 2), "w = 2")
    single = naive.routing_attention(queries, keys, values, None, _config("routing", num_clusters=2, cluster_size=1),
                                     parameters=centroids)
    assert_exact(single, values[:, :, :2], "w = 1: one key each")
    with pytest.raises(ValueError, match="centroids"):
        naive.routing_attention(queries, keys, values, None, config)


# ------------------------------------------------------------------ bigbird
def test_bigbird_of_equal_keys_averages_the_segment_and_the_global_values():
    """n = 10, s = 3 (m = 4), T = 4, g = 2, r = 0: the segment plus positions 0 and 1, each once."""
    keys = _tensor([[0.3]] * 10)
    values = _tensor([[float(j)] for j in range(10)])
    queries = _tensor([[1.0]] * 4)
    config = _config("bigbird", 3, 4, num_global_tokens=2, num_random_blocks=0)
    output = naive.bigbird_attention(queries, keys, values, None, config, scale=0.7)
    # t = 0: {0, 1, 2}; t = 1: {0, 1, 3, 4, 5}; t = 2: {0, 1, 6, 7, 8}; t = 3: {0, 1, 9}
    assert_exact(output, _tensor([[1.0], [13 / 5], [22 / 5], [10 / 3]]), "union means")


def test_bigbird_with_every_other_segment_random_is_full_attention():
    """r = m - 1 random blocks and g < s: every segment is attended, whatever the seed."""
    queries, keys, values = _random(1, 2, 5, 3, 1), _random(1, 2, 10, 3, 2), _random(1, 2, 10, 3, 3)
    full = naive.full_attention(queries, keys, values, None, _config("full"), scale=0.5)
    for seed in (0, 5):
        config = _config("bigbird", 3, 4, num_global_tokens=1, num_random_blocks=3, random_blocks_seed=seed)
        assert_exact(naive.bigbird_attention(queries, keys, values, None, config, scale=0.5), full, f"seed {seed}")
    assert sorted(naive.bigbird_random_blocks(5, 1, 4, 1, 3, 3)) == [0, 2, 3]
    assert naive.bigbird_random_blocks(5, 1, 4, 6, 3, 3) == [2, 3]  # blocks 0, 1 are global: not candidates


# ------------------------------------------------------------------ compressive
@pytest.mark.parametrize(
    "rate,expected",
    [
        (1, [1.0, 2.5, 4.0, 4.5]),  # c = 1: every older position kept, the prefix up to segment i(t)
        (3, [1.0, 15 / 6, 34 / 7, 35 / 6]),  # c = s: one mean row per older segment
        (2, [1.0, 15 / 6, (33 + 0.5 + 2) / 8, (30 + 0.5 + 2 + 3.5 + 5) / 8]),  # windows {0,1}, {2}, {3,4}, {5}
    ],
)
def test_compressive_of_equal_keys_averages_segment_memory_and_compressed_rows(rate, expected):
    """n = 10, s = 3 (m = 4), T = 4, values p: t = i(t). Equal keys: the plain mean over the segment, the
    memory segment i - 1 and one value per compressed row (the mean of its window)."""
    keys = _tensor([[0.3]] * 10)
    values = _tensor([[float(j)] for j in range(10)])
    queries = _tensor([[1.0]] * 4)
    config = _config("compressive", 3, 4, compression_rate=rate)
    output = naive.compressive_attention(queries, keys, values, None, config, scale=0.7)
    assert_exact(output, _tensor([[value] for value in expected]), f"c = {rate}")


# ------------------------------------------------------------------ adaptive span
def test_adaptive_span_weights_by_the_soft_mask_and_reduces_to_segmented():
    """n = 6, s = 2 (m = 3), T = 3, S = 4, R = 2, equal keys: t = 1 reads segment 1 (positions 2, 3) with mask 1 and
    positions 1, 4 (x = 1), 0, 5 (x = 2) with m = (R + z - x) / R. z = 0 and R = 1 is ``segmented``."""
    keys = _tensor([[0.3]] * 6)
    values = _tensor([[float(j)] for j in range(6)])
    queries = _tensor([[1.0]] * 3)
    config = _config("adaptive", 2, 3, max_span=4, span_ramp=2)
    output = naive.adaptive_attention(queries, keys, values, None, config, scale=0.7)  # z = 0.5 * 4 = 2
    # x = 1: m = 1; x = 2: m = 1; x = 3: m = 0.5; x = 4: m = 0
    # t = 1: every position, m = (1, 1, 1, 1, 1, 1) -> mean 2.5; t = 0: 0, 1 (x = 0), 2, 3 (1, 2), 4 (x = 3, 0.5)
    assert_exact(output[:, :, 1:2], _tensor([[2.5]]), "t = 1")
    assert_exact(output[:, :, 0:1], _tensor([[(0 + 1 + 2 + 3 + 0.5 * 4) / 4.5]]), "t = 0")
    narrow = naive.adaptive_attention(
        queries, keys, values, None, config, scale=0.7, parameters={"span_fraction": torch.tensor([0.125])}
    )  # z = 0.5: x = 1 -> m = 0.75, x = 2 -> m = 0.25
    assert_exact(narrow[:, :, 2:3], _tensor([[(4 + 5 + 0.75 * 3 + 0.25 * 2) / 3.0]]), "t = 2, z = 0.5")
    queries, keys, values = _random(1, 2, 3, 3, 1), _random(1, 2, 6, 3, 2), _random(1, 2, 6, 3, 3)
    segmented = naive.segmented_attention(queries, keys, values, None, _config("segmented", 2, 3), scale=0.5)
    zero_span = _config("adaptive", 2, 3, max_span=4, span_ramp=1, span_init=0.0)
    assert_exact(naive.adaptive_attention(queries, keys, values, None, zero_span, scale=0.5), segmented, "z = 0")


# ------------------------------------------------------------------ bp (binary partition)
def test_bp_partition_by_hand_and_equal_keys_average_segment_and_node_means():
    """k = 1, m = 20, segment 9: level 0 nodes 8 | 10, 11 (the extra one aligns the boundary); level 1 nodes 2, 3
    (segments 4-7) | 6, 7 (12-15); level 2 node 0 (0-3) | 4 (16-19). Equal keys: the mean of the segment's values
    and one value per node (the mean of its positions)."""
    assert naive.bp_partition(9, 20, 1) == [(0, 8), (0, 10), (0, 11), (1, 2), (1, 3), (1, 6), (1, 7), (2, 0), (2, 4)]
    assert naive.bp_partition(0, 1, 2) == []  # one segment: no node
    # m = 5, segment 2, k = 1: level 0 nodes 0, 1 (lo = 1 is odd: lowered to 0) | 3; level 1 node 2 (segments 4-5;
    # node 3, segments 6-7, is past the input)
    assert naive.bp_partition(2, 5, 1) == [(0, 0), (0, 1), (0, 3), (1, 2)]
    keys = _tensor([[0.3]] * 10)
    values = _tensor([[float(j)] for j in range(10)])
    queries = _tensor([[1.0]] * 5)
    output = naive.bp_attention(queries, keys, values, None, _config("bp", 2, 5, span_nodes=1), scale=0.7)
    # t = 2 reads segment 2 (positions 4, 5) and the node means 0.5, 2.5, 6.5 and 8.5 (positions 8, 9)
    assert_exact(output[:, :, 2:3], _tensor([[(4 + 5 + 0.5 + 2.5 + 6.5 + 8.5) / 6]]), "t = 2")


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
