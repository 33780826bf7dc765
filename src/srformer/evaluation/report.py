"""Writing evaluation results: metrics as JSON files and comparison tables as Markdown."""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["format_table", "write_jsonl", "write_metrics_json", "write_predictions"]


def _json_default(value: Any) -> Any:
    """Convert values ``json`` cannot serialize: numpy/torch scalars (via ``.item()``), paths."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def write_metrics_json(path: str | os.PathLike[str], metrics: Mapping[str, Any]) -> None:
    """Write ``metrics`` to ``path`` as JSON (UTF-8, indent 2, trailing newline).

    Parent directories are created as needed and an existing file is overwritten. Keys keep
    their insertion order. Besides plain JSON types, numpy/torch scalars (anything with a
    one-value ``.item()``) and ``os.PathLike`` values are accepted; tuples become lists.

    Args:
        path: Destination file.
        metrics: Mapping of metric names to JSON-serializable values (nested allowed).

    Raises:
        TypeError: If a value cannot be serialized.
        OSError: If the directory or file cannot be written.
    """
    path = Path(path)
    # Serialize first so that a TypeError does not leave a truncated file behind.
    text = json.dumps(metrics, indent=2, default=_json_default)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def write_jsonl(path: str | os.PathLike[str], records: Sequence[Mapping[str, Any]]) -> None:
    """Write ``records`` to ``path``, one JSON object per line (UTF-8), atomically: into a temporary file next to it,
    then renamed over ``path``, so a reader or a kill never sees half a file. Missing folders are created.

    Raises:
        TypeError: a value that does not serialize (nothing is written then).
        OSError: the folder or file cannot be written.
    """
    path = Path(path)
    text = "".join(json.dumps(record, default=_json_default) + "\n" for record in records)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_predictions(path: str | os.PathLike[str], pairs: Sequence[Any], predictions: Sequence[str]) -> None:
    """Write a model's ``predictions`` for ``pairs`` (:class:`~srformer.data.pairs.SummaryPair`, aligned) to ``path``
    as :func:`write_jsonl` does: one ``{"id", "prediction", "reference"}`` line per document, in input order.

    Raises:
        ValueError: ``pairs`` and ``predictions`` of different lengths.
        OSError: the folder or file cannot be written.
    """
    write_jsonl(path, [{"id": pair.id, "prediction": prediction, "reference": pair.summary}
                       for pair, prediction in zip(pairs, predictions, strict=True)])


def _format_cell(value: object) -> str:
    """Render one table cell: floats with 2 decimals, ``None`` as empty, ``|`` escaped."""
    if value is None:
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        text = f"{float(value):.2f}"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")


def format_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """Format ``rows`` as a GitHub-flavoured Markdown table.

    One header line with ``columns``, a ``| --- |`` separator line, then one line per row.
    Non-integral real numbers (``float``, numpy floats) are written with 2 decimals, integers
    and other values with ``str``; a missing key or ``None`` gives an empty cell. ``|`` in a
    cell is escaped and newlines become spaces so that every row stays on one line.

    Args:
        rows: The table rows, each a mapping from column name to value; extra keys are ignored.
        columns: Column names, in display order.

    Returns:
        The table as a string, lines separated by ``"\\n"``, without a trailing newline.

    Raises:
        ValueError: If ``columns`` is empty.
    """
    if len(columns) == 0:
        raise ValueError("columns must not be empty")

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    lines = [
        line([_format_cell(column) for column in columns]),
        line(["---"] * len(columns)),
    ]
    lines.extend(line([_format_cell(row.get(column)) for column in columns]) for row in rows)
    return "\n".join(lines)
