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
    load_long_probe_records,
    load_probe_records,
    pareto_front,
    parse_length,
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
    with pytest.raises(FileNotFoundError, match="no results.json"):
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


def long_probe_record(name: str, length: int, seed: int, off: float, *, steps: int = 0, on: float = 1.0) -> dict:
    return {"name": name, "length": length, "seed": seed, "knn_index": None, "trained_length": 512,
            "segment_size": 32, "encoder_window": 512, "finetune_steps": steps, "cell": f"convert/{name}-seed{seed}",
            "metrics": {"off_token_accuracy": off, "on_token_accuracy": on, "off_positions": 500, "on_positions": 12}}


def long_probe_file(tmp_path, records, name="long-probe"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "long_probe.json").write_text(json.dumps({"records": records}))
    return folder


def long_bench_file(tmp_path, seconds: dict[tuple[str, int], float | None], name="long-bench"):
    """seconds: (variant, length) -> seconds per token (None: refused)."""
    records = [{"kind": "encode", "length": n, "seconds": 1.0, "peak_bytes": 1, "output_bytes": 1}
               for n in sorted({n for _, n in seconds})]
    for (variant, length), value in seconds.items():
        if value is None:
            records.append({"kind": "decode", "variant": variant, "length": length, "estimated_bytes": 2**40,
                            "refused": True})
        else:
            records.append({"kind": "decode", "variant": variant, "length": length, "refused": False,
                            "first_token_seconds": 1.0, "seconds_per_token": value, "peak_bytes": 1,
                            "state_bytes": 1, "tokens": 64})
    records.append({"kind": "end_to_end", "variant": "srformer-lean", "length": 16384, "seconds": 99.0,
                    "peak_bytes": 1})
    folder = tmp_path / name
    folder.mkdir()
    settings = {"shape": "t5-small", "new_tokens": 64, "segment_size": 64}
    (folder / "long_input.json").write_text(json.dumps({"settings": settings, "records": records}))
    return folder


K16, K64, K256 = 16384, 65536, 262144
LONG_PROBE = [long_probe_record("knn", K16, 0, 1.0), long_probe_record("knn", K16, 1, 0.9),
              long_probe_record("knn", K64, 0, 0.8),
              long_probe_record("srformer", K16, 0, 0.05), long_probe_record("srformer", K16, 0, 0.25, steps=400),
              long_probe_record("knn (ivf, 32 probes)", K16, 0, 0.7),
              long_probe_record("knn (ivf, 4 probes)", K16, 0, 0.6)]
LONG_BENCH = {("segmented", K16): 0.010, ("segmented", K256): 0.020, ("knn", K16): 0.030, ("knn", K256): None,
              ("knn-ivf", K16): 0.015, ("knn-ivf", K256): 0.080, ("srformer-lean", K16): 0.025,
              ("srformer", K16): 0.011}


def long_payload(tmp_path, **options):
    return pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE,
                      long_probe_records=load_long_probe_records([long_probe_file(tmp_path, LONG_PROBE)]),
                      long_bench=[long_bench_file(tmp_path, LONG_BENCH)], **options)


def test_long_recall_columns_are_seed_means_per_length_and_fine_tuning_budget(tmp_path):
    payload = long_payload(tmp_path)
    labels = [c["label"] for c in payload["long_input"]["recall_columns"]]
    assert labels == ["recall 16k (convert+0)", "recall 64k (convert+0)", "recall 16k (convert+400)"]
    rows = {row["name"]: row for row in payload["rows"]}
    knn = rows["knn"]["long_recall"]["recall 16k (convert+0)"]
    assert knn["off"] == pytest.approx(0.95) and knn["seeds"] == [0, 1] and knn["off_by_seed"] == [1.0, 0.9]
    # +0 and +400 cells of srformer stay in their own columns
    assert rows["srformer"]["long_recall"]["recall 16k (convert+0)"]["off"] == pytest.approx(0.05)
    assert rows["srformer"]["long_recall"]["recall 16k (convert+400)"]["off"] == pytest.approx(0.25)
    table = pick_markdown(payload)
    head = next(line for line in table.splitlines() if line.startswith("| mechanism"))
    assert head.endswith("| recall 16k (convert+0) | recall 64k (convert+0) | recall 16k (convert+400) "
                         "| ms/token 16k (× segmented) | ms/token 256k (× segmented) |")
    knn_line = next(line for line in table.splitlines() if line.startswith("| knn |"))
    assert knn_line.endswith("| 95.0 [2 seeds] | 80.0 | - | 30.0 (3.00) | refused |")
    assert "synthetic recall and random-weight timings" in table


