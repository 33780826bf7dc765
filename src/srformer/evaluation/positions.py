"""Where in its document does an output copy from? The source position of each output sentence.

A model that copies by position copies from the top of its input; one that reads chooses sentences from anywhere.
For each sentence of an output (:func:`srformer.data.sentences.split_sentences`), :func:`copied_sentence_offsets`
finds the sentence of the source it was taken from: the source sentence holding the largest share of the output
sentence's word 3-grams (words as ``rouge_score`` tokenizes them, no stemming), when that share is at least
``min_share`` (default one half); otherwise the output sentence counts as not copied. The position of a copied
sentence is the character offset where its source sentence starts; :func:`source_position_summary` turns these
into token positions of the model's input and counts them per encoder window.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from rouge_score import tokenizers

from srformer.data.sentences import split_sentences

__all__ = ["copied_sentence_offsets", "pool_source_positions", "source_position_summary"]

_WORDS = tokenizers.DefaultTokenizer(use_stemmer=False)


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = _WORDS.tokenize(text)
    if len(words) < 3:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


def copied_sentence_offsets(output: str, source: str, *, min_share: float = 0.5) -> list[int | None]:
    """For each sentence of ``output``, the character offset in ``source`` of the sentence it was copied from, or
    None when no source sentence holds ``min_share`` of its word 3-grams (a sentence of fewer than three words
    counts as one n-gram of its words).

    Raises:
        ValueError: ``min_share`` outside (0, 1].
    """
    if not 0 < min_share <= 1:
        raise ValueError(f"min_share must be in (0, 1], got {min_share}")
    sentences: list[tuple[int, set[tuple[str, ...]]]] = []
    cursor = 0
    for sentence in split_sentences(source):
        start = source.find(sentence, cursor)
        if start < 0:  # the splitter normalised whitespace: fall back to the first words
            start = source.find(sentence.split()[0], cursor) if sentence.split() else cursor
            start = max(start, cursor)
        cursor = start + 1
        sentences.append((start, _trigrams(sentence)))
    offsets: list[int | None] = []
    for sentence in split_sentences(output):
        grams = _trigrams(sentence)
        best, where = 0.0, None
        for start, source_grams in sentences:
            if grams:
                share = len(grams & source_grams) / len(grams)
                if share > best:
                    best, where = share, start
        offsets.append(where if best >= min_share else None)
    return offsets


def source_position_summary(outputs: Sequence[str], sources: Sequence[str], tokenizer: Any, *,
                            window: int = 512, source_prefix: str = "", max_source_length: int | None = None,
                            min_share: float = 0.5) -> dict[str, Any]:
    """Token positions, in the model's input, of the source sentences the outputs copy from.

    Args:
        outputs: one output per document.
        sources: the documents, aligned.
        tokenizer: the model's fast tokenizer (its character offsets map a sentence start to its token).
        window: tokens per window of the histogram (the encoder window of a chunked model).
        source_prefix: text put before each document in the model's input.
        max_source_length: tokens the model reads (a copied sentence beyond them counts at the last window).
        min_share: as for :func:`copied_sentence_offsets`.

    Returns:
        ``{"output_sentences": N, "copied": sentences traced to a source sentence, "beyond_first_window": share of
        the copied ones whose source starts at token ``window`` or later, "histogram": copied sentences per window
        (index i: tokens [i * window, (i + 1) * window)), "window": window}``.

    Raises:
        ValueError: misaligned inputs, ``window < 1``, or a tokenizer without character offsets.
    """
    if len(outputs) != len(sources):
        raise ValueError(f"outputs ({len(outputs)}) and sources ({len(sources)}) must align")
    if window < 1:
        raise ValueError(f"window must be at least 1 token, got {window}")
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("the source positions need a fast (tokenizers-backed) tokenizer for character offsets")
    histogram: list[int] = []
    total = copied = beyond = 0
    for output, source in zip(outputs, sources, strict=True):
        offsets = copied_sentence_offsets(output, source, min_share=min_share)
        total += len(offsets)
        found = [offset for offset in offsets if offset is not None]
        if not found:
            continue
        encoded = tokenizer(source_prefix + source, truncation=max_source_length is not None,
                            max_length=max_source_length, return_offsets_mapping=True)
        starts = [start - len(source_prefix) for start, end in encoded["offset_mapping"] if end > start]
        for offset in found:
            token = max(bisect.bisect_right(starts, offset) - 1, 0)
            index = token // window
            histogram.extend([0] * (index + 1 - len(histogram)))
            histogram[index] += 1
            copied += 1
            beyond += token >= window
    return {"output_sentences": total, "copied": copied, "beyond_first_window": beyond / copied if copied else None,
            "histogram": histogram, "window": window}


def pool_source_positions(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several :func:`source_position_summary` results (e.g. one per seed) as one: the counts and the histograms
    added, ``beyond_first_window`` recomputed from the pooled counts.

    Raises:
        ValueError: no summaries, or summaries of different windows.
    """
    if not summaries:
        raise ValueError("no source-position summaries to pool")
    windows = {summary["window"] for summary in summaries}
    if len(windows) != 1:
        raise ValueError(f"source-position summaries of different windows cannot be pooled: {sorted(windows)}")
    histogram: list[int] = []
    for summary in summaries:
        histogram.extend([0] * (len(summary["histogram"]) - len(histogram)))
        for index, count in enumerate(summary["histogram"]):
            histogram[index] += count
    copied = sum(summary["copied"] for summary in summaries)
    return {"output_sentences": sum(summary["output_sentences"] for summary in summaries), "copied": copied,
            "beyond_first_window": sum(histogram[1:]) / copied if copied else None, "histogram": histogram,
            "window": windows.pop()}
