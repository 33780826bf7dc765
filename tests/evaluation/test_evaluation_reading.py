"""The reading check on hand-made outputs: distinct outputs, copy rate, lead-3 ROUGE, ROUGE against another
document's reference."""

from __future__ import annotations

import pytest

from srformer.evaluation.reading import copy_counts, lead_sentences, reading_check
from srformer.evaluation.rouge import score_summaries

DOCUMENTS = [
    "The council approved the new budget on Monday. Taxes will rise by two percent. Critics called it unfair. "
    "The mayor defended the plan.",
    "A storm hit the northern coast overnight. Thousands lost power. Roads were closed. Repairs start today.",
]


def test_lead_sentences_are_the_first_three():
    assert lead_sentences(DOCUMENTS[1]).split("\n") == [
        "A storm hit the northern coast overnight.", "Thousands lost power.", "Roads were closed."]


def test_copy_counts_word_trigrams():
    assert copy_counts("the council approved a plan", DOCUMENTS[0]) == (1, 3)  # "the council approved" only
    assert copy_counts("Taxes will rise!", DOCUMENTS[0]) == (1, 1)  # case and punctuation do not matter
    assert copy_counts("two words", DOCUMENTS[0]) == (0, 0)
    with pytest.raises(ValueError, match="at least 1"):
        copy_counts("a b c", "a b c", n=0)


def test_extractive_outputs_read_their_input():
    outputs = ["The council approved the new budget on Monday.", "A storm hit the northern coast overnight."]
    check = reading_check(outputs, DOCUMENTS)
    assert check["distinct_outputs"] == 2 and check["distinct_fraction"] == 1.0
    assert check["copy_rate"] == 1.0
    assert check["lead3_rouge1"] > 40 and check["num_documents"] == 2


def test_one_generic_output_for_every_document_is_caught():
    outputs = ["Officials said the situation was under review."] * 2
    check = reading_check(outputs, DOCUMENTS)
    assert check["distinct_outputs"] == 1 and check["distinct_fraction"] == 0.5
    assert check["copy_rate"] == 0.0
    assert check["lead3_rouge1"] < reading_check([DOCUMENTS[0][:46], DOCUMENTS[1][:41]], DOCUMENTS)["lead3_rouge1"]


def test_short_outputs_have_no_copy_rate_and_bad_input_is_rejected():
    assert reading_check(["no", "yes"], DOCUMENTS)["copy_rate"] is None
    with pytest.raises(ValueError, match="differ in length"):
        reading_check(["a"], DOCUMENTS)
    with pytest.raises(ValueError, match="at least one"):
        reading_check([], [])


REFERENCES = ["The council raised taxes.", "A storm cut power on the coast.", "Prices of wheat fell sharply."]
THREE = [*DOCUMENTS, "Wheat prices fell sharply this week. Farmers worry. Traders expect a rebound. Exports slowed."]


def test_against_another_documents_reference_an_output_that_ignores_its_document_scores_as_well():
    generic = ["Officials said taxes and power prices fell."] * 3
    check = reading_check(generic, THREE, REFERENCES)
    own = score_summaries(generic, REFERENCES).mean()
    # the same output for every document: its control is the mean over the same three references, its own ROUGE
    for key in ("rouge1", "rouge2"):
        assert check[f"mismatched_{key}"] == pytest.approx(own[key], abs=1e-9)
    # outputs that are their own references score 100 against them and less against the next document's
    check = reading_check(REFERENCES, THREE, REFERENCES)
    expected = score_summaries(REFERENCES, [*REFERENCES[1:], REFERENCES[0]]).mean()
    assert check["mismatched_rouge1"] == pytest.approx(expected["rouge1"]) and check["mismatched_rouge1"] < 40
    assert "mismatched_rouge1" not in reading_check(REFERENCES, THREE)  # no references, no control
    assert "mismatched_rouge1" not in reading_check(REFERENCES[:1], THREE[:1], REFERENCES[:1])  # one document
    with pytest.raises(ValueError, match="references differ in length"):
        reading_check(REFERENCES, THREE, REFERENCES[:2])
