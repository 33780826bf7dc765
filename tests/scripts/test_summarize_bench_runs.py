"""scripts/summarize_bench_runs.py: ratios within each run, then min / median / max over runs, as a table and JSON."""

from __future__ import annotations

import json

from tests.script_loading import script_module


def _run(path, fill_full, fill_srformer):
    records = [
        {"variant": variant, "encoder_length": 4096, "segment_size": size, "batch_size": 8, "metric": metric,
         "value": value}
        for variant, size, metric, value in [
            ("full-sdpa", None, "cross_attention_step_time", 10.0), ("srformer", 64, "cross_attention_step_time", 0.5),
            ("full-sdpa", None, "cross_attention_prefill_time", fill_full),
            ("srformer", 64, "cross_attention_prefill_time", fill_srformer),
        ]
    ]
    path.write_text(json.dumps(records))
    return str(path)


def test_ratios_are_taken_per_run_and_summarised_over_runs(tmp_path, capsys):
    paths = [_run(tmp_path / f"run{i}.json", full, mine)
             for i, (full, mine) in enumerate([(500.0, 600.0), (400.0, 440.0), (500.0, 575.0)])]
    with script_module("summarize_bench_runs") as module:
        module.main(paths, str(tmp_path / "ratios.json"))
    table = json.loads((tmp_path / "ratios.json").read_text())
    build = table["k=4096, s=64, batch 8"]["state build: srformer time / full cache fill"]
    assert build == {"min": 1.1, "median": 1.15, "max": 1.2, "runs": 3}
    assert table["k=4096, s=64, batch 8"]["step: full time / srformer time"]["median"] == 20.0
    assert "| k=4096, s=64, batch 8 | state build: srformer time / full cache fill | 1.10 / 1.15 / 1.20 | 3 |" in (
        capsys.readouterr().out)
