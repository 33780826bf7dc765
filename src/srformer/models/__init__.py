"""Hugging Face model integration: conversion, loading, and the converted attention modules.

Importing this package registers srformer's model types (``srformer_t5``, ``srformer_bart``, ...) with
transformers' Auto classes (:mod:`srformer.models.auto`).
"""

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
