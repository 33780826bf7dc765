"""Cued copy, gap sentences, sentence reordering and marked copy: each target is recoverable from its window."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srformer.data.sentence_objectives import cued_copy, gap_sentences, marked_copy, sentence_reordering, unigram_f1

SEPARATOR, MASK = 1000, 1001
sentence_lists = st.lists(st.lists(st.integers(3, 40), min_size=1, max_size=20), min_size=1, max_size=12)


def occurrences(tokens, pattern):
    return sum(tokens[i:i + len(pattern)] == pattern for i in range(len(tokens) - len(pattern) + 1))


@settings(max_examples=200, deadline=None)
@given(sentences=sentence_lists, seed=st.integers(0, 10**6), limit=st.integers(1, 30))
def test_cued_copy_cue_is_unique_and_the_target_continues_it(sentences, seed, limit):
    pair = cued_copy(sentences, random.Random(seed), separator_id=SEPARATOR, max_target_length=limit)
    window = [token for sentence in sentences for token in sentence]
    if pair is None:
        return
    source, target = pair
    cut = source.index(SEPARATOR)
    cue = source[:cut]
    assert source[cut + 1:] == window
    assert 3 <= len(cue) <= 8 and occurrences(window, cue) == 1
    assert 1 <= len(target) <= limit
    assert any(sentence[:len(cue)] == cue and sentence[len(cue):len(cue) + limit] == target for sentence in sentences)


def test_cued_copy_gives_none_without_a_unique_cue():
    assert cued_copy([[5, 5, 5, 5], [5, 5, 5, 5]], random.Random(0), separator_id=SEPARATOR,
                     max_target_length=8) is None
    assert cued_copy([[5, 6, 7]], random.Random(0), separator_id=SEPARATOR, max_target_length=8) is None
    with pytest.raises(ValueError, match="max_target_length"):
        cued_copy([[5, 6, 7, 8]], random.Random(0), separator_id=SEPARATOR, max_target_length=0)


@settings(max_examples=200, deadline=None)
@given(sentences=sentence_lists, ratio=st.floats(0.05, 0.95))
def test_gap_sentences_put_back_give_the_window(sentences, ratio):
    pair = gap_sentences(sentences, mask_id=MASK, max_target_length=10_000, gap_ratio=ratio)
    if len(sentences) < 2:
        assert pair is None
        return
    assert pair is not None
    source, target = pair
    gaps = source.count(MASK)
    assert 1 <= gaps <= max(1, round(ratio * len(sentences)))
    # walk the window: each sentence is either in the source as is or one mask, its tokens next in the target
    position, rest = 0, list(target)
    for sentence in sentences:
        if source[position] == MASK:
            assert rest[:len(sentence)] == sentence
            rest = rest[len(sentence):]
            position += 1
        else:
            assert source[position:position + len(sentence)] == sentence
            position += len(sentence)
    assert position == len(source) and rest == []


def test_gap_sentences_pick_the_sentence_most_like_the_rest():
    sentences = [[1, 2, 3], [7, 8, 9], [1, 2, 4], [1, 3, 4]]
    source, target = gap_sentences(sentences, mask_id=MASK, max_target_length=10, gap_ratio=0.25)
    assert target == [1, 2, 3] and source == [MASK, 7, 8, 9, 1, 2, 4, 1, 3, 4]
    assert unigram_f1([1, 2], [2, 3]) == pytest.approx(0.5) and unigram_f1([], [1]) == 0.0


def test_gap_sentences_respect_the_target_length():
    sentences = [[1, 2, 3, 4, 5, 6], [1, 2, 3], [1, 2, 4], [9, 9]]
    source, target = gap_sentences(sentences, mask_id=MASK, max_target_length=4, gap_ratio=0.6)
    assert len(target) <= 4 and source.count(MASK) >= 1


@settings(max_examples=200, deadline=None)
@given(sentences=sentence_lists, seed=st.integers(0, 10**6), limit=st.integers(1, 300))
def test_reordering_shuffles_sentences_and_targets_the_original(sentences, seed, limit):
    pair = sentence_reordering(sentences, random.Random(seed), max_target_length=limit)
    window = [token for sentence in sentences for token in sentence]
    if len(sentences) < 2 or all(sentence == sentences[0] for sentence in sentences):
        assert pair is None
        return
    assert pair is not None
    source, target = pair
    assert sorted(source) == sorted(window) and len(source) == len(window)
    assert target == window[:limit]
    if len(set(window)) == len(window):  # distinct tokens: any other order is visible
        assert source != window


@settings(max_examples=200, deadline=None)
@given(sentences=sentence_lists, seed=st.integers(0, 10**6), limit=st.integers(1, 30))
def test_marked_copy_removing_the_marker_gives_the_window_and_the_target_follows_it(sentences, seed, limit):
    source, target = marked_copy(sentences, random.Random(seed), marker_id=SEPARATOR, max_target_length=limit)
    window = [token for sentence in sentences for token in sentence]
    at = source.index(SEPARATOR)
    assert source.count(SEPARATOR) == 1 and source[:at] + source[at + 1:] == window
    assert any(sentence[:limit] == target and window[:at] == [t for s in sentences[:index] for t in s]
               for index, sentence in enumerate(sentences))  # the marker stands before the sentence it copies
    assert source[at + 1:at + 1 + len(target)] == target and 1 <= len(target) <= limit


def test_marked_copy_draws_every_sentence_and_rejects_bad_input():
    sentences = [[5, 6], [], [7, 8, 9], [10]]
    targets = {tuple(marked_copy(sentences, random.Random(seed), marker_id=SEPARATOR, max_target_length=8)[1])
               for seed in range(200)}
    assert targets == {(5, 6), (7, 8, 9), (10,)}
    assert marked_copy([[], []], random.Random(0), marker_id=SEPARATOR, max_target_length=8) is None
    with pytest.raises(ValueError, match="max_target_length"):
        marked_copy([[5, 6]], random.Random(0), marker_id=SEPARATOR, max_target_length=0)
