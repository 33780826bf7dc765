"""The lean cache layout: identical outputs to the standard layout, far smaller state."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

import srformer
from srformer.attention.srformer import LeanSRformerState
from srformer.attention.state import SRformerCacheLayer
from srformer.models import set_runtime_options
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch, plain_generation_config
from tests.models.test_exactness import step_by_step_logits, teacher_forced_logits
from tests.tolerance import assert_exact


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
def test_lean_incremental_logits_equal_teacher_forcing(family, variant):
    model = converted(BUILDERS[family](), variant=variant, segment_size=4, target_length=12, lean_cache=True)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 14)
    assert_exact(step_by_step_logits(model, ids, mask, dec), teacher_forced_logits(model, ids, mask, dec), "lean step")


@pytest.mark.parametrize("num_beams", [1, 3])
def test_lean_generation_equals_standard_generation(family, num_beams):
    model = converted(BUILDERS[family](), variant="srformer", segment_size=4, target_length=12)
    ids, mask = padded_batch(model)
    config = plain_generation_config(model, max_new_tokens=14, num_beams=num_beams, num_return_sequences=num_beams)
    with torch.no_grad():
        standard = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        set_runtime_options(model, lean_cache=True)
        lean = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(standard, lean)


def test_lean_state_holds_no_encoder_length_float_tensor(family):
    model = converted(BUILDERS[family](), variant="srformer", segment_size=4, target_length=12, lean_cache=True)
    ids, mask = padded_batch(model)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_inputs(model, 3, 1), use_cache=True)
    cross_layers = out.past_key_values.cross_attention_cache.layers
    layers = [layer for layer in cross_layers if isinstance(layer, SRformerCacheLayer)]
    assert len(layers) == 2
    for layer in layers:
        state = layer.state
        assert isinstance(state, LeanSRformerState) and state.is_lean
        assert not any(hasattr(state, name) for name in ("keys", "values", "raf_readout"))
        assert state.positions.dtype == torch.int32


def test_runtime_options_do_not_change_the_model_identity(tmp_path):
    model = converted(BUILDERS["t5"](), variant="srformer", segment_size=4, target_length=12)
    model.save_pretrained(tmp_path)
    requested = srformer.SRformerConfig(**{**srformer.models.srformer_config_of(model).to_dict(), "lean_cache": True})
    loaded = srformer.from_pretrained(str(tmp_path), requested)
    assert srformer.models.srformer_config_of(loaded).lean_cache
    with pytest.raises(ValueError, match=r"segment_size cannot change on a model of variant 'srformer': only \["):
        set_runtime_options(loaded, segment_size=8)


@pytest.mark.parametrize("variant", ["segmented", "srformer"])
def test_lean_cache_survives_a_rejected_multi_token_chunk(family, variant):
    """Assisted decoding and prompt lookup feed several candidate tokens at once, then crop the cache to
    the accepted prefix. A chunk that ran into a later segment must not leave its RAF state behind: the
    steps after the crop equal teacher forcing."""
    model = converted(BUILDERS[family](), variant=variant, segment_size=4, target_length=12, lean_cache=True)
    ids, mask = padded_batch(model)
    dec = decoder_inputs(model, ids.shape[0], 10)
    reference = teacher_forced_logits(model, ids, mask, dec)
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())

        def run(tokens):
            return model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tokens,
                         past_key_values=cache, use_cache=True).logits

        logits = [run(dec[:, :1])]
        run(dec[:, 1:8])  # candidates for positions 1..7: segments up to i(7), past i(1)
        cache.crop(-7)  # none accepted: remove the 7 candidates, back to the prefix of length 1
        logits += [run(dec[:, t : t + 1]) for t in range(1, dec.shape[1])]
    assert_exact(torch.cat(logits, dim=1), reference, "steps after a rejected chunk")
