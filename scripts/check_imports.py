"""Check the import graph of the ``srformer`` package: the layer table and no import cycle.

Usage, from the repository root: ``python scripts/check_imports.py [--src SRC]``. It prints one line per violation
and exits 1, or prints a one-line summary and exits 0.

Rules:

- Layers (:data:`LAYERS`): the table has one row per top-level name of the package (a subpackage, i.e. a folder,
  or a module directly in the root) and one for the root package itself; a row for anything deeper is a violation,
  so the layers follow the folders. A module's layer is that of the row of its top-level name (the root package's
  own row matches the root ``__init__`` only; a module no row covers is a violation). A module may import modules of
  its own layer or lower. Imports under ``if TYPE_CHECKING:`` count here too.
- Cycles: the runtime imports (module-level and inside functions; not those under ``if TYPE_CHECKING:``) must form
  no cycle.

An import ``import a.b.c`` is an edge to ``a.b.c`` only (the implicit import of the parent packages is not
modelled). ``from a.b import c`` is an edge to ``a.b.c`` when that module exists, else to ``a.b``; relative imports
are resolved against the importing module's package. Imports of other packages are ignored.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The layer table of ``srformer``, one row per top-level folder (and root module): modules import only modules of
#: their own layer or lower. ``srformer.core`` is the ground floor (the config, the mechanism schema and registry,
#: the settings base); ``srformer.config`` is its public face (a re-export of ``srformer.core``).
LAYERS: dict[str, int] = {
    "srformer.core": 0,
    "srformer.config": 0,
    "srformer.attention": 1,
    "srformer.models": 2,
    "srformer.data": 2,
    "srformer.training": 3,
    "srformer.evaluation": 3,
    "srformer.probe": 4,
    "srformer.experiments": 4,
    "srformer.benchmarks": 4,
    "srformer.cli": 5,
    "srformer": 6,
}


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``line``; ``runtime`` is False under
    ``if TYPE_CHECKING:``."""

    source: str
    target: str
    line: int
    runtime: bool


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` below ``src`` by dotted name (a package by its ``__init__.py``)."""
    modules: dict[str, Path] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _statements(body: Sequence[ast.stmt], runtime: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement below ``body`` (function bodies included) with whether it runs outside TYPE_CHECKING."""
    for statement in body:
        yield statement, runtime
        if isinstance(statement, ast.If) and _is_type_checking(statement.test):
            yield from _statements(statement.body, False)
            yield from _statements(statement.orelse, runtime)
            continue
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(statement, name, None)
            if isinstance(children, list):
                nested = [c for c in children if isinstance(c, ast.stmt)]
                for child in children:  # except handlers and match cases hold statements one level down
                    if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                        nested.extend(child.body)
                yield from _statements(nested, runtime)


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str, path: Path, modules: Mapping[str, Path], package: str) -> list[Import]:
    """The edges from ``module`` (read from ``path``) to modules of ``package`` (see the module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    edges: list[Import] = []

    def add(target: str, line: int, runtime: bool) -> None:
        while target and target not in modules:  # an attribute path such as ``pkg.mod.name``: its module
            target = target.rpartition(".")[0]
        if target:
            edges.append(Import(module, target, line, runtime))

    for statement, runtime in _statements(tree.body, True):
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.name == package or alias.name.startswith(package + "."):
                    add(alias.name, statement.lineno, runtime)
        elif isinstance(statement, ast.ImportFrom):
            if statement.level:
                base = _package_of(module, path)
                for _ in range(statement.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{statement.module}" if statement.module else base
            else:
                base = statement.module or ""
            if base != package and not base.startswith(package + "."):
                continue
            for alias in statement.names:
                child = f"{base}.{alias.name}"
                add(child if child in modules else base, statement.lineno, runtime)
    return edges


def layer_of(module: str, layers: Mapping[str, int], package: str) -> int | None:
    """The layer of the longest entry of ``layers`` that is ``module`` or a dotted prefix of it (the root package's
    entry covers only the root package itself); None when none does."""
    best: str | None = None
    for prefix in layers:
        covers = module == prefix or (prefix != package and module.startswith(prefix + "."))
        if covers and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else layers[best]


def find_cycles(edges: Sequence[Import]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of the runtime edges that has one
    (Tarjan's algorithm, iterative)."""
    graph: dict[str, list[str]] = {}
    for edge in edges:
        if edge.runtime:
            graph.setdefault(edge.source, []).append(edge.target)
            graph.setdefault(edge.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            successors = sorted(set(graph[node]))
            if position < len(successors):
                work.append((node, position + 1))
                successor = successors[position]
                if successor not in index:
                    work.append((successor, 0))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: list[str], graph: Mapping[str, list[str]]) -> list[str]:
    """A shortest cycle through the first module of ``component`` (breadth-first, inside the component)."""
    first, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(set(graph[node])):
                if successor == first:
                    path = [node]
                    while path[-1] != first:
                        path.append(previous[path[-1]])
                    return [first, *reversed(path[:-1]), first] if node != first else [first, first]
                if successor in members and successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    return [first, first]


def check(src: Path, layers: Mapping[str, int]) -> tuple[list[str], int, int]:
    """The violations of the package below ``src`` that ``layers`` describes (its top-level package is the first
    component of the table's entries).

    Returns:
        ``(violations, modules, edges)``: one line per violation (``LAYERS: ...`` for a row inside a folder,
        ``path:line: ...`` for a layer violation or a module outside the table, ``cycle: a -> b -> a`` for a cycle),
        and the numbers of modules and edges read.
    """
    package = next(iter(layers)).split(".")[0]
    modules = module_files(src, package)
    edges = [edge for name, path in modules.items() for edge in imports_of(name, path, modules, package)]
    violations: list[str] = []
    for prefix in layers:
        if prefix != package and prefix.count(".") != 1:
            violations.append(f"LAYERS: the row {prefix} lies inside a folder of {package}; give the layer to its "
                              "top-level folder, so that the layers follow the folders")
    for name, path in modules.items():
        if layer_of(name, layers, package) is None:
            violations.append(f"{path}:1: {name} is in no layer of the table; add it to LAYERS")
    for edge in edges:
        source, target = layer_of(edge.source, layers, package), layer_of(edge.target, layers, package)
        if source is not None and target is not None and target > source:
            kind = "" if edge.runtime else " (under TYPE_CHECKING)"
            violations.append(f"{modules[edge.source]}:{edge.line}: {edge.source} (layer {source}) imports "
                              f"{edge.target} (layer {target}), a higher layer{kind}")
    for cycle in find_cycles(edges):
        violations.append("cycle: " + " -> ".join(cycle))
    return violations, len(modules), len(edges)


def main(argv: Sequence[str] | None = None, layers: Mapping[str, int] = LAYERS) -> int:
    """Check the package below ``--src`` against ``layers``; print the violations (exit status 1) or a one-line
    summary (0)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path("src"), help="the folder holding the package (default src)")
    args = parser.parse_args(argv)
    violations, modules, edges = check(args.src, layers)
    for line in violations:
        print(line)
    if violations:
        return 1
    print(f"check_imports: {modules} modules, {edges} imports within the package: layers respected, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
