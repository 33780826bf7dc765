"""The lead-3 baseline row of ``srformer compare``: scored like a cell, compared with srformer, shown in the tables."""

from __future__ import annotations

import numpy as np
import pytest
from rouge_score import rouge_scorer

from srformer.data.pairs import SummaryPair
from srformer.experiments.compare import Cell, CellResult, CompareSettings, lead_baseline, summarize
from srformer.experiments.compare_report import lead3_line, table2

PAIRS = [
    SummaryPair("The storm hit the coast at night. Power failed. Roads closed. Schools shut on Friday.",
                "Power failed after the storm.", "a"),
    SummaryPair("The council passed the budget on Monday. Taxes rise. Critics object. The mayor is pleased.",
                "The mayor is pleased with the budget.", "b"),
    SummaryPair("Rain fell for a week. Rivers rose. Farmers lost crops. Prices went up.", "Crops were lost.", "c"),
]
KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
SETTINGS = CompareSettings(variants=("srformer",), segment_sizes=(8,), ablations=(), seeds=(0,))


def cell(per_document: dict[str, list[float]]) -> CellResult:
    metrics = {key: float(np.mean(values)) for key, values in per_document.items()} | {"seconds": 1.0,
                                                                                        "num_examples": 3}
    return CellResult(Cell("srformer", 8, 0), metrics, 1.0, per_document, 3, {}, None)


def test_lead_baseline_scores_the_first_three_sentences_against_the_reference():
    scores = lead_baseline(PAIRS)
    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    for index, (pair, lead) in enumerate(zip(PAIRS, ("The storm hit the coast at night.\nPower failed.\nRoads closed.",
                                                      "The council passed the budget on Monday.\nTaxes rise.\n"
                                                      "Critics object.",
                                                      "Rain fell for a week.\nRivers rose.\nFarmers lost crops."),
                                             strict=True)):
        expected = 100 * scorer.score(pair.summary, lead)["rouge1"].fmeasure
        assert scores["rouge1"][index] == pytest.approx(expected, abs=1e-9)
    assert set(scores) == set(KEYS)


def test_lead_baseline_refuses_no_pairs():
    with pytest.raises(ValueError, match="at least one test pair"):
        lead_baseline([])


def test_summarize_pairs_srformer_with_lead3_per_document():
    lead = lead_baseline(PAIRS)
    better = {key: [value + 5.0 for value in lead[key]] for key in KEYS}
    payload = summarize([cell(better)], SETTINGS, lead=lead)
    assert payload["lead3"]["rouge1"] == pytest.approx(float(np.mean(lead["rouge1"])))
    row = next(r for r in payload["paired"] if r["other"] == "lead-3")
    assert row["segment_size"] == 8 and row["reference"] == "srformer"
    for key in ("rouge1", "rouge2", "rougeL"):  # srformer - lead-3, five points on every document
        assert row[key]["mean"] == pytest.approx(5.0)
        assert row[key]["low"] == pytest.approx(5.0) and row[key]["high"] == pytest.approx(5.0)


def test_summarize_without_lead_has_no_baseline_row():
    lead = lead_baseline(PAIRS)
    payload = summarize([cell(lead)], SETTINGS)
    assert payload["lead3"] is None
    assert not any(r["other"] == "lead-3" for r in payload["paired"])
    assert "lead-3 (first three sentences)" not in table2(payload) and lead3_line(payload) == ""


def test_summarize_refuses_lead_scores_of_other_documents():
    lead = lead_baseline(PAIRS)
    with pytest.raises(ValueError, match="same test pairs"):
        summarize([cell(lead)], SETTINGS, lead={key: values[:2] for key, values in lead.items()})


