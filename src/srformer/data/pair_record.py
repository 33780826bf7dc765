"""The summarization example every loader produces: :class:`SummaryPair`, and :func:`make_pair`, which validates one
source record and builds it.

Every problem with a record raises an error that names where it is (the file and the 1-based line, row or item, or
the hub split and row), the argument involved and how to fix it, because these errors usually reach a user of the
command line rather than a programmer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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


def make_pair(
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
