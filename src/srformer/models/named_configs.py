"""The named configs: small T5, BART and LED architectures built from scratch
(:func:`srformer.models.factory.load_model`).

Data only, with no import of torch or transformers, so that ``srformer --help`` lists them; also public as
:data:`srformer.models.factory.NAMED_CONFIGS`.
"""

from __future__ import annotations

__all__ = ["NAMED_CONFIGS"]

#: Small architectures that can be trained from scratch on a CPU. Sizes: d_model, layers, heads, head_dim.
NAMED_CONFIGS: dict[str, dict] = {
    "t5-tiny": dict(family="t5", d_model=128, d_ff=512, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=32),
    "t5-mini": dict(family="t5", d_model=256, d_ff=1024, num_layers=4, num_decoder_layers=4, num_heads=4, d_kv=64),
    "t5-small-random": dict(
        family="t5", d_model=512, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8, d_kv=64
    ),
    "bart-tiny": dict(
        family="bart", d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
    ),
    "bart-mini": dict(
        family="bart", d_model=256, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024,
    ),
    # bart-mini's sizes with LED's encoder (Beltagy et al., 2020): local self attention in windows of 256 tokens
    # (128 on each side) over the whole input, positions for the whole input
    "led-mini": dict(
        family="led", d_model=256, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, attention_window=256,
    ),
}
