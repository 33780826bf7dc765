"""The lead-3, length-matched lead and length-capped oracle baselines."""

from __future__ import annotations

import pytest

from srformer.evaluation.baselines import (
    BASELINE_NAMES,
    baseline_scores,
    extractive_oracle,
    lead_sentences,
    lead_words,
    word_count,
)
from srformer.evaluation.rouge import score_summaries

DOCUMENT = ("The council met on Monday. It approved a new park near the river. Residents had asked for it for years. "
            "The park will open in May. Critics said the cost was too high.")
REFERENCE = "A new park near the river was approved. It will open in May."


def test_lead_sentences_and_lead_words_keep_sentences_on_lines():
    assert lead_sentences(DOCUMENT, 2) == "The council met on Monday.\nIt approved a new park near the river."
    assert lead_words(DOCUMENT, 7) == "The council met on Monday.\nIt approved"
    assert word_count(lead_words(DOCUMENT, 7)) == 7
    assert lead_words(DOCUMENT, 0) == "" and lead_words(DOCUMENT, 1000).split() == DOCUMENT.split()


def test_oracle_respects_the_cap_and_beats_the_lead_of_the_same_length():
    for cap in (3, 8, 12, 20, 40):
        oracle = extractive_oracle(DOCUMENT, REFERENCE, cap)
        assert word_count(oracle) <= cap
        lead = lead_words(DOCUMENT, cap)
        scores = score_summaries([oracle, lead], [REFERENCE, REFERENCE]).per_document
        mean = [(scores["rouge1"][i] + scores["rouge2"][i]) / 2 for i in range(2)]
        assert mean[0] >= mean[1] - 1e-9  # greedy on R1+R2 never loses to the lead at the same length here
    # the two sentences that make up the reference, in document order
    assert extractive_oracle(DOCUMENT, REFERENCE, 40) == ("It approved a new park near the river.\n"
                                                         "The park will open in May.")
    assert extractive_oracle(DOCUMENT, REFERENCE, 0) == "" and extractive_oracle(DOCUMENT, "zzz qqq", 20) == ""


def test_baseline_scores_rows_and_alignment():
    documents, references = [DOCUMENT, DOCUMENT], [REFERENCE, "The council met."]
    only_lead = baseline_scores(documents, references)
    assert list(only_lead) == ["lead-3"]
    rows = baseline_scores(documents, references, ["one two three four five six", "council met"])
    assert tuple(rows) == BASELINE_NAMES
    assert all(len(values) == 2 for row in rows.values() for values in row.values())
    # the second output has two words: its matched lead is "The council", its oracle "The council"... at most 2 words
    assert rows["oracle (length-capped)"]["rouge1"][1] >= rows["lead (length-matched)"]["rouge1"][1]
    with pytest.raises(ValueError, match="align"):
        baseline_scores(documents, references[:1])
    with pytest.raises(ValueError, match="at least one"):
        baseline_scores([], [])


def test_evaluate_reports_the_baselines_and_the_paired_gap_to_the_matched_lead():
    from srformer.data.pairs import SummaryPair
    from srformer.evaluation.evaluate import baseline_summary

    pairs = [SummaryPair(document=DOCUMENT, summary=REFERENCE), SummaryPair(document=DOCUMENT, summary=REFERENCE)]
    outputs = ["The council met on Monday.", "It approved a new park near the river."]
    per_document = score_summaries(outputs, [REFERENCE, REFERENCE]).per_document
    summary = baseline_summary(pairs, outputs, per_document)
    assert summary["words"] == pytest.approx(6.5) and summary["lead3_words"] == 20
    matched = summary["lead (length-matched)"]["rouge1"]
    # the first output is its own matched lead, so the mean gap is the second output's gap over 2
    lead_second = score_summaries([lead_words(DOCUMENT, 8)], [REFERENCE]).per_document["rouge1"][0]
    gap = summary["minus_lead_matched"]["rouge1"]["mean"]
    assert gap == pytest.approx((per_document["rouge1"][1] - lead_second) / 2)
    assert matched == pytest.approx((per_document["rouge1"][0] + lead_second) / 2)
    assert summary["oracle (length-capped)"]["rouge1"] >= matched
