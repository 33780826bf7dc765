"""Probe metrics: exact match and token accuracy, split into on-segment and off-segment target positions.

A scored target position ``j`` is produced at decoder position ``t = j``, where segmented attention
reads segment ``i(t) = min(floor(t * m / T), m - 1)`` (:func:`srformer.attention.schedule.segment_index`,
the schedule the attention modules use) with ``m = ceil(k / s)`` segments of the example's real length
``k``. The position is *on-segment* when every document position it needs lies in segment ``i(t)``
(position ``p`` is in segment ``p // s``), and *off-segment* otherwise (including a position that
needs nothing that exists, such as an ``aggregate`` count of 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from srformer.attention.schedule import num_segments, segment_index
from srformer.probe.tasks import Example

ON, OFF = "on", "off"


def segment_labels(examples: Sequence[Example], *, segment_size: int, target_length: int) -> list[list[str | None]]:
    """Per example and target index: ``"on"``, ``"off"``, or None for a position that is not scored.

    Args:
        examples: the examples (their ``needed`` document positions).
        segment_size: ``s`` in tokens.
        target_length: the schedule's ``T``.

    Raises:
        ValueError: for a non-positive ``segment_size`` or ``target_length``.
    """
    if segment_size < 1 or target_length < 1:
        raise ValueError(f"segment_size and target_length must be positive, got {segment_size} and {target_length}.")
    labels = []
    for example in examples:
        m = num_segments(torch.tensor([len(example.source)]), segment_size)
        scheduled = segment_index(torch.arange(len(example.target)), m, target_length)[0].tolist()
        row: list[str | None] = []
        for j, (needed, scored) in enumerate(zip(example.needed, example.scored, strict=True)):
            if not scored:
                row.append(None)
            elif needed and all(p // segment_size == scheduled[j] for p in needed):
                row.append(ON)
            else:
                row.append(OFF)
        labels.append(row)
    return labels


def _fraction(hits: int, total: int) -> float | None:
    return hits / total if total else None


def score(predictions: Sequence[Sequence[int]], examples: Sequence[Example], *, segment_size: int,
          target_length: int) -> dict:
    """Accuracy of ``predictions`` (token ids per example, aligned with the targets; a missing
    position counts as wrong) on the scored target positions.

    Returns:
        ``token_accuracy``, ``exact_match`` (all scored positions of an example right), and the same two
        restricted to on-segment (``on_token_accuracy``, ``on_exact_match``: examples with at least one
        on-segment position, all of them right) and off-segment positions (``off_*``); None where no
        position of that kind exists. Also ``on_positions``, ``off_positions``, ``examples``.

    Raises:
        ValueError: if the number of predictions differs from the number of examples.
    """
    if len(predictions) != len(examples):
        raise ValueError(f"Got {len(predictions)} predictions for {len(examples)} examples; give one per example.")
    labels = segment_labels(examples, segment_size=segment_size, target_length=target_length)
    hits = {ON: 0, OFF: 0}
    totals = {ON: 0, OFF: 0}
    exact = {"all": [0, 0], ON: [0, 0], OFF: [0, 0]}  # [examples right, examples counted]
    for prediction, example, row in zip(predictions, examples, labels, strict=True):
        right = {"all": True, ON: True, OFF: True}
        seen = {"all": False, ON: False, OFF: False}
        for j, label in enumerate(row):
            if label is None:
                continue
            correct = j < len(prediction) and int(prediction[j]) == example.target[j]
            hits[label] += correct
            totals[label] += 1
            for kind in ("all", label):
                seen[kind] = True
                right[kind] = right[kind] and correct
        for kind, counts in exact.items():
            if seen[kind]:
                counts[0] += right[kind]
                counts[1] += 1
    return {
        "examples": len(examples),
        "token_accuracy": _fraction(hits[ON] + hits[OFF], totals[ON] + totals[OFF]),
        "exact_match": _fraction(*exact["all"]),
        "on_token_accuracy": _fraction(hits[ON], totals[ON]),
        "off_token_accuracy": _fraction(hits[OFF], totals[OFF]),
        "on_exact_match": _fraction(*exact[ON]),
        "off_exact_match": _fraction(*exact[OFF]),
        "on_positions": totals[ON],
        "off_positions": totals[OFF],
    }


def gap_recovered(variant: float | None, segmented: float | None, full: float | None, *,
                  min_gap: float = 0.05) -> float | None:
    """Share of the segmented-to-full gap a variant recovers: ``(variant - segmented) / (full - segmented)``.

    1.0 means as good as full attention, 0.0 no better than segmented attention. None when an input
    is missing or the gap ``full - segmented`` is below ``min_gap`` (accuracy as a fraction): then
    there is nothing to recover, and the ratio of two small noisy differences means nothing.
    """
    if variant is None or segmented is None or full is None:
        return None
    gap = full - segmented
    if gap < min_gap:
        return None
    return (variant - segmented) / gap
