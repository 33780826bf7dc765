"""One-call conversion of a Hugging Face seq2seq model, and loading converted checkpoints.

``convert(model, SRformerConfig(...))`` swaps every decoder cross-attention module for its SRformer
version in place, keeping all pretrained weights, and records the settings in
``model.config.srformer``. ``model.save_pretrained(dir)`` then writes the settings and the RAF
weights, and :func:`from_pretrained` rebuilds the same converted model.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from functools import cache
from typing import Any, cast

from torch import nn
from transformers import AutoConfig, AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel

from srformer.attention.variants import build_cross_attention
from srformer.config import SRformerConfig
from srformer.models.families import (
    SRformerBartAttentionMixin,
    SRformerT5AttentionMixin,
    attention_scale_of,
    head_dim_of,
    projection_weight,
)

#: Attribute that holds the decoder cross attention, per architecture family.
CROSS_ATTENTION_ATTRIBUTES = ("EncDecAttention", "encoder_attn")

#: (module path, attention class, mixin) of every supported cross-attention class. Subclasses of
#: these classes are supported too.
_SUPPORTED = (
    ("transformers.models.t5.modeling_t5", "T5Attention", SRformerT5AttentionMixin),
    ("transformers.models.mt5.modeling_mt5", "MT5Attention", SRformerT5AttentionMixin),
    ("transformers.models.bart.modeling_bart", "BartAttention", SRformerBartAttentionMixin),
    ("transformers.models.mbart.modeling_mbart", "MBartAttention", SRformerBartAttentionMixin),
    ("transformers.models.pegasus.modeling_pegasus", "PegasusAttention", SRformerBartAttentionMixin),
    ("transformers.models.marian.modeling_marian", "MarianAttention", SRformerBartAttentionMixin),
)

SUPPORTED_MODELS = (
    "T5ForConditionalGeneration, MT5ForConditionalGeneration (and models whose cross attention is a "
    "T5Attention/MT5Attention), BartForConditionalGeneration, MBartForConditionalGeneration, "
    "PegasusForConditionalGeneration, MarianMTModel (and models reusing their attention classes)"
)


@cache
def _supported_classes() -> tuple[tuple[type, type], ...]:
    found = []
    for module_path, class_name, mixin in _SUPPORTED:
        module = importlib.import_module(module_path)
        found.append((getattr(module, class_name), mixin))
    return tuple(found)


@cache
def _converted_class(base: type, mixin: type) -> type:
    return type(f"SRformer{base.__name__}", (mixin, base), {"__module__": __name__})


def _mixin_for(module: nn.Module) -> type | None:
    for base, mixin in _supported_classes():
        if isinstance(module, base):
            return mixin
    return None


def cross_attention_modules(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Every decoder cross-attention module of ``model``.

    Returns:
        ``(parent, attribute, module)`` triples in module order.
    """
    found = []
    for parent in model.modules():
        for attribute in CROSS_ATTENTION_ATTRIBUTES:
            child = getattr(parent, attribute, None)
            if isinstance(child, nn.Module):
                found.append((parent, attribute, child))
    return found


def is_converted(model: nn.Module) -> bool:
    """True if any cross-attention module of ``model`` is already an SRformer module."""
    return any(isinstance(m, SRformerT5AttentionMixin | SRformerBartAttentionMixin) for m in model.modules())


def convert(model: PreTrainedModel, config: SRformerConfig, *, _loading: bool = False) -> PreTrainedModel:
    """Replace every decoder cross attention of ``model`` by the variant in ``config``, in place.

    Pretrained weights are kept (the modules are re-classed, not rebuilt); the ``srformer``
    variants add a RAF neuron per layer (``srformer`` only). The settings are stored in
    ``model.config.srformer`` so that ``save_pretrained``/:func:`from_pretrained` round-trip.
    The ``full`` variant leaves the attention unchanged and only records the settings.

    Args:
        model: a ``T5ForConditionalGeneration``, ``BartForConditionalGeneration`` or another
            supported class (see :data:`SUPPORTED_MODELS`).
        config: the SRformer settings.

    Returns:
        The same ``model`` object.

    Raises:
        TypeError: if ``config`` is not an :class:`SRformerConfig`.
        ValueError: if the model has no supported decoder cross attention, is already converted,
            or its config says it was saved as a ``segmented``/``srformer`` model (load it with
            :func:`from_pretrained` instead, which keeps its RAF weights). A checkpoint saved with
            the ``full`` variant is a plain model and may be converted (the paper's protocol:
            convert a trained full-attention model, then fine-tune).
    """
    if not isinstance(config, SRformerConfig):
        raise TypeError(f"`config` must be an srformer.SRformerConfig, got {type(config).__name__}.")
    if is_converted(model):
        raise ValueError("This model is already converted to SRformer cross attention; convert the original model.")
    stored = getattr(getattr(model, "config", None), "srformer", None)
    if stored is not None and stored.get("variant") != "full" and not _loading:
        raise ValueError(
            f"This model's config says it was saved as an SRformer model (variant {stored.get('variant')!r}); "
            "load it with srformer.from_pretrained(path) so that its settings and RAF weights are restored."
        )
    targets = cross_attention_modules(model)
    unsupported = sorted({type(m).__name__ for _, _, m in targets if _mixin_for(m) is None})
    if not targets or unsupported:
        what = f"cross-attention classes {unsupported}" if unsupported else "no decoder cross attention"
        raise ValueError(
            f"Cannot convert {type(model).__name__}: it has {what}. Supported: {SUPPORTED_MODELS}."
        )
    if config.variant != "full":
        for _, _, module in targets:
            mixin = _mixin_for(module)
            weight = projection_weight(module)
            module_class: type = type(module)  # a class is hashable (the lru cache's key)
            module.__class__ = _converted_class(module_class, mixin)
            module.add_module(
                "srformer",
                build_cross_attention(config, head_dim_of(module), attention_scale_of(module)).to(
                    device=weight.device, dtype=weight.dtype
                ),
            )
    model.config.srformer = config.to_dict()
    return model


