"""Lazy package faces (PEP 562): a package exports names of its modules without importing them until used.

A package whose modules import torch or transformers declares its exports by module, and imports them only under
``TYPE_CHECKING`` (for mypy)::

    if TYPE_CHECKING:
        from srformer.training.loop import train

    __all__ = ["train"]
    __getattr__, __dir__ = lazy_exports(__name__, {"srformer.training.loop": ("train",)})

``import srformer.training`` (and so ``import srformer.training.settings``, which runs the package's
``__init__`` first) then imports nothing heavy; ``srformer.training.train`` and ``from srformer.training import
train`` import :mod:`srformer.training.loop` on first use. That keeps ``srformer --help`` light: the parsers read
their choices and defaults from light modules of these packages.

This module imports only the standard library.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` (PEP 562) of ``package`` for the names of ``exports``.

    Args:
        package: the package's ``__name__``.
        exports: the names each module exports through the package, by the module's dotted name.

    Returns:
        ``(__getattr__, __dir__)``: ``__getattr__(name)`` imports the module that exports ``name``, stores the value
        in the package (later look-ups do not come back) and returns it; a name no module exports but a submodule of
        the package has (``srformer.models`` after ``import srformer``) gives that submodule, imported; any other
        name raises :class:`AttributeError`. ``__dir__()`` lists the package's names and the exported ones.

    Raises:
        ValueError: if two modules export the same name.
    """
    modules: dict[str, str] = {}
    for module, names in exports.items():
        for name in names:
            if modules.setdefault(name, module) != module:
                raise ValueError(f"{package}: {name} is exported by both {modules[name]} and {module}")

    def __getattr__(name: str) -> Any:
        namespace = sys.modules[package]
        if name in modules:
            value = getattr(importlib.import_module(modules[name]), name)
        elif not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(namespace, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *modules})

    return __getattr__, __dir__
