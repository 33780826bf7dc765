"""mBART (``MBartForConditionalGeneration``): BART's layout (:mod:`srformer.models.families.bart`) in its own
classes."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.bart import FAMILY as BART

FAMILY = replace(
    BART,
    name="mbart",
    modeling_module="transformers.models.mbart.modeling_mbart",
    attention_class="MBartAttention",
    config_class="MBartConfig",
    heads=(("MBartForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("MBartModel", "AutoModel")),
)
