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
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

#: File extensions :func:`load_pairs` reads, lower case, with the dot.
SUPPORTED_EXTENSIONS: tuple[str, ...] = (".jsonl", ".json", ".csv")

#: Compressed forms read as their plain form (``train.jsonl.gz`` is read as ``train.jsonl``), by their last suffix.
COMPRESSIONS: dict[str, Any] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}

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

#: ACLSum splits, with accepted aliases mapped to the file stem.
_ACLSUM_SPLITS: dict[str, str] = {
    "train": "train",
    "val": "val",
    "validation": "val",
    "test": "test",
}

#: Order of the ACLSum document sections and summary aspects.
_ACLSUM_SECTIONS: tuple[str, ...] = ("abstract", "introduction", "conclusion")
_ACLSUM_ASPECTS: tuple[str, ...] = ("challenge", "approach", "outcome")


@dataclass(frozen=True)
class SummaryPair:
    """One summarization example.

    Attributes:
        document: the source text (non-empty, outer whitespace stripped).
        summary: the reference summary (non-empty, outer whitespace stripped). Multi-sentence
            summaries may hold one sentence a line (``"\\n"``-separated), as ``rougeLsum``
            expects.
        id: the example's identifier from the source, as a string, or ``None`` if it had none.
    """

    document: str
    summary: str
    id: str | None = None


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
        return _load_file(path, document_field, summary_field, max_examples)
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
    return _load_hub(text, split, document_field, summary_field, max_examples)


def load_aclsum(split: str) -> list[SummaryPair]:
    """Load one split of ACLSum (Takeshita et al. 2024) from the installed ``aclsum`` package.

    The package ships the corpus as JSON lines under ``aclsum/dataset/{split}.jsonl``; this reads
    those files directly (no network). The document is every sentence of the abstract, the
    introduction and the conclusion, in that order, joined with single spaces (the sentences are
    pre-tokenized, with spaces around punctuation such as ``"word ,"``). The summary is the three
    aspect sentences challenge, approach and outcome, one a line (joined with ``"\\n"``), so that
    ``rougeLsum`` sees three sentences.

    Args:
        split: ``"train"`` (100 papers), ``"val"`` (50; ``"validation"`` is accepted as an alias)
            or ``"test"`` (100).

    Returns:
        The split's examples, ``id`` set to the paper's ACL Anthology id.

    Raises:
        ModuleNotFoundError: the ``aclsum`` package is not installed.
        ValueError: ``split`` is not one of the splits above, or a record is malformed.
        FileNotFoundError: the installed package lacks the split's file.
    """
    stem = _ACLSUM_SPLITS.get(split)
    if stem is None:
        raise ValueError(
            f"unknown ACLSum split {split!r}; use one of 'train', 'val' (alias 'validation') "
            "or 'test'"
        )
    try:
        import aclsum
    except ImportError as exc:
        raise ModuleNotFoundError(
            "load_aclsum needs the 'aclsum' package, which is not installed; "
            "install it with `pip install aclsum`"
        ) from exc
    path = Path(aclsum.__file__).parent / "dataset" / f"{stem}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"the installed aclsum package has no {path}; reinstall it with "
            "`pip install --force-reinstall aclsum`"
        )
    pairs = []
    for location, record in _iter_json_lines(path):
        where = f"{path}, {location}"
        try:
            sentences = record["sentences"]
            summary = record["summary"]
            document = " ".join(
                sentence.strip() for section in _ACLSUM_SECTIONS for sentence in sentences[section]
            )
            summary_text = "\n".join(summary[aspect].strip() for aspect in _ACLSUM_ASPECTS)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{where}: not an ACLSum record (expected 'sentences' with keys "
                f"{list(_ACLSUM_SECTIONS)} and 'summary' with keys {list(_ACLSUM_ASPECTS)}): "
                f"{exc!r}"
            ) from exc
        record_id = record.get("id")
        pairs.append(
            _make_pair(
                {"document": document, "summary": summary_text, "id": record_id},
                "document",
                "summary",
                where,
            )
        )
    if not pairs:
        raise ValueError(f"{path}: no examples found; the aclsum installation looks broken")
    return pairs


