"""``srformer bench --quick`` end to end: every record well-formed, every output file written."""

from __future__ import annotations

import json
import math

import pytest
import torch

from srformer.benchmarks.outputs import OUTPUT_FILES
from srformer.benchmarks.records import (
    DEFAULT_BENCH_VARIANTS,
    KNOWN_UNITS,
    KNOWN_VARIANTS,
    METRIC_UNITS,
    read_records_json,
)
from srformer.cli.main import main

FIELDS = {"variant", "encoder_length", "segment_size", "batch_size", "metric", "value", "unit", "device"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--quick", "--output", str(output), "--no-progress"]) == 0
    return output


@pytest.mark.slow
def test_quick_run_writes_every_output_file(quick_run):
    for name in OUTPUT_FILES:
        assert (quick_run / name).is_file(), name
    for name in ("step_time.png", "figure5.png"):
        data = (quick_run / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
    report = (quick_run / "bench.md").read_text()
    assert "## Performance goals" in report and "## Cross-attention time per decoder step (ms)" in report
    assert "encoder excluded" in report or "excludes the encoder" in report


@pytest.mark.slow
def test_every_record_is_well_formed(quick_run):
    rows = json.loads((quick_run / "bench.json").read_text())
    assert rows, "no records"
    for row in rows:
        assert set(row) >= FIELDS, row
        assert row["variant"] in KNOWN_VARIANTS
        assert row["unit"] in KNOWN_UNITS and row["unit"] == METRIC_UNITS[row["metric"]]
        assert isinstance(row["value"], (int, float)) and math.isfinite(row["value"]) and row["value"] > 0
        assert isinstance(row["encoder_length"], int) and row["encoder_length"] > 0
        assert isinstance(row["batch_size"], int) and row["batch_size"] > 0
        assert (row["segment_size"] is None) == row["variant"].startswith("full")
    assert len(read_records_json(quick_run / "bench.json")) == len(rows)  # the reader validates too


@pytest.mark.slow
def test_quick_run_measures_every_metric_and_variant(quick_run):
    records = read_records_json(quick_run / "bench.json")
    metrics = {r.metric for r in records}
    expected = set(METRIC_UNITS)
    assert expected <= metrics, expected - metrics
    stepped = {r.variant for r in records if r.metric == "cross_attention_step_time"}
    assert stepped == set(DEFAULT_BENCH_VARIANTS)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert {r.device for r in records} == {device, "theory"}
    assert {r.encoder_length for r in records if r.metric == "generate_throughput"} == {64, 128}
    assert all("encoder excluded" in r.note for r in records if r.metric == "generate_throughput")


@pytest.mark.slow
def test_quick_run_cache_bytes_follow_the_layouts(quick_run):
    records = read_records_json(quick_run / "bench.json")
    cache = {(r.variant, r.encoder_length): r.value for r in records if r.metric == "cross_attention_cache_bytes"}
    # t5-tiny: 2 decoder layers, 4 heads, d_kv 32; full keeps K and V of every position (float32)
    for k in (64, 128):
        assert cache[("full-sdpa", k)] == 2 * 2 * 4 * k * 32 * 4
        assert cache[("full-eager", k)] == cache[("full-sdpa", k)]
        assert cache[("srformer", k)] > cache[("full-sdpa", k)]  # standard layout keeps K, V and per-segment RAF state


@pytest.mark.parametrize("argv", [["--variants", "no-such-variant"], ["--encoder-lengths", "0"], ["--sections", "all"]])
def test_bad_arguments_are_rejected(tmp_path, argv):
    with pytest.raises(SystemExit) as error:
        main(["bench", "--output", str(tmp_path), *argv])
    assert error.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_machine_is_a_clear_error(tmp_path, capsys):
    assert main(["bench", "--quick", "--device", "cuda", "--output", str(tmp_path)]) == 2
    assert "no CUDA" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_of_the_baselines_fills_their_columns(tmp_path):
    """xl, longt5 and linear are opt-in; linear has no segment size and appears in every segment row."""
    assert main(["bench", "--quick", "--output", str(tmp_path), "--no-progress", "--sections", "step", "memory",
                 "--variants", "full-sdpa", "xl", "longt5", "linear"]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())
    steps = {(row["variant"], row["segment_size"]) for row in rows if row["metric"] == "cross_attention_step_time"}
    assert {v for v, _ in steps} == {"full-sdpa", "xl", "longt5", "linear"}
    assert all((s is None) == (v in ("full-sdpa", "linear")) for v, s in steps)
    table = (tmp_path / "bench.md").read_text().split("## Cross-attention time per decoder step (ms)")[1].split("##")[0]
    data_rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert data_rows and all(line.rstrip().endswith("x) |") for line in data_rows)  # the linear column is filled


def test_generate_times_the_default_set_and_every_opt_in_variant():
    from srformer.benchmarks.records import DEFAULT_BENCH_VARIANTS
    from srformer.benchmarks.suite_generate import GENERATE_VARIANTS, generate_variants

    assert generate_variants(DEFAULT_BENCH_VARIANTS) == tuple(v for v in DEFAULT_BENCH_VARIANTS
                                                              if v in GENERATE_VARIANTS)
    assert generate_variants(("knn", "segmented-lean", "full-sdpa", "block-topk")) == ("knn", "full-sdpa",
                                                                                        "block-topk")


def test_quick_generate_of_an_opt_in_mechanism_is_timed(tmp_path):
    assert main(["bench", "--quick", "--output", str(tmp_path), "--no-progress", "--sections", "generate",
                 "--variants", "full-sdpa", "knn"]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert {row["variant"] for row in rows if row["metric"] == "generate_throughput"} == {"full-sdpa", "knn"}
    assert {row["variant"] for row in rows if row["metric"] == "cross_attention_cache_bytes"} == {"full-sdpa", "knn"}


def test_a_variant_setting_changes_what_is_counted_and_is_noted(tmp_path):
    """``--setting knn-loki:index_rank=R``: fewer channels read fewer persistent bytes per token, and each of the
    variant's records carries its settings in the note."""
    def per_token_bytes(folder, extra):
        assert main(["bench", "--quick", "--output", str(folder), "--no-progress", "--sections", "operators",
                     "--variants", "knn-loki", "--encoder-lengths", "128", *extra]) == 0
        records = read_records_json(folder / "bench.json")
        return records, next(r.value for r in records if r.metric == "persistent_bytes_per_token")

    default_records, default_bytes = per_token_bytes(tmp_path / "default", [])
    records, fewer = per_token_bytes(tmp_path / "rank2", ["--setting", "knn-loki:index_rank=2"])
    assert fewer < default_bytes
    assert all(r.note.endswith("settings: index_rank=2") for r in records)
    assert not any("settings:" in r.note for r in default_records)


@pytest.mark.parametrize("setting,message", [
    ("index_rank=2", "write VARIANT:NAME=VALUE"),
    ("full-sdpa:index_rank=2", "unmodified model takes no settings"),
    ("segmented:index_rank=2", "not among `variants`"),
    ("knn-loki:no_such=2", "no_such"),
])
def test_bad_variant_settings_are_clear_errors(tmp_path, capsys, setting, message):
    assert main(["bench", "--quick", "--output", str(tmp_path), "--variants", "full-sdpa", "knn-loki",
                 "--setting", setting]) == 2
    assert message in capsys.readouterr().err
