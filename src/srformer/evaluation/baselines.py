"""Extractive baselines a summarization table is read against: lead-3, the length-matched lead and the
length-capped extractive oracle.

ROUGE F1 grows with output length up to the reference's, so a baseline is only a fair floor or ceiling when it is
as long as the model's output:

* **lead-3**: the document's first three sentences (:func:`lead_sentences`). The classic row, but its length is
  the document's, not the model's.
* **length-matched lead** (:func:`lead_words`): per document, the document's first ``n`` words, ``n`` being the
  number of words of the model's own output for that document. The floor: a model that reads its input should
  beat the text it could have copied from the top at the same length.
* **length-capped extractive oracle** (:func:`extractive_oracle`): sentences chosen greedily to maximise the mean
  of ROUGE-1 and ROUGE-2 F1 against the reference (Nallapati et al. 2017, "SummaRuNNer", Sec. 3; the greedy
  labelling of Liu & Lapata 2019, "BertSum"), within the same ``n`` words. The ceiling an extractive model of
  that length could reach.

Sentences come from :func:`srformer.data.sentences.split_sentences` (pysbd); words are whitespace-separated tokens
of the text. Every baseline keeps one sentence per line, so ROUGE-Lsum sees its sentences.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from rouge_score import tokenizers

from srformer.data.sentences import split_sentences
from srformer.evaluation.rouge import score_summaries

__all__ = ["BASELINE_NAMES", "baseline_scores", "extractive_oracle", "lead_sentences", "lead_words", "word_count"]

#: Names of the rows :func:`baseline_scores` returns, in reporting order.
BASELINE_NAMES: tuple[str, ...] = ("lead-3", "lead (length-matched)", "oracle (length-capped)")

_TOKENS = tokenizers.DefaultTokenizer(use_stemmer=True)


def word_count(text: str) -> int:
    """Whitespace-separated words of ``text``."""
    return len(text.split())


def lead_sentences(document: str, count: int = 3) -> str:
    """The first ``count`` sentences of ``document`` (:func:`~srformer.data.sentences.split_sentences`), one per
    line."""
    return "\n".join(split_sentences(document)[:count])


def _cut(sentence: str, words: int) -> str:
    return " ".join(sentence.split()[:words])


def lead_words(document: str, num_words: int) -> str:
    """The first ``num_words`` words of ``document``, one sentence per line (the last sentence cut at the limit);
    ``""`` for ``num_words <= 0``."""
    lines: list[str] = []
    left = num_words
    for sentence in split_sentences(document):
        if left <= 0:
            break
        lines.append(_cut(sentence, left))
        left -= word_count(lines[-1])
    return "\n".join(lines)


def _grams(tokens: Sequence[str], n: int) -> collections.Counter[tuple[str, ...]]:
    return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _f1(candidate: collections.Counter, reference: collections.Counter) -> float:
    overlap = sum((candidate & reference).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(candidate.values()), overlap / sum(reference.values())
    return 2 * precision * recall / (precision + recall)


def extractive_oracle(document: str, reference: str, max_words: int) -> str:
    """The greedy extractive oracle of ``document`` for ``reference`` within ``max_words`` words.

    Starting from nothing, each round adds the sentence (cut to the words left when longer) that most raises the
    mean of ROUGE-1 and ROUGE-2 F1 (rouge-score's stemmed tokens) of the selection against ``reference``; it stops
    when no sentence raises it or no word is left. The chosen sentences are returned in document order, one per
    line; ``""`` when ``max_words <= 0`` or nothing overlaps.
    """
    sentences = split_sentences(document)
    tokens_of = [_TOKENS.tokenize(sentence) for sentence in sentences]
    words_of = [word_count(sentence) for sentence in sentences]
    target = _TOKENS.tokenize(reference)
    reference_grams = (_grams(target, 1), _grams(target, 2))
    chosen: dict[int, str] = {}
    grams: tuple[collections.Counter, collections.Counter] = (collections.Counter(), collections.Counter())
    best, left = 0.0, max_words
    while left > 0:
        pick: tuple[float, int, str, tuple[collections.Counter, collections.Counter]] | None = None
        for index, sentence in enumerate(sentences):
            if index in chosen:
                continue
            text = sentence if words_of[index] <= left else _cut(sentence, left)
            tokens = tokens_of[index] if words_of[index] <= left else _TOKENS.tokenize(text)
            merged = (grams[0] + _grams(tokens, 1), grams[1] + _grams(tokens, 2))
            score = (_f1(merged[0], reference_grams[0]) + _f1(merged[1], reference_grams[1])) / 2
            if score > best and (pick is None or score > pick[0]):
                pick = (score, index, text, merged)
        if pick is None:
            break
        best, index, text, grams = pick
        chosen[index] = text
        left -= word_count(text)
    return "\n".join(chosen[index] for index in sorted(chosen))


def baseline_scores(documents: Sequence[str], references: Sequence[str],
                    outputs: Sequence[str] | None = None) -> dict[str, dict[str, list[float]]]:
    """Per-document ROUGE F1 (x 100, :data:`~srformer.evaluation.rouge.ROUGE_KEYS`) of the baselines.

    Args:
        documents: the whole source documents (not a model's truncated input).
        references: the reference summaries, aligned.
        outputs: a model's outputs, aligned; they set the length of the length-matched lead and the oracle's cap
            (their word counts). Without them only ``"lead-3"`` is returned.

    Returns:
        Maps each name of :data:`BASELINE_NAMES` it computed to ``{rouge key: per-document F1 list}``.

    Raises:
        ValueError: empty or misaligned inputs.
    """
    if len(documents) != len(references) or (outputs is not None and len(outputs) != len(documents)):
        raise ValueError(f"documents ({len(documents)}), references ({len(references)}) and outputs "
                         f"({'none' if outputs is None else len(outputs)}) must align")
    if not documents:
        raise ValueError("the baselines need at least one document")
    rows = {"lead-3": [lead_sentences(document) for document in documents]}
    if outputs is not None:
        lengths = [word_count(output) for output in outputs]
        rows["lead (length-matched)"] = [lead_words(d, n) for d, n in zip(documents, lengths, strict=True)]
        rows["oracle (length-capped)"] = [extractive_oracle(d, r, n)
                                          for d, r, n in zip(documents, references, lengths, strict=True)]
    return {name: score_summaries(texts, list(references)).per_document for name, texts in rows.items()}
