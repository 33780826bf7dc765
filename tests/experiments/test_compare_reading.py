"""The reading check in ``srformer compare``: new cells carry it, finished cells recorded before it are reused."""

from __future__ import annotations

import json

import pytest

from srformer.data.pairs import SummaryPair
from srformer.evaluation.rouge import score_summaries
from srformer.experiments import compare as compare_module
from srformer.experiments.compare import Cell, CellResult, CompareSettings, summarize
from srformer.experiments.compare_report import table2

PAIRS = [
    SummaryPair("The storm hit the coast at night. Power failed. Roads closed.", "A storm hit.", "a"),
    SummaryPair("The council passed the budget on Monday. Taxes rise. Critics object.", "Budget passed.", "b"),
]
SETTINGS = CompareSettings(variants=("srformer",), segment_sizes=(8,), ablations=(), seeds=(0,))


def old_record(run_dir, predictions):
    """A finished cell as written before the reading check existed (no ``reading`` key)."""
    run_dir.mkdir(parents=True)
    metrics = {"rouge1": 10.0, "rouge2": 1.0, "rougeL": 9.0, "rougeLsum": 9.0, "seconds": 1.0, "num_examples": 2,
               "num_beams": SETTINGS.num_beams, "max_new_tokens": SETTINGS.max_new_tokens,
               "no_repeat_ngram_size": SETTINGS.no_repeat_ngram_size}
    record = {"name": "srformer", "segment_size": 8, "seed": 0, "key": "srformer-s8-seed0", "metrics": metrics,
              "finetune_seconds": 3.0, "per_document": {k: [10.0, 10.0] for k in ("rouge1", "rouge2", "rougeL",
                                                                                  "rougeLsum")},
              "distinct_outputs": len(set(predictions)), "settings": {}}
    (run_dir / "cell.json").write_text(json.dumps(record))
    return record


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a finished cell must not be trained or decoded again")

    monkeypatch.setattr(compare_module, "train_stage", refuse)
    monkeypatch.setattr(compare_module, "evaluate_stage", refuse)


def test_an_old_finished_cell_is_reused_and_gets_its_reading_check_from_its_predictions(tmp_path, no_training):
    run_dir = tmp_path / "srformer-s8-seed0"
    predictions = ["The storm hit the coast.", "The storm hit the coast."]
    old_record(run_dir, predictions)
    (run_dir / "test_predictions.jsonl").write_text(
        "".join(json.dumps({"id": p.id, "prediction": s, "reference": p.summary}) + "\n"
                for p, s in zip(PAIRS, predictions, strict=True)))
    result = compare_module._run_cell(Cell("srformer", 8, 0), SETTINGS, "base", PAIRS, PAIRS, run_dir)
    assert result.distinct_outputs == 1 and result.metrics["rouge1"] == 10.0
    assert result.reading["distinct_outputs"] == 1 and result.reading["distinct_fraction"] == 0.5
    assert result.reading["copy_rate"] == pytest.approx(0.5)  # every 3-gram of document a, none of document b
    # the control: the same output for both documents scores the same against the other document's reference
    assert result.reading["mismatched_rouge1"] == pytest.approx(
        score_summaries(predictions, [p.summary for p in PAIRS]).mean()["rouge1"])
    assert json.loads((run_dir / "cell.json").read_text())["reading"] == result.reading


def test_a_reading_check_recorded_before_the_control_gets_it_from_the_predictions(tmp_path, no_training):
    run_dir = tmp_path / "srformer-s8-seed0"
    predictions = ["A storm hit.", "Budget passed."]  # each its own reference: 100 against it, 0 against the other
    record = old_record(run_dir, predictions)
    record["reading"] = {"distinct_outputs": 2, "distinct_fraction": 1.0, "copy_rate": 0.0, "lead3_rouge1": 1.0,
                         "lead3_rouge2": 0.0, "lead3_rougeL": 1.0, "num_documents": 2}
    (run_dir / "cell.json").write_text(json.dumps(record))
    (run_dir / "test_predictions.jsonl").write_text(
        "".join(json.dumps({"id": p.id, "prediction": s}) + "\n" for p, s in zip(PAIRS, predictions, strict=True)))
    result = compare_module._run_cell(Cell("srformer", 8, 0), SETTINGS, "base", PAIRS, PAIRS, run_dir)
    assert result.reading["mismatched_rouge1"] == 0.0 and result.reading["distinct_outputs"] == 2
    assert json.loads((run_dir / "cell.json").read_text())["reading"]["mismatched_rouge1"] == 0.0


def test_an_old_cell_without_predictions_loads_with_no_reading_check(tmp_path, no_training):
    run_dir = tmp_path / "srformer-s8-seed0"
    old_record(run_dir, ["x", "y"])
    result = compare_module._run_cell(Cell("srformer", 8, 0), SETTINGS, "base", PAIRS, PAIRS, run_dir)
    assert result.reading is None
    payload = summarize([result], SETTINGS)
    assert payload["groups"][0]["reading"] is None and payload["cells"][0]["reading"] is None
    row = [line for line in table2(payload).splitlines() if line.startswith("| srformer")][0]
    assert "| - | - |" in row  # copied 3-grams and lead-3 ROUGE-1 unknown


def test_groups_average_the_reading_check_over_seeds():
    def result(seed, copy_rate):
        reading = {"distinct_outputs": 2, "distinct_fraction": 1.0, "copy_rate": copy_rate, "lead3_rouge1": 20.0 + seed,
                   "lead3_rouge2": 5.0, "lead3_rougeL": 15.0, "num_documents": 2}
        per_document = {k: [10.0, 20.0] for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
        metrics = {k: 15.0 for k in per_document} | {"seconds": 1.0, "num_examples": 2}
        return CellResult(Cell("srformer", 8, seed), metrics, 1.0, per_document, 2, {}, reading)

    settings = CompareSettings(variants=("srformer",), segment_sizes=(8,), ablations=(), seeds=(0, 1))
    payload = summarize([result(0, 0.2), result(1, 0.4)], settings)
    reading = payload["groups"][0]["reading"]
    assert reading["copy_rate"] == pytest.approx(0.3) and reading["lead3_rouge1"] == pytest.approx(20.5)
    assert "| 30% | 20.50 |" in table2(payload)
