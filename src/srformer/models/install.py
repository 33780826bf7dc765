"""Putting SRformer cross attention into a built transformers model: each decoder cross-attention module of a
family srformer converts is re-classed to its converted class (weights kept) and given the variant's mechanism as
its ``srformer`` child, which is then initialised; the settings are recorded in ``model.config.srformer`` and the
encoder gets chunked encoding's settings.

One pass, downwards (:func:`install_cross_attention`): the modules' family and sizes
(:func:`~srformer.models.families.describe`), the encoder's windows
(:func:`~srformer.models.chunked_encoding.install_windows`), the modules' converted classes
(:func:`~srformer.models.families.calls.converted_class`) and their mechanisms
(:func:`~srformer.attention.variants.build_cross_attention`), initialised last. srformer's model classes
(:mod:`srformer.models.classes`) call it, and call :func:`initialize_srformer_module` from their ``_init_weights``;
it knows nothing of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

from srformer.attention.initialization import OwnInitialization
from srformer.attention.variants import build_cross_attention
from srformer.core import SRformerConfig, keeps_own_attention
from srformer.models.chunked_encoding import install_windows
from srformer.models.families import SUPPORTED_MODELS, describe, family_of_config
from srformer.models.families.calls import converted_class

__all__ = ["initialize_srformer_module", "install_cross_attention", "srformer_config_of"]


def srformer_config_of(model_or_config) -> SRformerConfig | None:
    """The :class:`SRformerConfig` stored in a model or its config, or None for a plain model."""
    config = getattr(model_or_config, "config", model_or_config)
    stored = getattr(config, "srformer", None)
    return None if stored is None else SRformerConfig.from_dict(dict(stored))


def initialize_srformer_module(module: nn.Module) -> bool:
    """srformer's initialisation of one module of a converted model's cross attention (its own parameters only):
    the module's ``initialize_parameters`` (:class:`~srformer.attention.initialization.OwnInitialization`: every
    cross-attention mechanism, the RAF and its ``W``), called with transformers' guarded init functions
    (``transformers.initialization``), so parameters already loaded from a checkpoint are left alone. Each
    mechanism's method documents its values (e.g. the RAF ``W`` uniform in ``±raf_linear_init_scale / sqrt(d)``,
    the RAF leak and threshold their initial values, the Eq. 10 mix logit ``logit(mix_init)``).

    Returns:
        True if ``module`` initialises itself this way (and was initialised), False for any other module.
    """
    if isinstance(module, OwnInitialization):
        module.initialize_parameters(init)
        return True
    return False


def install_cross_attention(
    model: PreTrainedModel, config: SRformerConfig, found: Sequence[tuple[nn.Module, str, nn.Module]]
) -> list[nn.Module]:
    """Swap every decoder cross attention of ``model`` for ``config``'s variant, in place.

    In order: the settings go to ``model.config.srformer`` and the encoder gets chunked encoding's
    (:func:`~srformer.models.chunked_encoding.install_windows`); each module is re-classed (weights kept) and gets the
    new mechanism as its ``srformer`` child, built with its initial values where the model has storage and on the
    meta device where it has none; the new modules are then initialised through the ``_initialize_weights`` of the
    innermost ``PreTrainedModel`` holding each (transformers' own path, children first, which marks them initialised,
    so a later ``init_weights()`` leaves them alone; those ``PreTrainedModel`` parts must already have srformer's
    classes, whose ``_init_weights`` call :func:`initialize_srformer_module`) and take the dtype of the module's
    projections. Modules on the meta device are left to ``to_empty()`` + ``init_weights()`` or to loading. ``full``
    keeps the modules and only records the settings and the windows.

    Args:
        model: the model.
        config: the settings.
        found: ``(parent, attribute, module)`` of each decoder cross-attention module of ``model``
            (:func:`srformer.models.classes.cross_attention_modules`).

    Returns:
        The added modules, in module order (none for ``full``).

    Raises:
        ValueError: if the model has no decoder cross attention or one of a class srformer does not convert (the
            model is left unchanged); for an ``encoder_window`` beyond the encoder's positions.
    """
    shapes = [describe(module) for _, _, module in found]
    unsupported = sorted({type(module).__name__ for (_, _, module), shape in zip(found, shapes, strict=True)
                          if shape is None})
    if not found or unsupported:
        what = f"cross-attention classes {unsupported}" if unsupported else "no decoder cross attention"
        raise ValueError(f"Cannot convert {type(model).__name__}: it has {what}. Supported: {SUPPORTED_MODELS}.")
    install_windows(model, config, family_of_config(model.config))
    model.config.srformer = config.to_dict()
    added: list[tuple[nn.Module, torch.dtype]] = []
    if not keeps_own_attention(config.variant):
        # Each module fills its parameters and seeded buffers in its own __init__ (parameters from the global RNG),
        # so they hold their initial values even where transformers' weight initialisation is skipped
        # (no_init_weights, a patched _init_weights). The global RNG is restored afterwards: the draws of the
        # initialisation below, through the model's _init_weights, are the same as without these.
        with torch.random.fork_rng(devices=[]):
            for (_, _, module), shape in zip(found, shapes, strict=True):
                assert shape is not None  # refused above
                module_class: type = type(module)  # a class is hashable (the cache's key)
                module.__class__ = converted_class(module_class, shape.family)
                attention = build_cross_attention(config, shape.head_dim, shape.scale, num_heads=shape.num_heads,
                                                  device=shape.query_weight.device)
                module.add_module("srformer", attention)
                attention.train(module.training)  # a model converted in eval mode stays there (routing's centroids)
                added.append((attention, shape.query_weight.dtype))
    # the initialisation, on transformers' path: each new module's owner is the innermost PreTrainedModel around it
    owners: dict[str, PreTrainedModel] = {}
    new = {id(added_module) for added_module, _ in added}
    for name, module in model.named_modules():
        if isinstance(module, PreTrainedModel):
            owners[name] = module
        # buffers too: a module whose only tensor is a buffer (performer's random features) built on meta must
        # stay unmarked, or init_weights() after to_empty() would skip it
        if id(module) not in new or any(t.is_meta for t in (*module.parameters(), *module.buffers())):
            continue
        owner = owners[max((prefix for prefix in owners if not prefix or name.startswith(prefix + ".")), key=len)]
        with torch.no_grad():
            for child in reversed(list(module.modules())):  # children first, as transformers' smart_apply
                owner._initialize_weights(child)
    for added_module, dtype in added:  # in the dtype of the model's own projections
        added_module.to(dtype=dtype)
    return [added_module for added_module, _ in added]
