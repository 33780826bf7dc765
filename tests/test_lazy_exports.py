"""The lazy package faces (PEP 562, :mod:`srformer.core.lazy`): the root package and the faces of the packages whose
modules import torch or transformers import neither, and every name they export is there on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from srformer.core.lazy import lazy_exports

#: The packages with a lazy face.
LAZY = ("srformer", "srformer.models", "srformer.training", "srformer.data", "srformer.benchmarks")

#: The light modules the parsers of ``srformer --help`` read, below those faces.
LIGHT = (
    "srformer.models.named_configs", "srformer.training.settings", "srformer.training.curriculum",
    "srformer.training.pretrain_data", "srformer.benchmarks.records", "srformer.benchmarks.suite_settings",
    "srformer.benchmarks.long_input_variants", "srformer.experiments.compare_settings",
    "srformer.experiments.aclsum_settings", "srformer.probe.grid",
)


def test_the_lazy_faces_and_the_light_modules_import_neither_torch_nor_transformers():
    script = (f"import importlib, sys\nfor name in {LAZY + LIGHT!r}:\n    importlib.import_module(name)\n"
              "heavy = {'torch', 'transformers'} & set(sys.modules)\nassert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("package", LAZY)
def test_every_exported_name_is_there_on_first_use_and_listed(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        namespace: dict = {}
        exec(f"from {package} import {name}", namespace)
        assert namespace[name] is getattr(module, name)
    assert set(module.__all__) <= set(dir(module))


def test_a_submodule_is_an_attribute_and_an_unknown_name_is_not():
    import srformer

    assert srformer.models.named_configs is importlib.import_module("srformer.models.named_configs")
    assert not hasattr(srformer, "no_such_name") and not hasattr(srformer, "_private")
    with pytest.raises(AttributeError, match="no_such_name"):
        srformer.models.no_such_name  # noqa: B018


def test_a_name_exported_by_two_modules_is_refused():
    with pytest.raises(ValueError, match="both"):
        lazy_exports("srformer", {"srformer.core": ("VARIANTS",), "srformer.config": ("VARIANTS",)})
