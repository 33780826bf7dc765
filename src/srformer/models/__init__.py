"""Hugging Face model integration: conversion, loading, and the converted attention modules.

The names below are imported on first use (PEP 562), so that ``import srformer.models.named_configs`` (the
parsers of ``srformer --help``) imports no torch or transformers. srformer's model types (``srformer_t5``,
``srformer_bart``, ...) are registered with transformers' Auto classes (:mod:`srformer.models.auto`) wherever
srformer and transformers are both imported (:mod:`srformer.models.registration`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from srformer.core.lazy import lazy_exports

if TYPE_CHECKING:
    from srformer.models.convert import (
        SUPPORTED_MODELS,
        convert,
        cross_attention_modules,
        from_pretrained,
        is_converted,
        set_runtime_options,
        srformer_config_of,
    )

__all__ = [
    "SUPPORTED_MODELS",
    "convert",
    "cross_attention_modules",
    "from_pretrained",
    "is_converted",
    "set_runtime_options",
    "srformer_config_of",
]

__getattr__, __dir__ = lazy_exports(__name__, {"srformer.models.convert": __all__})
