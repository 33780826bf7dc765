"""Self-supervised targets that need *content* addressing, built from a window's sentences (token id lists).

Span corruption and copy (:mod:`srformer.data.objectives`) can be solved by position: the decoder reads the source
in order. A summarizer must instead find where in a long source the content it wants lies. These objectives make
the decoder do that:

* **Cued copy**: the source is a cue, the first tokens of one of the window's sentences, then a separator, then the
  window; the target is the rest of that sentence. The cue is the shortest prefix (from ``min_cue`` tokens) that
  occurs once in the window, so the answer is unique and can only be found by matching the cue's content. It is
  the real-text form of the recall probe (:mod:`srformer.probe.tasks`).
* **Marked copy**: the source is the window with a marker token put before one of its sentences; the target is that
  sentence. The marker is one token, so the first target token is found by content in one hop; the rest of the
  sentence must then be copied from wherever the marker stands (not from target position ``t`` to source
  position ``t``). It is the one-hop step before cued copy's two-hop match.
* **Gap-sentence generation** (Zhang et al. 2020, "PEGASUS: Pre-training with Extracted Gap-sentences for
  Abstractive Summarization", Sec. 3.1, the *Ind-Orig* selection): each sentence is scored by ROUGE-1 F1 against
  the rest of the window (here over token ids), the best-scoring ``gap_ratio`` of them are replaced by a mask token
  in the source, and the target lists them in document order.
* **Sentence reordering**: the source holds the window's sentences shuffled; the target is the window in its
  original order (Lewis et al. 2020, BART's sentence permutation).

Every function is a pure function of its arguments and ``rng``; none appends ``</s>`` (the caller does). A target
longer than ``max_target_length`` is cut there.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence

__all__ = ["cued_copy", "gap_sentences", "marked_copy", "sentence_reordering", "unigram_f1"]


def _flatten(sentences: Sequence[Sequence[int]]) -> list[int]:
    return [token for sentence in sentences for token in sentence]


def _occurrences(tokens: Sequence[int], pattern: Sequence[int], limit: int = 2) -> int:
    """How many times ``pattern`` occurs in ``tokens`` (counting stops at ``limit``)."""
    width, found = len(pattern), 0
    first = pattern[0]
    for start in range(len(tokens) - width + 1):
        if tokens[start] == first and list(tokens[start:start + width]) == list(pattern):
            found += 1
            if found >= limit:
                break
    return found


def cued_copy(sentences: Sequence[Sequence[int]], rng: random.Random, *, separator_id: int,
              max_target_length: int, min_cue: int = 3, max_cue: int = 8) -> tuple[list[int], list[int]] | None:
    """Cued copy: ``(cue + [separator_id] + window, rest of the cued sentence)``, or None when no sentence has a
    unique cue with at least one token after it.

    A sentence is drawn uniformly among those with a cue: the shortest prefix of ``min_cue`` to ``max_cue`` tokens
    that occurs exactly once in the window, leaving at least one token of the sentence after it.

    Args:
        sentences: the window's sentences, token ids each (the window is their concatenation).
        rng: the random source (the only one used).
        separator_id: a token id that does not occur in the window (a sentinel), put between cue and window.
        max_target_length: the longest target (tokens, >= 1).
        min_cue: the shortest cue (tokens, >= 1).
        max_cue: the longest cue (tokens, >= ``min_cue``).

    Raises:
        ValueError: ``max_target_length < 1`` or cue lengths out of range.
    """
    if max_target_length < 1:
        raise ValueError(f"max_target_length must be at least 1 token, got {max_target_length}")
    if not 1 <= min_cue <= max_cue:
        raise ValueError(f"need 1 <= min_cue ({min_cue}) <= max_cue ({max_cue})")
    window = _flatten(sentences)
    order = list(range(len(sentences)))
    rng.shuffle(order)
    for index in order:
        sentence = list(sentences[index])
        for length in range(min_cue, min(max_cue, len(sentence) - 1) + 1):
            cue = sentence[:length]
            if _occurrences(window, cue) == 1:
                return [*cue, separator_id, *window], sentence[length:length + max_target_length]
    return None


def marked_copy(sentences: Sequence[Sequence[int]], rng: random.Random, *, marker_id: int,
                max_target_length: int) -> tuple[list[int], list[int]] | None:
    """Marked copy: ``(window with [marker_id] before one sentence, that sentence)``, or None without a non-empty
    sentence.

    The sentence is drawn uniformly among the non-empty ones; the target is its first ``max_target_length`` tokens.
    The source is one token longer than the window.

    Args:
        sentences: the window's sentences, token ids each (the window is their concatenation).
        rng: the random source (the only one used).
        marker_id: a token id that does not occur in the window (a sentinel).
        max_target_length: the longest target (tokens, >= 1).

    Raises:
        ValueError: ``max_target_length < 1``.
    """
    if max_target_length < 1:
        raise ValueError(f"max_target_length must be at least 1 token, got {max_target_length}")
    kept = [list(sentence) for sentence in sentences if sentence]
    if not kept:
        return None
    index = rng.randrange(len(kept))
    source = [*_flatten(kept[:index]), marker_id, *_flatten(kept[index:])]
    return source, kept[index][:max_target_length]


def unigram_f1(candidate: Sequence[int], reference: Sequence[int]) -> float:
    """ROUGE-1 F1 (0-1) of two token id sequences: clipped unigram overlap, ``2PR / (P + R)``; 0 when either is
    empty or they share nothing."""
    if not candidate or not reference:
        return 0.0
    overlap = sum((collections.Counter(candidate) & collections.Counter(reference)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(candidate), overlap / len(reference)
    return 2 * precision * recall / (precision + recall)


def gap_sentences(sentences: Sequence[Sequence[int]], *, mask_id: int, max_target_length: int,
                  gap_ratio: float = 0.3) -> tuple[list[int], list[int]] | None:
    """PEGASUS gap-sentence generation (Ind-Orig): ``(source with gaps masked, the gap sentences in order)``, or None
    for fewer than 2 non-empty sentences.

    ``max(1, round(gap_ratio * n))`` of the ``n`` non-empty sentences are chosen by :func:`unigram_f1` against the
    rest of the window, best first (ties to the earlier sentence), while the chosen ones fit ``max_target_length``
    (the best one always, cut to fit). Each chosen sentence becomes one ``mask_id`` in the source.

    Args:
        sentences: the window's sentences (token ids each).
        mask_id: the gap token (a sentinel that does not occur in the window).
        max_target_length: the longest target (tokens, >= 1).
        gap_ratio: the share of sentences masked, in (0, 1) (PEGASUS: 0.3 for its large model).

    Raises:
        ValueError: ``max_target_length < 1`` or ``gap_ratio`` outside (0, 1).
    """
    if max_target_length < 1:
        raise ValueError(f"max_target_length must be at least 1 token, got {max_target_length}")
    if not 0.0 < gap_ratio < 1.0:
        raise ValueError(f"gap_ratio must lie in (0, 1), got {gap_ratio}")
    kept = [list(sentence) for sentence in sentences if sentence]
    if len(kept) < 2:
        return None
    scores = []
    for index, sentence in enumerate(kept):
        rest = _flatten(kept[:index] + kept[index + 1:])
        scores.append((-unigram_f1(sentence, rest), index))
    chosen: set[int] = set()
    budget = max_target_length
    for _, index in sorted(scores)[:max(1, round(gap_ratio * len(kept)))]:
        if chosen and len(kept[index]) > budget:
            continue
        chosen.add(index)
        budget -= len(kept[index])
    source: list[int] = []
    target: list[int] = []
    for index, sentence in enumerate(kept):
        if index in chosen:
            source.append(mask_id)
            target.extend(sentence)
        else:
            source.extend(sentence)
    return source, target[:max_target_length]


def sentence_reordering(sentences: Sequence[Sequence[int]], rng: random.Random, *,
                        max_target_length: int) -> tuple[list[int], list[int]] | None:
    """Sentence reordering: ``(the sentences shuffled, the window in order)``, or None for fewer than 2 non-empty
    sentences. The shuffle is redrawn until it differs from the original order (a few tries; sentences that are all
    equal cannot be reordered and give None).

    Raises:
        ValueError: ``max_target_length < 1``.
    """
    if max_target_length < 1:
        raise ValueError(f"max_target_length must be at least 1 token, got {max_target_length}")
    kept = [list(sentence) for sentence in sentences if sentence]
    if len(kept) < 2 or all(sentence == kept[0] for sentence in kept):
        return None
    order = list(range(len(kept)))
    shuffled = [kept[index] for index in order]
    while shuffled == kept:
        rng.shuffle(order)
        shuffled = [kept[index] for index in order]
    return _flatten(shuffled), _flatten(kept)[:max_target_length]
