"""Chunked encoding (SLED / Unlimiformer form): the window plan, equality with the encoder's own path when an input
fits one window, an independent float64 reference for longer inputs, padding invariance, and bad settings."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import srformer
from srformer.models import is_converted
from srformer.models.chunked_encoding import ChunkedEncoderMixin, default_window, plan_windows, window_stride
from tests.models.conftest import BUILDERS, VOCAB, converted, decoder_inputs, plain_generation_config
from tests.models.test_convert import _tiny_family_models
from tests.registry_cases import variants
from tests.tolerance import assert_exact

MECHANISMS = variants()


# ------------------------------------------------------------------ the window plan
@settings(max_examples=300, deadline=None)
@given(length=st.integers(0, 3000), window=st.integers(1, 700), overlap=st.floats(0.0, 0.99))
def test_kept_parts_cover_every_token_exactly_once_inside_their_windows(length, window, overlap):
    plan = plan_windows(length, window, overlap)
    covered = [0] * length
    for start, keep_start, keep_end in zip(plan.starts, plan.keep_starts, plan.keep_ends, strict=True):
        assert start <= keep_start <= keep_end <= start + window
        for token in range(keep_start, keep_end):
            covered[token] += 1
    assert covered == [1] * length
    assert list(plan.keep_starts[1:]) == list(plan.keep_ends[:-1])
    assert plan.starts[-1] + window >= length  # the last window reaches the end
    assert len(plan.starts) == 1 or plan.starts[-2] + window < length  # and no window is spare
    assert all(b - a == window_stride(window, overlap) for a, b in zip(plan.starts, plan.starts[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(length=st.integers(1, 2000), window=st.integers(2, 300), overlap=st.floats(0.0, 0.95))
def test_each_token_is_kept_from_the_window_where_it_has_most_context(length, window, overlap):
    """The plan's boundaries equal the rule they implement: the window where the token lies farthest from an edge
    (the earlier one on ties), found here by brute force."""
    plan = plan_windows(length, window, overlap)
    for token in range(length):
        holding = [j for j, start in enumerate(plan.starts) if start <= token < start + window]
        best = max(holding, key=lambda j: (min(token - plan.starts[j], plan.starts[j] + window - 1 - token), -j))
        assert plan.keep_starts[best] <= token < plan.keep_ends[best]


def test_an_input_that_fits_is_one_window():
    assert plan_windows(512, 512, 0.5).starts == (0,)
    assert plan_windows(513, 512, 0.5).starts == (0, 256)


@pytest.mark.parametrize("bad", [dict(window=0, overlap=0.5), dict(window=8, overlap=1.0),
                                 dict(window=8, overlap=-0.1)])
def test_the_plan_rejects_bad_settings(bad):
    with pytest.raises(ValueError, match="encoder_window|window_overlap"):
        plan_windows(10, **bad)


# ------------------------------------------------------------------ equal to the encoder's own path
def _ids(batch: int, length: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("variant", MECHANISMS)
def test_an_input_that_fits_one_window_is_encoded_as_by_the_plain_model(family, variant):
    """For every mechanism: with a window exactly as long as the input, the converted model's logits are those of
    the same conversion with chunking out of reach (bit for bit: the encoder's own path runs)."""
    base = BUILDERS[family]()
    ids, dec = _ids(2, 24), decoder_inputs(base, 2, 6)
    torch.manual_seed(5)  # the same initial values of the mechanism's own parameters in both
    fitted = converted(base, variant=variant, segment_size=4, target_length=8, encoder_window=24)
    torch.manual_seed(5)
    roomy = converted(base, variant=variant, segment_size=4, target_length=8, encoder_window=64)
    with torch.no_grad():
        got = fitted(input_ids=ids, decoder_input_ids=dec).logits
        expected = roomy(input_ids=ids, decoder_input_ids=dec).logits
    assert torch.equal(got, expected), variant


@pytest.mark.parametrize("name", ["mt5", "mbart", "pegasus", "marian"])
def test_every_family_encodes_a_fitting_input_as_its_own_encoder(name):
    base = _tiny_family_models()[name].double().eval()
    ids = _ids(2, 20)
    plain = base.get_encoder()(input_ids=ids).last_hidden_state
    model = srformer.convert(copy.deepcopy(base), srformer.SRformerConfig("segmented", segment_size=4,
                                                                           target_length=8, encoder_window=20))
    assert isinstance(model.get_encoder(), ChunkedEncoderMixin)
    assert torch.equal(model.get_encoder()(input_ids=ids).last_hidden_state, plain)


# ------------------------------------------------------------------ an independent reference
def _reference(plain_encoder, ids: torch.Tensor, mask: torch.Tensor, window: int, stride: int) -> torch.Tensor:
    """Each example alone: windows at multiples of ``stride`` until one reaches its end, each encoded by the plain
    encoder, each token from the window where it lies farthest from an edge (the earlier on ties); zero at
    padding. Written without the library's plan."""
    rows = []
    for b in range(ids.shape[0]):
        real = ids[b][mask[b].bool()]
        n = real.shape[0]
        starts = [0]
        while starts[-1] + window < n:
            starts.append(starts[-1] + stride)
        encoded = [plain_encoder(input_ids=real[None, s:s + window]).last_hidden_state[0] for s in starts]
        tokens = []
        for t in range(n):
            scores = [(min(t - s, s + window - 1 - t), -j) for j, s in enumerate(starts) if s <= t < s + window]
            j = -max(scores)[1]
            tokens.append(encoded[j][t - starts[j]])
        out = torch.zeros(ids.shape[1], encoded[0].shape[-1], dtype=encoded[0].dtype)
        out[mask[b].bool()] = torch.stack(tokens)
        rows.append(out)
    return torch.stack(rows)


@pytest.mark.parametrize("overlap", [0.0, 0.5, 0.75])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_long_input_is_encoded_window_by_window(family, overlap, side):
    base = BUILDERS[family]()
    lengths, width = (70, 41, 13), 70
    ids = _ids(3, width)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        if side == "right":
            mask[row, :n] = 1
        else:
            mask[row, width - n:] = 1
    ids = ids.masked_fill(mask == 0, base.config.pad_token_id)
    model = converted(base, variant="segmented", segment_size=4, target_length=8, encoder_window=16,
                      window_overlap=overlap, window_batch_size=3)
    with torch.no_grad():
        got = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        expected = _reference(base.get_encoder(), ids, mask, 16, window_stride(16, overlap))
    assert_exact(got, expected, f"{family}, overlap {overlap}, {side} padding")


def test_an_example_is_encoded_alike_in_any_batch(family):
    base = BUILDERS[family]()
    model = converted(base, variant="srformer", segment_size=4, target_length=8, encoder_window=16)
    ids = _ids(2, 90)
    mask = torch.ones_like(ids)
    mask[1, 37:] = 0
    with torch.no_grad():
        batched = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state[1, :37]
        alone = model.get_encoder()(input_ids=ids[1:, :37]).last_hidden_state[0]
    assert_exact(batched, alone, family)


def test_embeddings_and_hidden_states_are_joined_like_ids(family):
    base = BUILDERS[family]()
    model = converted(base, variant="linear", encoder_window=16, window_batch_size=2)
    ids = _ids(2, 50)
    encoder = model.get_encoder()
    with torch.no_grad():
        from_ids = encoder(input_ids=ids, output_hidden_states=True)
        from_embeds = encoder(inputs_embeds=encoder.embed_tokens(ids))
    assert_exact(from_embeds.last_hidden_state, from_ids.last_hidden_state, family)
    hidden = from_ids.hidden_states
    assert len(hidden) == 3  # the embeddings and two layers
    assert all(h.shape == from_ids.last_hidden_state.shape for h in hidden)


def test_encoder_attentions_of_a_long_input_are_refused(family):
    model = converted(BUILDERS[family](), variant="segmented", encoder_window=16)
    with pytest.raises(ValueError, match="output_attentions.*encoder_window=16"):
        model.get_encoder()(input_ids=_ids(1, 40), output_attentions=True)


def test_empty_documents_in_a_long_batch_give_zero_and_finite_summaries(family):
    base = BUILDERS[family]()
    model = converted(base, variant="srformer", segment_size=4, target_length=8, encoder_window=16, lean_cache=True)
    ids = _ids(3, 60)
    mask = torch.ones_like(ids)
    mask[1] = 0
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.equal(encoded[1], torch.zeros_like(encoded[1]))
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4,
                             generation_config=plain_generation_config(model, num_beams=2))
        assert out.shape[0] == 3
        all_empty = model.get_encoder()(input_ids=ids, attention_mask=torch.zeros_like(mask)).last_hidden_state
    assert torch.equal(all_empty, torch.zeros_like(all_empty))


