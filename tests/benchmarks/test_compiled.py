"""``srformer bench --compiled``: the compiled column of the step and ``generate()`` measurements.

The end-to-end run compiles with inductor on the tiniest shape the CLI offers (``--quick``: t5-tiny-sized
model, k = 64, s = 16, batch 1) and is skipped, with the probe's reason, where inductor cannot compile
(no C++ compiler). The rest (records, report, skipping) needs no compiler.
"""

from __future__ import annotations

import json

import pytest
import torch

import srformer.benchmarks.compiled as compiled_module
from srformer.benchmarks import suite
from srformer.benchmarks.records import BenchRecord, RecordError
from srformer.benchmarks.report import TABLES, metric_rows
from srformer.benchmarks.suite import SuiteSettings, run_suite
from srformer.cli.main import main


def _record(variant, value, compiled, s=None, metric="cross_attention_step_time", unit="ms"):
    return BenchRecord(variant=variant, encoder_length=64, segment_size=s, batch_size=1, metric=metric, value=value,
                       unit=unit, device="cpu", compiled=compiled)


def test_records_without_the_field_read_as_eager_and_a_non_bool_is_rejected():
    row = _record("full-sdpa", 1.0, False).to_dict()
    del row["compiled"]  # a bench.json written before the column existed
    assert BenchRecord.from_dict(row).compiled is False
    with pytest.raises(RecordError, match="compiled"):
        BenchRecord.from_dict({**row, "compiled": "yes"})


def test_report_rows_get_a_compiled_column_with_ratios_against_compiled_full_sdpa():
    records = [_record("full-sdpa", 4.0, False), _record("srformer", 2.0, False, s=16),
               _record("full-sdpa", 1.0, True), _record("srformer", 2.0, True, s=16)]
    table = next(t for t in TABLES if t.metric == "cross_attention_step_time")
    rows, variants = metric_rows(records, table)
    assert variants == ["full-sdpa", "srformer"]
    assert [(row["compiled"], row["srformer"]) for row in rows] == [("no", "2 (2.00x)"), ("yes", "2 (0.50x)")]
    eager_only, _ = metric_rows(records[:2], table)
    assert "compiled" not in eager_only[0]  # reports without --compiled keep their columns


def test_no_compiler_skips_the_compiled_column_with_the_reason(monkeypatch):
    monkeypatch.setattr(suite, "compile_unavailable_reason", lambda device_type: "InvalidCxxCompiler: no g++")
    lines: list[str] = []
    settings = SuiteSettings.quick(encoder_lengths=(64,), sections=("step",), variants=("full-sdpa",), compiled=True)
    records = run_suite(settings, progress=False, log=lines.append)
    assert records and not any(r.compiled for r in records)
    assert any("compiled column skipped" in line and "no g++" in line for line in lines)


def test_the_probe_reports_why_compiling_fails(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no working C++ compiler\nsecond line")

    compiled_module.compile_unavailable_reason.cache_clear()
    monkeypatch.setattr(torch, "compile", broken)
    try:
        assert compiled_module.compile_unavailable_reason("cpu") == "RuntimeError: no working C++ compiler"
    finally:
        compiled_module.compile_unavailable_reason.cache_clear()


@pytest.fixture(scope="module")
def inductor():
    reason = compiled_module.compile_unavailable_reason("cpu")
    if reason is not None:
        pytest.skip(f"inductor cannot compile on this machine: {reason}")


@pytest.mark.slow
def test_compiled_quick_run_writes_the_compiled_column(tmp_path, inductor):
    assert main(["bench", "--quick", "--compiled", "--output", str(tmp_path), "--no-progress", "--device", "cpu",
                 "--sections", "step", "generate", "--variants", "full-sdpa", "srformer",
                 "--encoder-lengths", "64"]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())
    measured = {(row["metric"], row["variant"], row["compiled"]) for row in rows}
    for metric in ("cross_attention_step_time", "generate_throughput"):
        for variant in ("full-sdpa", "srformer"):
            assert (metric, variant, False) in measured and (metric, variant, True) in measured
    notes = [row["note"] for row in rows if row["compiled"]]
    assert all("fullgraph=True" in note and "inductor" in note for note in notes)
    report = (tmp_path / "bench.md").read_text()
    for title in ("## Cross-attention time per decoder step (ms)", "## generate() throughput (new tokens/s)"):
        table = report.split(title)[1].split("\n## ")[0]
        assert "| compiled |" in table  # the header cell
        assert any(line.startswith("| 64 ") and "| yes |" in line for line in table.splitlines())
