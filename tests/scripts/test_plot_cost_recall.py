"""scripts/plot_cost_recall.py: the README's picture is drawn from results/ with the headline check's functions."""

from __future__ import annotations

import json

from tests.script_loading import script_module


def test_points_come_from_results_and_the_plot_is_written(tmp_path, monkeypatch):
    with script_module("plot_cost_recall") as module:
        points = {point["mechanism"]: point for point in module.points()}
        assert set(points) == {"full", "knn", "knn-rows", "knn-loki", "knn-loki-pages", "quest-b2", "quest-tree"}
        assert points["full"]["bytes_x_full"] == 1.0
        assert points["knn-loki"]["recall_64k"] == points["knn"]["recall_64k"] > points["full"]["recall_64k"]
        assert points["knn-loki"]["bytes_x_full"] < 0.1 < points["knn"]["bytes_x_full"]
        assert points["knn-loki-pages"]["bytes_x_full"] < points["knn-loki"]["bytes_x_full"]
        assert points["knn-loki-pages"]["recall_64k"] >= points["knn-loki"]["recall_64k"]
        monkeypatch.setattr(module, "ROOT", tmp_path)
        monkeypatch.setattr(module, "points", lambda: list(points.values()))
        assert module.main(["--output", "out/cost-recall"]) == 0
    assert (tmp_path / "out" / "cost-recall.png").stat().st_size > 1000
    written = json.loads((tmp_path / "out" / "cost-recall.json").read_text())
    assert [p["mechanism"] for p in written["points"]] == list(points)
    loki = points["knn-loki"]
    row = f"| `knn-loki` | {loki['bytes_x_full']:.3f} | {loki['recall_64k']:.1f} |"
    assert row in (tmp_path / "out" / "cost-recall.md").read_text()
