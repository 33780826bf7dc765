"""``srformer long-probe``: scoring finished recall cells at longer inputs through chunked encoding."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from srformer.cli.main import main
from srformer.probe.long_input import (
    LongProbeSettings,
    find_cells,
    long_probe_table,
    run_long_probe,
    write_long_probe,
)
from srformer.probe.runner import ProbeSettings, run_probe
from srformer.probe.training import ModelShape


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    run_probe(folder, ProbeSettings(tasks=("recall",), recall_sizes=(2,), lengths=(32,), segment_sizes=(8,),
                                    variants=("full", "srformer", "linear", "knn"), steps=2, finetune_steps=2,
                                    batch_size=2, curriculum_start=32, eval_examples=2, shape=tiny, progress=False,
                                    workers=1, seeds=(0, 1)))
    return folder


def test_longer_inputs_are_scored_in_windows_of_the_trained_length_and_resumed(probe_run, tmp_path, monkeypatch):
    from srformer.models import chunked_encoding

    calls = []
    real = chunked_encoding.encode_in_windows
    monkeypatch.setattr(chunked_encoding, "encode_in_windows", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    settings = LongProbeSettings(runs=(str(probe_run),), variants=("full", "srformer", "linear"), lengths=(64, 96),
                                 examples=4, batch_size=2)
    records = run_long_probe(settings, tmp_path, log=lambda line: None)
    assert sorted((r["name"], r["length"], r["seed"]) for r in records) == [
        ("full", 64, 0), ("full", 96, 0), ("linear", 64, 0), ("linear", 96, 0), ("srformer", 64, 0),
        ("srformer", 96, 0)]
    assert calls and all(windows.window == 32 for windows in calls)  # the trained length
    assert all(r["trained_length"] == 32 and r["metrics"]["examples"] == 4 for r in records)
    calls.clear()
    assert run_long_probe(settings, tmp_path, log=lambda line: None) == records and not calls  # nothing redone
    written = write_long_probe(tmp_path)
    assert "| srformer (2) |" in written["markdown"].read_text() and written["plot"].is_file()


def test_a_variant_without_a_finished_cell_is_named_with_the_seed(probe_run):
    with pytest.raises(FileNotFoundError, match="block-topk"):
        find_cells([probe_run], ["full", "block-topk"], seed=0)
    with pytest.raises(FileNotFoundError, match=r"seed 7, .*\['full'\].*--seeds 7"):
        find_cells([probe_run], ["full"], seed=7)
    assert find_cells([probe_run], ["full"], seed=1)["full"].name == "full-seed1"


def test_the_registered_settings_cell_wins_over_one_with_extra_settings(probe_run, tmp_path):
    import shutil

    plain = probe_run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0"
    run = tmp_path / "run"
    shutil.copytree(plain, run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0")
    explored = run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0@kv_clamp=5.0"
    shutil.copytree(plain, explored)
    record = json.loads((explored / "cell.json").read_text())
    (explored / "cell.json").write_text(json.dumps({**record, "settings": {"kv_clamp": 5.0}}))
    assert find_cells([run], ["linear"], seed=0)["linear"].name == "linear-seed0"
    shutil.rmtree(run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0")
    assert find_cells([run], ["linear"], seed=0)["linear"] == explored  # the only cell there
    assert find_cells([run, probe_run], ["linear"], seed=0)["linear"] == plain  # a later run wins


def test_the_command_writes_its_outputs(probe_run, tmp_path):
    assert main(["long-probe", "--runs", str(probe_run), "--variants", "linear", "--lengths", "48", "--examples",
                 "2", "--output", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "long_probe.json").read_text())["records"][0]["length"] == 48


def test_knn_cells_are_scored_through_the_index_one_position_at_a_time(probe_run, tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    from srformer.probe import long_input

    stepwise = []
    real = long_input.predict_stepwise
    monkeypatch.setattr(long_input, "predict_stepwise", lambda *a, **k: stepwise.append(1) or real(*a, **k))
    exact = run_long_probe(LongProbeSettings(runs=(str(probe_run),), variants=("knn",), lengths=(64,), examples=4,
                                             batch_size=2), tmp_path, log=lambda line: None)
    assert not stepwise
    settings = LongProbeSettings(runs=(str(probe_run),), variants=("knn",), lengths=(64,), examples=4, batch_size=2,
                                 knn_index="ivf", index_probes=2)
    records = run_long_probe(settings, tmp_path, log=lambda line: None)
    assert stepwise and [r["name"] for r in records] == ["knn", "knn (ivf, 2 probes)"]
    assert records[1]["knn_index"] == "ivf" and records[1]["metrics"]["examples"] == exact[0]["metrics"]["examples"]
    with pytest.raises(ValueError, match="knn"):
        LongProbeSettings(runs=("x",), variants=("full",), knn_index="flat")


def test_top_keys_reads_more_keys_and_names_the_row(probe_run, tmp_path, monkeypatch):
    """``top_keys`` reaches the knn module of the scored cell and the row says so; only knn cells take it."""
    from srformer.probe import long_input

    built = []
    real = long_input.convert
    monkeypatch.setattr(long_input, "convert", lambda model, config: built.append(config) or real(model, config))
    settings = LongProbeSettings(runs=(str(probe_run),), variants=("knn",), lengths=(64,), examples=4, batch_size=2,
                                 top_keys=3)
    records = run_long_probe(settings, tmp_path, log=lambda line: None)
    assert [r["name"] for r in records] == ["knn (top 3)"] and built[-1].top_keys == 3
    assert long_input._label("knn", replace(settings, knn_index="loki")) == "knn (loki, r=12, C=256, top 3)"
    with pytest.raises(ValueError, match="knn"):
        LongProbeSettings(runs=("x",), variants=("full",), top_keys=3)
    with pytest.raises(ValueError, match="top_keys"):
        LongProbeSettings(runs=("x",), variants=("knn",), top_keys=0)


def test_pages_reach_the_knn_module_and_name_the_row(probe_run, tmp_path, monkeypatch):
    """``index_page`` and ``index_pages`` reach the scored cell's config and the row says so; they need loki."""
    from srformer.probe import long_input

    built = []
    real = long_input.convert
    monkeypatch.setattr(long_input, "convert", lambda model, config: built.append(config) or real(model, config))
    settings = LongProbeSettings(runs=(str(probe_run),), variants=("knn",), lengths=(64,), examples=2, batch_size=2,
                                 knn_index="loki", index_page=4, index_pages=9)
    records = run_long_probe(settings, tmp_path, log=lambda line: None)
    assert [r["name"] for r in records] == ["knn (loki, r=12, C=256, pages 4 x 9)"]
    assert built[-1].index_page == 4 and built[-1].index_pages == 9
    with pytest.raises(ValueError, match="index_page"):
        LongProbeSettings(runs=("x",), variants=("knn",), index_page=4)