def test_long_bench_times_are_ms_per_token_and_multiples_of_segmented(tmp_path):
    payload = long_payload(tmp_path)
    assert [c["length"] for c in payload["long_input"]["time_columns"]] == [K16, K256]
    rows = {row["name"]: row for row in payload["rows"]}
    knn = rows["knn"]["long_time"]
    assert knn["ms/token 16k (× segmented)"]["ms_per_token"] == pytest.approx(30.0)
    assert knn["ms/token 16k (× segmented)"]["segmented_ratio"] == pytest.approx(3.0)
    assert knn["ms/token 256k (× segmented)"]["refused"] and knn["ms/token 256k (× segmented)"]["ms_per_token"] is None
    assert rows["segmented"]["long_time"]["ms/token 256k (× segmented)"]["segmented_ratio"] == pytest.approx(1.0)
    lean = rows["srformer (lean_cache=True)"]
    assert lean["long_input_only"] and lean["long_time"]["ms/token 16k (× segmented)"]["segmented_ratio"] == \
        pytest.approx(2.5)
    table = pick_markdown(payload)
    assert "| segmented | " in table and "| 10.0 (1.00) | 20.0 (1.00) |" in table


def test_the_index_rows_join_long_probe_and_long_bench_names(tmp_path):
    payload = long_payload(tmp_path)
    names = [row["name"] for row in payload["rows"]]
    # one row for knn with the default ivf index (long-probe's 32 probes, long-bench's knn-ivf), right after knn
    assert names[names.index("knn") + 1:names.index("knn") + 3] == ["knn (ivf index)", "knn (ivf index, 4 probes)"]
    rows = {row["name"]: row for row in payload["rows"]}
    ivf = rows["knn (ivf index)"]
    assert ivf["long_input_only"] and ivf["quality"] == {} and ivf["step_ratio"] is None
    assert ivf["long_recall"]["recall 16k (convert+0)"]["off"] == pytest.approx(0.7)
    assert ivf["long_time"]["ms/token 256k (× segmented)"]["ms_per_token"] == pytest.approx(80.0)
    assert ivf["long_time"]["ms/token 256k (× segmented)"]["segmented_ratio"] == pytest.approx(4.0)
    assert "knn-ivf" not in names and "srformer-lean" not in names
    assert not rows["knn"]["long_input_only"]
    table = pick_markdown(payload)
    line = next(line for line in table.splitlines() if line.startswith("| knn (ivf index) |"))
    # no quality, cost or front (six dashes), then recall 16k +0, 64k +0, 16k +400 and the two time columns
    assert line == "| knn (ivf index) | - | - | - | - | - | - | 70.0 | - | - | 15.0 (1.50) | 80.0 (4.00) |"
    assert "| knn (ivf index, 4 probes) | - | - | - | - | - | - | 60.0 | - | - | - | - |" in table


def test_mechanisms_without_long_input_data_show_a_dash(tmp_path):
    payload = long_payload(tmp_path)
    rows = {row["name"]: row for row in payload["rows"]}
    assert rows["ablation-III"]["long_recall"] == {} and rows["ablation-III"]["long_time"] == {}
    line = next(line for line in pick_markdown(payload).splitlines() if line.startswith("| ablation-III |"))
    assert line.endswith("| - | - | - | - | - |")
    written = json.loads((write_pick(payload, tmp_path / "out") / "pick.json").read_text())
    assert written["long_input"]["time_columns"][1]["label"] == "ms/token 256k (× segmented)"
    assert {row["name"]: row for row in written["rows"]}["knn (ivf index)"]["long_recall"]


