#!/usr/bin/env python3
"""Copy transformers' own modeling test files (and what they import) out of a transformers git dir.

    python scripts/transformers_suites/fetch_tests.py GIT_DIR REF OUT [--families t5 bart ...]
        [--overlay-sdist transformers-X.Y.Z.tar.gz]

GIT_DIR is a transformers git directory (bare or not; read with `git show REF:path`, no work tree needed).
REF is a tag, branch or commit (e.g. v5.25.0). OUT is the folder to fill (e.g. runs/transformers-tests);
OUT/tests/... mirrors the repository's tests/ folder, so `tests.models.t5.test_modeling_t5` imports as a package.

Copied: tests/models/<family>/test_modeling_<family>.py for each family, tests/test_modeling_common.py,
tests/generation/test_utils.py, tests/test_configuration_common.py, tests/test_pipeline_mixin.py, then the
closure of the modules they import from the tests package (relative imports and `tests.` imports), plus the
`__init__.py` of every folder on the way. `--overlay-sdist` replaces the files that a transformers sdist ships
under tests/ (the sdist ships only the top-level tests/*.py) with the sdist's, for when the git dir has no
commit of the installed release; the closure is recomputed afterwards.

The ref, the commit it resolves to, its date, the `__version__` at that commit and every copied file with its
source are written to OUT/PROVENANCE.json.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

FAMILIES = ["t5", "bart", "led", "longt5", "pegasus_x", "bigbird_pegasus"]
SHARED = [
    "tests/test_modeling_common.py",
    "tests/generation/test_utils.py",
    "tests/test_configuration_common.py",
    "tests/test_pipeline_mixin.py",
]
# files and folders used at import time: test_pipeline_mixin.py loads the tiny-model summary, and
# tests/utils/test_configuration_utils.py puts the repository's utils/ on sys.path for `test_module`
DATA = ["tests/utils/tiny_model_summary.json", "utils/test_module/"]


def git_bytes(git_dir: str, *args: str) -> bytes:
    """Run ``git -C git_dir ARGS...`` and return its standard output as raw bytes.

    Raises ``subprocess.CalledProcessError`` when git exits non-zero (e.g. an unknown ref or path) and
    ``FileNotFoundError`` when no ``git`` executable is on ``PATH``.
    """
    completed = subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True)
    return completed.stdout


def git_text(git_dir: str, *args: str) -> str:
    """Run ``git -C git_dir ARGS...`` and return its standard output decoded as UTF-8.

    Raises what ``git_bytes`` raises, and ``UnicodeDecodeError`` when the output is not valid UTF-8.
    """
    return git_bytes(git_dir, *args).decode()


class Source:
    """Files of the repository at one commit, optionally overlaid with a sdist's tests/*.py.

    ``git_dir`` is a git directory (bare or not), ``commit`` a commit id (or any ref git accepts), ``overlay``
    maps repository paths (``tests/...``) to file contents that replace the commit's. Constructing one lists
    ``tests/`` and ``utils/test_module/`` at the commit; it raises ``subprocess.CalledProcessError`` when git
    cannot (e.g. an unknown commit).
    """

    def __init__(self, git_dir: str, commit: str, overlay: dict[str, bytes] | None = None):
        self.git_dir = git_dir
        self.commit = commit
        self.overlay: dict[str, bytes] = overlay or {}
        listing = git_text(git_dir, "ls-tree", "-r", "--name-only", commit, "--", "tests", "utils/test_module")
        self.paths: set[str] = set(listing.splitlines()) | set(self.overlay)

    def exists(self, path: str) -> bool:
        """Whether the repository path ``path`` is a file at the commit or in the overlay. Raises nothing."""
        return path in self.paths

    def read(self, path: str) -> tuple[bytes, str]:
        """The contents (raw bytes) of the repository path ``path`` and where they came from: "sdist" or "git".

        The overlay wins over the commit. Raises ``subprocess.CalledProcessError`` when the path is in neither.
        """
        if path in self.overlay:
            return self.overlay[path], "sdist"
        return git_bytes(self.git_dir, "show", f"{self.commit}:{path}"), "git"


def module_candidates(module: str) -> list[str]:
    """The two repository paths a dotted module name can live at: ``a/b.py`` and ``a/b/__init__.py``.

    Pure string work; raises nothing.
    """
    base = module.replace(".", "/")
    return [f"{base}.py", f"{base}/__init__.py"]


def imported_paths(path: str, data: bytes) -> set[str]:
    """Repository paths of the tests-package modules that `path` imports (module or package candidates).

    ``path`` is the repository path of a Python file (it resolves relative imports), ``data`` its source as bytes.
    Only imports of ``tests`` / ``tests.*`` (absolute or relative) count; both candidates of each are returned,
    whether they exist or not. A file that does not parse (``SyntaxError``) yields an empty set.
    """
    try:
        tree = ast.parse(data, filename=path)
    except SyntaxError:
        return set()
    package = posixpath.dirname(path).replace("/", ".")
    found: set[str] = set()
    for node in ast.walk(tree):
        mods: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                prefix = ".".join(base)
                mod = f"{prefix}.{node.module}" if node.module else prefix
            else:
                mod = node.module or ""
            if not mod.startswith("tests"):
                continue
            mods.append(mod)
            mods.extend(f"{mod}.{alias.name}" for alias in node.names)  # `from . import submodule`
        elif isinstance(node, ast.Import):
            mods.extend(alias.name for alias in node.names if alias.name.startswith("tests."))
        for mod in mods:
            found.update(module_candidates(mod))
    return found


def closure(src: Source, roots: list[str]) -> list[str]:
    """Sorted repository paths of ``roots`` and every tests-package module they import, transitively.

    Roots and imports that do not exist in ``src`` are left out; the ``__init__.py`` of every folder on the way
    to a kept file is added where it exists. Raises ``subprocess.CalledProcessError`` when git cannot read a file.
    """
    todo: list[str] = list(roots)
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen or not src.exists(path):
            continue
        seen.add(path)
        data, _ = src.read(path)
        todo.extend(imported for imported in imported_paths(path, data) if imported not in seen)
    # __init__.py of every folder from tests/ down to each copied file
    for path in list(seen):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            init = "/".join(parts[:i]) + "/__init__.py"
            if src.exists(init):
                seen.add(init)
    return sorted(seen)


def _member_bytes(tarball: str, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The contents of one member of the archive ``tarball``; ``ValueError`` when it is not a regular file."""
    extracted = tar.extractfile(member)
    if extracted is None:
        raise ValueError(f"{tarball}: {member.name} is not a regular file")
    return extracted.read()


