"""Sentence segmentation of documents and summaries, by pysbd (Sadvilkar & Neumann 2020, "PySBD: Pragmatic Sentence
Boundary Disambiguation"), a rule-based English segmenter that runs offline and in pure Python.

Every sentence split of the project goes through here: ROUGE-Lsum's one-sentence-per-line layout, the lead and
oracle baselines (:mod:`srformer.evaluation.baselines`) and the sentence-level pretraining objectives
(:mod:`srformer.data.objectives`). A line break always ends a sentence (pysbd's own rule), so headings and
paragraphs on their own lines stay apart, and abbreviations, decimals and closing quotes (``e.g.``, ``3.14``,
``"stop."``) do not split.

pysbd costs about 0.1 s per 5,000-word document on one CPU thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import cache, lru_cache

import pysbd

__all__ = ["sentence_spans", "sentence_token_starts", "split_sentences"]


@cache
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False, char_span=True)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as character spans ``(start, end)``, in order, whitespace-only ones dropped.

    ``text[start:end]`` is one sentence with its surrounding whitespace stripped; the spans do not overlap and
    increase. The spans of the last few thousand texts are kept (an evaluation splits each document for lead-3,
    the length-matched lead and the oracle of every cell), so a text is segmented once.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return list(_spans(text))


@lru_cache(maxsize=4096)
def _spans(text: str) -> tuple[tuple[int, int], ...]:
    if not text.strip():
        return ()
    spans: list[tuple[int, int]] = []
    for piece in _segmenter().segment(text):
        start, end = piece.start, piece.end
        # pysbd's span covers the sentence and the whitespace after it; keep the words only.
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            spans.append((start, end))
    return tuple(spans)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentence_spans`), each stripped; ``[]`` for empty or whitespace-only text.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    return [text[start:end] for start, end in sentence_spans(text)]


def sentence_token_starts(text: str, offsets: Sequence[tuple[int, int]]) -> list[int]:
    """The token index at which each sentence of ``text`` (:func:`sentence_spans`) starts, for a tokenization of
    ``text`` whose token ``i`` covers the characters ``offsets[i] = (start, end)`` (a fast tokenizer's
    ``return_offsets_mapping``).

    A sentence starts at the first token that ends after the sentence's first character. Sentences that start in
    the same token count once; the result increases strictly and may be empty (no tokens or no sentences).
    """
    ends = [end for _, end in offsets]
    starts: list[int] = []
    for start, _ in sentence_spans(text):
        token = bisect.bisect_right(ends, start)
        if token < len(offsets) and (not starts or token > starts[-1]):
            starts.append(token)
    return starts
