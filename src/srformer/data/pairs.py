"""Document/summary pairs: the :class:`SummaryPair` record and the loaders that produce it.

Sources understood by :func:`load_pairs`:

* local files: ``.jsonl`` (one JSON object a line), ``.json`` (a list of objects, or JSON
  lines) and ``.csv`` (a header row, then one example a row);
* Hugging Face hub dataset names (``xsum``, ``cnn_dailymail``, ``EdinburghNLP/xsum``), loaded
  with :func:`datasets.load_dataset` (needs network access or a warm local cache).

:func:`load_aclsum` reads the ACLSum corpus shipped inside the ``aclsum`` PyPI package.

Every problem with the data raises an error that names the file, the 1-based line, row or item
number, the argument involved and how to fix it, because these errors usually reach a user of the
command line rather than a programmer.

The parts live beside this module, which is their public face: the record (:mod:`~srformer.data.pair_record`),
local files (:mod:`~srformer.data.pair_files`, opened through :mod:`~srformer.data.file_reading`), hub datasets
(:mod:`~srformer.data.pair_hub`) and ACLSum (:mod:`~srformer.data.aclsum_corpus`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from srformer.data.aclsum_corpus import load_aclsum
from srformer.data.pair_files import SUPPORTED_EXTENSIONS, load_file
from srformer.data.pair_hub import load_hub
from srformer.data.pair_record import SummaryPair

__all__ = ["SUPPORTED_EXTENSIONS", "SummaryPair", "load_aclsum", "load_pairs"]

#: Extensions that mark a source as a file path (never a hub name) even when it does not exist.
_FILE_LIKE_EXTENSIONS = frozenset(
    SUPPORTED_EXTENSIONS
    + (
        ".tsv",
        ".txt",
        ".parquet",
        ".arrow",
        ".gz",
        ".bz2",
        ".xz",
        ".zip",
        ".zst",
        ".xml",
        ".ndjson",
    )
)

#: ``name`` or ``owner/name`` as the hub spells dataset ids.
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


def load_pairs(
    source: str | os.PathLike[str],
    *,
    split: str | None = None,
    document_field: str = "document",
    summary_field: str = "summary",
    max_examples: int | None = None,
) -> list[SummaryPair]:
    """Load summarization pairs from a local file or a Hugging Face hub dataset.

    Args:
        source: a path to a ``.jsonl``, ``.json`` or ``.csv`` file, or a hub dataset name such
            as ``"xsum"``, ``"cnn_dailymail"`` or ``"EdinburghNLP/xsum"`` (used only when no
            such path exists and the name has no file extension).
        split: hub split to load (default ``"train"``); ignored for local files, which hold one
            split each.
        document_field: name of the field (JSON key or CSV column) holding the document. For
            ``cnn_dailymail`` the defaults ``document``/``summary`` are mapped to
            ``article``/``highlights``.
        summary_field: name of the field holding the reference summary.
        max_examples: if given, stop after this many examples (the first ones of the source).

    Returns:
        The examples in source order; an ``id`` field, when present, is kept as a string.

    Raises:
        FileNotFoundError: ``source`` looks like a file path (has a file extension, or is an
            absolute or ``./`` path) but does not exist.
        ValueError: unsupported extension, ``source`` is a directory, bytes that are not UTF-8,
            malformed JSON or CSV (an unclosed quote, a row with fewer or more cells than the
            header), a record that is not an object, a missing field, a field that is not a
            string, an empty or whitespace-only document or summary, a source with no examples,
            or ``max_examples < 1``. The message names the file and the 1-based line, row or
            item, and the fix.

    Warns:
        UserWarning: CSV rows whose cells are all empty are skipped; one warning gives their
            number and row numbers. (Blank lines of JSON-lines files are not records and are
            skipped silently.)
        RuntimeError: a hub dataset could not be loaded (no network, unknown name, ...).
    """
    if max_examples is not None and max_examples < 1:
        raise ValueError(
            f"max_examples must be a positive integer or None, got {max_examples!r}; "
            "pass None to load every example"
        )
    path = Path(os.fspath(source)).expanduser()
    if path.exists():
        if path.is_dir():
            raise ValueError(
                f"{path} is a directory; pass a .jsonl, .json or .csv file inside it "
                f"(supported extensions: {', '.join(SUPPORTED_EXTENSIONS)})"
            )
        return load_file(path, document_field, summary_field, max_examples)
    text = os.fspath(source)
    if _looks_like_file_path(text):
        raise FileNotFoundError(
            f"data file {text!r} does not exist; check the path "
            f"(supported files: {', '.join(SUPPORTED_EXTENSIONS)})"
        )
    if not _HUB_NAME.match(text):
        raise ValueError(
            f"{text!r} is neither an existing file nor a hub dataset name (like 'xsum' or "
            "'EdinburghNLP/xsum'); pass a path to a .jsonl, .json or .csv file"
        )
    return load_hub(text, split, document_field, summary_field, max_examples)


def _looks_like_file_path(text: str) -> bool:
    """True when a non-existent ``text`` should be reported as a missing file, not a hub name."""
    if Path(text).suffix.lower() in _FILE_LIKE_EXTENSIONS:
        return True
    if os.path.isabs(text) or text.startswith(("./", "../", "~", ".\\", "..\\")):
        return True
    return "\\" in text or text.count("/") > 1
