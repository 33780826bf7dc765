"""srformer.data.sentences: pysbd sentence spans and their token starts."""

from __future__ import annotations

import pytest

from srformer.data.sentences import sentence_spans, sentence_token_starts, split_sentences


def test_spans_are_stripped_increasing_and_cover_every_word():
    text = "BACKGROUND\nthe cell grew. it split, e.g. twice.  then it died.\n\nRESULTS\nnone."
    spans = sentence_spans(text)
    sentences = [text[a:b] for a, b in spans]
    assert sentences == ["BACKGROUND", "the cell grew.", "it split, e.g. twice.", "then it died.", "RESULTS", "none."]
    assert all(a < b <= c for (a, b), (c, _) in zip(spans, spans[1:], strict=False))
    assert " ".join(sentences).split() == text.split()


def test_repeated_sentences_get_their_own_spans():
    text = "Yes. No. Yes. No."
    assert sentence_spans(text) == [(0, 4), (5, 8), (9, 13), (14, 17)]


def test_empty_and_bad_input():
    assert split_sentences(" \n ") == [] and sentence_spans("") == []
    with pytest.raises(TypeError, match="str"):
        sentence_spans(b"bytes")  # type: ignore[arg-type]


def test_token_starts_follow_the_offsets():
    text = "ab cd. ef gh. ij."
    # one token per word, the last one spanning the period: tokens 0-1, 2-3, 4
    offsets = [(0, 2), (3, 6), (7, 9), (10, 13), (14, 17)]
    assert sentence_token_starts(text, offsets) == [0, 2, 4]
    # a token that spans two sentence starts counts once
    assert sentence_token_starts(text, [(0, 17)]) == [0]
    assert sentence_token_starts(text, []) == []
