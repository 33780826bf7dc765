"""Local files of summary pairs: JSON lines (``.jsonl``), JSON (``.json``) and CSV (``.csv``), plain or compressed.

:func:`load_file` reads one file into :class:`~srformer.data.pair_record.SummaryPair` objects. The record iterators
yield ``(location, record)`` pairs, the location naming the 1-based line, row or item for error messages; every
malformed part raises a ValueError that names the file, the location and the fix. Files are opened through
:mod:`~srformer.data.file_reading` (``.gz``, ``.bz2`` and ``.xz`` are decompressed).
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from srformer.data.file_reading import (
    COMPRESSIONS,
    data_extension,
    not_utf8_message,
    open_bytes,
    open_text,
    undecodable_line,
)
from srformer.data.pair_record import SummaryPair, make_pair

#: File extensions :func:`~srformer.data.pairs.load_pairs` reads, lower case, with the dot.
SUPPORTED_EXTENSIONS: tuple[str, ...] = (".jsonl", ".json", ".csv")


def load_file(
    path: Path, document_field: str, summary_field: str, max_examples: int | None
) -> list[SummaryPair]:
    """Read a local file of examples; see :func:`~srformer.data.pairs.load_pairs` for arguments and errors."""
    extension = data_extension(path)
    if extension == ".jsonl":
        records = iter_json_lines(path)
    elif extension == ".json":
        records = iter_json_file(path)
    elif extension == ".csv":
        records = iter_csv_rows(path)
    else:
        raise ValueError(
            f"{path}: unsupported file extension {''.join(path.suffixes[-2:])!r}; use one of "
            f"{', '.join(SUPPORTED_EXTENSIONS)}, plain or compressed ({', '.join(COMPRESSIONS)}; e.g. "
            "train.jsonl.gz) (for a hub dataset pass its name, e.g. 'xsum')"
        )
    pairs: list[SummaryPair] = []
    for location, record in records:
        pairs.append(make_pair(record, document_field, summary_field, f"{path}, {location}"))
        if max_examples is not None and len(pairs) >= max_examples:
            break
    if not pairs:
        raise ValueError(
            f"{path}: the file holds no examples; add one "
            f"{'row below the header' if extension == '.csv' else 'JSON object'} per example"
        )
    return pairs


def iter_json_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("line N", object)`` for each non-blank line of a JSON-lines file (N from 1).

    Blank (whitespace-only) lines separate nothing and are skipped; every other line must be one
    JSON object.

    Raises:
        ValueError: a line is not valid UTF-8, not valid JSON or not a JSON object.
    """
    with open_bytes(path) as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(not_utf8_message(path, line_no, raw, exc)) from exc
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}, line {line_no}: malformed JSON ({exc.msg} at column {exc.colno}); "
                    "each line of a JSON-lines file must be one complete JSON object such as "
                    '{"document": "...", "summary": "..."}'
                ) from exc
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}, line {line_no}: expected a JSON object, got "
                    f"{type(record).__name__}; write one object a line such as "
                    '{"document": "...", "summary": "..."}'
                )
            yield f"line {line_no}", record


def iter_json_file(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield records of a ``.json`` file: a list of objects, or JSON lines as a fallback.

    Raises:
        ValueError: the file is neither a JSON list of objects nor valid JSON lines.
    """
    try:
        with open_text(path) as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise undecodable_line(path, exc) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # Not one JSON value: read it as JSON lines (errors then name the bad line).
        yield from iter_json_lines(path)
        return
    if isinstance(data, dict):
        yield "the top-level object", data
        return
    if not isinstance(data, list):
        raise ValueError(
            f"{path}: expected a JSON list of objects (or one object a line), got "
            f"{type(data).__name__}"
        )
    for index, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            raise ValueError(
                f"{path}, item {index} of the top-level list: expected a JSON object, got "
                f"{type(record).__name__}; the list must hold objects such as "
                '{"document": "...", "summary": "..."}'
            )
        yield f"item {index} of the top-level list", record


def iter_csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("row N (line L)", row)`` for each data row of a CSV file with a header row.

    Rows are numbered from 1 after the header; ``L`` is the file line where the row ends. Rows
    whose cells are all empty (``,,``, as spreadsheet exports leave them) are skipped, counted, and
    reported in one warning with their row numbers; wholly blank lines are not rows.

    Raises:
        ValueError: the file is not valid UTF-8; a quote is never closed or is followed by other
            characters; a row has fewer or more cells than the header.
    """
    skipped: list[str] = []
    try:
        with open_text(path) as handle:
            reader = csv.DictReader(handle, strict=True)
            rows = enumerate(reader, start=1)
            first_line = 1
            while True:
                try:
                    if reader.line_num == 0:
                        _ = reader.fieldnames  # reading the property consumes the header row; first_line counts it
                    first_line = reader.line_num + 1
                    row_no, row = next(rows)
                except StopIteration:
                    break
                except UnicodeDecodeError as exc:
                    raise undecodable_line(path, exc) from exc
                except csv.Error as exc:
                    raise ValueError(
                        f"{path}, the row starting at line {first_line}: malformed CSV ({exc}); a quoted cell must "
                        'end with a closing quote followed by a comma or the end of the line. Quote cells that '
                        'contain commas, quotes or newlines, and double the quotes inside them ("")'
                    ) from exc
                where = f"row {row_no} (line {reader.line_num})"
                extra = row.get(None)
                if extra:
                    raise ValueError(
                        f"{path}, {where}: the row has {len(extra)} more cell(s) than the header "
                        f"({list(reader.fieldnames or [])}); quote cells that contain commas"
                    )
                if not any((value or "").strip() for key, value in row.items() if key is not None):
                    skipped.append(str(row_no))
                    continue
                missing = [key for key, value in row.items() if value is None]
                if missing:
                    raise ValueError(
                        f"{path}, {where}: the row has fewer columns than the header (no value for "
                        f"{missing}); quote cells that contain commas or newlines"
                    )
                yield where, row
    finally:  # also when the caller stops early (max_examples)
        if skipped:
            shown = ", ".join(skipped[:10]) + (", ..." if len(skipped) > 10 else "")
            warnings.warn(
                f"{path}: skipped {len(skipped)} row(s) whose cells are all empty (rows {shown}); "
                "delete them from the file to silence this warning",
                UserWarning,
                stacklevel=2,
            )
