"""Span corruption and copy targets: the source and target always give the original tokens back."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srformer.data.objectives import (
    PASSAGE_LENGTHS,
    copy_target,
    noise_span_counts,
    passage_target,
    sentinel_tokens,
    span_corruption,
)

SENTINELS = list(range(1000, 1100))


def restore(source: list[int], target: list[int]) -> list[int]:
    """Put every sentinel's target span back in place of the sentinel in the source."""
    spans: dict[int, list[int]] = {}
    current = None
    for token in target:
        if token in SENTINELS:
            current = token
            spans[current] = []
        else:
            assert current is not None, "the target starts with a sentinel"
            spans[current].append(token)
    out: list[int] = []
    for token in source:
        out.extend(spans.pop(token) if token in SENTINELS else [token])
    assert not spans, "every target span has its sentinel in the source"
    return out


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(3, 999), min_size=2, max_size=300), seed=st.integers(0, 10**6),
       density=st.floats(0.05, 0.5), mean_span=st.floats(1.0, 8.0))
def test_span_corruption_is_recoverable(tokens, seed, density, mean_span):
    source, target = span_corruption(tokens, SENTINELS, random.Random(seed), noise_density=density,
                                     mean_span_length=mean_span)
    assert restore(source, target) == tokens
    noise, spans = noise_span_counts(len(tokens), noise_density=density, mean_span_length=mean_span)
    used = [t for t in source if t in SENTINELS]
    assert used == SENTINELS[:spans]  # in order, one per span
    assert len(target) == noise + spans
    assert len(source) == len(tokens) - noise + spans


def test_span_corruption_follows_t5_counts():
    assert noise_span_counts(256) == (38, 13)  # 15% of 256, mean span 3
    assert noise_span_counts(2) == (1, 1)
    source, target = span_corruption(list(range(3, 103)), SENTINELS, random.Random(0))
    assert source[0] not in SENTINELS and target[0] == SENTINELS[0]


def test_span_corruption_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2 tokens"):
        span_corruption([5], SENTINELS, random.Random(0))
    with pytest.raises(ValueError, match="sentinel"):
        span_corruption(list(range(3, 300)), SENTINELS[:2], random.Random(0))
    with pytest.raises(ValueError, match="noise_density"):
        noise_span_counts(10, noise_density=1.0)


@settings(max_examples=100, deadline=None)
@given(source=st.lists(st.integers(0, 50), min_size=1, max_size=200), limit=st.integers(1, 250),
       seed=st.integers(0, 10**6))
def test_copy_target_is_a_span_of_the_source(source, limit, seed):
    target = copy_target(source, random.Random(seed), max_target_length=limit)
    assert len(target) == min(len(source), limit)
    assert any(source[i:i + len(target)] == target for i in range(len(source) - len(target) + 1))
    if len(source) <= limit:
        assert target == source


@settings(max_examples=100, deadline=None)
@given(source=st.lists(st.integers(0, 50), min_size=1, max_size=200), limit=st.integers(1, 250),
       seed=st.integers(0, 10**6))
def test_a_passage_is_a_span_of_the_source_within_its_lengths(source, limit, seed):
    target = passage_target(source, random.Random(seed), max_target_length=limit)
    longest = min(PASSAGE_LENGTHS[1], limit, len(source))
    assert min(PASSAGE_LENGTHS[0], longest) <= len(target) <= longest
    assert any(source[i:i + len(target)] == target for i in range(len(source) - len(target) + 1))


def test_passages_start_anywhere_not_only_at_the_top():
    """On a source of distinct tokens the first token names the offset: over 200 draws from a 128-token source they
    spread over the offsets (a copy of a source that fits always starts at 0)."""
    source = list(range(1000, 1128))
    rng = random.Random(0)
    starts = [source.index(passage_target(source, rng, max_target_length=128)[0]) for _ in range(200)]
    assert min(starts) == 0 or min(starts) < 5
    assert max(starts) > 70 and len(set(starts)) > 50
    assert copy_target(source, rng, max_target_length=128) == source


def test_a_passage_needs_a_source_and_a_positive_limit():
    with pytest.raises(ValueError, match="max_target_length"):
        passage_target([1, 2], random.Random(0), max_target_length=0)
    with pytest.raises(ValueError, match="non-empty"):
        passage_target([], random.Random(0), max_target_length=4)


def test_sentinel_names_follow_t5():
    assert sentinel_tokens(3) == ["<extra_id_0>", "<extra_id_1>", "<extra_id_2>"]
