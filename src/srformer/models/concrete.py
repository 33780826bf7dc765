"""transformers' own (concrete) classes loading a converted checkpoint: ``T5ForConditionalGeneration.
from_pretrained(dir)``, ``BartDecoder.from_pretrained(dir)`` and every other class of a supported family.

A concrete class does not consult the Auto registration (:mod:`srformer.models.auto`): it reads the checkpoint's
config into its own config class and builds itself, so without this module it would return the unconverted model
(plain cross attention, the SRformer weights dropped as unexpected keys, other outputs). :func:`install` wraps the
``from_pretrained`` of each family's base class (``T5PreTrainedModel``, ``BartPreTrainedModel``, ...): when the
checkpoint's config carries SRformer settings of a variant other than ``full``, the call is handed to srformer's
subclass of the class asked for (:func:`~srformer.models.classes.srformer_model_class`), which rebuilds the
converted model; every other checkpoint loads exactly as before. Building a plain class directly from a converted
config (``T5ForConditionalGeneration(config)``) is not intercepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from transformers import PretrainedConfig, PreTrainedModel

from srformer.core import SRformerConfig, keeps_own_attention
from srformer.models.classes import SRformerModelMixin, srformer_model_class
from srformer.models.install import srformer_config_of

__all__ = ["family_base_class", "install", "stored_settings"]

#: Keyword arguments of ``from_pretrained`` that say where the checkpoint's config is read from.
_CONFIG_LOOKUP_KWARGS = (
    "cache_dir", "force_download", "proxies", "local_files_only", "token", "revision", "subfolder",
)

#: Marks a wrapped ``from_pretrained`` (so that :func:`install` is idempotent).
_MARK = "_srformer_loads_converted"


def family_base_class(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """The base class of a transformers model family (``T5PreTrainedModel`` for ``T5ForConditionalGeneration``):
    the most general strict subclass of ``PreTrainedModel`` that ``model_class`` derives from."""
    return next(
        cls for cls in reversed(model_class.__mro__) if issubclass(cls, PreTrainedModel) and cls is not PreTrainedModel
    )


def stored_settings(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SRformerConfig | None:
    """The SRformer settings of the checkpoint a ``from_pretrained(*args, **kwargs)`` call loads: from the
    ``config`` argument, else from the checkpoint's ``config.json``; None for a plain checkpoint, and where the
    config cannot be read here (transformers' own loading then reports the problem).

    Raises:
        ValueError: for malformed settings in the config (as :class:`SRformerConfig` reports them).
    """
    config = kwargs.get("config")
    if isinstance(config, PretrainedConfig):
        return srformer_config_of(config)
    source = config if isinstance(config, (str, os.PathLike)) else (
        args[0] if args else kwargs.get("pretrained_model_name_or_path")
    )
    if source is None:
        return None
    lookup = {key: kwargs[key] for key in _CONFIG_LOOKUP_KWARGS if key in kwargs}
    try:
        config_dict, _ = PretrainedConfig.get_config_dict(source, **lookup)
    except (OSError, ValueError):
        return None
    stored = config_dict.get("srformer")
    return None if stored is None else SRformerConfig.from_dict(dict(stored))


def _wrap(original: Any) -> classmethod:
    """``from_pretrained`` that hands a converted checkpoint to srformer's subclass of the class asked for."""

    def from_pretrained(cls: type[PreTrainedModel], *args: Any, **kwargs: Any) -> Any:
        if not issubclass(cls, SRformerModelMixin):
            settings = stored_settings(args, kwargs)
            if settings is not None and not keeps_own_attention(settings.variant):
                return srformer_model_class(cls).from_pretrained(*args, **kwargs)
        return original(cls, *args, **kwargs)

    from_pretrained.__doc__ = original.__doc__
    from_pretrained.__name__ = "from_pretrained"
    from_pretrained.__qualname__ = "PreTrainedModel.from_pretrained"
    setattr(from_pretrained, _MARK, True)
    return classmethod(from_pretrained)


def install(model_classes: Iterable[type[PreTrainedModel]]) -> None:
    """Wrap ``from_pretrained`` of the family base class of every class in ``model_classes`` (idempotent)."""
    for base in {family_base_class(cls) for cls in model_classes}:
        current = base.from_pretrained.__func__  # type: ignore[attr-defined]
        if not getattr(current, _MARK, False):
            base.from_pretrained = _wrap(current)  # type: ignore[method-assign,assignment]
