"""Tests for srformer.evaluation.rouge."""

import numpy as np
import pytest
from rouge_score import rouge_scorer

from srformer.evaluation import ROUGE_KEYS, RougeResult, score_summaries, split_sentences

# --- split_sentences ---------------------------------------------------------------------------


def test_split_sentences_on_punctuation():
    text = "The cat sat. Did it run? Yes!  It did."
    assert split_sentences(text) == ["The cat sat.", "Did it run?", "Yes!", "It did."]


def test_split_sentences_keeps_closing_quotes_and_decimals():
    text = 'He said "stop." Then he left. Pi is 3.14 today.'
    assert split_sentences(text) == ['He said "stop."', "Then he left.", "Pi is 3.14 today."]


def test_split_sentences_ends_a_sentence_at_every_line_break():
    text = "first line. still first\n\n  second line  \n"
    assert split_sentences(text) == ["first line.", "still first", "second line"]


def test_split_sentences_keeps_abbreviations():
    assert split_sentences("Dr. Smith came, e.g. on foot. He left.") == ["Dr. Smith came, e.g. on foot.", "He left."]


def test_split_sentences_empty():
    assert split_sentences("") == []
    assert split_sentences("  \n \n") == []


def test_split_sentences_rejects_non_str():
    with pytest.raises(TypeError):
        split_sentences(None)  # type: ignore[arg-type]


# --- score_summaries ---------------------------------------------------------------------------


def test_identical_texts_score_100():
    texts = ["The cat sat on the mat. It was happy.", "A quick brown fox."]
    result = score_summaries(texts, texts)
    assert set(result.per_document) == set(ROUGE_KEYS)
    for key, value in result.mean().items():
        assert value == pytest.approx(100.0), key


def test_disjoint_texts_score_0():
    result = score_summaries(["alpha beta gamma"], ["delta epsilon zeta"])
    for key, value in result.mean().items():
        assert value == 0.0, key


def test_hand_checked_rouge1_matches_rouge_score():
    reference = "the cat sat on the mat"
    prediction = "the cat lay on the rug"
    # Shared unigrams with clipped counts: the x2, cat, on -> 4 of 6 on both sides, F1 = 2/3.
    result = score_summaries([prediction], [reference])
    assert result.per_document["rouge1"][0] == pytest.approx(100 * 2 / 3)
    direct = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True).score(
        reference, prediction
    )
    for key in ("rouge1", "rouge2", "rougeL"):
        assert result.per_document[key][0] == pytest.approx(100 * direct[key].fmeasure)


def test_stemming_is_applied():
    result = score_summaries(["running"], ["run"])
    assert result.per_document["rouge1"][0] == pytest.approx(100.0)


def test_rougelsum_uses_sentence_splitting():
    reference = "the cat sat. the dog ran."
    prediction = "the dog ran. the cat sat."
    result = score_summaries([prediction], [reference])
    # One sequence: LCS is 3 of 6 tokens. Per sentence: each reference sentence is fully matched.
    assert result.per_document["rougeL"][0] == pytest.approx(50.0)
    assert result.per_document["rougeLsum"][0] == pytest.approx(100.0)
    # Same as handing rouge_score the newline-separated texts directly.
    direct = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True).score(
        "the cat sat.\nthe dog ran.", "the dog ran.\nthe cat sat."
    )
    assert result.per_document["rougeLsum"][0] == pytest.approx(100 * direct["rougeLsum"].fmeasure)


def test_mean_averages_documents():
    result = score_summaries(["a b", "x y"], ["a b", "c d"])
    assert result.per_document["rouge1"] == pytest.approx([100.0, 0.0])
    assert result.mean()["rouge1"] == pytest.approx(50.0)
    assert result.num_documents == 2


def test_score_summaries_errors():
    with pytest.raises(ValueError, match="length"):
        score_summaries(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="empty"):
        score_summaries([], [])


# --- RougeResult -------------------------------------------------------------------------------


def _varied_result() -> RougeResult:
    references = [f"word{i} shared text number {i % 3}" for i in range(20)]
    predictions = [f"word{i} other text {('digit', 'number')[i % 2]} {i % 5}" for i in range(20)]
    return score_summaries(predictions, references)


def test_bootstrap_interval_is_ordered_and_reproducible():
    result = _varied_result()
    intervals = result.bootstrap(n_samples=200, seed=3)
    means = result.mean()
    assert set(intervals) == set(ROUGE_KEYS)
    for key, (low, mid, high) in intervals.items():
        assert low <= mid <= high, key
        assert low <= means[key] <= high, key
        assert low >= 0.0 and high <= 100.0
    assert result.bootstrap(n_samples=200, seed=3) == intervals
    assert result.bootstrap(n_samples=200, seed=4) != intervals


def test_bootstrap_leaves_global_numpy_state_alone():
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    _varied_result().bootstrap(n_samples=10)
    assert np.random.rand() == expected


def test_bootstrap_errors():
    result = _varied_result()
    with pytest.raises(ValueError):
        result.bootstrap(confidence=1.5)
    with pytest.raises(ValueError):
        result.bootstrap(n_samples=0)


def test_rouge_result_validates():
    with pytest.raises(ValueError):
        RougeResult(per_document={})
    with pytest.raises(ValueError):
        RougeResult(per_document={"rouge1": [], "rouge2": []})
    with pytest.raises(ValueError):
        RougeResult(per_document={"rouge1": [1.0], "rouge2": [1.0, 2.0]})
