"""The reading check on hand-made outputs: distinct outputs, copy rate, lead-3 ROUGE."""

from __future__ import annotations

import pytest

from srformer.evaluation.reading import copy_counts, lead_sentences, reading_check

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
