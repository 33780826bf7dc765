"""The model families srformer converts, one file each (:class:`~srformer.models.families.entry.Family`), and the
lookups the rest of :mod:`srformer.models` derives everything from: a module's family and sizes (:func:`describe`), a
config's family (:func:`family_of_config`), the attributes that hold cross attention, and the supported models named
in errors. ``docs/adding-a-family.md`` says how to add one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from srformer.models.families import (
    bart,
    bigbird_pegasus,
    led,
    longt5,
    marian,
    mbart,
    mt5,
    pegasus,
    pegasus_x,
    t5,
)
from srformer.models.families.entry import Family

__all__ = [
    "CROSS_ATTENTION_ATTRIBUTES", "FAMILIES", "SUPPORTED_MODELS", "CrossAttentionShape", "Family", "attention_types",
    "describe", "family_of_config", "family_of_module", "family_named",
]

#: Every family srformer converts, in the order their classes are tried (a subclass before its base is not needed:
#: no family's cross-attention class derives from another's).
FAMILIES: tuple[Family, ...] = (
    t5.FAMILY, mt5.FAMILY, bart.FAMILY, mbart.FAMILY, pegasus.FAMILY, marian.FAMILY,
    led.FAMILY, longt5.FAMILY, pegasus_x.FAMILY, bigbird_pegasus.FAMILY,
)

#: The attributes of a decoder layer that may hold its cross attention, over every family.
CROSS_ATTENTION_ATTRIBUTES: tuple[str, ...] = tuple(dict.fromkeys(f.cross_attention_attribute for f in FAMILIES))

#: The models :func:`srformer.convert` accepts, for error messages.
SUPPORTED_MODELS = ", ".join(f.heads[0][0] for f in FAMILIES) + " (and models reusing their cross-attention classes)"

_BY_NAME = {family.name: family for family in FAMILIES}


def family_named(name: str) -> Family:
    """The family whose ``model_type`` is ``name`` (srformer's own ``"srformer_" + name`` too).

    Raises:
        ValueError: for a model type srformer does not convert, listing those it does.
    """
    family = _BY_NAME.get(name.removeprefix("srformer_"))
    if family is None:
        raise ValueError(f"srformer does not convert model type {name!r}; it converts {', '.join(_BY_NAME)}.")
    return family


@cache
def attention_types() -> tuple[type, ...]:
    """The cross-attention class of every family, in :data:`FAMILIES`' order (imported on first call)."""
    return tuple(family.attention_type for family in FAMILIES)


def family_of_module(module: Any) -> Family | None:
    """The family whose cross-attention class ``module`` is an instance of, or None."""
    pairs = zip(attention_types(), FAMILIES, strict=True)
    return next((family for cls, family in pairs if isinstance(module, cls)), None)


@dataclass(frozen=True)
class CrossAttentionShape:
    """One cross-attention module as its family's entry reads it (:func:`describe`).

    Attributes:
        family: its family's entry.
        num_heads: ``H``, its number of heads.
        head_dim: ``d``, the size of one head.
        scale: its softmax scale (``head_dim^-0.5`` in BART's families, 1.0 in T5's).
        query_weight: its query projection's weight, (H·d, d_model): the device and dtype of its parameters.
    """

    family: Family
    num_heads: int
    head_dim: int
    scale: float
    query_weight: torch.Tensor


def describe(module: Any) -> CrossAttentionShape | None:
    """``module``'s family and sizes, read through the attribute names of its family's entry; None for a module of
    no family srformer converts.

    Raises:
        TypeError: for a module of a family whose number of heads or head size is not an int, or whose query
            projection has no ``weight`` tensor.
    """
    family = family_of_module(module)
    if family is None:
        return None
    num_heads, head_dim = getattr(module, family.num_heads, None), getattr(module, family.head_dim, None)
    for attribute, value in ((family.num_heads, num_heads), (family.head_dim, head_dim)):
        if not isinstance(value, int):
            raise TypeError(f"{type(module).__name__} has no int `{attribute}` (its number of heads or head size).")
    assert isinstance(num_heads, int) and isinstance(head_dim, int)
    weight = getattr(getattr(module, family.projections[0]), "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"{type(module).__name__}'s query projection has no `weight` tensor.")
    scale = 1.0 if family.scale is None else float(getattr(module, family.scale))
    return CrossAttentionShape(family, num_heads, head_dim, scale, weight)


def family_of_config(config: Any) -> Family | None:
    """The family of a transformers config (or srformer's config of that family) by its ``model_type``, or None."""
    return _BY_NAME.get(str(getattr(config, "model_type", "")).removeprefix("srformer_"))