def set_runtime_options(model: PreTrainedModel, **options) -> PreTrainedModel:
    """Change the runtime options (``lean_cache``, ``strict_schedule``) of a converted model in place.

    Raises:
        ValueError: for an option that is not a runtime option, or a model that is not converted.
    """
    allowed = {"lean_cache", "strict_schedule"}
    if set(options) - allowed:
        raise ValueError(f"Only {sorted(allowed)} can change after conversion, got {sorted(set(options) - allowed)}.")
    current = srformer_config_of(model)
    if current is None:
        raise ValueError("This model is not converted; call srformer.convert(model, SRformerConfig(...)) first.")
    updated = replace(current, **options)
    for _, _, module in cross_attention_modules(model):
        attention = getattr(module, "srformer", None)
        if attention is not None:
            attention.settings = updated
    model.config.srformer = updated.to_dict()
    return model


def srformer_config_of(model_or_config) -> SRformerConfig | None:
    """The :class:`SRformerConfig` stored in a model or its config, or None for a plain model."""
    config = getattr(model_or_config, "config", model_or_config)
    stored = getattr(config, "srformer", None)
    return None if stored is None else SRformerConfig.from_dict(dict(stored))


def from_pretrained(path: str, srformer_config: SRformerConfig | None = None, **kwargs) -> PreTrainedModel:
    """Load a model saved after :func:`convert` (or convert a plain checkpoint in one call).

    Args:
        path: a local directory or a Hugging Face hub id.
        srformer_config: for an SRformer checkpoint, the settings you expect (an error if they
            differ from the stored ones); for a plain checkpoint, the settings to convert to.
        **kwargs: passed to ``AutoModelForSeq2SeqLM.from_pretrained`` (e.g. ``torch_dtype``).

    Returns:
        The converted model, in eval mode.

    Raises:
        ValueError: if a plain checkpoint is loaded without ``srformer_config``; if the stored
            variant/settings differ from ``srformer_config``; if the checkpoint lacks the RAF
            weights its variant needs (it was saved from another variant).
    """
    hf_config = AutoConfig.from_pretrained(path, **{k: v for k, v in kwargs.items() if k in _CONFIG_KWARGS})
    stored = srformer_config_of(hf_config)
    if stored is None:
        if srformer_config is None:
            raise ValueError(
                f"{path} is not an SRformer checkpoint (its config has no `srformer` settings); pass "
                "srformer_config=SRformerConfig(...) to convert it, or use srformer.convert(model, config)."
            )
        return convert(AutoModelForSeq2SeqLM.from_pretrained(path, **kwargs), srformer_config)
    if srformer_config is not None and not srformer_config.same_model(stored):
        raise ValueError(
            f"{path} holds an SRformer checkpoint of variant {stored.variant!r} with settings {stored.to_dict()}, "
            f"but variant {srformer_config.variant!r} with settings {srformer_config.to_dict()} was requested. "
            "Load it without `srformer_config`, or convert the original full-attention model to the other variant."
        )
    architecture = (hf_config.architectures or [None])[0]
    base = type(AutoModelForSeq2SeqLM.from_config(hf_config)) if architecture is None else _model_class(architecture)

    effective = srformer_config or stored  # runtime options (lean_cache, strict_schedule) may differ

    def converting_init(self: PreTrainedModel, config: PretrainedConfig, *args: Any, **init_kwargs: Any) -> None:
        base.__init__(self, config, *args, **init_kwargs)
        convert(self, effective, _loading=True)

    loader = cast(
        type[PreTrainedModel],
        type(base.__name__, (base,), {"__init__": converting_init, "__module__": base.__module__}),
    )
    # With output_loading_info=True this is a (model, loading info) pair; transformers annotates only the model.
    loaded: Any = loader.from_pretrained(path, output_loading_info=True, **kwargs)
    model, info = loaded
    missing = [key for key in info.get("missing_keys", []) if ".srformer." in key]
    if missing:
        raise ValueError(
            f"{path} is marked as SRformer variant {stored.variant!r} but lacks its weights {missing[:3]}...; "
            "the checkpoint was probably saved from another variant."
        )
    model.__class__ = base
    model.eval()
    return model


_CONFIG_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "trust_remote_code")


def _model_class(architecture: str) -> type[PreTrainedModel]:
    import transformers

    cls = getattr(transformers, architecture, None)
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel)):
        raise ValueError(f"Unknown model architecture {architecture!r} in the checkpoint config.")
    return cls
