"""LongT5 (``LongT5ForConditionalGeneration``; Guo et al., 2022): a T5 encoder whose self attention is local or
transient-global (``encoder_attention_type``), relative positions, so no input limit: the encoder reads a long input
whole (no chunked encoding unless ``encoder_window`` is set). Its decoder's cross attention ``LongT5Attention``
(each layer's ``EncDecAttention``) reads every encoder position, as T5's."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.entry import no_limit
from srformer.models.families.t5 import FAMILY as T5

FAMILY = replace(
    T5,
    name="longt5",
    modeling_module="transformers.models.longt5.modeling_longt5",
    attention_class="LongT5Attention",
    config_class="LongT5Config",
    heads=(("LongT5ForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("LongT5Model", "AutoModel")),
    native_window=no_limit,
    long_document="google/long-t5-tglobal-base",
)
