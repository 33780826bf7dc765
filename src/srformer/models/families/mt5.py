"""mT5 (``MT5ForConditionalGeneration``): T5's layout (:mod:`srformer.models.families.t5`) in its own classes."""

from __future__ import annotations

from dataclasses import replace

from srformer.models.families.t5 import FAMILY as T5

FAMILY = replace(
    T5,
    name="mt5",
    modeling_module="transformers.models.mt5.modeling_mt5",
    attention_class="MT5Attention",
    config_class="MT5Config",
    heads=(("MT5ForConditionalGeneration", "AutoModelForSeq2SeqLM"), ("MT5Model", "AutoModel")),
)
