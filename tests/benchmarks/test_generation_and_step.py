"""Cross-attention cache bytes and the per-step run on a tiny T5 (structure only, no timing asserts)."""

from __future__ import annotations

import pytest
import torch

from srformer.benchmarks.cross_attention_step import CrossAttentionStepRun, measure_cross_attention_step
from srformer.benchmarks.generation import cross_attention_cache_bytes, generate_fixed, random_encoder_outputs
from srformer.benchmarks.variants import build_model, first_cross_attention, quiet_schedule_warnings

K, BATCH, TOKENS = 48, 2, 5


@pytest.mark.parametrize(
    "variant", ["full-sdpa", "srformer", "srformer-lean", "segmented-lean", "xl", "longt5", "linear"]
)
def test_cache_bytes(variant):
    model = build_model("t5-tiny", variant, segment_size=16, target_length=16)
    outputs, mask = random_encoder_outputs(BATCH, K, model.config.d_model)
    with torch.no_grad():
        generated = generate_fixed(model, outputs, mask, TOKENS)
    assert generated.sequences.shape == (BATCH, TOKENS + 1)
    cache = generated.past_key_values
    size = cross_attention_cache_bytes(cache, outputs.last_hidden_state)
    full_bytes = 2 * 2 * BATCH * 4 * K * 32 * 4  # layers x (K, V) x B x heads x k x d x float32
    encoder_bytes = outputs.last_hidden_state.numel() * 4
    if variant == "full-sdpa":
        assert size == full_bytes
    else:
        states = [layer.state for layer in cache.cross_attention_cache.layers]
        assert size == sum(state.nbytes() for state in states) + (encoder_bytes if "lean" in variant else 0)
        assert all(state.reads_encoder_rows == ("lean" in variant) for state in states)
    if "lean" in variant:
        with pytest.raises(ValueError):
            cross_attention_cache_bytes(cache)


@pytest.mark.parametrize("variant", ["full-eager", "srformer", "srformer-lean", "xl", "longt5", "linear"])
def test_step_run_restores_the_filled_cache(variant):
    model = build_model("t5-tiny", variant, segment_size=8, target_length=16)
    module = first_cross_attention(model)
    states = random_encoder_outputs(BATCH, K, model.config.d_model)[0].last_hidden_state
    run = CrossAttentionStepRun(module, states, positions=6)
    assert run.fill() >= 0
    with quiet_schedule_warnings():
        first, second = run.run(), run.run()
    assert first >= 0 and second >= 0
    # every run starts from the filled cache at position 1 and ends at position 6
    assert run.cache.self_attention_cache.get_seq_length(0) == 7
    result = measure_cross_attention_step(module, states, positions=4, repeats=2, warmup=1)
    assert result.timing.repeats == 2 and result.step_ms >= 0 and result.flops_per_step > 0


def test_reported_fill_is_the_median_of_repeats_after_one_discarded_fill(monkeypatch):
    """A single fill sample moved by 10-20% between calls: the report takes the median of `repeats` fills."""
    samples = iter([9.0, 3.0, 1.0, 2.0])  # the first (warm-up) fill is discarded; the median of the rest is 2.0
    calls = []

    def fake_fill(self):
        calls.append(1)
        return next(samples)

    monkeypatch.setattr(CrossAttentionStepRun, "fill", fake_fill)
    monkeypatch.setattr(CrossAttentionStepRun, "run", lambda self: 0.0)
    model = build_model("t5-tiny", "srformer", segment_size=8, target_length=16)
    states = random_encoder_outputs(BATCH, K, model.config.d_model)[0]
    result = measure_cross_attention_step(first_cross_attention(model), states.last_hidden_state, positions=2,
                                          repeats=3, warmup=1, count=False)
    assert len(calls) == 4 and result.fill_seconds == 2.0


def test_step_run_rejects_bad_positions():
    module = first_cross_attention(build_model("t5-tiny", "full-sdpa", segment_size=None, target_length=16))
    with pytest.raises(ValueError):
        CrossAttentionStepRun(module, torch.zeros(1, 4, 128), positions=0)


@pytest.mark.parametrize("variant", ["full-eager", "srformer"])
def test_every_fill_rebuilds_the_cross_attention_cache(variant):
    """A second fill must project K/V (and build the state) again, not reuse the filled cache:
    reusing it made the reported fill time that of an ordinary cached step."""
    model = build_model("t5-tiny", variant, segment_size=8, target_length=16)
    module = first_cross_attention(model)
    states = random_encoder_outputs(BATCH, K, model.config.d_model)[0].last_hidden_state
    run = CrossAttentionStepRun(module, states, positions=2)
    run.fill()
    first = run.cache.cross_attention_cache.layers[module.layer_idx]
    first_keys = first.state.keys if variant == "srformer" else first.keys
    run.fill()
    second = run.cache.cross_attention_cache.layers[module.layer_idx]
    second_keys = second.state.keys if variant == "srformer" else second.keys
    assert second is not first and second_keys is not first_keys
    assert torch.equal(second_keys, first_keys)


def test_linformer_bench_model_accepts_the_longest_encoder_length_of_the_run():
    """``srformer bench`` passes its longest ``k``: linformer's E, F then get one column per position (beyond the
    default 4096), and the other variants are unchanged."""
    module = first_cross_attention(build_model("t5-tiny", "linformer", segment_size=None, target_length=16,
                                               longest_input=5000))
    assert module.srformer.key_projection.shape[1] == 5000
    default = first_cross_attention(build_model("t5-tiny", "linformer", segment_size=None, target_length=16,
                                                longest_input=512))
    assert default.srformer.key_projection.shape[1] == 4096


@pytest.mark.parametrize(("variant", "setting", "value"), [("knn-4", "top_keys", 4),
                                                            ("srformer-gated-taylor", "feature_map", "taylor")])
def test_a_named_setting_is_built_with_its_own_module_settings(variant, setting, value):
    """A bench variant that is a named setting (``knn-4``) runs its variant's module with the setting's values."""
    model = build_model("t5-tiny", variant, segment_size=8, target_length=16)
    module = first_cross_attention(model)
    assert getattr(module.srformer.settings.settings, setting) == value
    outputs, mask = random_encoder_outputs(BATCH, K, model.config.d_model)
    with torch.no_grad(), quiet_schedule_warnings():
        assert generate_fixed(model, outputs, mask, TOKENS).sequences.shape == (BATCH, TOKENS + 1)
