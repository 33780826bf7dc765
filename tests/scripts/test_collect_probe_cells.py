"""scripts/collect_probe_cells.py on a synthetic run folder: the finished cells of the asked protocols, without
their training-time diagnostics, with the gap recovered, and their table next to the JSON."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "collect_probe_cells.py"


def _cell(run: Path, protocol: str, name: str, size: int | None, off: float) -> None:
    key = f"{name}{'' if size is None else f'-s{size}'}-seed0"
    folder = run / "cells" / protocol / "recall-n4-k512" / key
    folder.mkdir(parents=True)
    record = {"protocol": protocol, "task": "recall", "n": 4, "length": 512, "name": name, "segment_size": size,
              "seed": 0, "chance": 0.0625, "train_seconds": 12.0, "settings": {}, "diagnostics": [{"step": 1}],
              "metrics": {"token_accuracy": off, "on_token_accuracy": 1.0, "off_token_accuracy": off,
                          "exact_match": 0.0}}
    (folder / "cell.json").write_text(json.dumps(record))


def test_collects_one_protocols_cells_with_the_gap_and_writes_their_table(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _cell(run, "scratch", "full", None, 0.9)  # the conversions' base: another protocol, left out
    _cell(run, "convert", "full", None, 1.0)
    _cell(run, "convert", "segmented", 32, 0.1)
    _cell(run, "convert", "block-topk-b4", 32, 0.955)
    (run / "cells" / "convert" / "recall-n4-k512" / "knn-seed0").mkdir()  # unfinished: no cell.json
    output = tmp_path / "results.json"
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(run), str(output), "convert"])
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    except SystemExit as stop:
        assert stop.code == 0
    records = json.loads(output.read_text())["records"]
    assert [r["name"] for r in records] == ["block-topk-b4", "full", "segmented"]
    assert all(r["protocol"] == "convert" and "diagnostics" not in r for r in records)
    assert abs(records[0]["gap_recovered"]["off_token_accuracy"] - 0.95) < 1e-12
    table = (tmp_path / "results.md").read_text()
    assert "| recall | 4 | 512 | 32 | block-topk-b4 | 0 | 95.5 | 100.0 | 95.5 | 0.0 | 0.95 | 6.2 | 12 |" in table
    assert "Collected from the finished cells of `run`." in table
