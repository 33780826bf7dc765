"""Oracle-extract training targets: for every training document, the sentences worth copying.

A base that copies well but was never told *what* to copy learns positions, not content. Supervising the choice
directly is the extract-then-abstract recipe (Pilault et al. 2020, "On Extractive and Abstractive Neural Document
Summarization with Transformer Language Models"; the greedy labels of Liu & Lapata 2019, "BertSum"): each
document's target becomes the greedy ROUGE oracle of its reference
(:func:`srformer.evaluation.baselines.extractive_oracle`: sentences chosen greedily for the mean of ROUGE-1 and
ROUGE-2 F1, in document order, within the reference's number of words), taken from the part of the document the
encoder reads (its first ``max_source_length`` tokens). Training on these targets teaches which sentences to copy
from their content; training on the references afterwards teaches to rephrase them.

:func:`write_oracle_targets` writes them as an ordinary data file (``id``, ``document``, ``summary``: the oracle;
``reference``: the original summary), which ``srformer train``/``compare``/``pretrain`` read like any other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from srformer.data.file_reading import complete_json_lines
from srformer.data.pairs import SummaryPair
from srformer.evaluation.baselines import extractive_oracle, word_count

__all__ = ["oracle_target", "readable_prefix", "write_oracle_targets"]


def readable_prefix(document: str, tokenizer: Any | None, max_source_length: int | None,
                    source_prefix: str = "") -> str:
    """The part of ``document`` an encoder reads: the characters of its first ``max_source_length`` tokens (after
    ``source_prefix``), by the tokenizer's offsets; the whole document without a tokenizer or a length.

    Raises:
        ValueError: ``tokenizer`` is not a fast tokenizer (it has no character offsets).
    """
    if tokenizer is None or max_source_length is None:
        return document
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("--tokenizer must be a fast (tokenizers-backed) tokenizer: its character offsets cut the "
                         "document where the encoder stops reading.")
    encoded = tokenizer(source_prefix + document, truncation=True, max_length=max_source_length,
                        return_offsets_mapping=True, add_special_tokens=True)
    ends = [end for _, end in encoded["offset_mapping"] if end > 0]
    if not ends:
        return ""
    return document[: max(0, max(ends) - len(source_prefix))]


def oracle_target(document: str, reference: str, *, max_words: int | None = None) -> str:
    """The oracle-extract target of one document: :func:`~srformer.evaluation.baselines.extractive_oracle` of
    ``document`` for ``reference`` within ``max_words`` words (default: the reference's word count), one sentence
    per line in document order; ``""`` when no sentence overlaps the reference."""
    return extractive_oracle(document, reference, word_count(reference) if max_words is None else max_words)


def _resume_position(output: Path, pairs: Sequence[SummaryPair]) -> int:
    """Where a partly written ``output`` stops in ``pairs``: the index after its last complete record (a line cut by
    a kill is dropped: the file is cut back to its complete lines).

    Raises:
        ValueError: ``output`` holds records of other documents, or in another order.
    """
    position = {pair.id: index for index, pair in enumerate(pairs)}
    data = output.read_bytes()
    records, good = complete_json_lines(data)
    after = 0
    for record in records:
        identifier = record.get("id") if isinstance(record, dict) else None
        index = position.get(identifier, -1)
        if index < after:
            raise ValueError(f"{output} holds targets of other documents (id {identifier!r}); choose another "
                             "--output or delete it.")
        after = index + 1
    if good < len(data):
        with open(output, "r+b") as handle:
            handle.truncate(good)
    return after


def write_oracle_targets(
    pairs: Sequence[SummaryPair],
    output: str | os.PathLike,
    *,
    tokenizer: Any | None = None,
    max_source_length: int | None = None,
    source_prefix: str = "",
    progress: bool = True,
) -> dict[str, float]:
    """Write the oracle-extract target of every pair to ``output`` (JSON lines ``{"id", "document", "summary",
    "reference"}``, in input order), resuming a partly written file. A document none of whose sentences overlaps
    its reference has no target and is left out (a training example may not have an empty summary).

    Args:
        pairs: the training documents and their references (every pair needs an ``id``).
        output: the JSONL file to write; records already there (from a stopped run) are kept and skipped.
        tokenizer: the model's tokenizer; with ``max_source_length`` the oracle only picks from what the encoder
            reads (:func:`readable_prefix`). The ``document`` field keeps the whole document.
        max_source_length: encoder input length in tokens (None: the whole document).
        source_prefix: text the model puts before each document (counted in its tokens).
        progress: show a tqdm bar over the documents.

    Returns:
        ``{"documents": N, "written": records in ``output``, "target_words": mean words of a target,
        "reference_words": mean words of their references}``.

    Raises:
        ValueError: a pair without an id, repeated ids, ``output`` holding other documents' targets, or a slow
            tokenizer with ``max_source_length``.
    """
    ids = [pair.id for pair in pairs]
    if any(i is None or i == "" for i in ids) or len(set(ids)) != len(ids):
        raise ValueError("every document needs a unique id for oracle targets (the resume matches records by id); "
                         "add an `id` field to the data.")
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _resume_position(path, pairs) if path.is_file() else 0
    with open(path, "a", encoding="utf-8") as handle:
        for pair in tqdm(pairs[done:], total=len(pairs), initial=done, desc="oracle targets", unit="doc",
                         disable=not progress):
            readable = readable_prefix(pair.document, tokenizer, max_source_length, source_prefix)
            target = oracle_target(readable, pair.summary)
            if not target:
                continue
            handle.write(json.dumps({"id": pair.id, "document": pair.document, "summary": target,
                                     "reference": pair.summary}) + "\n")
            handle.flush()
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    target_words = [word_count(record["summary"]) for record in records]
    return {
        "documents": len(pairs),
        "written": len(records),
        "target_words": sum(target_words) / max(len(records), 1),
        "reference_words": sum(word_count(record["reference"]) for record in records) / max(len(records), 1),
    }
