"""One-call conversion of a Hugging Face seq2seq model, and loading converted checkpoints.

``convert(model, SRformerConfig(...))`` swaps every decoder cross-attention module for its SRformer
version in place, keeping all pretrained weights, records the settings in ``model.config.srformer`` and
gives the model srformer's own model type and class (see :mod:`srformer.models.auto`).
``model.save_pretrained(dir)`` then writes the settings and the RAF weights, and :func:`from_pretrained`,
``AutoModelForSeq2SeqLM.from_pretrained`` and ``AutoModel.from_pretrained`` rebuild the same converted model.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from transformers import AutoConfig, AutoModelForSeq2SeqLM, PreTrainedModel

import srformer.models.auto  # noqa: F401  (registers srformer's model types with transformers' Auto classes)
from srformer.core import RUNTIME_OPTIONS, SRformerConfig, keeps_own_attention
from srformer.models.chunked_encoding import install_windows
from srformer.models.classes import (
    attach_cross_attention,
    cross_attention_modules,
    is_converted,
    srformer_config_class,
    srformer_model_class,
)
from srformer.models.families import SUPPORTED_MODELS, family_of_config
from srformer.models.install import srformer_config_of

__all__ = [
    "SUPPORTED_MODELS", "convert", "cross_attention_modules", "from_pretrained", "is_converted",
    "set_runtime_options", "srformer_config_of", "with_runtime_options",
]


def convert(model: PreTrainedModel, config: SRformerConfig) -> PreTrainedModel:
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
    if stored is not None and not keeps_own_attention(stored.get("variant")):
        raise ValueError(
            f"This model's config says it was saved as an SRformer model (variant {stored.get('variant')!r}); "
            "load it with srformer.from_pretrained(path) so that its settings and RAF weights are restored."
        )
    return attach_cross_attention(model, config)


def with_runtime_options(config: SRformerConfig, options: Mapping[str, Any]) -> SRformerConfig:
    """``config`` with the runtime ``options`` changed (:data:`srformer.config.RUNTIME_OPTIONS` and the mechanism's
    own runtime settings, :attr:`~srformer.attention.settings.MechanismSettings.runtime`).

    Raises:
        ValueError: for an option that is not a runtime option of ``config``'s variant (``knn_index`` and the other
            index options apply to a ``knn`` model only; the message names the variant), or a bad value.
    """
    allowed = set(RUNTIME_OPTIONS) | set(config.settings.runtime)
    wrong = sorted(set(options) - allowed)
    if wrong:
        raise ValueError(
            f"{', '.join(wrong)} cannot change on a model of variant {config.variant!r}: only {sorted(allowed)} are "
            "its runtime options (the index options apply to a knn model)."
        )
    return replace(config, **options)


def set_runtime_options(model: PreTrainedModel, **options) -> PreTrainedModel:
    """Change the runtime options (:data:`srformer.config.RUNTIME_OPTIONS`: ``lean_cache``, ``strict_schedule``,
    ``encoder_window``, ``window_overlap``, ``window_batch_size``; and the mechanism's own runtime settings,
    :attr:`~srformer.attention.settings.MechanismSettings.runtime`: ``knn``'s ``knn_index``, ``index_min_keys``,
    ``index_lists``, ``index_probes``) of a converted model in place.

    Raises:
        ValueError: for an option that is not a runtime option (:func:`with_runtime_options`), a model that is not
            converted, or a bad value.
        ImportError: for ``knn_index`` without faiss.
    """
    current = srformer_config_of(model)
    if current is None:
        raise ValueError("This model is not converted; call srformer.convert(model, SRformerConfig(...)) first.")
    updated = with_runtime_options(current, options)
    for _, _, module in cross_attention_modules(model):
        attention = getattr(module, "srformer", None)
        if attention is not None:
            attention.configure(updated)
    for inner in model.modules():  # the model's config and any inner model's own copy (T5's decoder stack)
        if isinstance(inner, PreTrainedModel) and getattr(inner.config, "srformer", None) is not None:
            inner.config.srformer = updated.to_dict()
    model.config.srformer = updated.to_dict()
    install_windows(model, updated, family_of_config(model.config))
    return model


def from_pretrained(
    path: str, srformer_config: SRformerConfig | None = None, *, runtime: Mapping[str, Any] | None = None, **kwargs
) -> PreTrainedModel:
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
        runtime: runtime options to apply on top (:func:`with_runtime_options`: chunked encoding's
            ``encoder_window``/``window_overlap``/``window_batch_size``, ``knn``'s index options, ...). A plain
            checkpoint loaded with runtime options and no ``srformer_config`` becomes ``full`` with them (full
            attention over chunked encodings).
        **kwargs: passed to the model class's ``from_pretrained`` (e.g. ``dtype``, ``device_map``).

    Returns:
        The converted model, in eval mode.

    Raises:
        ValueError: if a plain checkpoint is loaded with neither ``srformer_config`` nor ``runtime``; if the
            stored variant/settings differ from ``srformer_config``; if the checkpoint lacks the RAF
            weights its variant needs (it was saved from another variant); for a ``runtime`` option the variant
            does not have (:func:`with_runtime_options`).
    """
    hf_config = AutoConfig.from_pretrained(path, **{k: v for k, v in kwargs.items() if k in _CONFIG_KWARGS})
    stored = srformer_config_of(hf_config)
    # each branch loads the model and says what to convert it to (None: its class converted it as it was built)
    settings: SRformerConfig | None
    if stored is None:
        if srformer_config is None and not runtime:
            raise ValueError(
                f"{path} is not an SRformer checkpoint (its config has no `srformer` settings); pass "
                "srformer_config=SRformerConfig(...) to convert it, or use srformer.convert(model, config)."
            )
        settings = with_runtime_options(srformer_config or SRformerConfig("full"), runtime or {})
        model = AutoModelForSeq2SeqLM.from_pretrained(path, **kwargs)
    else:
        if srformer_config is not None and not srformer_config.same_model(stored):
            raise ValueError(
                f"{path} holds an SRformer checkpoint of variant {stored.variant!r} with settings "
                f"{stored.to_dict()}, but variant {srformer_config.variant!r} with settings "
                f"{srformer_config.to_dict()} was requested. Load it without `srformer_config`, or convert the "
                "original full-attention model to the other variant."
            )
        # runtime options (lean_cache, strict_schedule, windows, knn's index) may differ from the stored ones
        effective = with_runtime_options(srformer_config or stored, runtime or {})
        hf_config.srformer = effective.to_dict()
        architecture = (hf_config.architectures or [None])[0]
        base = _model_class(architecture) if architecture else type(AutoModelForSeq2SeqLM.from_config(hf_config))
        if keeps_own_attention(effective.variant):  # a plain model that records its settings
            settings = effective
            model = base.from_pretrained(path, config=hf_config, **kwargs)
        else:
            settings = None
            model = _load_converted(path, hf_config, base, stored, **kwargs)
    if settings is not None:
        attach_cross_attention(model, settings)
    model.eval()
    return model


def _load_converted(path: str, hf_config: Any, base: type[PreTrainedModel], stored: SRformerConfig,
                    **kwargs: Any) -> PreTrainedModel:
    """A converted checkpoint loaded with srformer's class of ``base`` (which converts the model as it is built,
    from ``hf_config.srformer``); a config saved by an srformer version without model types of its own is
    upgraded, with a warning.

    Raises:
        ValueError: if the checkpoint lacks the weights of its variant's modules.
    """
    own_config = srformer_config_class(type(hf_config))
    if own_config is not None and not isinstance(hf_config, own_config):
        warnings.warn(
            f"{path} was saved by an srformer version without model types of its own (model_type "
            f"{hf_config.model_type!r}), so transformers' Auto classes load it without SRformer cross attention. "
            "Save the returned model again (model.save_pretrained(path)) to upgrade the checkpoint.",
            UserWarning,
            stacklevel=3,
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
