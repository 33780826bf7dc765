"""Shared by the tests of ``scripts/``: load a script as a module."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@contextmanager
def script_module(name: str) -> Iterator[ModuleType]:
    """``scripts/<name>.py`` imported as the module ``name`` for the duration of the block."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is created
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]