# --------------------------------------------------------------------------------------------
# local files


def _looks_like_file_path(text: str) -> bool:
    """True when a non-existent ``text`` should be reported as a missing file, not a hub name."""
    if Path(text).suffix.lower() in _FILE_LIKE_EXTENSIONS:
        return True
    if os.path.isabs(text) or text.startswith(("./", "../", "~", ".\\", "..\\")):
        return True
    return "\\" in text or text.count("/") > 1


def data_extension(path: Path) -> str:
    """The format's extension of a data file, lower-case: ``.jsonl`` for ``train.jsonl`` and for
    ``train.jsonl.gz`` (a compressed file is named by its plain form plus one of :data:`COMPRESSIONS`)."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] in COMPRESSIONS:
        return suffixes[-2]
    return suffixes[-1] if suffixes else ""


def _open_bytes(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes, decompressed when its last suffix is one of :data:`COMPRESSIONS`."""
    opener = COMPRESSIONS.get(path.suffix.lower())
    return cast(IO[bytes], opener(path, "rb")) if opener is not None else path.open("rb")


def _open_text(path: Path) -> IO[str]:
    """``path`` as UTF-8 text (a leading BOM dropped, newlines untranslated, as the csv module wants)."""
    return io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig", newline="")


def _load_file(
    path: Path, document_field: str, summary_field: str, max_examples: int | None
) -> list[SummaryPair]:
    """Read a local file of examples; see :func:`load_pairs` for arguments and errors."""
    extension = data_extension(path)
    if extension == ".jsonl":
        records = _iter_json_lines(path)
    elif extension == ".json":
        records = _iter_json_file(path)
    elif extension == ".csv":
        records = _iter_csv_rows(path)
    else:
        raise ValueError(
            f"{path}: unsupported file extension {''.join(path.suffixes[-2:])!r}; use one of "
            f"{', '.join(SUPPORTED_EXTENSIONS)}, plain or compressed ({', '.join(COMPRESSIONS)}; e.g. "
            "train.jsonl.gz) (for a hub dataset pass its name, e.g. 'xsum')"
        )
    pairs: list[SummaryPair] = []
    for location, record in records:
        pairs.append(_make_pair(record, document_field, summary_field, f"{path}, {location}"))
        if max_examples is not None and len(pairs) >= max_examples:
            break
    if not pairs:
        raise ValueError(
            f"{path}: the file holds no examples; add one "
            f"{'row below the header' if extension == '.csv' else 'JSON object'} per example"
        )
    return pairs


def _iter_json_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("line N", object)`` for each non-blank line of a JSON-lines file (N from 1).

    Blank (whitespace-only) lines separate nothing and are skipped; every other line must be one
    JSON object.

    Raises:
        ValueError: a line is not valid UTF-8, not valid JSON or not a JSON object.
    """
    with _open_bytes(path) as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(_not_utf8_message(path, line_no, raw, exc)) from exc
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


def _not_utf8_message(path: Path, line_no: int, raw: bytes, exc: UnicodeDecodeError) -> str:
    """The error message for line ``line_no`` (bytes ``raw``) that ``exc`` failed to decode."""
    bad = raw[exc.start : exc.start + 1]
    return (
        f"{path}, line {line_no}: not valid UTF-8 (byte 0x{bad.hex()} at byte {exc.start + 1} of the line: "
        f"{exc.reason}); save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}` "
        "if it was written as Latin-1"
    )


def _undecodable_line(path: Path, exc: UnicodeDecodeError) -> ValueError:
    """A ValueError naming the first line of ``path`` that is not UTF-8 (``exc`` came from a text reader)."""
    with _open_bytes(path) as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as line_exc:
                return ValueError(_not_utf8_message(path, line_no, raw, line_exc))
    # Only a multi-byte character split across lines gets here; report the byte offset instead.
    return ValueError(
        f"{path}: not valid UTF-8 at byte {exc.start + 1} of the file ({exc.reason}); save the file as UTF-8"
    )


def _iter_json_file(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield records of a ``.json`` file: a list of objects, or JSON lines as a fallback.

    Raises:
        ValueError: the file is neither a JSON list of objects nor valid JSON lines.
    """
    try:
        with _open_text(path) as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise _undecodable_line(path, exc) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # Not one JSON value: read it as JSON lines (errors then name the bad line).
        yield from _iter_json_lines(path)
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


