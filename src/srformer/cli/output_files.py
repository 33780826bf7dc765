"""Checking an output file's location before any work is done."""

from __future__ import annotations

import os
from pathlib import Path


def check_output_file(path: str | os.PathLike, option: str) -> Path:
    """Make sure a file can be written at ``path`` later, before generating or training, so no work is lost: ``path``
    is not a folder, and its folder exists and is writable or can be created (the nearest existing folder above it
    is a writable folder, not a file). Nothing is created here: the writer creates missing folders.

    Args:
        path: the file to be written.
        option: the command-line option that gave ``path`` (e.g. ``"--predictions"``), named in the error.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: naming ``option`` and the fix, when a folder above ``path`` is a file, a folder cannot be
            written, or ``path`` is an existing folder.
    """
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{option} {path} is a folder; give a file path (e.g. {target / 'out.json'}).")
    existing = target.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option} {path}: {existing} is a file, not a folder; choose another path.")
    if not os.access(existing, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"{option} {path}: no permission to write in {existing}; choose another path.")
    return target


def partial_path(path: str | os.PathLike) -> Path:
    """Where a resumable corpus run writing ``path`` keeps its finished batches until ``path`` is written:
    ``<path>.partial`` (:func:`srformer.evaluation.corpus.generate_corpus`)."""
    target = Path(path)
    return target.with_name(target.name + ".partial")
