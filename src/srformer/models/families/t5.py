"""T5 (``T5ForConditionalGeneration``): relative positions, cross attention ``T5Attention`` in each decoder
layer's ``EncDecAttention``, softmax scale 1."""

from __future__ import annotations

from typing import Any

from srformer.models.families.entry import Family, no_limit

#: The encoder input length of T5's relative positions when the config names none: the length it was pretrained on.
PRETRAINED_LENGTH = 512


def pretrained_length(config: Any) -> int:
    """``config.n_positions`` where the config has it, else :data:`PRETRAINED_LENGTH` (tokens)."""
    positions = getattr(config, "n_positions", None)
    return positions if isinstance(positions, int) and positions > 0 else PRETRAINED_LENGTH


FAMILY = Family(
    name="t5",
    modeling_module="transformers.models.t5.modeling_t5",
    attention_class="T5Attention",
    cross_attention_attribute="EncDecAttention",
    call="t5",
    config_class="T5Config",
    heads=(("T5ForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("T5Model", "AutoModel")),
    projections=("q", "k", "v", "o"),
    num_heads="n_heads",
    head_dim="key_value_proj_dim",
    input_limit=no_limit,
    native_window=pretrained_length,
)
