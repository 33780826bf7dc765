"""Self-supervised seq2seq targets built from a window of a document's tokens (pure functions of token lists).

* Span corruption (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
  Transformer", Sec. 3.1.4): ``round(noise_density * n)`` of the ``n`` tokens, in
  ``round(noise tokens / mean_span_length)`` spans, are dropped from the source; each dropped span is replaced
  by one sentinel token (``<extra_id_0>``, ``<extra_id_1>``, ... in order). The target lists every sentinel
  followed by the tokens it replaced. The source and target together hold exactly the original tokens.
* Copy: the target is a contiguous span of the source (the whole source when it fits the target length), so
  the decoder must read the encoder's input token by token.

Neither function appends ``</s>``; the caller does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = [
    "copy_target",
    "noise_span_counts",
    "sentinel_tokens",
    "span_corruption",
]


def sentinel_tokens(count: int) -> list[str]:
    """T5's sentinel token strings ``<extra_id_0>`` ... ``<extra_id_{count-1}>``."""
    return [f"<extra_id_{index}>" for index in range(count)]


def noise_span_counts(length: int, *, noise_density: float = 0.15, mean_span_length: float = 3.0) -> tuple[int, int]:
    """``(noise tokens, noise spans)`` of span corruption for ``length`` tokens (T5's rule).

    Noise tokens: ``round(noise_density * length)``, clipped to ``[1, length - 1]``; spans:
    ``round(noise / mean_span_length)``, at least 1 (every span and every gap between them is non-empty).

    Raises:
        ValueError: ``length < 2``, ``noise_density`` outside (0, 1) or ``mean_span_length < 1``.
    """
    if length < 2:
        raise ValueError(f"span corruption needs at least 2 tokens, got {length}")
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must lie in (0, 1), got {noise_density}")
    if mean_span_length < 1.0:
        raise ValueError(f"mean_span_length must be at least 1 token, got {mean_span_length}")
    noise = min(max(round(noise_density * length), 1), length - 1)
    spans = min(max(round(noise / mean_span_length), 1), noise, length - noise)
    return noise, spans


def _random_segmentation(rng: random.Random, total: int, parts: int) -> list[int]:
    """``parts`` positive integers summing to ``total`` (uniform over such compositions)."""
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    bounds = [0, *cuts, total]
    return [bounds[i + 1] - bounds[i] for i in range(parts)]


def span_corruption(
    tokens: Sequence[int],
    sentinel_ids: Sequence[int],
    rng: random.Random,
    *,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
) -> tuple[list[int], list[int]]:
    """T5 span corruption of ``tokens``: ``(source, target)``.

    The tokens are cut into alternating kept and noise spans, starting with a kept span (lengths drawn
    uniformly from the compositions of :func:`noise_span_counts`' totals). Source: the kept spans with
    ``sentinel_ids[i]`` in place of the ``i``-th noise span. Target: ``sentinel_ids[i]`` followed by the ``i``-th
    noise span, for every ``i``. Replacing each sentinel of the source by its target span gives ``tokens`` back.

    Args:
        tokens: the window's token ids (at least 2; must not contain sentinel ids).
        sentinel_ids: ids of ``<extra_id_0>``, ``<extra_id_1>``, ... (at least as many as noise spans).
        rng: the random source (the only one used).
        noise_density: fraction of tokens dropped (T5: 0.15).
        mean_span_length: mean noise span length in tokens (T5: 3).

    Raises:
        ValueError: bad densities or lengths (:func:`noise_span_counts`), or fewer sentinels than spans.
    """
    noise, spans = noise_span_counts(len(tokens), noise_density=noise_density, mean_span_length=mean_span_length)
    if spans > len(sentinel_ids):
        raise ValueError(f"{spans} noise spans need as many sentinel tokens, got {len(sentinel_ids)}; add sentinels "
                         "to the tokenizer or shorten the input")
    noise_lengths = _random_segmentation(rng, noise, spans)
    kept_lengths = _random_segmentation(rng, len(tokens) - noise, spans)
    source: list[int] = []
    target: list[int] = []
    position = 0
    for index, (kept, dropped) in enumerate(zip(kept_lengths, noise_lengths, strict=True)):
        source.extend(tokens[position:position + kept])
        position += kept
        source.append(sentinel_ids[index])
        target.append(sentinel_ids[index])
        target.extend(tokens[position:position + dropped])
        position += dropped
    return source, target


def copy_target(source: Sequence[int], rng: random.Random, *, max_target_length: int) -> list[int]:
    """A contiguous span of ``source`` of ``min(len(source), max_target_length)`` tokens: all of ``source`` when it
    fits, else a window at a uniformly random offset.

    Raises:
        ValueError: ``max_target_length < 1``.
    """
    if max_target_length < 1:
        raise ValueError(f"max_target_length must be at least 1 token, got {max_target_length}")
    length = min(len(source), max_target_length)
    offset = rng.randint(0, len(source) - length)
    return list(source[offset:offset + length])


#: Shortest and longest passage of :func:`passage_target` (tokens, before ``</s>``).
PASSAGE_LENGTHS: tuple[int, int] = (16, 48)


def passage_target(source: Sequence[int], rng: random.Random, *, max_target_length: int) -> list[int]:
    """A passage of ``source`` at a uniformly random offset (the ``passage`` objective): its length uniform in
    :data:`PASSAGE_LENGTHS` (capped by ``max_target_length`` and ``len(source)``), its first token anywhere a passage
    of that length fits. Unlike :func:`copy_target` on a source that fits, it cannot be solved by position: once
    the first tokens are written, the rest must be found by content (what ``srformer copy-reach`` measures).

    Raises:
        ValueError: ``max_target_length < 1`` or an empty ``source``.
    """
    if max_target_length < 1:
        raise ValueError(f"max_target_length must be at least 1 token, got {max_target_length}")
    if not source:
        raise ValueError("passage_target needs a non-empty source")
    longest = min(PASSAGE_LENGTHS[1], max_target_length, len(source))
    length = rng.randint(min(PASSAGE_LENGTHS[0], longest), longest)
    offset = rng.randint(0, len(source) - length)
    return list(source[offset:offset + length])