def _iter_csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
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
        with _open_text(path) as handle:
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
                    raise _undecodable_line(path, exc) from exc
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


# --------------------------------------------------------------------------------------------
# hub datasets


def _load_hub(
    name: str,
    split: str | None,
    document_field: str,
    summary_field: str,
    max_examples: int | None,
) -> list[SummaryPair]:
    """Load a hub dataset with :func:`datasets.load_dataset`; see :func:`load_pairs`."""
    split = split or "train"
    config = None
    if name.rsplit("/", 1)[-1].lower() == "cnn_dailymail":
        config = "3.0.0"
        if document_field == "document" and summary_field == "summary":
            document_field, summary_field = "article", "highlights"
    described = f"hub dataset {name!r}" + (f" (config {config!r})" if config else "")
    try:
        import datasets

        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # network, unknown name, unknown split, missing cache, ...
        raise RuntimeError(
            f"could not load {described}, split {split!r}: {type(exc).__name__}: "
            f"{str(exc).rstrip('. ')}. "
            "If this machine is offline (or the name is wrong), save the data as a local "
            "JSONL or CSV file with 'document' and 'summary' fields and pass its path instead"
        ) from exc
    if max_examples is not None:
        dataset = dataset.select(range(min(max_examples, len(dataset))))
    pairs = [
        _make_pair(
            record, document_field, summary_field, f"{described}, split {split!r}, row {row_no}"
        )
        for row_no, record in enumerate(dataset, start=1)
    ]
    if not pairs:
        raise ValueError(f"{described}, split {split!r}: the split holds no examples")
    return pairs


# --------------------------------------------------------------------------------------------
# records


def _make_pair(
    record: Mapping[str, Any], document_field: str, summary_field: str, where: str
) -> SummaryPair:
    """Validate one record and build its :class:`SummaryPair`.

    Args:
        record: the example's fields.
        document_field, summary_field: the fields to read.
        where: the record's location for error messages ("file, line N").

    Raises:
        ValueError: a field is missing, not a string, or empty/whitespace only.
    """
    texts = []
    for field, role, argument, option in (
        (document_field, "document", "document_field", "--document-field"),
        (summary_field, "summary", "summary_field", "--summary-field"),
    ):
        if field not in record:
            present = [key for key in record if key is not None]
            raise ValueError(
                f"{where}: no {role} field {field!r} ({argument}={field!r}); the fields present "
                f"are {present}. Pass {argument}=<name> (CLI: {option} <name>) to name the field "
                f"that holds the {role}"
            )
        value = record[field]
        if not isinstance(value, str):
            raise ValueError(
                f"{where}: the {role} field {field!r} must be a string, got "
                f"{type(value).__name__}; check that {argument}={field!r} names the right field "
                f"(CLI: {option})"
            )
        if not value.strip():
            raise ValueError(
                f"{where}: the {role} field {field!r} is empty or whitespace only; remove this "
                "example from the data or fill in its text"
            )
        texts.append(value.strip())
    raw_id = record.get("id")
    return SummaryPair(
        document=texts[0], summary=texts[1], id=None if raw_id is None else str(raw_id)
    )
