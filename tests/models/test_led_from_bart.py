"""An LED made from BART (srformer.models.led_from_bart): exactly BART where LED sees what BART saw, its positions
repeated, and its refusals."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    LEDForConditionalGeneration,
    T5Config,
    T5ForConditionalGeneration,
)

from srformer import SRformerConfig
from srformer.models.convert import convert
from srformer.models.led_from_bart import led_from_bart
from tests.tolerance import assert_exact

WINDOW = 16  # LED's local attention: each token sees 8 on each side


def _bart(**overrides) -> BartForConditionalGeneration:
    torch.manual_seed(0)
    settings = dict(vocab_size=60, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40,
                    dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    settings.update(overrides)
    return BartForConditionalGeneration(BartConfig(**settings)).double().eval()


def test_led_equals_bart_where_every_token_sees_every_other():
    bart = _bart()
    led = led_from_bart(bart, max_positions=128, attention_window=WINDOW)
    assert isinstance(led, LEDForConditionalGeneration) and not led.training and led.dtype == torch.float64
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 60, (2, WINDOW // 2 + 1), generator=generator)  # every token within 8 of each other
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, -3:] = 0
    decoder_input_ids = torch.randint(3, 60, (2, 6), generator=generator)
    with torch.no_grad():
        expected = bart(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        got = led(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    assert_exact(got, expected, "LED from BART against BART")
    with torch.no_grad():
        longer = torch.randint(3, 60, (1, 30), generator=generator)  # beyond the window: local attention differs
        far = (bart(input_ids=longer, decoder_input_ids=decoder_input_ids[:1]).logits
               - led(input_ids=longer, decoder_input_ids=decoder_input_ids[:1]).logits).abs().max()
    assert far > 1e-6


def test_positions_repeat_with_the_period_and_decoder_is_bart():
    bart = _bart()
    led = led_from_bart(bart, max_positions=100, attention_window=WINDOW, position_period=12)
    table = bart.model.encoder.embed_positions.weight[2:14]
    assert led.led.encoder.embed_positions.weight.shape == (100, 32)
    for row in (0, 11, 12, 50, 99):
        assert torch.equal(led.led.encoder.embed_positions.weight[row], table[row % 12])
    assert torch.equal(led.led.decoder.embed_positions.weight, bart.model.decoder.embed_positions.weight[2:])
    layer = led.led.encoder.layers[1].self_attn
    for name in ("query", "query_global"):
        assert torch.equal(getattr(layer.longformer_self_attn, name).weight,
                           bart.model.encoder.layers[1].self_attn.q_proj.weight)
    assert torch.equal(layer.output.bias, bart.model.encoder.layers[1].self_attn.out_proj.bias)
    assert led.config.max_decoder_position_embeddings == 40 and led.config.attention_window == [WINDOW, WINDOW]


def test_refusals_name_the_argument():
    bart = _bart()
    with pytest.raises(ValueError, match="attention_window"):
        led_from_bart(bart, max_positions=64, attention_window=15)
    with pytest.raises(ValueError, match="max_positions"):
        led_from_bart(bart, max_positions=0, attention_window=WINDOW)
    with pytest.raises(ValueError, match="position_period"):
        led_from_bart(bart, max_positions=64, attention_window=WINDOW, position_period=41)
    with pytest.raises(ValueError, match="converted to 'segmented'"):
        led_from_bart(convert(_bart(), SRformerConfig(variant="segmented", segment_size=4, target_length=8)),
                      max_positions=64, attention_window=WINDOW)
    led_from_bart(convert(_bart(), SRformerConfig(variant="full")), max_positions=64, attention_window=WINDOW)
    with pytest.raises(ValueError, match="scale_embedding"):
        led_from_bart(_bart(scale_embedding=True), max_positions=64, attention_window=WINDOW)
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=60, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8))
    with pytest.raises(ValueError, match="must be a BART model"):
        led_from_bart(t5, max_positions=64, attention_window=WINDOW)
