"""Marian (``MarianMTModel``): BART's layout (:mod:`srformer.models.families.bart`) in its own classes."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.bart import FAMILY as BART

FAMILY = replace(
    BART,
    name="marian",
    modeling_module="transformers.models.marian.modeling_marian",
    attention_class="MarianAttention",
    config_class="MarianConfig",
    heads=(("MarianMTModel", "AutoModelForSeq2SeqLM"), ("MarianModel", "AutoModel")),
)