def read_sdist(tarball: str) -> tuple[dict[str, bytes], str]:
    """The ``tests/**/*.py`` files of a transformers sdist and its version.

    Returns (repository path -> contents as bytes, the ``Version:`` of its top-level ``PKG-INFO``, "" when there
    is none). Paths drop the archive's top folder (``transformers-X.Y.Z/``). Raises ``FileNotFoundError`` for a
    missing file, ``tarfile.ReadError`` for one that is not a tar archive, ``ValueError`` when ``PKG-INFO`` is not
    a regular file, ``UnicodeDecodeError`` when it is not UTF-8.
    """
    files: dict[str, bytes] = {}
    version = ""
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if member.isfile() and name.startswith("tests/") and name.endswith(".py"):
                files[name] = _member_bytes(tarball, tar, member)
            if name == "PKG-INFO":
                version_match = re.search(r"^Version: (.+)$", _member_bytes(tarball, tar, member).decode(), re.M)
                version = version_match.group(1).strip() if version_match else ""
    return files, version


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (see the module docstring); returns the exit status, 0 on success.

    Raises ``SystemExit`` for bad arguments or ``--help``, ``subprocess.CalledProcessError`` when git cannot
    resolve the ref or read a file, and what ``read_sdist`` raises for a bad ``--overlay-sdist``.
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("git_dir")
    parser.add_argument("ref")
    parser.add_argument("out")
    parser.add_argument("--families", nargs="+", default=FAMILIES)
    parser.add_argument("--extra", nargs="*", default=[], help="more repository paths to copy (with their imports)")
    parser.add_argument("--overlay-sdist", help="a transformers sdist whose tests/*.py replace the git dir's")
    args = parser.parse_args(argv)

    commit = git_text(args.git_dir, "rev-parse", f"{args.ref}^{{commit}}").strip()
    date = git_text(args.git_dir, "show", "-s", "--format=%cI", commit).strip()
    init_source = git_text(args.git_dir, "show", f"{commit}:src/transformers/__init__.py")
    version_match = re.search(r'^__version__ = "([^"]+)"', init_source, re.M)
    overlay: dict[str, bytes] = {}
    sdist_version: str | None = None
    if args.overlay_sdist:
        overlay, sdist_version = read_sdist(args.overlay_sdist)
    src = Source(args.git_dir, commit, overlay)

    roots = [f"tests/models/{family}/test_modeling_{family}.py" for family in args.families]
    roots += SHARED + list(args.extra)
    missing = [root for root in roots if not src.exists(root)]
    if missing:
        print(f"warning: not at {args.ref}: {missing}", file=sys.stderr)
    data_paths = {
        path
        for wanted in DATA
        for path in src.paths
        if path == wanted or (wanted.endswith("/") and path.startswith(wanted))
    }
    paths = sorted(set(closure(src, roots)) | data_paths)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("tests", "utils"):  # a previous copy (from another ref) must not leave files behind
        shutil.rmtree(out / stale, ignore_errors=True)
    files: list[dict[str, str]] = []
    for path in paths:
        content, origin = src.read(path)
        dest = out / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
        files.append({"path": path, "from": origin, "sha256": hashlib.sha256(content).hexdigest()[:16]})
    version_at_commit = version_match.group(1) if version_match else None
    provenance = {
        "git_dir": str(Path(args.git_dir).resolve()),
        "ref": args.ref,
        "commit": commit,
        "commit_date": date,
        "transformers_version_at_commit": version_at_commit,
        "overlay_sdist": str(Path(args.overlay_sdist).resolve()) if args.overlay_sdist else None,
        "overlay_sdist_version": sdist_version,
        "families": args.families,
        "missing_roots": missing,
        "copied_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": files,
    }
    (out / "PROVENANCE.json").write_text(json.dumps(provenance, indent=1) + "\n")
    n_sdist = sum(entry["from"] == "sdist" for entry in files)
    print(f"copied {len(files)} files ({n_sdist} from the sdist) from {args.ref} = {commit[:12]} "
          f"({version_at_commit}, {date}) into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
