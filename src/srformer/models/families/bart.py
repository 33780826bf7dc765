"""BART (``BartForConditionalGeneration``): a learned position table of ``max_position_embeddings`` tokens, cross
attention ``BartAttention`` in each decoder layer's ``encoder_attn``, softmax scale ``head_dim^-0.5``."""

from __future__ import annotations

from srformer.models.families.entry import Family

FAMILY = Family(
    name="bart",
    modeling_module="transformers.models.bart.modeling_bart",
    attention_class="BartAttention",
    cross_attention_attribute="encoder_attn",
    call="bart",
    config_class="BartConfig",
    heads=(("BartForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("BartModel", "AutoModel")),
)
