"""Tests for srformer.evaluation.report."""

import json

import numpy as np
import pytest

from srformer.evaluation import format_table, write_metrics_json


def test_write_metrics_json_creates_dirs(tmp_path):
    path = tmp_path / "a" / "b" / "metrics.json"
    metrics = {"rouge1": 41.5, "n": 3, "ci": (1.0, 2.0, 3.0), "np": np.float32(0.5)}
    write_metrics_json(path, metrics)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    assert '\n  "rouge1": 41.5' in text  # indent 2
    assert json.loads(text) == {"rouge1": 41.5, "n": 3, "ci": [1.0, 2.0, 3.0], "np": 0.5}


def test_write_metrics_json_rejects_unserializable(tmp_path):
    path = tmp_path / "bad.json"
    with pytest.raises(TypeError):
        write_metrics_json(path, {"x": object()})
    assert not path.exists()


def test_format_table():
    rows = [
        {"model": "t5-small", "rouge1": 41.234, "steps": 10},
        {"model": "a|b", "rouge1": 7.0},
    ]
    table = format_table(rows, ["model", "rouge1", "steps"])
    assert table.splitlines() == [
        "| model | rouge1 | steps |",
        "| --- | --- | --- |",
        "| t5-small | 41.23 | 10 |",
        "| a\\|b | 7.00 |  |",
    ]


def test_format_table_no_rows_and_errors():
    assert format_table([], ["a"]) == "| a |\n| --- |"
    with pytest.raises(ValueError):
        format_table([{"a": 1}], [])
