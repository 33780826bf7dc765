"""Documents without summaries, for self-supervised pretraining."""

from __future__ import annotations

import os

from srformer.data.pairs import SummaryPair, load_pairs
from srformer.data.split import select_split

__all__ = ["load_documents"]


def load_documents(
    source: str | os.PathLike[str],
    *,
    document_field: str = "document",
    split_by_id: str | None = None,
    part: str = "train",
) -> list[SummaryPair]:
    """The documents of a JSONL/JSON/CSV file (or hub dataset), with the file's checks and messages.

    Records need only ``document_field``; each document is returned as a :class:`SummaryPair` whose
    ``summary`` is the document itself (so that :mod:`srformer.data.split` applies unchanged). With
    ``split_by_id`` (e.g. ``"train=0.8,validation=0.1,test=0.1"``) only the part ``part`` of the stable id split
    of ``srformer split`` is returned, so pretraining never sees the validation or test documents.

    Raises:
        FileNotFoundError, ValueError: from :func:`srformer.data.pairs.load_pairs`, naming the file and the
            1-based line for a record without ``document_field`` (CLI: ``--document-field``), a document that is
            not a string, or an empty one; and from :func:`srformer.data.split.select_split`.
    """
    pairs = load_pairs(source, document_field=document_field, summary_field=document_field)
    if split_by_id is not None:
        pairs = select_split(pairs, split_by_id, part)
    return pairs
