"""Messages for inputs a converted model cannot serve well: too many segments for the target length,
and architectures that cannot be converted."""

from __future__ import annotations

import pytest
import torch
from transformers import BlenderbotConfig, BlenderbotForConditionalGeneration

import srformer
from tests.models.conftest import BUILDERS, converted, decoder_inputs, padded_batch

# padded_batch: real lengths 24, 17, 9 -> with 2-token segments the longest input has 12 segments.
TOO_MANY = r"An encoder input has 12 segments of 2 tokens but target_length is 4: segments after step 4 are never " \
           r"attended by segmented attention\. Increase `segment_size` \(to at least input_length / target_length\) " \
           r"or `target_length`\."


def test_target_length_below_the_number_of_segments_warns(family):
    model = converted(BUILDERS[family](), variant="srformer", segment_size=2, target_length=4)
    ids, mask = padded_batch(model)
    with pytest.warns(UserWarning, match=TOO_MANY), torch.no_grad():
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_inputs(model, 3, 5))


def test_target_length_below_the_number_of_segments_raises_when_strict(family):
    model = converted(BUILDERS[family](), variant="segmented", segment_size=2, target_length=4, strict_schedule=True)
    ids, mask = padded_batch(model)
    with pytest.raises(ValueError, match=TOO_MANY), torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3)


def test_unsupported_encoder_decoder_is_a_clear_error_listing_what_is_supported():
    blenderbot = BlenderbotForConditionalGeneration(BlenderbotConfig(
        vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
    ))
    with pytest.raises(
        ValueError,
        match=r"Cannot convert BlenderbotForConditionalGeneration: it has cross-attention classes "
        r"\['BlenderbotAttention'\]\. Supported: T5ForConditionalGeneration, MT5ForConditionalGeneration, "
        r"BartForConditionalGeneration, MBartForConditionalGeneration, PegasusForConditionalGeneration, MarianMTModel, "
        r"LEDForConditionalGeneration, LongT5ForConditionalGeneration, PegasusXForConditionalGeneration, "
        r"BigBirdPegasusForConditionalGeneration",
    ):
        srformer.convert(blenderbot, srformer.SRformerConfig())
