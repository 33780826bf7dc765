"""The main job on a tiny budget: every stage runs, the table, JSON and plot are written, and it resumes."""

from __future__ import annotations

import json

import pytest

from srformer.experiments.aclsum import ComparisonSettings, run_aclsum_comparison


@pytest.mark.slow
def test_tiny_aclsum_comparison_writes_results_and_skips_finished_stages(tmp_path):
    settings = ComparisonSettings(
        base_steps=3, finetune_steps=2, max_test_examples=3, max_new_tokens=8, max_source_length=64,
        segment_size=16, target_length=32, max_target_length=32, vocab_size=400, batch_size=4, progress=False,
    )
    rows = run_aclsum_comparison(tmp_path, settings)
    assert [r["variant"] for r in rows] == ["full", "segmented", "srformer"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["rows"][2]["segment_size"] == 16 and results["rows"][0]["segment_size"] == "-"
    assert (tmp_path / "results.png").stat().st_size > 1000
    table = (tmp_path / "results.md").read_text()
    assert "| srformer | 16 |" in table
    for variant in ("full", "segmented", "srformer"):
        saved = json.loads((tmp_path / variant / "config.json").read_text())["srformer"]["variant"]
        assert saved == variant
    stamp = (tmp_path / "srformer" / "test_metrics.json").stat().st_mtime_ns
    again = run_aclsum_comparison(tmp_path, settings)
    assert (tmp_path / "srformer" / "test_metrics.json").stat().st_mtime_ns == stamp
    assert again == rows


@pytest.mark.slow
def test_zero_finetuning_steps_score_the_converted_base_model(tmp_path):
    """convert+0: each variant is the base converted and scored with no optimizer step (no checkpoint; the full
    variant keeps the base's weights exactly)."""
    from safetensors.torch import load_file

    settings = ComparisonSettings(
        base_steps=3, finetune_steps=0, max_test_examples=3, max_new_tokens=8, max_source_length=64,
        segment_size=16, target_length=32, max_target_length=32, vocab_size=400, batch_size=4, progress=False,
        variants=("full", "srformer"),
    )
    rows = run_aclsum_comparison(tmp_path, settings)
    assert [(r["variant"], r["finetune_steps"], r["finetune_seconds"]) for r in rows] == [
        ("full", 0, 0.0), ("srformer", 0, 0.0)]
    assert not (tmp_path / "full" / "checkpoint").exists()
    base, full = (load_file(tmp_path / folder / "model.safetensors") for folder in ("base", "full"))
    assert base.keys() == full.keys() and all((base[key] == full[key]).all() for key in base)
