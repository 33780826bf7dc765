"""Checking an output file's location before any work is done."""

from __future__ import annotations

import os
from pathlib import Path


def prepare_output_file(path: str | os.PathLike, option: str) -> Path:
    """Make sure a file can be written at ``path``: create its missing parent folders and check that the folder is
    writable and that ``path`` is not a folder. Called before generating or training, so no work is lost.

    Args:
        path: the file to be written later.
        option: the command-line option that gave ``path`` (e.g. ``"--predictions"``), named in the error.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: naming ``option`` and the fix, when a parent is a file, a folder cannot be created or written,
            or ``path`` is an existing folder.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(
            f"{option} {path}: a parent of {target.name!r} is a file, not a folder; choose another path."
        ) from None
    except OSError as error:
        raise ValueError(f"{option} {path}: cannot create its folder {target.parent} ({error.strerror}).") from None
    if target.is_dir():
        raise ValueError(f"{option} {path} is a folder; give a file path (e.g. {target / 'out.json'}).")
    if not os.access(target.parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"{option} {path}: no permission to write there; choose another path.")
    return target
