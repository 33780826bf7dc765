"""Probe metrics: on/off-segment labels recomputed independently, accuracies on hand-made predictions."""

from __future__ import annotations

import math

import pytest

from srformer.probe.metrics import OFF, ON, gap_recovered, score, segment_labels
from srformer.probe.tasks import TASKS, Example, ProbeVocabulary, TaskSpec, generate_examples

VOCAB = ProbeVocabulary()


def _independent_labels(example: Example, s: int, T: int) -> list[str | None]:
    """The paper's schedule written out from scratch: m = ceil(k / s), i(t) = min(floor(t m / T), m - 1)."""
    m = math.ceil(len(example.source) / s)
    labels = []
    for t, (needed, scored) in enumerate(zip(example.needed, example.scored, strict=True)):
        if not scored:
            labels.append(None)
            continue
        segment = min(math.floor(t * m / T), m - 1)
        inside = [segment * s <= p < (segment + 1) * s for p in needed]
        labels.append(ON if inside and all(inside) else OFF)
    return labels


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length,s,n", [(64, 8, 4), (100, 16, 3), (512, 32, 4), (33, 5, 2)])
def test_labels_match_an_independent_schedule(task, length, s, n):
    spec = TaskSpec(task, n)
    T = max(spec.target_tokens + 1, math.ceil(length / s))
    examples = generate_examples(spec, VOCAB, count=6, length=length, segment_size=s, target_length=T, seed=11)
    assert segment_labels(examples, segment_size=s, target_length=T) == [
        _independent_labels(e, s, T) for e in examples
    ]


def test_copy_is_on_segment_and_reverse_off_segment():
    length, s, n = 256, 32, 8
    T = max(n + 1, length // s)
    for task, expected in (("copy", ON), ("reverse", OFF)):
        examples = generate_examples(TaskSpec(task, n), VOCAB, count=4, length=length, segment_size=s,
                                     target_length=T, seed=0)
        labels = segment_labels(examples, segment_size=s, target_length=T)
        assert all(label == expected for row in labels for label in row)


# Hand-made: documents of 8 tokens, s = 4 (segments [0, 4) and [4, 8)), T = 2: step 0 reads segment 0,
# step 1 reads segment 1.
HAND = [
    Example(source=(0,) * 8, target=(10, 11), needed=((1,), (2,))),  # step 0 on, step 1 off
    Example(source=(0,) * 8, target=(12, 13), needed=((5,), (6,))),  # step 0 off, step 1 on
    Example(source=(0,) * 8, target=(14, 15), needed=((), (4, 7)), scored=(False, True)),  # unscored, on
]


def test_hand_made_labels():
    assert segment_labels(HAND, segment_size=4, target_length=2) == [[ON, OFF], [OFF, ON], [None, ON]]


def test_hand_made_scores():
    predictions = [[10, 99], [12, 13], [0, 15]]  # right/wrong, right/right, (unscored)/right
    result = score(predictions, HAND, segment_size=4, target_length=2)
    assert result["on_positions"] == 3 and result["off_positions"] == 2
    assert result["token_accuracy"] == pytest.approx(4 / 5)
    assert result["on_token_accuracy"] == pytest.approx(3 / 3)
    assert result["off_token_accuracy"] == pytest.approx(1 / 2)
    assert result["exact_match"] == pytest.approx(2 / 3)
    assert result["on_exact_match"] == pytest.approx(3 / 3)
    assert result["off_exact_match"] == pytest.approx(1 / 2)


def test_short_prediction_counts_as_wrong_and_missing_kind_is_none():
    only_on = [HAND[2]]
    result = score([[]], only_on, segment_size=4, target_length=2)
    assert result["token_accuracy"] == 0.0 and result["off_token_accuracy"] is None
    assert result["off_exact_match"] is None


def test_score_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="predictions"):
        score([[1]], HAND, segment_size=4, target_length=2)
    with pytest.raises(ValueError, match="segment_size"):
        segment_labels(HAND, segment_size=0, target_length=2)


def test_gap_recovered():
    assert gap_recovered(0.5, 0.1, 0.9) == pytest.approx(0.5)
    assert gap_recovered(0.9, 0.1, 0.9) == pytest.approx(1.0)
    assert gap_recovered(0.1, 0.1, 0.9) == pytest.approx(0.0)
    assert gap_recovered(0.0, 0.1, 0.9) == pytest.approx(-0.125)
    assert gap_recovered(0.5, 0.5, 0.52) is None  # gap below min_gap
    assert gap_recovered(None, 0.1, 0.9) is None
