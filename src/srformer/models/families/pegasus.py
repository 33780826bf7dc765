"""Pegasus (``PegasusForConditionalGeneration``): BART's layout (:mod:`srformer.models.families.bart`) in its own
classes."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.bart import FAMILY as BART

FAMILY = replace(
    BART,
    name="pegasus",
    modeling_module="transformers.models.pegasus.modeling_pegasus",
    attention_class="PegasusAttention",
    config_class="PegasusConfig",
    heads=(("PegasusForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("PegasusModel", "AutoModel")),
)
