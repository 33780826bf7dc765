"""PEGASUS-X (``PegasusXForConditionalGeneration``; Phang et al., 2022): an encoder of staggered block-local and
global-token attention with sinusoidal positions, trained on inputs of up to ``max_position_embeddings`` tokens
(16,384 in ``google/pegasus-x-base``); its decoder's cross attention ``PegasusXAttention`` (each layer's
``encoder_attn``) is BART's. Longer inputs are encoded in windows of that length (chunked encoding)."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.bart import FAMILY as BART

FAMILY = replace(
    BART,
    name="pegasus_x",
    modeling_module="transformers.models.pegasus_x.modeling_pegasus_x",
    attention_class="PegasusXAttention",
    config_class="PegasusXConfig",
    heads=(("PegasusXForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("PegasusXModel", "AutoModel")),
    long_document="google/pegasus-x-base",
)
