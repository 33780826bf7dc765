"""``srformer long-probe``: scoring finished recall cells at longer inputs through chunked encoding."""

from __future__ import annotations

import json

import pytest

from srformer.cli.main import main
from srformer.probe.long_input import LongProbeSettings, find_cells, run_long_probe, write_long_probe
from srformer.probe.runner import ProbeSettings, run_probe
from srformer.probe.training import ModelShape


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    run_probe(folder, ProbeSettings(tasks=("recall",), recall_sizes=(2,), lengths=(32,), segment_sizes=(8,),
                                    variants=("full", "srformer", "linear", "knn"), steps=2, finetune_steps=2,
                                    batch_size=2, curriculum_start=32, eval_examples=2, shape=tiny, progress=False,
                                    workers=1))
    return folder


def test_longer_inputs_are_scored_in_windows_of_the_trained_length_and_resumed(probe_run, tmp_path, monkeypatch):
    from srformer.models import chunked_encoding

    calls = []
    real = chunked_encoding.encode_in_windows
    monkeypatch.setattr(chunked_encoding, "encode_in_windows", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    settings = LongProbeSettings(runs=(str(probe_run),), variants=("full", "srformer", "linear"), lengths=(64, 96),
                                 examples=4, batch_size=2)
    records = run_long_probe(settings, tmp_path, log=lambda line: None)
    assert sorted((r["name"], r["length"]) for r in records) == [
        ("full", 64), ("full", 96), ("linear", 64), ("linear", 96), ("srformer", 64), ("srformer", 96)]
    assert calls and all(windows.window == 32 for windows in calls)  # the trained length
    assert all(r["trained_length"] == 32 and r["metrics"]["examples"] == 4 for r in records)
    calls.clear()
    assert run_long_probe(settings, tmp_path, log=lambda line: None) == records and not calls  # nothing redone
    written = write_long_probe(tmp_path)
    assert "| srformer (2) |" in written["markdown"].read_text() and written["plot"].is_file()


def test_a_variant_without_a_finished_cell_is_named(probe_run):
    with pytest.raises(FileNotFoundError, match="block-topk"):
        find_cells([probe_run], ["full", "block-topk"])


def test_the_registered_settings_cell_wins_over_one_with_extra_settings(probe_run, tmp_path):
    import shutil

    plain = probe_run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0"
    run = tmp_path / "run"
    shutil.copytree(plain, run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0")
    explored = run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0@kv_clamp=5.0"
    shutil.copytree(plain, explored)
    record = json.loads((explored / "cell.json").read_text())
    (explored / "cell.json").write_text(json.dumps({**record, "settings": {"kv_clamp": 5.0}}))
    assert find_cells([run], ["linear"])["linear"].name == "linear-seed0"
    shutil.rmtree(run / "cells" / "convert" / "recall-n2-k32" / "linear-seed0")
    assert find_cells([run], ["linear"])["linear"] == explored  # the only cell there
    assert find_cells([run, probe_run], ["linear"])["linear"] == plain  # a later run wins


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


@pytest.mark.parametrize("bad", [dict(lengths=(0,)), dict(examples=0), dict(variants=())])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        LongProbeSettings(**{"runs": ("x",), "variants": ("full",), **bad})
