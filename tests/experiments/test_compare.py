"""``srformer compare`` on a tiny grid with a tiny budget, its statistics and its grid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from srformer.cli.main import main
from srformer.evaluation.statistics import paired_difference, seed_spread
from srformer.experiments import compare as compare_module
from srformer.experiments.compare import Cell, CompareSettings, grid_cells

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "xsum_sample"
TINY = [
    "--max-train-examples", "24", "--max-test-examples", "5", "--base-steps", "3", "--finetune-steps", "2",
    "--segment-sizes", "8", "32", "--seeds", "0", "1", "--variants", "full", "srformer", "xl",
    "--ablations", "ablation-II", "--vocab-size", "300", "--max-source-length", "64", "--target-length", "8",
    "--max-target-length", "16", "--max-new-tokens", "6", "--batch-size", "4", "--no-progress",
]


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="needs the shared xsum_sample data")
def test_tiny_grid_writes_tables_plots_and_json_and_skips_finished_cells(tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--train-data", str(DATA / "train.jsonl"), "--test-data", str(DATA / "validation.jsonl"),
            "--output", str(out), *TINY]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    keys = sorted(cell["key"] for cell in results["cells"])
    # full once per seed; srformer and xl per segment size and seed; the ablation next to srformer at s = 32
    assert keys == sorted(
        [f"full-seed{k}" for k in (0, 1)]
        + [f"{n}-s{s}-seed{k}" for n in ("srformer", "xl") for s in (8, 32) for k in (0, 1)]
        + [f"ablation-II-s32-seed{k}" for k in (0, 1)]
    )
    for cell in results["cells"]:
        assert len(cell["per_document"]["rouge1"]) == 5 and cell["metrics"]["num_examples"] == 5
        predictions = (out / "cells" / cell["key"] / "test_predictions.jsonl").read_text().splitlines()
        assert cell["distinct_outputs"] == len({json.loads(line)["prediction"] for line in predictions})
        saved = json.loads((out / "cells" / cell["key"] / "config.json").read_text())["srformer"]
        assert saved["variant"] == {"full": "full", "xl": "xl"}.get(cell["name"], "srformer")
        if cell["name"] == "ablation-II":
            assert saved["ablation"] == "no_norm"
    groups = {(g["name"], g["segment_size"]): g for g in results["groups"]}
    assert set(groups) == {
        ("full", None), ("srformer", 8), ("srformer", 32), ("xl", 8), ("xl", 32), ("ablation-II", 32)
    }
    assert all(g["rouge1"]["num_seeds"] == 2 and g["seeds"] == [0, 1] for g in groups.values())
    paired = {(p["other"], p["segment_size"]) for p in results["paired"]}
    assert paired == {("full", 8), ("full", 32), ("xl", 8), ("xl", 32), ("ablation-II", 32), ("lead-3", 8),
                      ("lead-3", 32)}
    assert results["lead3"]["num_documents"] == 5
    table = (out / "results.md").read_text()
    for heading in (
        "Table 2 shape", "Figure 4 shape", "Table 3 shape", "(II) no norm(K)", "**Segment size 8**", " / 5 |",
        "Do the models read their input?", "## Against lead-3", "| lead-3 (first three sentences) |",
    ):
        assert heading in table
    assert (out / "figure4.png").stat().st_size > 5000 and (out / "table3.png").stat().st_size > 5000
    assert "cells; results in" in capsys.readouterr().out

    # Re-run: nothing is trained again. Then lose one cell: only that cell is re-run.
    trained = []
    original = compare_module.train_stage

    def recording_train_stage(spec, pairs, output, settings):
        trained.append(output.name)
        return original(spec, pairs, output, settings)

    monkeypatch.setattr(compare_module, "train_stage", recording_train_stage)
    assert main(args) == 0
    assert trained == ["base"]  # train_stage finds the finished base and returns; finished cells are not asked
    shutil.rmtree(out / "cells" / "xl-s8-seed1")
    assert main(args) == 0
    assert trained == ["base", "base", "xl-s8-seed1"]
    rerun_groups = json.loads((out / "results.json").read_text())["groups"]
    rerun = {g["name"] + str(g["segment_size"]): g["rouge1"] for g in rerun_groups}
    assert rerun == {g["name"] + str(g["segment_size"]): g["rouge1"] for g in results["groups"]}


def _result(name, size, seed, rouge1):
    per_document = {key: list(rouge1) for key in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    metrics = {key: sum(rouge1) / len(rouge1) for key in per_document} | {"seconds": 1.0, "num_examples": len(rouge1)}
    return compare_module.CellResult(Cell(name, size, seed), metrics, 2.0, per_document)


def test_summary_spreads_over_seeds_and_pairs_documents_against_srformer():
    settings = CompareSettings(variants=("full", "srformer"), segment_sizes=(8,), ablations=(), seeds=(0, 1))
    results = [
        _result("full", None, 0, [10.0, 20.0, 30.0]), _result("full", None, 1, [20.0, 20.0, 20.0]),
        _result("srformer", 8, 0, [20.0, 30.0, 40.0]), _result("srformer", 8, 1, [30.0, 30.0, 30.0]),
    ]
    payload = compare_module.summarize(results, settings)
    groups = {g["name"]: g for g in payload["groups"]}
    assert groups["full"]["rouge1"] == {"mean": 20.0, "std": 0.0, "num_seeds": 2}
    assert groups["srformer"]["rouge1"]["mean"] == 30.0
    (paired,) = payload["paired"]
    assert (paired["other"], paired["segment_size"]) == ("full", 8)
    # per document, averaged over seeds: srformer (25, 30, 35) vs full (15, 20, 25): +10 everywhere
    assert paired["rouge1"]["mean"] == pytest.approx(10.0) and paired["rouge1"]["low"] == pytest.approx(10.0)
    assert paired["rouge1"]["a_wins"] == 1.0 and paired["rouge1"]["significant"]


def test_input_check_names_the_cells_below_ninety_percent():
    from srformer.experiments.compare_report import input_check

    def cell(key, distinct, n=20):
        return {"key": key, "distinct_outputs": distinct, "metrics": {"num_examples": n}}

    reading = input_check({"cells": [cell("full-seed0", 20), cell("srformer-s16-seed0", 18)]})
    assert reading.startswith("All 2 cells") and "fewest: srformer-s16-seed0, 18 / 20" in reading
    mixed = input_check({"cells": [cell("full-seed0", 18), cell("linear-seed0", 17), cell("xl-s16-seed0", 1)]})
    assert mixed.startswith("2 of 3 cells") and "linear-seed0 (17 / 20), xl-s16-seed0 (1 / 20)" in mixed
    assert "full-seed0" not in mixed


def test_grid_runs_segment_free_settings_once_per_seed_and_ablations_at_one_size():
    settings = CompareSettings(variants=("linear", "segmented"), segment_sizes=(16, 64), ablations=("ablation-IV",),
                               seeds=(3,))
    assert grid_cells(settings) == [
        Cell("linear", None, 3), Cell("segmented", 16, 3), Cell("segmented", 64, 3),
        Cell("srformer", 64, 3), Cell("ablation-IV", 64, 3),
    ]


@pytest.mark.parametrize("kwargs,match", [
    (dict(variants=("no-such-variant",)), "Unknown variant names"),
    (dict(variants=(), ablations=()), "grid is empty"),
    (dict(seeds=()), "seeds"),
    (dict(base_steps=0), "base_steps=0"),
])
def test_bad_grids_are_rejected_with_the_argument_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CompareSettings(**kwargs)


def test_paired_difference_known_answers():
    same = paired_difference([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert (same.mean, same.low, same.high, same.a_wins, same.b_wins) == (0.0, 0.0, 0.0, 0.0, 0.0)
    shifted = paired_difference([3.0, 5.0, 9.0, 4.0], [1.0, 3.0, 7.0, 2.0])  # +2 on every document
    assert (shifted.mean, shifted.low, shifted.high) == pytest.approx((2.0, 2.0, 2.0))
    assert shifted.a_wins == 1.0 and shifted.significant
    noisy = paired_difference([1.0, 0.0] * 20, [0.0, 1.0] * 20)
    assert noisy.mean == 0.0 and noisy.low < 0 < noisy.high and not noisy.significant
    with pytest.raises(ValueError, match="equally long"):
        paired_difference([1.0], [1.0, 2.0])


def test_seed_spread_uses_the_sample_standard_deviation():
    spread = seed_spread([10.0, 12.0])
    assert spread.mean == 11.0 and spread.std == pytest.approx(2**0.5) and spread.num_seeds == 2
    assert seed_spread([5.0]).std == 0.0


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="needs the shared xsum_sample data")
def test_a_trained_checkpoint_is_the_base_with_zero_base_steps(tmp_path):
    """The paper's protocol: convert a given full-attention checkpoint (here a local one; a hub id
    such as t5-small online) without training a base first."""
    first = tmp_path / "first"
    common = ["--train-data", str(DATA / "train.jsonl"), "--test-data", str(DATA / "validation.jsonl"), *TINY]
    common[common.index("--variants") + 1 : common.index("--ablations")] = ["srformer"]
    common[common.index("--seeds") + 1 : common.index("--variants")] = ["0"]
    common[common.index("--segment-sizes") + 1 : common.index("--seeds")] = ["8"]
    assert main(["compare", "--output", str(first), *common, "--ablations"]) == 0
    second = tmp_path / "second"
    reuse_base = ["--model", str(first / "base"), "--base-steps", "0"]
    assert main(["compare", "--output", str(second), *common, "--ablations", *reuse_base]) == 0
    assert not (second / "base").exists()
    run = json.loads((second / "cells" / "srformer-s8-seed0" / "srformer_run.json").read_text())
    assert run["model"] == str(first / "base")
    assert len(json.loads((second / "results.json").read_text())["cells"]) == 1


def test_changing_decoding_regenerates_without_retraining(tmp_path, monkeypatch):
    """A cell scored with other decoding settings is decoded again from its saved model, not retrained."""
    if not DATA.is_dir():
        pytest.skip("needs the shared xsum_sample data")
    common = ["compare", "--train-data", str(DATA / "train.jsonl"), "--test-data", str(DATA / "validation.jsonl"),
              "--output", str(tmp_path), *TINY]
    common[common.index("--variants") + 1 : common.index("--ablations")] = ["segmented"]
    common[common.index("--seeds") + 1 : common.index("--variants")] = ["0"]
    common[common.index("--segment-sizes") + 1 : common.index("--seeds")] = ["8"]
    assert main([*common, "--ablations", "--no-repeat-ngram-size", "0"]) == 0
    cell = tmp_path / "cells" / "segmented-s8-seed0"
    weights = (cell / "model.safetensors").stat().st_mtime_ns
    assert json.loads((cell / "cell.json").read_text())["metrics"]["no_repeat_ngram_size"] == 0
    assert main([*common, "--ablations", "--no-repeat-ngram-size", "2"]) == 0
    assert json.loads((cell / "cell.json").read_text())["metrics"]["no_repeat_ngram_size"] == 2
    assert json.loads((cell / "test_metrics.json").read_text())["no_repeat_ngram_size"] == 2
    assert (cell / "model.safetensors").stat().st_mtime_ns == weights
    assert "no repeated 2-gram" in (tmp_path / "results.md").read_text()


def test_variant_settings_are_checked_against_every_cell_of_the_grid():
    with pytest.raises(ValueError, match=r"Variant 'full' rejects the settings \{'window_size': 64\}.*VARIANT:"):
        CompareSettings(variants=("full", "window"), ablations=(), variant_settings={"full": {"window_size": 64}})
    with pytest.raises(ValueError, match="'strided', which is not among the grid's variants"):
        CompareSettings(variants=("window",), ablations=(), variant_settings={"strided": {"stride": 4}})
    with pytest.raises(ValueError, match="Variant 'window' rejects .* at segment size 64"):  # w = 32 < s = 64
        CompareSettings(variants=("window",), segment_sizes=(8, 64), ablations=(),
                        variant_settings={"window": {"window_size": 32}})
    # srformer runs next to the ablations, so it may get settings although --variants does not name it
    CompareSettings(variants=("full",), ablations=("ablation-III",), variant_settings={"srformer": {"kv_clamp": 5.0}})


def test_cell_directory_and_same_settings():
    from srformer.experiments.compare import cell_directory, same_settings

    cell = Cell("window", 8, 0)
    assert cell_directory(cell, {}) == "window-s8-seed0"
    assert cell_directory(cell, {"window_size": 16, "kv_clamp": None}) == "window-s8-seed0@kv_clamp=None+window_size=16"
    assert same_settings({"metrics": {}}, {})  # a record of before the option: made with no settings
    assert not same_settings({"metrics": {}}, {"window_size": 16})
    assert same_settings({"settings": {"window_size": 16}}, {"window_size": 16})
    assert not same_settings({"settings": {"window_size": 16}}, {"window_size": 24})


def test_a_changed_setting_reruns_only_its_named_settings_cells(tmp_path, monkeypatch):
    """Training and decoding replaced by stand-ins (the tiny real grid above covers them): what is trained, with
    which config, and where."""
    from dataclasses import replace

    from srformer.data.pairs import SummaryPair

    trained = []

    def train_stage(spec, pairs, output, settings):
        trained.append((output.name, spec.srformer))
        return {"seconds": 1.0}

    def evaluate_stage(run_dir, test_pairs, *, max_new_tokens, num_beams, no_repeat_ngram_size, **_):
        metrics = {"num_examples": len(test_pairs), "num_beams": num_beams, "max_new_tokens": max_new_tokens,
                   "no_repeat_ngram_size": no_repeat_ngram_size, "seconds": 0.5,
                   **{key: 10.0 for key in ("rouge1", "rouge2", "rougeL", "rougeLsum")}}
        return metrics, [f"summary {run_dir.name} {i}" for i in range(len(test_pairs))]

    monkeypatch.setattr(compare_module, "train_stage", train_stage)
    monkeypatch.setattr(compare_module, "evaluate_stage", evaluate_stage)
    pairs = [SummaryPair(f"document {i} words", f"summary {i}", str(i)) for i in range(3)]
    plain = CompareSettings(model="some/checkpoint", base_steps=0, variants=("full", "window"), segment_sizes=(8,),
                            ablations=(), seeds=(0,), progress=False)
    compare_module.run_compare(tmp_path, pairs, pairs, plain)
    assert [name for name, _ in trained] == ["full-seed0", "window-s8-seed0"]
    # records written before the option existed have no settings entry: they are reused
    for path in (tmp_path / "cells").rglob("cell.json"):
        record = json.loads(path.read_text())
        assert record.pop("settings") == {}
        path.write_text(json.dumps(record))
    trained.clear()
    compare_module.run_compare(tmp_path, pairs, pairs, plain)
    assert trained == []

    wide = replace(plain, variant_settings={"window": {"window_size": 16}})
    payload = compare_module.run_compare(tmp_path, pairs, pairs, wide)
    ((name, config),) = trained
    assert name == "window-s8-seed0@window_size=16" and config.resolved_window_size() == 16
    assert {c["key"]: c["settings"] for c in payload["cells"]} == {"full-seed0": {},
                                                                  "window-s8-seed0": {"window_size": 16}}
    assert "| window (window_size=16) |" in (tmp_path / "results.md").read_text()
    trained.clear()
    compare_module.run_compare(tmp_path, pairs, pairs, wide)
    compare_module.run_compare(tmp_path, pairs, pairs, plain)  # the cell without settings is still there
    assert trained == []


def test_the_base_trains_with_the_settings_given_to_full_in_a_folder_named_after_them(tmp_path, monkeypatch):
    """An encoder_window given to every setting reaches the trained base too (its source may be longer than the
    encoder's positions), and a base trained without settings is not reused for it."""
    from srformer.data.pairs import SummaryPair

    trained = []
    monkeypatch.setattr(compare_module, "train_stage",
                        lambda spec, pairs, output, settings: trained.append((output.name, spec.srformer)) or {})
    monkeypatch.setattr(compare_module, "evaluate_stage", lambda run_dir, test_pairs, **_: (
        {"num_examples": len(test_pairs), "seconds": 0.5, **{k: 10.0 for k in ("rouge1", "rouge2", "rougeL",
                                                                               "rougeLsum")}},
        [f"summary {i}" for i in range(len(test_pairs))]))
    pairs = [SummaryPair(f"document {i} words", f"summary {i}", str(i)) for i in range(3)]
    settings = CompareSettings(model="t5-tiny", base_steps=2, variants=("full",), segment_sizes=(8,), ablations=(),
                               seeds=(0,), progress=False, variant_settings={"full": {"encoder_window": 32}})
    compare_module.run_compare(tmp_path, pairs, pairs, settings)
    (base_name, base_config), (cell_name, cell_config) = trained
    assert base_name == "base@encoder_window=32" and base_config.encoder_window == 32
    assert cell_name == "full-seed0@encoder_window=32" and cell_config.encoder_window == 32


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="needs the shared xsum_sample data")
def test_zero_finetuning_steps_score_the_converted_base_as_it_is(tmp_path, monkeypatch):
    """convert+0: every cell is the base converted, saved and scored with no optimizer step (no checkpoint, the
    base's weights), its record says 0 steps, and a re-run reuses it."""
    from safetensors.torch import load_file

    out = tmp_path / "cmp"
    args = ["compare", "--train-data", str(DATA / "train.jsonl"), "--test-data", str(DATA / "validation.jsonl"),
            "--output", str(out), *TINY]
    args[args.index("--finetune-steps") + 1] = "0"
    args[args.index("--variants") + 1: args.index("--ablations")] = ["full", "srformer"]
    args[args.index("--seeds") + 1: args.index("--variants")] = ["0"]
    args[args.index("--segment-sizes") + 1: args.index("--seeds")] = ["8"]
    args[args.index("--ablations") + 1: args.index("--ablations") + 2] = []
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert sorted(cell["key"] for cell in results["cells"]) == ["full-seed0", "srformer-s8-seed0"]
    base = load_file(out / "base" / "model.safetensors")
    for cell in results["cells"]:
        folder = out / "cells" / cell["key"]
        assert cell["finetune_steps"] == 0 and cell["finetune_seconds"] == 0.0
        assert json.loads((folder / "training_summary.json").read_text())["steps"] == 0
        assert not (folder / "checkpoint").exists() and cell["metrics"]["num_examples"] == 5
        weights = load_file(folder / "model.safetensors")
        assert all(torch.equal(weights[key], base[key]) for key in base.keys() & weights.keys())
        assert all(".raf." in key for key in weights.keys() - base.keys())
    assert "0 fine-tuning steps" in (out / "results.md").read_text()
    monkeypatch.setattr(compare_module, "convert_stage", lambda *a, **k: pytest.fail("a finished cell was redone"))
    assert main(args) == 0


def test_a_zero_step_conversion_never_overwrites_a_fine_tuned_run(tmp_path):
    from srformer.config import named_config
    from srformer.experiments.stages import convert_stage
    from srformer.training.pipeline import RunSpec

    spec = RunSpec(model="t5-tiny", srformer=named_config("full", segment_size=8, target_length=8))
    (tmp_path / "training_summary.json").write_text(json.dumps({"steps": 2, "seconds": 1.0}))
    with pytest.raises(ValueError, match="fine-tuned for 2 steps.*choose another output directory"):
        convert_stage(spec, [], tmp_path, seed=0)