def test_gradients_reach_the_encoder_through_every_window(family):
    model = converted(BUILDERS[family](), variant="srformer", segment_size=4, target_length=8,
                      encoder_window=16).train()
    ids = _ids(2, 48)
    labels = decoder_inputs(model, 2, 8)[:, 1:].contiguous()
    model(input_ids=ids, labels=labels).loss.backward()
    embedding = model.get_encoder().embed_tokens.weight.grad
    assert embedding is not None and bool(embedding[ids[0, -1]].abs().sum() > 0)  # a token of the last window


# ------------------------------------------------------------------ settings
def test_the_default_window_is_the_model_limit(family):
    model = converted(BUILDERS[family](), variant="segmented")
    assert model.get_encoder().srformer_windows.window == (128 if family == "bart" else 512)
    assert default_window(model.config) == model.get_encoder().srformer_windows.window


def test_a_window_beyond_learned_positions_is_refused():
    with pytest.raises(ValueError, match="encoder_window.*129.*positions for 128 tokens.*encoder_window <= 128"):
        converted(BUILDERS["bart"](), variant="segmented", encoder_window=129)


@pytest.mark.parametrize("bad", [dict(encoder_window=0), dict(window_overlap=1.0), dict(window_overlap=-0.5),
                                 dict(window_batch_size=0), dict(encoder_window=True)])
