"""srformer's model types are known to transformers wherever srformer is imported, without ``import srformer``
importing transformers (or torch) itself.

Importing :mod:`srformer.models.auto` registers srformer's model types with transformers' Auto classes and wraps
the concrete classes' ``from_pretrained`` (see there); it imports torch and transformers. ``import srformer`` runs
:func:`register_with_transformers`, which imports it at once if transformers is already imported, and otherwise
as soon as both are: right after the import that brings transformers in (``import transformers``, ``from
transformers import AutoModelForSeq2SeqLM``, or a module of srformer that imports it) has finished. So
``import srformer`` followed by ``AutoModelForSeq2SeqLM.from_pretrained(converted_dir)`` loads the converted
model, as it did when ``import srformer`` imported everything, while ``srformer --help``, which never imports
transformers, stays light.

How: a finder first on ``sys.meta_path`` hands out the specs of ``transformers`` and of srformer's modules with a
loader that wraps theirs. When the outermost of these imports (in its thread) has run, and transformers is
imported, it imports :mod:`srformer.models.auto` and takes itself off ``sys.meta_path``. Waiting for the outermost
import matters: a module of srformer may import transformers while modules that :mod:`srformer.models.auto` needs
are half-initialised. The loader hands each module its own loader back before running it, so the module's
``__loader__`` and ``__spec__`` are the usual ones, and passes every other call on to it (``python -m
srformer.cli.main`` asks it for the module's code).

This module imports only the standard library.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

__all__ = ["REGISTERING_MODULE", "register_with_transformers"]

#: Importing it registers srformer's model types with transformers.
REGISTERING_MODULE = "srformer.models.auto"

_TRANSFORMERS = "transformers"
_PACKAGE = "srformer."


class _Pending(threading.local):
    """Per thread: how deep the running imports of watched modules are nested, and whether it registers now."""

    depth = 0
    registering = False


_PENDING = _Pending()


def _registered() -> bool:
    module = sys.modules.get(REGISTERING_MODULE)
    return module is not None and not getattr(module.__spec__, "_initializing", False)


def _register() -> None:
    """Import :data:`REGISTERING_MODULE` (unless done, and not from inside itself), then stop watching imports."""
    if _PENDING.registering:
        return
    if not _registered():
        _PENDING.registering = True
        try:
            importlib.import_module(REGISTERING_MODULE)
        finally:
            _PENDING.registering = False
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


class _RegisterAfter(importlib.abc.Loader):
    """A watched module's loader: runs the module with ``loader``, then registers if this was the outermost
    watched import of its thread and transformers is imported."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:  # get_code (runpy: python -m), get_source, is_package, ...
        return getattr(self.loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        _PENDING.depth += 1
        try:
            self.loader.exec_module(module)
        finally:
            _PENDING.depth -= 1
        if _PENDING.depth == 0 and _TRANSFORMERS in sys.modules:
            _register()


class _Watch(importlib.abc.MetaPathFinder):
    """Finds ``transformers`` and srformer's modules with the other finders and wraps their loaders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _TRANSFORMERS and not fullname.startswith(_PACKAGE):
            return None
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisterAfter(spec.loader)
                return spec
        return None


_FINDER = _Watch()


def register_with_transformers() -> None:
    """Register srformer's model types with transformers now if it is imported, else as soon as it is (once)."""
    if _TRANSFORMERS in sys.modules:
        _register()
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
