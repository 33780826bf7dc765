"""Putting SRformer cross attention into a built transformers model: finding its decoder cross-attention
modules, swapping in the variant's module, initialising it, and reading the settings a model stores.

The model classes of srformer (:mod:`srformer.models.classes`) and :func:`srformer.models.convert` both build on
this module; it knows nothing of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init

from srformer.attention.initialization import OwnInitialization
from srformer.attention.variants import build_cross_attention
from srformer.core import SRformerConfig, keeps_own_attention
from srformer.models.families import (
    CROSS_ATTENTION_ATTRIBUTES,
    SUPPORTED_MODELS,
    Family,
    family_of_module,
)
from srformer.models.families.calls import (
    MIXINS,
    attention_scale_of,
    head_dim_of,
    num_heads_of,
    projection_weight,
)

__all__ = [
    "CROSS_ATTENTION_ATTRIBUTES", "SUPPORTED_MODELS", "cross_attention_modules", "initialize_added_modules",
    "initialize_srformer_module", "install_cross_attention", "is_converted", "srformer_config_of",
]


@cache
def _converted_class(base: type, family: Family) -> type:
    """``SRformer<base>``: the family's calling-convention mixin before ``base``, with the family's entry."""
    return type(f"SRformer{base.__name__}", (MIXINS[family.call], base),
                {"__module__": __name__, "srformer_family": family})


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
    return any(isinstance(m, tuple(MIXINS.values())) for m in model.modules())


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


def srformer_config_of(model_or_config) -> SRformerConfig | None:
    """The :class:`SRformerConfig` stored in a model or its config, or None for a plain model."""
    config = getattr(model_or_config, "config", model_or_config)
    stored = getattr(config, "srformer", None)
    return None if stored is None else SRformerConfig.from_dict(dict(stored))


def install_cross_attention(model: PreTrainedModel, config: SRformerConfig) -> list[tuple[nn.Module, nn.Module]]:
    """Swap every decoder cross attention of ``model`` for ``config``'s variant (modules re-classed, weights
    kept; the new SRformer module built with its initial values where the model has storage, on the meta device
    where it has none), and record the settings in ``model.config.srformer``. The new modules are initialised again
    on transformers' path by :func:`initialize_added_modules`, after the model has its srformer classes.

    Returns:
        ``(srformer_module, cross_attention_module)`` for every added module (none for ``full``).

    Raises:
        ValueError: if the model has no supported decoder cross attention.
    """
    targets = [(module, family_of_module(module)) for _, _, module in cross_attention_modules(model)]
    unsupported = sorted({type(module).__name__ for module, family in targets if family is None})
    if not targets or unsupported:
        what = f"cross-attention classes {unsupported}" if unsupported else "no decoder cross attention"
        raise ValueError(
            f"Cannot convert {type(model).__name__}: it has {what}. Supported: {SUPPORTED_MODELS}."
        )
    added: list[tuple[nn.Module, nn.Module]] = []
    if not keeps_own_attention(config.variant):
        # Each module fills its parameters and seeded buffers in its own __init__ (parameters from the global RNG),
        # so they hold their initial values even where transformers' weight initialisation is skipped
        # (no_init_weights, a patched _init_weights). The global RNG is restored afterwards: the draws of
        # initialize_added_modules, through the model's _init_weights, are the same as without these.
        with torch.random.fork_rng(devices=[]):
            for module, family in targets:
                assert family is not None  # refused above
                weight = projection_weight(module)
                module_class: type = type(module)  # a class is hashable (the lru cache's key)
                module.__class__ = _converted_class(module_class, family)
                attention = _built_where_storage_is(config, module, weight.device)
                module.add_module("srformer", attention)
                attention.train(module.training)  # a model converted in eval mode stays there (routing's centroids)
                added.append((attention, module))
    model.config.srformer = config.to_dict()
    return added


def _built_where_storage_is(config: SRformerConfig, module: nn.Module, device: torch.device) -> nn.Module:
    """``config``'s mechanism for the cross-attention ``module``, built in torch's default dtype on the CPU (its
    ``__init__`` fills every parameter and seeded buffer) and moved to ``device``; on the meta device where the model
    has no storage (built under ``torch.device("meta")`` or by ``from_pretrained``), to be filled by ``to_empty()`` +
    ``init_weights()`` or by loading."""
    where = torch.device("meta") if device.type == "meta" else torch.device("cpu")
    with where:
        attention = build_cross_attention(
            config, head_dim_of(module), attention_scale_of(module), num_heads=num_heads_of(module)
        )
    return attention if device.type == "meta" else attention.to(device=device)


def initialize_added_modules(model: PreTrainedModel, added: Sequence[tuple[nn.Module, nn.Module]]) -> None:
    """Initialise the new cross-attention modules through the ``_initialize_weights`` of the innermost
    ``PreTrainedModel`` holding each (transformers' own path, which marks them initialised, so a later
    ``init_weights()`` leaves them alone), children first as transformers does. Modules on the meta device
    (the model was built there) are left to ``to_empty()`` + ``init_weights()`` or to loading. Then every added
    module takes the dtype of its cross attention's projections.

    Args:
        model: the model, already of srformer's classes.
        added: ``(srformer_module, cross_attention_module)`` pairs from :func:`install_cross_attention`."""
    owners: dict[str, PreTrainedModel] = {}
    new = {id(attention) for attention, _ in added}
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
    for attention, module in added:  # in the dtype of the model's own projections
        attention.to(dtype=projection_weight(module).dtype)