def test_bad_window_settings_are_refused_by_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        srformer.SRformerConfig("segmented", **bad)


def test_window_settings_are_runtime_options_and_survive_saving(tmp_path):
    model = converted(BUILDERS["t5"](), variant="srformer", segment_size=4, target_length=8, encoder_window=32)
    srformer.set_runtime_options(model, encoder_window=16, window_overlap=0.25)
    assert model.get_encoder().srformer_windows.window == 16
    model.save_pretrained(tmp_path)
    loaded = srformer.from_pretrained(str(tmp_path))
    assert loaded.get_encoder().srformer_windows.window == 16
    assert loaded.get_encoder().srformer_windows.overlap == 0.25
    other = srformer.from_pretrained(str(tmp_path), srformer.SRformerConfig(
        "srformer", segment_size=4, target_length=8, raf_linear_init_scale=1.0, raf_threshold_init=1e-3,
        encoder_window=48))
    assert other.get_encoder().srformer_windows.window == 48


def test_full_attention_over_chunked_encodings_reloads_with_its_windows(tmp_path):
    model = converted(BUILDERS["bart"](), variant="full", encoder_window=32)
    assert not is_converted(model) and model.get_encoder().srformer_windows.window == 32
    model.save_pretrained(tmp_path)
    assert srformer.from_pretrained(str(tmp_path)).get_encoder().srformer_windows.window == 32


@pytest.mark.parametrize("variant", ["full", "srformer"])
def test_a_16k_token_input_is_summarised_end_to_end(variant):
    """generate() on 16,384 tokens, far past the tiny BART's 128 learned positions: chunked encoding reads the whole
    input (128 windows), and the lean state of srformer is built from all of it."""
    model = converted(BUILDERS["bart"](dtype=torch.float32), variant=variant, segment_size="auto", target_length=16,
                      encoder_window=128, window_batch_size=32, lean_cache=variant == "srformer")
    ids = _ids(1, 16_384)
    with torch.no_grad():
        out = model.generate(input_ids=ids, max_new_tokens=8, min_new_tokens=8,
                             generation_config=plain_generation_config(model))
    assert out.shape == (1, 9)
    if variant == "srformer":
        attention = next(m for m in model.modules() if hasattr(m, "configured"))
        assert attention.settings.segment_size == 16_384 // 16


def test_a_traced_long_input_is_refused_not_encoded_unchunked(monkeypatch):
    from srformer.models import chunked_encoding

    model = converted(BUILDERS["t5"](), variant="segmented", encoder_window=16)
    monkeypatch.setattr(chunked_encoding, "tracing", lambda: True)
    with pytest.raises(ValueError, match="torch.compile/torch.export"):
        model.get_encoder()(input_ids=_ids(1, 40))
    assert model.get_encoder()(input_ids=_ids(1, 16)).last_hidden_state.shape == (1, 16, 32)  # fits: traced as is
