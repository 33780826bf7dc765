"""scripts/check_imports.py on small synthetic packages: layer violations and cycles are reported, a clean
package passes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.script_loading import script_module

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_imports.py"
LAYERS = {"pkg.low": 0, "pkg.mid": 1, "pkg": 2}


@pytest.fixture(scope="module")
def checker():
    with script_module("check_imports") as module:
        yield module


def _package(root: Path, files: dict[str, str]) -> Path:
    src = root / "src"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return src


GOOD = {
    "pkg/__init__.py": "from pkg.mid import b\nimport pkg.low\n",
    "pkg/low/__init__.py": "",
    "pkg/low/a.py": "import os\n\nVALUE = os.sep\n",
    "pkg/mid/__init__.py": "",
    "pkg/mid/b.py": """\
        from typing import TYPE_CHECKING

        from ..low import a
        from . import c

        if TYPE_CHECKING:
            from pkg.mid.d import Thing  # a cycle under TYPE_CHECKING only: allowed
        """,
    "pkg/mid/c.py": "from pkg.low.a import VALUE\n",
    "pkg/mid/d.py": "from pkg.mid import b\n\n\nclass Thing:\n    pass\n",
}


def test_a_clean_package_passes_with_a_summary(checker, tmp_path, capsys):
    src = _package(tmp_path, GOOD)
    violations, modules, edges = checker.check(src, LAYERS)
    assert violations == [] and modules == 7
    assert edges == 7  # __init__ -> mid.b, low; b -> low.a, mid.c, mid.d; c -> low.a; d -> mid.b
    assert checker.main(["--src", str(src)], layers=LAYERS) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "7 modules" in out[0] and "no cycle" in out[0]


def test_layer_violations_and_cycles_are_each_reported(checker, tmp_path, capsys):
    src = _package(tmp_path, {
        **GOOD,
        "pkg/low/a.py": """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg.mid.c import VALUE  # upward, though only for typing


            def late():
                from .. import mid  # a function-level import counts too
                return mid
            """,
        "pkg/low/e.py": "import pkg\n",  # the root package is the top layer
        "pkg/mid/c.py": "from pkg.mid.d import Thing\n",  # d -> b -> c -> d at runtime
        "pkg/extra.py": "",  # covered by no entry but the root's, which covers the root only
    })
    violations, _, _ = checker.check(src, LAYERS)
    low_a, low_e = src / "pkg" / "low" / "a.py", src / "pkg" / "low" / "e.py"
    assert f"{low_a}:4: pkg.low.a (layer 0) imports pkg.mid.c (layer 1), a higher layer (under TYPE_CHECKING)" \
        in violations
    assert f"{low_a}:8: pkg.low.a (layer 0) imports pkg.mid (layer 1), a higher layer" in violations
    assert f"{low_e}:1: pkg.low.e (layer 0) imports pkg (layer 2), a higher layer" in violations
    assert f"{src / 'pkg' / 'extra.py'}:1: pkg.extra is in no layer of the table; add it to LAYERS" in violations
    assert "cycle: pkg.mid.b -> pkg.mid.c -> pkg.mid.d -> pkg.mid.b" in violations
    assert len(violations) == 5
    assert checker.main(["--src", str(src)], layers=LAYERS) == 1
    assert capsys.readouterr().out.splitlines() == violations


def test_a_function_level_import_closes_a_cycle(checker, tmp_path):
    src = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "from pkg.low import b\n",
        "pkg/low/b.py": "def f():\n    from pkg.low.a import f\n    return f\n",
    })
    assert checker.check(src, LAYERS)[0] == ["cycle: pkg.low.a -> pkg.low.b -> pkg.low.a"]


def test_a_row_inside_a_folder_is_a_violation(checker, tmp_path):
    """The layers follow the top-level folders: a row that gives one module of a folder a layer of its own (as
    ``srformer.attention.registry`` at layer 0 once did) is reported, whatever its imports."""
    src = _package(tmp_path, GOOD)
    violations, _, _ = checker.check(src, {"pkg.low": 0, "pkg.mid.c": 0, "pkg.mid": 1, "pkg": 2})
    assert violations == ["LAYERS: the row pkg.mid.c lies inside a folder of pkg; give the layer to its top-level "
                          "folder, so that the layers follow the folders"]


def test_the_package_table_has_one_row_per_top_level_name(checker):
    """``srformer``'s own table: the root package and one row per top-level folder or root module, each of which
    exists."""
    src = SCRIPT.parents[1] / "src"
    top = {path.stem if path.suffix == ".py" else path.name
           for path in (src / "srformer").iterdir() if path.suffix == ".py" or (path / "__init__.py").is_file()}
    rows = {name.removeprefix("srformer.") for name in checker.LAYERS if name != "srformer"}
    assert "srformer" in checker.LAYERS and rows == top - {"__init__"}
    assert checker.LAYERS["srformer.core"] == 0 == min(checker.LAYERS.values())
