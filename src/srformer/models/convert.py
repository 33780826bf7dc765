"""One-call conversion of a Hugging Face seq2seq model, and loading converted checkpoints.

``convert(model, SRformerConfig(...))`` swaps every decoder cross-attention module for its SRformer
version in place, keeping all pretrained weights, records the settings in ``model.config.srformer`` and
gives the model srformer's own model type and class (see :mod:`srformer.models.auto`).
``model.save_pretrained(dir)`` then writes the settings and the RAF weights, and :func:`from_pretrained`,
``AutoModelForSeq2SeqLM.from_pretrained`` and ``AutoModel.from_pretrained`` rebuild the same converted model.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSeq2SeqLM, PreTrainedModel

from srformer.attention.registry import keeps_own_attention
from srformer.attention.variants import build_cross_attention
from srformer.config import SRformerConfig
from srformer.models.auto import (
    adopt_class,
    initialize_srformer_module,
    srformer_config_class,
    srformer_model_class,
)
from srformer.models.families import (
    SRformerBartAttentionMixin,
    SRformerT5AttentionMixin,
    attention_scale_of,
    head_dim_of,
    num_heads_of,
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
    variants add a RAF neuron per layer (``srformer`` only), initialised through the model's
    ``_init_weights`` with srformer's own scheme. The settings are stored in ``model.config.srformer``.
    For every variant but ``full``, the config gets srformer's model type of its family
    (``srformer_t5``, ``srformer_bart``, ...) and the model srformer's class of its transformers class
    (``SRformerT5ForConditionalGeneration``, ...; a subclass, so ``isinstance`` checks still hold), so that
    ``save_pretrained`` followed by :func:`from_pretrained` or transformers' ``AutoModelForSeq2SeqLM`` /
    ``AutoModel`` rebuilds the converted model (see :mod:`srformer.models.auto`). The ``full`` variant
    leaves the model unchanged (its class, config class and attention) and only records the settings.

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
    if stored is not None and not keeps_own_attention(stored.get("variant")) and not _loading:
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
    added = []
    if not keeps_own_attention(config.variant):
        for _, _, module in targets:
            mixin = _mixin_for(module)
            weight = projection_weight(module)
            module_class: type = type(module)  # a class is hashable (the lru cache's key)
            module.__class__ = _converted_class(module_class, mixin)
            # Built without storage and initialised below through the model's _init_weights: one draw per
            # parameter, in the dtype of construction (float32), then cast to the model's dtype.
            with torch.device("meta"):
                attention = build_cross_attention(
                    config, head_dim_of(module), attention_scale_of(module), num_heads=num_heads_of(module)
                )
            module.add_module("srformer", attention.to_empty(device=weight.device))
            attention.train(module.training)  # a model converted in eval mode stays there (routing's centroids)
            added.append(attention)
    model.config.srformer = config.to_dict()
    if added:
        _adopt_srformer_classes(model)
        _initialize_added_modules(model, added)
        for attention, (_, _, module) in zip(added, targets, strict=True):
            attention.to(dtype=projection_weight(module).dtype)
    return model


def _adopt_srformer_classes(model: PreTrainedModel) -> None:
    """Give the config srformer's model type of its family and re-class the model, and every inner
    ``PreTrainedModel`` holding converted cross attention (``T5Stack``, ``BartModel``, ``BartDecoder``: their
    ``_init_weights`` initialise the modules under them), to srformer's subclasses."""
    config_class = srformer_config_class(type(model.config))
    if config_class is None:
        warnings.warn(
            f"srformer has no model type for {type(model.config).__name__}: after save_pretrained, transformers' "
            "Auto classes would load this checkpoint without SRformer cross attention. Load it with "
            "srformer.from_pretrained(path).",
            UserWarning,
            stacklevel=3,
        )
    else:
        model.config.__class__ = config_class
    converted = SRformerT5AttentionMixin | SRformerBartAttentionMixin
    holders = {name for name, module in model.named_modules() if isinstance(module, converted)}
    for name, module in model.named_modules():
        if isinstance(module, PreTrainedModel) and (
            module is model or any(holder.startswith(name + ".") for holder in holders)
        ):
            adopt_class(module, srformer_model_class(type(module)))


