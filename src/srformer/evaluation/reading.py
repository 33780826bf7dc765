"""Does a model read its input? Checks on generated outputs beside ROUGE.

A small seq2seq model can reach a respectable ROUGE while ignoring its input: it writes one fluent, generic
summary for every document. ROUGE against the references cannot tell; these checks can:

* **distinct outputs**: the number (and fraction) of different outputs over the documents; a model that ignores
  its input writes one output for all of them;
* **copy rate**: the fraction of the outputs' word 3-grams that occur in their own source document (pooled over
  all outputs; words as ``rouge_score`` tokenizes them: lower-cased alphanumeric runs, no stemming). A generic
  output reuses few of its document's 3-grams; an extractive one reuses most;
* **lead-3 ROUGE**: ROUGE-1/2/L F1 (x 100) of each output against the first three sentences of its own source
  (:func:`srformer.evaluation.baselines.lead_sentences`, pysbd sentences), the classic extractive baseline's
  text. An output about its document overlaps its lead; a generic one overlaps every lead a little;
* **ROUGE against another document's reference** (with the references): ROUGE-1/2 F1 (x 100) of the output for
  document ``i`` against the reference of document ``i + 1`` (the last against the first). It is the ROUGE that
  owes nothing to the document: an output that does not depend on its document scores the same against any
  reference, so its ROUGE minus this control is near 0; the difference is what ROUGE credits to reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rouge_score import tokenizers

from srformer.evaluation.baselines import lead_sentences
from srformer.evaluation.rouge import score_summaries

__all__ = ["LEAD_ROUGE_KEYS", "MISMATCHED_ROUGE_KEYS", "copy_counts", "lead_sentences", "reading_check"]

#: The ROUGE keys of the lead-3 comparison (stored as ``lead3_<key>``).
LEAD_ROUGE_KEYS: tuple[str, ...] = ("rouge1", "rouge2", "rougeL")

#: The ROUGE keys of the control against another document's reference (stored as ``mismatched_<key>``).
MISMATCHED_ROUGE_KEYS: tuple[str, ...] = ("rouge1", "rouge2")

_WORDS = tokenizers.DefaultTokenizer(use_stemmer=False)


def _ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def copy_counts(output: str, source: str, n: int = 3) -> tuple[int, int]:
    """``(found, total)``: how many of ``output``'s word ``n``-grams (with repeats) occur in ``source``, of how many.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n-gram size must be at least 1, got {n}")
    grams = _ngrams(_WORDS.tokenize(output), n)
    present = set(_ngrams(_WORDS.tokenize(source), n))
    return sum(gram in present for gram in grams), len(grams)


def reading_check(outputs: Sequence[str], sources: Sequence[str],
                  references: Sequence[str] | None = None) -> dict[str, Any]:
    """The reading check of ``outputs`` (one per document) against their ``sources`` (and ``references``).

    Args:
        outputs: one generated summary per document.
        sources: the documents, aligned with ``outputs``.
        references: the reference summaries, aligned with ``outputs``; with two or more documents they add the
            control against another document's reference (``mismatched_rouge1``, ``mismatched_rouge2``).

    Returns:
        ``{"distinct_outputs": int, "distinct_fraction": distinct / documents (0-1), "copy_rate": pooled fraction
        of output 3-grams found in their own source (0-1; None when no output has three words),
        "lead3_rouge1", "lead3_rouge2", "lead3_rougeL": mean F1 x 100 against the source's first three
        sentences, "num_documents": int}``, and with ``references`` (two or more documents)
        ``"mismatched_rouge1", "mismatched_rouge2"``: mean F1 x 100 of output ``i`` against reference ``i + 1``.

    Raises:
        ValueError: empty or misaligned ``outputs``, ``sources`` and ``references``.
    """
    if len(outputs) != len(sources):
        raise ValueError(f"outputs and sources differ in length: {len(outputs)} != {len(sources)}")
    if references is not None and len(references) != len(outputs):
        raise ValueError(f"outputs and references differ in length: {len(outputs)} != {len(references)}")
    if not outputs:
        raise ValueError("the reading check needs at least one output")
    found = total = 0
    for output, source in zip(outputs, sources, strict=True):
        hits, count = copy_counts(output, source)
        found += hits
        total += count
    lead = score_summaries(list(outputs), [lead_sentences(source) for source in sources]).mean()
    distinct = len(set(outputs))
    mismatched: dict[str, float] = {}
    if references is not None and len(outputs) > 1:
        shifted = [*references[1:], references[0]]
        scores = score_summaries(list(outputs), shifted).mean()
        mismatched = {f"mismatched_{key}": scores[key] for key in MISMATCHED_ROUGE_KEYS}
    return {
        "distinct_outputs": distinct,
        "distinct_fraction": distinct / len(outputs),
        "copy_rate": found / total if total else None,
        **{f"lead3_{key}": lead[key] for key in LEAD_ROUGE_KEYS},
        **mismatched,
        "num_documents": len(outputs),
    }
