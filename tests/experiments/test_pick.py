"""``srformer pick``: probe quality joined with bench cost, the gap recovered, and the Pareto front."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from srformer.benchmarks.records import BenchRecord, write_records_json
from srformer.cli.main import main
from srformer.experiments.pick import (
    CostColumns,
    load_probe_records,
    pareto_front,
    pick_markdown,
    pick_table,
    write_pick,
)

BUDGET = {"train": {"steps": 100, "min_curriculum_segments": 2}, "segment_sizes": [8],
          "base": {"train": {"steps": 1000, "min_curriculum_segments": 2}}}
WHERE = CostColumns(encoder_length=4096, segment_size=64, batch_size=8, device="cpu")


def record(name: str, seed: int, off: float, on: float, *, length: int = 128, settings: dict | None = None) -> dict:
    return {"protocol": "convert", "task": "recall", "n": 4, "length": length, "name": name,
            "segment_size": None if name in ("full", "linear", "knn") else 8, "seed": seed,
            "key": f"convert/recall-n4-k{length}/{name}-seed{seed}", "budget": BUDGET, "settings": settings or {},
            "metrics": {"off_token_accuracy": off, "on_token_accuracy": on}}


def probe_file(tmp_path, records, name="probe"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"settings": {}, "records": records}))
    return folder


def bench_file(tmp_path, values: dict[str, tuple[float, float, float]], name="bench.json"):
    """values: bench variant -> (step ms, generate tokens/s, cache bytes)."""
    records = []
    for variant, (step, throughput, cache) in values.items():
        size = None if variant in ("full-sdpa", "linear", "knn", "knn-4") else 64
        for metric, value, unit in (("cross_attention_step_time", step, "ms"),
                                    ("generate_throughput", throughput, "tokens/s"),
                                    ("cross_attention_cache_bytes", cache, "bytes")):
            records.append(BenchRecord(variant, 4096, size, 8, metric, value, unit, "cpu"))
    records.append(BenchRecord("srformer", 4096, 16, 8, "cross_attention_step_time", 1e6, "ms", "cpu"))  # other s
    return write_records_json(tmp_path / name, records)


PROBE = [record("full", 0, 0.9, 1.0), record("full", 1, 1.0, 1.0),
         record("segmented", 0, 0.1, 1.0), record("segmented", 1, 0.1, 1.0),
         record("srformer", 0, 0.3, 0.9), record("srformer", 1, 0.5, 0.9),
         record("ablation-III", 0, 0.6, 0.5), record("knn", 0, 0.95, 1.0), record("knn", 1, 0.95, 1.0),
         record("knn-4", 0, 0.4, 1.0), record("srformer", 0, 0.99, 1.0, settings={"raf_threshold": 2.0})]
BENCH = {"full-sdpa": (10.0, 100.0, 6 * 2**20), "segmented": (0.5, 400.0, 6 * 2**19),
         "srformer": (1.0, 300.0, 6 * 2**18), "knn": (5.0, 120.0, 6 * 2**20)}


def test_quality_is_the_seed_mean_with_the_gap_recovered_against_full_and_segmented(tmp_path):
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE)
    rows = {row["name"]: row for row in payload["rows"]}
    label = payload["columns"][0]["label"]
    srformer = rows["srformer"]["quality"][label]
    assert srformer["off"] == pytest.approx(0.4) and srformer["on"] == pytest.approx(0.9)
    assert srformer["seeds"] == [0, 1]  # the run with an extra --setting is another mechanism, left out
    assert srformer["gap_recovered"] == pytest.approx((0.4 - 0.1) / (0.95 - 0.1))
    assert rows["full"]["quality"][label]["gap_recovered"] == pytest.approx(1.0)
    # one seed: against full and segmented of that seed only
    assert rows["ablation-III"]["quality"][label]["gap_recovered"] == pytest.approx((0.6 - 0.1) / (0.9 - 0.1))


def test_costs_are_ratios_to_full_at_the_bench_shape(tmp_path):
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE)
    rows = {row["name"]: row for row in payload["rows"]}
    assert rows["srformer"]["step_ratio"] == pytest.approx(0.1)  # the s=16 record is another shape
    assert rows["srformer"]["generate_ratio"] == pytest.approx(100 / 300)
    assert rows["srformer"]["state_bytes_per_layer"] == pytest.approx(2**18)  # t5-small: 6 decoder layers
    assert rows["ablation-III"]["cost_from_variant"] and rows["ablation-III"]["step_ratio"] == pytest.approx(0.1)
    assert rows["knn-4"]["step_ratio"] is None  # other settings than knn's: not knn's cost
    assert not rows["knn"]["cost_from_variant"] and rows["knn"]["step_ratio"] == pytest.approx(0.5)


def test_a_later_bench_run_adds_what_the_first_lacks_against_its_own_full(tmp_path):
    """knn-4 is only in the second run: its ratios are against the second run's full-sdpa (twice as slow there),
    while knn, in both, keeps the first run's; the table marks the later run's cells."""
    later = bench_file(tmp_path, {"full-sdpa": (20.0, 50.0, 6 * 2**20), "knn": (99.0, 1.0, 1.0),
                                  "knn-4": (8.0, 60.0, 6 * 2**20)}, "later.json")
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), [bench_file(tmp_path, BENCH), later],
                         WHERE)
    rows = {row["name"]: row for row in payload["rows"]}
    assert rows["knn-4"]["step_ratio"] == pytest.approx(0.4) and rows["knn-4"]["bench_run"] == 1
    assert rows["knn-4"]["generate_ratio"] == pytest.approx(50 / 60)
    assert rows["knn"]["step_ratio"] == pytest.approx(0.5) and rows["knn"]["bench_run"] == 0
    table = pick_markdown(payload)
    assert "0.400 (run 2)" in table and "0.500 |" in table and "run 2: " in table
    with pytest.raises(ValueError, match="no full-sdpa record"):
        pick_table(load_probe_records([probe_file(tmp_path, PROBE, "again")]),
                   [bench_file(tmp_path, BENCH), bench_file(tmp_path, {"knn": (1.0, 1.0, 1.0)}, "bad.json")], WHERE)


def test_the_front_holds_the_undominated_mechanisms(tmp_path):
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE)
    front = payload["fronts"][payload["columns"][0]["label"]]
    # segmented (cheapest), ablation-III (srformer's cost, more off-segment than srformer), knn
    assert front == ["segmented", "ablation-III", "knn"]  # knn is as accurate as full and cheaper


def test_write_pick_writes_the_table_the_json_and_the_plot(tmp_path):
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE)
    folder = write_pick(payload, tmp_path / "out")
    table = (folder / "pick.md").read_text()
    assert "| srformer | 40.0 / 90.0 (0.35) [2 seeds] | 0.100 | 0.333 | 0.25 | - |" in table
    assert "0.100 (as srformer)" in table and (folder / "pick.png").stat().st_size > 0
    assert json.loads((folder / "pick.json").read_text())["fronts"] == payload["fronts"]


def test_columns_separate_lengths_and_fine_tuning_budgets(tmp_path):
    longer = [dict(r, budget=dict(BUDGET, train={"steps": 400, "min_curriculum_segments": 2})) for r in PROBE[:4]]
    k512 = [record("full", 0, 0.9, 1.0, length=512), record("segmented", 0, 0.1, 1.0, length=512)]
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE), probe_file(tmp_path, longer + k512, "b")]),
                         bench_file(tmp_path, BENCH), WHERE)
    assert [c["short"] for c in payload["columns"]] == ["k128 convert+100", "k128 convert+400", "k512 convert+100"]


def test_a_cell_found_twice_keeps_the_last_files_record(tmp_path):
    first = probe_file(tmp_path, PROBE)
    second = probe_file(tmp_path, [record("srformer", 0, 0.7, 0.9)], "again")
    records = load_probe_records([first, second])
    srformer = [r for r in records if r["name"] == "srformer" and not r["settings"]]
    assert sorted(r["metrics"]["off_token_accuracy"] for r in srformer) == [0.5, 0.7]


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.tuples(st.floats(0.01, 10), st.floats(0, 1)), min_size=1))
def test_pareto_front_members_are_undominated_and_the_rest_dominated(points):
    front = pareto_front(points)

    def dominates(p, q):
        return p[0] <= q[0] and p[1] >= q[1] and (p[0] < q[0] or p[1] > q[1])

    for name in front:
        assert not any(dominates(other, points[name]) for other in points.values())
    for name in set(points) - set(front):
        assert any(dominates(points[other], points[name]) for other in front)
    assert [points[n][0] for n in front] == sorted(points[n][0] for n in front)


def test_bad_input_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="no probe results.json"):
        load_probe_records([tmp_path / "missing"])
    (tmp_path / "other.json").write_text("[]")
    with pytest.raises(ValueError, match="not a `srformer probe` results.json"):
        load_probe_records([tmp_path / "other.json"])
    with pytest.raises(ValueError, match="no full-sdpa record"):
        pick_table(PROBE, bench_file(tmp_path, {"srformer": (1.0, 1.0, 1.0)}), WHERE)
    with pytest.raises(ValueError, match="No probe cell records"):
        pick_table([], bench_file(tmp_path, BENCH), WHERE)


def test_cli_writes_the_pick_folder(tmp_path, capsys):
    folder = probe_file(tmp_path, PROBE)
    bench = bench_file(tmp_path, BENCH)
    assert main(["pick", "--probe", str(folder), "--bench", str(bench), "--output", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "pick.md").is_file() and "mechanisms" in capsys.readouterr().out
    assert main(["pick", "--probe", str(tmp_path / "nope"), "--bench", str(bench), "--output", str(tmp_path)]) == 2


def test_the_lean_layouts_state_is_its_own_column(tmp_path):
    bench = bench_file(tmp_path, BENCH | {"srformer-lean": (2.0, 250.0, 6 * 2**16)})
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench, WHERE)
    rows = {row["name"]: row for row in payload["rows"]}
    assert rows["srformer"]["lean_state_bytes_per_layer"] == pytest.approx(2**16)
    assert rows["srformer"]["step_ratio"] == pytest.approx(0.1)  # the standard layout's step
    assert rows["knn"]["lean_state_bytes_per_layer"] is None
