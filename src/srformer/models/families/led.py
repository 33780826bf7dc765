"""LED (Longformer-Encoder-Decoder, ``LEDForConditionalGeneration``; Beltagy et al., 2020): an encoder of windowed
and global self attention over up to ``max_encoder_position_embeddings`` tokens (16,384 in ``allenai/led-base-16384``),
and a BART decoder whose cross attention ``LEDDecoderAttention`` (each layer's ``encoder_attn``) reads every encoder
position. Its module takes ``output_attentions`` itself and returns ``(output, weights, cache)``; it has no ``sdpa``
path, so it returns weights whenever they are asked for. Inputs longer than the encoder's positions are encoded in
windows of that length (chunked encoding)."""

from __future__ import annotations

from srformer.models.families.entry import Family, position_table

FAMILY = Family(
    name="led",
    modeling_module="transformers.models.led.modeling_led",
    attention_class="LEDDecoderAttention",
    cross_attention_attribute="encoder_attn",
    call="led",
    config_class="LEDConfig",
    heads=(("LEDForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("LEDModel", "AutoModel")),
    weights_always=True,
    input_limit=position_table("max_encoder_position_embeddings"),
    long_document="allenai/led-base-16384",
)