def test_the_tables_show_the_lead3_row_and_say_whether_the_best_cell_beats_it():
    lead = lead_baseline(PAIRS)
    worse = {key: [max(value - 5.0, 0.0) for value in lead[key]] for key in KEYS}
    payload = summarize([cell(worse)], SETTINGS, lead=lead)
    rows = [line for line in table2(payload).splitlines() if line.startswith("| lead-3")]
    assert len(rows) == 1 and f"{np.mean(lead['rouge1']):.2f}" in rows[0]
    assert "does not beat lead-3" in lead3_line(payload)
    payload = summarize([cell({key: [v + 5.0 for v in lead[key]] for key in KEYS})], SETTINGS, lead=lead)
    assert "The best cell beats lead-3" in lead3_line(payload)


def test_reference_full_pairs_every_setting_and_the_lead_with_full():
    from srformer.experiments.compare import length_baselines

    lead = lead_baseline(PAIRS)
    settings = CompareSettings(variants=("full", "srformer"), segment_sizes=(8,), ablations=(), seeds=(0,),
                               reference="full")
    outputs = ["Power failed.", "The mayor is pleased.", "Crops were lost."]
    full = CellResult(Cell("full", None, 0), {key: float(np.mean(v)) for key, v in lead.items()} | {"seconds": 2.0},
                      1.0, lead, 3, {}, None, 1, length_baselines(PAIRS, outputs))
    worse = {key: [value - 1.0 for value in lead[key]] for key in KEYS}
    srformer = CellResult(Cell("srformer", 8, 0), {key: float(np.mean(v)) for key, v in worse.items()}
                          | {"seconds": 1.0}, 1.0, worse, 3, {}, None, 1, length_baselines(PAIRS, outputs))
    payload = summarize([full, srformer], settings, lead=lead)
    assert {(row["reference"], row["other"]) for row in payload["paired"]} == {("full", "lead-3"),
                                                                                ("full", "srformer")}
    gap = next(row for row in payload["paired"] if row["other"] == "srformer")
    assert gap["rouge1"]["mean"] == pytest.approx(1.0)  # full - srformer, one point on every document
    table = table2(payload)
    assert "full − this, ROUGE-1 (95% CI)" in table and "srformer − this" not in table
    srformer_row = next(line for line in table.splitlines() if line.startswith("| srformer"))
    assert "+1.00 (1.00 to 1.00) *" in srformer_row and "0.50×" in srformer_row  # decode time half of full's
    group = next(g for g in payload["groups"] if g["name"] == "srformer")
    matched = group["baselines"]["lead (length-matched)"]["rouge1"]
    assert group["baselines"]["words"] == pytest.approx(3.0)
    assert group["baselines"]["minus_lead_matched"]["rouge1"]["mean"] == pytest.approx(
        float(np.mean(worse["rouge1"])) - matched)
    with pytest.raises(ValueError, match="--reference"):
        CompareSettings(variants=("full",), segment_sizes=(8,), ablations=(), seeds=(0,), reference="linear")


def test_a_grid_of_segment_free_settings_only_is_still_paired_with_its_reference():
    """The long-input mechanisms beside `full`, no segmented setting in the grid: the pairs are made once, at no
    segment size, and the table shows them (a grid without them printed "-" in every paired column)."""
    settings = CompareSettings(variants=("full", "knn"), segment_sizes=(64,), ablations=(), seeds=(0,),
                               reference="full")
    lead = lead_baseline(PAIRS)
    worse = {key: [value - 2.0 for value in lead[key]] for key in KEYS}
    full = CellResult(Cell("full", None, 0), {key: float(np.mean(v)) for key, v in lead.items()} | {"seconds": 2.0},
                      1.0, lead, 3, {}, None)
    knn = CellResult(Cell("knn", None, 0), {key: float(np.mean(v)) for key, v in worse.items()} | {"seconds": 1.0},
                     1.0, worse, 3, {}, None)
    payload = summarize([full, knn], settings)
    (row,) = payload["paired"]
    assert (row["reference"], row["other"], row["segment_size"]) == ("full", "knn", None)
    assert row["rouge1"]["mean"] == pytest.approx(2.0)
    knn_row = next(line for line in table2(payload).splitlines() if line.startswith("| knn"))
    assert "+2.00 (2.00 to 2.00) *" in knn_row
