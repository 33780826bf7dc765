"""BigBirdPegasus (``BigBirdPegasusForConditionalGeneration``; Zaheer et al., 2020): an encoder of block-sparse
(``attention_type="block_sparse"``) or full (``"original_full"``) self attention over a learned position table of
``max_position_embeddings`` tokens (4,096 in ``google/bigbird-pegasus-large-arxiv``); its decoder's cross attention
``BigBirdPegasusDecoderAttention`` (each layer's ``encoder_attn``) is BART's. Longer inputs are encoded in windows of
that length (chunked encoding)."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.bart import FAMILY as BART

FAMILY = replace(
    BART,
    name="bigbird_pegasus",
    modeling_module="transformers.models.bigbird_pegasus.modeling_bigbird_pegasus",
    attention_class="BigBirdPegasusDecoderAttention",
    config_class="BigBirdPegasusConfig",
    heads=(("BigBirdPegasusForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("BigBirdPegasusModel", "AutoModel")),
    long_document="google/bigbird-pegasus-large-arxiv",
)
