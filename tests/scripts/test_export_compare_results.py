"""scripts/export_compare_results.py on a synthetic run folder: the report, plots and every cell's predictions (id
and prediction only, named by cell without its settings); an unfinished run writes nothing."""

from __future__ import annotations

import json

import pytest

from tests.script_loading import script_module


def _run(tmp_path, finished=True):
    run = tmp_path / "run"
    for cell in ("full-seed0@encoder_window=512", "knn-seed0@encoder_window=512"):
        folder = run / "cells" / cell
        folder.mkdir(parents=True)
        if finished or cell.startswith("full"):
            rows = [{"id": "a", "prediction": f"{cell} a", "reference": "ref a"},
                    {"id": "b", "prediction": f"{cell} b", "reference": "ref b"}]
            (folder / "test_predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run / "results.json").write_text("{}")
    (run / "results.md").write_text("# grid\n")
    (run / "figure4.png").write_bytes(b"png")
    return run


def test_copies_the_report_and_each_cells_predictions_without_references(tmp_path):
    with script_module("export_compare_results") as script:
        names = script.export(_run(tmp_path), tmp_path / "out")
    out = tmp_path / "out"
    assert names == ["full-seed0", "knn-seed0"]
    assert sorted(path.name for path in out.iterdir()) == ["figure4.png", "predictions", "results.json", "results.md"]
    rows = [json.loads(line) for line in (out / "predictions" / "knn-seed0.jsonl").read_text().splitlines()]
    assert rows == [{"id": "a", "prediction": "knn-seed0@encoder_window=512 a"},
                    {"id": "b", "prediction": "knn-seed0@encoder_window=512 b"}]


def test_an_unfinished_run_is_refused_before_anything_is_written(tmp_path):
    with script_module("export_compare_results") as script, pytest.raises(SystemExit, match="knn-seed0@"):
        script.export(_run(tmp_path, finished=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "run" / "results.json").unlink()
    with script_module("export_compare_results") as script, pytest.raises(SystemExit, match="results.json"):
        script.export(tmp_path / "run", tmp_path / "out")
