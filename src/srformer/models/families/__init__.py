"""The model families srformer converts, one file each (:class:`~srformer.models.families.entry.Family`), and the
lookups the rest of :mod:`srformer.models` derives everything from: a module's family (:func:`family_of_module`), a
config's family (:func:`family_of_config`), the attributes that hold cross attention, and the supported models named
in errors. ``docs/adding-a-family.md`` says how to add one.
"""

from __future__ import annotations

from functools import cache
from typing import Any

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
    "CROSS_ATTENTION_ATTRIBUTES", "FAMILIES", "SUPPORTED_MODELS", "Family", "family_of_config", "family_of_module",
    "family_named",
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
def _attention_types() -> tuple[tuple[type, Family], ...]:
    return tuple((family.attention_type, family) for family in FAMILIES)


def family_of_module(module: Any) -> Family | None:
    """The family whose cross-attention class ``module`` is an instance of, or None."""
    return next((family for cls, family in _attention_types() if isinstance(module, cls)), None)


def family_of_config(config: Any) -> Family | None:
    """The family of a transformers config (or srformer's config of that family) by its ``model_type``, or None."""
    return _BY_NAME.get(str(getattr(config, "model_type", "")).removeprefix("srformer_"))