@pytest.mark.parametrize("bad", [dict(lengths=(0,)), dict(examples=0), dict(variants=()), dict(seeds=()),
                                 dict(seeds=(-1,)), dict(seeds=(True,)), dict(seeds=(2**32,))])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        LongProbeSettings(**{"runs": ("x",), "variants": ("full",), **bad})


def test_several_seeds_are_scored_resumed_by_seed_and_averaged_in_the_table(probe_run, tmp_path):
    settings = LongProbeSettings(runs=(str(probe_run),), variants=("full", "linear"), lengths=(64,), examples=4,
                                 batch_size=2)
    first = run_long_probe(settings, tmp_path, log=lambda line: None)
    assert [(r["name"], r["seed"]) for r in first] == [("full", 0), ("linear", 0)]
    # a record written before seeds were scored has no "seed": it counts as seed 0 and is kept
    payload = json.loads((tmp_path / "long_probe.json").read_text())
    for record in payload["records"]:
        del record["seed"]
    (tmp_path / "long_probe.json").write_text(json.dumps(payload))
    logged: list[str] = []
    both = replace(settings, seeds=(0, 1))
    records = run_long_probe(both, tmp_path, log=logged.append)
    assert [(r["name"], r.get("seed", 0)) for r in records] == [("full", 0), ("linear", 0), ("full", 1),
                                                                ("linear", 1)]
    assert len(logged) == 2 and all("(seed 1)" in line for line in logged)
    assert [r["cell"] for r in records[2:]] == [f"convert/recall-n2-k32/{name}-seed1" for name in ("full", "linear")]
    assert run_long_probe(both, tmp_path, log=lambda line: pytest.fail(line)) == records  # nothing redone
    table = write_long_probe(tmp_path)["markdown"].read_text()
    for name in ("full", "linear"):
        zero, one = (r["metrics"]["off_token_accuracy"] for r in records if r["name"] == name)
        mean = f"{100 * (zero + one) / 2:.1f}"
        each = f" ({100 * zero:.1f}, {100 * one:.1f})" if f"{100 * zero:.1f}" != f"{100 * one:.1f}" else ""
        assert f"| {name} (2) | {mean}{each} / " in table
    assert "seeds 0, 1" in table
    with pytest.raises(FileNotFoundError, match="seed 2"):
        run_long_probe(replace(settings, seeds=(0, 2)), tmp_path, log=lambda line: None)


def _row(name, seed, off, on, steps=100, length=2048):
    row = {"name": name, "length": length, "seed": seed, "trained_length": 512, "segment_size": 8,
           "encoder_window": 512, "finetune_steps": steps,
           "metrics": {"off_token_accuracy": off, "on_token_accuracy": on, "on_positions": 3, "off_positions": 509}}
    if seed is None:
        del row["seed"]
    return row


def test_the_table_shows_the_mean_over_seeds_with_the_per_seed_values_and_zero_steps():
    records = [_row("srformer", 0, 0.989, 1.0), _row("srformer", 1, 0.995, 1.0),
               _row("full", None, 0.5, None, steps=0), _row("full", 1, 0.25, 0.5, steps=0),
               _row("linear", 0, 0.125, 0.5, steps=0)]
    table = long_probe_table(records)
    assert "| srformer (100) | 99.2 (98.9, 99.5) / 100.0 |" in table  # equal per-seed values are not repeated
    assert "| full (0) | 37.5 (50.0, 25.0) / 50.0 (-, 50.0) |" in table  # a record without a seed is seed 0
    assert "| linear (0) | 12.5 / 50.0 |" in table  # one seed: no parentheses
    assert "(seeds 0, 1)" in table and "2,048: 3 / 509" in table
    assert "| linear (0) | 12.5 / 50.0 |" in long_probe_table(records[-1:]) and "(seed 0)" in long_probe_table(
        records[-1:])


def test_the_command_scores_the_seeds_it_is_given(probe_run, tmp_path):
    assert main(["long-probe", "--runs", str(probe_run), "--variants", "linear", "--seeds", "0", "1", "--lengths",
                 "48", "--examples", "2", "--output", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "long_probe.json").read_text())["records"]
    assert [(r["length"], r["seed"]) for r in records] == [(48, 0), (48, 1)]
    assert "| linear (2) |" in (tmp_path / "long_probe.md").read_text()