def test_long_lengths_choose_the_columns_and_must_be_present(tmp_path):
    payload = long_payload(tmp_path, long_lengths=[K16])
    assert [c["label"] for c in payload["long_input"]["recall_columns"]] == ["recall 16k (convert+0)",
                                                                              "recall 16k (convert+400)"]
    assert [c["label"] for c in payload["long_input"]["time_columns"]] == ["ms/token 16k (× segmented)"]
    (tmp_path / "again").mkdir()
    with pytest.raises(ValueError, match=r"\[4096\] are in no --long-probe or --long-bench file"):
        long_payload(tmp_path / "again", long_lengths=[4096])
    assert parse_length("16k") == K16 and parse_length("1M") == 2**20 and parse_length("4,096") == 4096
    with pytest.raises(ValueError, match="not an input length"):
        parse_length("16q")


def test_without_long_inputs_the_table_is_unchanged(tmp_path):
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE)
    assert payload["long_input"]["recall_columns"] == [] and payload["long_input"]["time_columns"] == []
    table = pick_markdown(payload)
    assert "Long-input columns" not in table and "recall " not in table and "ms/token" not in table


def test_a_later_long_bench_file_adds_lengths_against_its_own_segmented(tmp_path):
    later = long_bench_file(tmp_path, {("segmented", 2**20): None, ("knn-ivf", 2**20): 0.5,
                                       ("knn", K16): 9.0}, "later")
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE,
                         long_bench=[long_bench_file(tmp_path, LONG_BENCH), later])
    rows = {row["name"]: row for row in payload["rows"]}
    assert rows["knn"]["long_time"]["ms/token 16k (× segmented)"]["ms_per_token"] == pytest.approx(30.0)
    ivf = rows["knn (ivf index)"]["long_time"]["ms/token 1M (× segmented)"]
    assert ivf["ms_per_token"] == pytest.approx(500.0) and ivf["segmented_ratio"] is None and ivf["bench_file"] == 1
    table = pick_markdown(payload)
    assert "| 500.0 (file 2) |" in table and "refused (file 2) |" in table and "file 2: " in table


def test_cli_takes_the_long_input_options(tmp_path, capsys):
    arguments = ["pick", "--probe", str(probe_file(tmp_path, PROBE)), "--bench", str(bench_file(tmp_path, BENCH)),
                 "--long-probe", str(long_probe_file(tmp_path, LONG_PROBE)),
                 "--long-bench", str(long_bench_file(tmp_path, LONG_BENCH) / "long_input.json")]
    assert main([*arguments, "--long-lengths", "16k", "--output", str(tmp_path / "o")]) == 0
    assert "3 long-input columns" in capsys.readouterr().out
    table = (tmp_path / "o" / "pick.md").read_text()
    assert "recall 16k (convert+0)" in table and "ms/token 256k" not in table and "| knn (ivf index) |" in table
    assert main([*arguments, "--long-lengths", "4k", "--output", str(tmp_path / "p")]) == 2
    assert main(["pick", "--probe", str(tmp_path / "probe"), "--bench", str(tmp_path / "bench.json"),
                 "--long-probe", str(tmp_path / "nowhere"), "--output", str(tmp_path / "q")]) == 2
    assert "no long_probe.json" in capsys.readouterr().err


def test_long_recall_of_two_encoder_windows_is_never_merged_and_bad_files_name_the_fix(tmp_path):
    narrow = [dict(long_probe_record("knn", K16, 0, 0.5), encoder_window=256)]
    records = load_long_probe_records([long_probe_file(tmp_path, LONG_PROBE), long_probe_file(tmp_path, narrow, "w")])
    payload = pick_table(load_probe_records([probe_file(tmp_path, PROBE)]), bench_file(tmp_path, BENCH), WHERE,
                         long_probe_records=records)
    labels = [c["label"] for c in payload["long_input"]["recall_columns"]]
    assert labels[:2] == ["recall 16k (k512 w256, convert+0)", "recall 16k (k512 w512, convert+0)"]
    knn = {row["name"]: row for row in payload["rows"]}["knn"]["long_recall"]
    assert knn[labels[0]]["off"] == pytest.approx(0.5) and knn[labels[1]]["off"] == pytest.approx(0.95)
    with pytest.raises(FileNotFoundError, match="no long_probe.json"):
        load_long_probe_records([tmp_path / "missing"])
    (tmp_path / "other.json").write_text("[]")
    with pytest.raises(ValueError, match="not a `srformer long-bench` long_input.json"):
        pick_table(PROBE, bench_file(tmp_path, BENCH, "b.json"), WHERE, long_bench=[tmp_path / "other.json"])