def _initialize_added_modules(model: PreTrainedModel, added: Sequence[nn.Module]) -> None:
    """Initialise the new cross-attention modules through the ``_initialize_weights`` of the innermost
    ``PreTrainedModel`` holding each (transformers' own path, which marks them initialised, so a later
    ``init_weights()`` leaves them alone), children first as transformers does. Modules on the meta device
    (the model was built there) are left to ``to_empty()`` + ``init_weights()`` or to loading."""
    owners: dict[str, PreTrainedModel] = {}
    new = {id(module) for module in added}
    for name, module in model.named_modules():
        if isinstance(module, PreTrainedModel):
            owners[name] = module
        # buffers too: a module whose only tensor is a buffer (performer's random features) built on meta must
        # stay unmarked, or init_weights() after to_empty() would skip it
        if id(module) not in new or any(t.is_meta for t in (*module.parameters(), *module.buffers())):
            continue
        prefixes = [prefix for prefix in owners if not prefix or name.startswith(prefix + ".")]
        with torch.no_grad():
            for child in reversed(list(module.modules())):  # children first, as transformers' smart_apply
                if prefixes:
                    owners[max(prefixes, key=len)]._initialize_weights(child)
                else:  # no PreTrainedModel around it: srformer's scheme directly
                    initialize_srformer_module(child)


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

    Converted checkpoints of this version also load through ``AutoModelForSeq2SeqLM.from_pretrained`` and
    ``AutoModel.from_pretrained`` once srformer is imported. Checkpoints saved by srformer 0.1.0 before it
    had model types of its own (``model_type`` ``t5``/``bart``/... with an ``srformer`` entry) load here only,
    with a warning: save the returned model again to get a checkpoint the Auto classes load.

    Args:
        path: a local directory or a Hugging Face hub id.
        srformer_config: for an SRformer checkpoint, the settings you expect (an error if they
            differ from the stored ones; the runtime options ``lean_cache``/``strict_schedule`` may
            differ and are applied); for a plain checkpoint, the settings to convert to.
        **kwargs: passed to the model class's ``from_pretrained`` (e.g. ``dtype``, ``device_map``).

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
            f"but variant {srformer_config.variant!r} with settings {srformer_config.to_dict()} "
            "was requested. Load it without `srformer_config`, or convert the original full-attention model to the "
            "other variant."
        )
    effective = srformer_config or stored  # runtime options (lean_cache, strict_schedule) may differ
    hf_config.srformer = effective.to_dict()
    architecture = (hf_config.architectures or [None])[0]
    base = _model_class(architecture) if architecture else type(AutoModelForSeq2SeqLM.from_config(hf_config))
    if keeps_own_attention(effective.variant):  # a plain model that records its settings
        model = base.from_pretrained(path, config=hf_config, **kwargs)
        model.eval()
        return model
    own_config = srformer_config_class(type(hf_config))
    if own_config is not None and not isinstance(hf_config, own_config):
        warnings.warn(
            f"{path} was saved by an srformer version without model types of its own (model_type "
            f"{hf_config.model_type!r}), so transformers' Auto classes load it without SRformer cross attention. "
            "Save the returned model again (model.save_pretrained(path)) to upgrade the checkpoint.",
            UserWarning,
            stacklevel=2,
        )
        hf_config.__class__ = own_config
    # With output_loading_info=True this is a (model, loading info) pair; transformers annotates only the model.
    loaded: Any = srformer_model_class(base).from_pretrained(path, config=hf_config, output_loading_info=True, **kwargs)
    model, info = loaded
    missing = [key for key in info.get("missing_keys", []) if ".srformer." in key]
    if missing:
        raise ValueError(
            f"{path} is marked as SRformer variant {stored.variant!r} but lacks its weights {missing[:3]}...; "
            "the checkpoint was probably saved from another variant."
        )
    model.eval()
    return model


_CONFIG_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "trust_remote_code")


def _model_class(architecture: str) -> type[PreTrainedModel]:
    """The transformers class of an ``architectures`` entry: ``T5ForConditionalGeneration`` for itself and
    for srformer's ``SRformerT5ForConditionalGeneration``."""
    import transformers

    cls = getattr(transformers, architecture.removeprefix("SRformer"), None)
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel)):
        raise ValueError(f"Unknown model architecture {architecture!r} in the checkpoint config.")
    return cls
