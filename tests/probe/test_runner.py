"""Probe grid: cells, the schedule length, gap recovered on records, settings validation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from srformer.config import NAMED_SETTINGS, named_config
from srformer.probe.comparison import add_gap_recovered
from srformer.probe.grid import ProbeSettings, grid_cells, schedule_length
from srformer.probe.tasks import TaskSpec


def test_default_variants_are_the_papers_and_every_compare_name_is_accepted():
    assert ProbeSettings().variants == ("full", "segmented", "srformer")
    assert ProbeSettings(variants=tuple(NAMED_SETTINGS)).variants == tuple(NAMED_SETTINGS)


def test_grid_runs_full_first_and_segment_free_once():
    settings = ProbeSettings(tasks=("recall",), recall_sizes=(4,), lengths=(128,), segment_sizes=(16, 32),
                             variants=("segmented", "full", "linear"))
    cells = grid_cells(settings)
    assert [c.protocol for c in cells] == ["scratch"] * 4 + ["convert"] * 4
    assert [(c.name, c.segment_size) for c in cells[:4]] == [("full", None), ("segmented", 16), ("segmented", 32),
                                                            ("linear", None)]
    assert len({c.key for c in cells}) == len(cells)


def test_schedule_length_covers_target_and_segments():
    assert schedule_length(TaskSpec("recall", 4), 512, 32) == 16
    assert schedule_length(TaskSpec("recall", 16), 512, 32) == 33


def _record(name, s, off):
    return {"name": name, "segment_size": s, "protocol": "scratch", "task": "recall", "n": 4, "length": 512,
            "seed": 0, "metrics": {"token_accuracy": off, "off_token_accuracy": off}}


def test_gap_recovered_on_records():
    records = [_record("full", None, 0.9), _record("segmented", 32, 0.1), _record("srformer", 32, 0.5),
               _record("segmented", 16, 0.1)]
    add_gap_recovered(records)
    assert records[2]["gap_recovered"]["off_token_accuracy"] == pytest.approx(0.5)
    assert records[1]["gap_recovered"]["off_token_accuracy"] == pytest.approx(0.0)
    assert records[0]["gap_recovered"] == {}


@pytest.mark.parametrize("bad,match", [
    ({"tasks": ("sort",)}, "tasks"), ({"variants": ("fast",)}, "variant"), ({"protocols": ("x",)}, "protocols"),
    ({"seeds": ()}, "seeds"), ({"steps": 0}, "steps"), ({"segment_sizes": (0,)}, "segment"),
])
def test_settings_validation(bad, match):
    with pytest.raises(ValueError, match=match):
        ProbeSettings(**bad)


def _mtimes(output):
    return {str(p.relative_to(output)): p.stat().st_mtime_ns for p in (output / "cells").rglob("cell.json")}


def test_rerun_skips_finished_cells_and_redoes_cells_of_another_budget(tmp_path):
    from srformer.probe.runner import run_probe
    from srformer.probe.training import ModelShape

    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    settings = ProbeSettings(tasks=("recall",), recall_sizes=(2,), lengths=(32,), segment_sizes=(8,),
                             variants=("full", "segmented"), steps=2, finetune_steps=2, batch_size=2,
                             curriculum_start=32, eval_examples=2, shape=tiny, progress=False, workers=1)
    run_probe(tmp_path, settings)
    first = _mtimes(tmp_path)
    assert len(first) == 4
    run_probe(tmp_path, settings)
    assert _mtimes(tmp_path) == first
    run_probe(tmp_path, ProbeSettings(**{**settings.__dict__, "finetune_steps": 3}))
    again = _mtimes(tmp_path)
    changed = {key for key in first if again[key] != first[key]}
    assert changed == {key for key in first if key.startswith("cells/convert/")}


def test_variant_settings_are_checked_against_the_grids_configs():
    with pytest.raises(ValueError, match="'window', which is not among the grid's variants"):
        ProbeSettings(variants=("full", "segmented"), variant_settings={"window": {"window_size": 64}})
    with pytest.raises(ValueError, match=r"Variant 'segmented' rejects the settings \{'window_size': 64\}"):
        ProbeSettings(variants=("segmented", "window"), variant_settings={"segmented": {"window_size": 64}})
    with pytest.raises(ValueError, match="Variant 'window' rejects .* at segment size 32"):  # w < s
        ProbeSettings(variants=("window",), segment_sizes=(32,), variant_settings={"window": {"window_size": 16}})


def test_cell_settings_are_the_named_settings_own_and_the_bases_for_convert_cells():
    from srformer.probe.grid import ProbeCell, cell_settings
    from srformer.probe.store import same_cell_settings

    settings = ProbeSettings(variants=("full", "window"), segment_sizes=(32,),
                             variant_settings={"window": {"window_size": 64}})
    window = ProbeCell("scratch", "recall", 4, 512, "window", 32, 0)
    full = ProbeCell("scratch", "recall", 4, 512, "full", None, 0)
    assert cell_settings(window, settings) == {"settings": {"window_size": 64}}
    assert cell_settings(full, settings) == {"settings": {}}
    assert cell_settings(replace(window, protocol="convert"), settings) == {"settings": {"window_size": 64}}
    with_base = replace(settings, variant_settings={"full": {"kv_clamp": 5.0}})
    assert cell_settings(replace(window, protocol="convert"), with_base) == {
        "settings": {}, "base_settings": {"kv_clamp": 5.0}}
    # a record written before --setting existed has neither entry: it matches a cell without settings only
    old = {"budget": {}, "metrics": {}}
    assert same_cell_settings(old, cell_settings(full, settings))
    assert not same_cell_settings(old, cell_settings(window, settings))
    assert not same_cell_settings(old, cell_settings(replace(window, protocol="convert"), with_base))


def test_a_changed_setting_reruns_only_its_named_settings_cells_and_old_records_are_reused(tmp_path, monkeypatch):
    from srformer.probe import runner
    from srformer.probe.training import ModelShape

    configs = []
    original = runner.convert

    def spy(model, config):
        configs.append(config)
        return original(model, config)

    monkeypatch.setattr(runner, "convert", spy)
    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    settings = ProbeSettings(tasks=("recall",), recall_sizes=(2,), lengths=(32,), segment_sizes=(8,),
                             variants=("full", "window"), steps=2, finetune_steps=2, batch_size=2,
                             curriculum_start=32, eval_examples=2, shape=tiny, progress=False, workers=1)
    runner.run_probe(tmp_path, settings)
    first = _mtimes(tmp_path)
    assert len(first) == 4
    # Records written before the option existed have no settings entry: strip them; they are still reused.
    for path in [*(tmp_path / "cells").rglob("cell.json"), *(tmp_path / "bases").rglob("budget.json")]:
        record = json.loads(path.read_text())
        assert record.pop("settings") == {}
        path.write_text(json.dumps(record))
    first = _mtimes(tmp_path)
    configs.clear()
    runner.run_probe(tmp_path, settings)
    assert _mtimes(tmp_path) == first and configs == []

    changed_settings = replace(settings, variant_settings={"window": {"window_size": 16}})
    payload = runner.run_probe(tmp_path, changed_settings)
    again = _mtimes(tmp_path)
    own = {f"cells/{protocol}/recall-n2-k32/window-s8-seed0@window_size=16/cell.json"
           for protocol in ("scratch", "convert")}
    # the window cells of the new setting have folders of their own: the registered setting's cells are kept
    assert set(again) == set(first) | own and all(again[key] == first[key] for key in first)
    assert [c.resolved_window_size() for c in configs] == [16, 16]  # the setting reached both window cells' configs
    settings_of = {r["key"]: r.get("settings") for r in payload["records"]}
    assert settings_of["scratch/recall-n2-k32/window-s8-seed0@window_size=16"] == {"window_size": 16}
    assert settings_of["scratch/recall-n2-k32/full-seed0"] is None  # the reused record of before the option
    assert "| window (window_size=16) |" in (tmp_path / "results.md").read_text()
    configs.clear()
    runner.run_probe(tmp_path, changed_settings)
    runner.run_probe(tmp_path, settings)
    assert _mtimes(tmp_path) == again and configs == []  # both settings' cells are reused


def test_a_cell_saved_under_its_plain_key_with_settings_is_moved_to_its_own_folder(tmp_path, monkeypatch):
    """Before cells of extra settings had folders of their own, they were saved under the plain key (and the base
    of extra ``full`` settings under the plain base folder): such a finished run is moved, not trained again."""
    from srformer.probe import runner
    from srformer.probe.training import ModelShape

    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    settings = ProbeSettings(tasks=("recall",), recall_sizes=(2,), lengths=(32,), segment_sizes=(8,),
                             variants=("full", "window"), steps=2, finetune_steps=2, batch_size=2,
                             curriculum_start=32, eval_examples=2, shape=tiny, progress=False, workers=1,
                             variant_settings={"full": {"kv_clamp": 5.0}, "window": {"window_size": 16}})
    runner.run_probe(tmp_path, settings)
    folders = sorted(p.parent.relative_to(tmp_path).as_posix() for p in (tmp_path / "cells").rglob("cell.json"))
    assert folders == ["cells/convert/recall-n2-k32/full-seed0@kv_clamp=5.0+base.kv_clamp=5.0",
                       "cells/convert/recall-n2-k32/window-s8-seed0@window_size=16+base.kv_clamp=5.0",
                       "cells/scratch/recall-n2-k32/full-seed0@kv_clamp=5.0",
                       "cells/scratch/recall-n2-k32/window-s8-seed0@window_size=16"]
    assert [p.name for p in (tmp_path / "bases").iterdir()] == ["recall-n2-k32-seed0@kv_clamp=5.0"]
    for folder in [*folders, "bases/recall-n2-k32-seed0@kv_clamp=5.0"]:
        (tmp_path / folder).rename(tmp_path / folder.split("@")[0])  # the layout of before
    monkeypatch.setattr(runner, "train_model", lambda *args, **kwargs: pytest.fail("a finished cell was retrained"))
    payload = runner.run_probe(tmp_path, settings)
    assert sorted(r["key"].split("@")[0] for r in payload["records"]) == sorted(
        f.removeprefix("cells/").split("@")[0] for f in folders)
    assert sorted(p.parent.relative_to(tmp_path).as_posix() for p in (tmp_path / "cells").rglob("cell.json")) == folders
    assert [p.name for p in (tmp_path / "bases").iterdir()] == ["recall-n2-k32-seed0@kv_clamp=5.0"]
    # a plain-key record of other settings is not taken: it stays where it is, and the cell is trained anew
    monkeypatch.undo()
    plain = tmp_path / "cells" / "scratch" / "recall-n2-k32" / "window-s8-seed0"
    (tmp_path / folders[3]).rename(plain)
    record = json.loads((plain / "cell.json").read_text())
    (plain / "cell.json").write_text(json.dumps({**record, "settings": {"window_size": 12}}))
    runner.run_probe(tmp_path, settings)
    assert (plain / "cell.json").is_file() and (tmp_path / folders[3] / "cell.json").is_file()


def test_a_cell_finished_without_diagnostics_is_measured_from_its_saved_model(tmp_path):
    import torch

    from srformer.models.convert import convert
    from srformer.probe.runner import run_probe
    from srformer.probe.tasks import generate_examples
    from srformer.probe.training import ModelShape, build_model, diagnose

    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=2, num_heads=2, d_kv=8)
    settings = ProbeSettings(tasks=("recall",), recall_sizes=(2,), lengths=(32,), segment_sizes=(8,),
                             variants=("full", "srformer"), protocols=("scratch",), steps=2, batch_size=2,
                             curriculum_start=32, eval_examples=4, shape=tiny, progress=False, diagnostics_every=0,
                             workers=1)
    run_probe(tmp_path, settings)
    cell_dir = tmp_path / "cells" / "scratch" / "recall-n2-k32" / "srformer-s8-seed0"
    assert json.loads((cell_dir / "cell.json").read_text())["diagnostics_eval"] is None
    measured = run_probe(tmp_path, replace(settings, diagnostics_every=100))["records"]
    record = next(r for r in measured if r["name"] == "srformer")
    full = next(r for r in measured if r["name"] == "full")
    assert full["diagnostics_eval"] is None  # no recurrent layer
    # independently: the saved model, measured on the same held-out examples
    target_length = record["target_length"]
    config = named_config("srformer", segment_size=8, target_length=target_length)
    model = convert(build_model(settings.vocabulary, tiny, 0), config)
    model.load_state_dict(torch.load(cell_dir / "model.pt", weights_only=True))
    examples = generate_examples(TaskSpec("recall", 2), settings.vocabulary, count=4, length=32, segment_size=8,
                                 target_length=target_length, seed=10_000)
    expected = diagnose(model, examples, settings.vocabulary)
    assert record["diagnostics_eval"] == json.loads(json.dumps(expected))
    assert json.loads((cell_dir / "cell.json").read_text())["diagnostics_eval"] == record["diagnostics_eval"]


def test_phases_train_every_base_before_the_convert_cells():
    from srformer.probe.grid import base_of
    from srformer.probe.pool import _phases

    settings = ProbeSettings(tasks=("recall",), recall_sizes=(2, 4), lengths=(64,), segment_sizes=(8,),
                             variants=("segmented", "srformer"), protocols=("convert",))
    cells = grid_cells(settings)
    assert all(c.protocol == "convert" for c in cells)
    first, waiting = _phases(cells)
    # the grid has no full cell, so what starts at once is exactly the two problems' bases
    assert first == [base_of(cells[0]), base_of(cells[2])]
    assert {(c.protocol, c.name, c.segment_size) for c in first} == {("scratch", "full", None)}
    assert waiting == {first[0]: cells[:2], first[1]: cells[2:]}
    with_scratch = grid_cells(replace(settings, protocols=("scratch", "convert"), variants=("full", "segmented")))
    first, waiting = _phases(with_scratch)
    assert first == [c for c in with_scratch if c.protocol == "scratch"]
    assert sorted(c.key for cs in waiting.values() for c in cs) == sorted(
        c.key for c in with_scratch if c.protocol == "convert")


def test_worker_count_and_device_resolution(monkeypatch):
    import torch

    from srformer.probe import runner

    assert runner.worker_count(ProbeSettings(workers=3)) == 3
    monkeypatch.setattr(runner, "available_cores", lambda: 6)
    assert runner.worker_count(ProbeSettings(device="cpu")) == 6
    assert runner.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="workers"):
        ProbeSettings(workers=-1)
    with pytest.raises(ValueError, match="not a torch device"):
        ProbeSettings(device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            ProbeSettings(device="cuda")
        assert runner.resolve_device("auto") == torch.device("cpu")


@pytest.mark.slow
def test_two_workers_write_the_cells_of_one_worker(tmp_path):
    from srformer.probe.runner import run_probe
    from srformer.probe.training import ModelShape

    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    settings = ProbeSettings(tasks=("recall", "copy"), recall_sizes=(2,), size=2, lengths=(32,), segment_sizes=(8,),
                             variants=("segmented", "full"), steps=3, finetune_steps=2, batch_size=2,
                             curriculum_start=32, eval_examples=3, shape=tiny, progress=False, workers=1)
    import torch

    from srformer.probe.runner import available_cores

    # this process gets the thread count each of two workers gets, so both runs sum floats in the same order
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, available_cores() // 2))
    try:
        one = run_probe(tmp_path / "one", settings)["records"]
    finally:
        torch.set_num_threads(threads)
    two = run_probe(tmp_path / "two", replace(settings, workers=2))["records"]
    assert [r["key"] for r in two] == [r["key"] for r in one] == [c.key for c in grid_cells(settings)]
    for a, b in zip(one, two, strict=True):  # the same training in another process: the same numbers
        assert (b["final_loss"], b["metrics"], b["budget"]) == (a["final_loss"], a["metrics"], a["budget"])
    for problem in ("recall-n2-k32", "copy-n2-k32"):
        assert (tmp_path / "two" / "bases" / f"{problem}-seed0" / "model.pt").is_file()
    # a grid of convert cells only, whose saved bases are gone: each base is trained once, before its cells
    import shutil

    shutil.rmtree(tmp_path / "two" / "bases")
    again = run_probe(tmp_path / "two", replace(settings, workers=2, protocols=("convert",)))["records"]
    assert [r["protocol"] for r in again] == ["convert"] * 4
    assert all((tmp_path / "two" / "bases" / f"{p}-seed0" / "budget.json").is_file()
               for p in ("recall-n2-k32", "copy-n2-k32"))


def _tiny_grid(**overrides) -> ProbeSettings:
    from srformer.probe.training import ModelShape

    tiny = ModelShape(d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8)
    values = {"tasks": ("recall",), "recall_sizes": (2,), "lengths": (32,), "segment_sizes": (8,),
              "variants": ("full", "segmented"), "steps": 4, "finetune_steps": 2, "batch_size": 2,
              "curriculum_start": 8, "eval_examples": 2, "shape": tiny, "progress": False, "workers": 1}
    return ProbeSettings(**{**values, **overrides})


def test_the_curriculum_floor_is_in_the_scratch_budget_and_a_budget_without_it_reads_as_one():
    from srformer.probe.budget import cell_budget, saved_budget

    assert ProbeSettings().min_curriculum_segments == 2
    floored = _tiny_grid()
    assert cell_budget(floored, "scratch")["train"]["min_curriculum_segments"] == 2
    assert cell_budget(floored, "convert")["base"]["train"]["min_curriculum_segments"] == 2
    old = json.loads(json.dumps(cell_budget(_tiny_grid(min_curriculum_segments=1), "convert")))
    for train in (old["train"], old["base"]["train"]):
        del train["min_curriculum_segments"]
    assert saved_budget(old) == cell_budget(_tiny_grid(min_curriculum_segments=1), "convert")
    assert saved_budget(old) != cell_budget(floored, "convert")
    assert "min_curriculum_segments" not in old["train"]  # the record itself is not changed
    with pytest.raises(ValueError, match="min_curriculum_segments"):
        _tiny_grid(min_curriculum_segments=0)


def test_every_variant_of_a_problem_trains_on_the_same_floored_lengths(tmp_path, monkeypatch):
    from srformer.probe import runner
    from srformer.probe.training import curriculum_lengths

    schedules = []
    original = runner.train_model

    def spy(model, spec, vocabulary, settings, *, length, segment_size, **kwargs):
        schedules.append((segment_size, curriculum_lengths(settings, spec, vocabulary, length=length,
                                                           segment_size=segment_size)))
        return original(model, spec, vocabulary, settings, length=length, segment_size=segment_size, **kwargs)

    monkeypatch.setattr(runner, "train_model", spy)
    settings = _tiny_grid(segment_sizes=(8, 16), variants=("full", "segmented", "linear"), protocols=("scratch",),
                          steps=10)
    runner.run_probe(tmp_path, settings)
    shapes = [(c.name, c.segment_size) for c in grid_cells(settings)]
    assert shapes == [("full", None), ("segmented", 8), ("segmented", 16), ("linear", None)]
    by_cell = dict(zip(shapes, schedules, strict=True))
    # segment-free variants take the grid's smallest segment size, so they see the s=8 cells' documents
    assert by_cell["full", None] == by_cell["linear", None] == by_cell["segmented", 8]
    assert by_cell["segmented", 8][1][0] == 16 and by_cell["segmented", 16][1][0] == 32
    assert all(lengths[-1] == 32 for _, lengths in schedules)


def test_records_made_before_the_floor_are_reused_only_without_a_floor(tmp_path, monkeypatch):
    from srformer.probe import runner

    old_behaviour = _tiny_grid(min_curriculum_segments=1)
    runner.run_probe(tmp_path, old_behaviour)
    # Records written before the setting existed have no min_curriculum_segments in their budgets.
    for path in [*(tmp_path / "cells").rglob("cell.json"), *(tmp_path / "bases").rglob("budget.json")]:
        record = json.loads(path.read_text())
        for part in (record["budget"], record["budget"].get("base")):
            if part is not None:
                assert part["train"].pop("min_curriculum_segments") == 1
        path.write_text(json.dumps(record))
    first = _mtimes(tmp_path)
    assert len(first) == 4
    trained = []
    original = runner.train_model
    monkeypatch.setattr(runner, "train_model", lambda *a, **k: trained.append(k["length"]) or original(*a, **k))
    runner.run_probe(tmp_path, old_behaviour)
    assert _mtimes(tmp_path) == first and trained == []
    payload = runner.run_probe(tmp_path, _tiny_grid())  # the default floor: every cell is trained again
    again = _mtimes(tmp_path)
    assert all(again[key] != first[key] for key in first) and len(trained) == 4
    assert all(r["budget"].get("base", r["budget"])["train"]["min_curriculum_segments"] == 2
               for r in payload["records"])
    trained.clear()
    runner.run_probe(tmp_path, _tiny_grid())
    assert _mtimes(tmp_path) == again and trained == []


def test_zero_finetuning_steps_score_the_converted_base_as_it_is(tmp_path, monkeypatch):
    """convert+0: every converted model is scored straight after conversion, with the base's weights (a new
    mechanism's own parameters, SRformer's RAF, are added; nothing else changes), and a re-run reuses the cells."""
    import torch

    from srformer.probe import runner

    settings = _tiny_grid(variants=("full", "segmented", "srformer"), finetune_steps=0)
    records = runner.run_probe(tmp_path, settings)["records"]
    converted = {r["name"]: r for r in records if r["protocol"] == "convert"}
    assert sorted(converted) == ["full", "segmented", "srformer"]
    base = torch.load(tmp_path / "bases" / "recall-n2-k32-seed0" / "model.pt", weights_only=True)
    for name, record in converted.items():
        assert record["steps"] == 0 and record["final_loss"] is None and record["diagnostics"] == []
        assert record["budget"]["train"]["steps"] == 0 and record["budget"]["train"]["warmup"] == 0
        state = torch.load(tmp_path / "cells" / record["key"] / "model.pt", weights_only=True)
        assert base.keys() <= state.keys() and all(torch.equal(state[key], base[key]) for key in base)
        added = state.keys() - base.keys()
        assert (name == "srformer") == bool(added) and all(".raf." in key for key in added)
    assert converted["srformer"]["diagnostics_eval"] is not None  # measured on held-out examples, no training
    scratch_full = next(r for r in records if r["protocol"] == "scratch" and r["name"] == "full")
    assert converted["full"]["metrics"] == scratch_full["metrics"]  # the base itself, scored on the same examples
    first = _mtimes(tmp_path)
    monkeypatch.setattr(runner, "train_model", lambda *args, **kwargs: pytest.fail("a finished cell was retrained"))
    runner.run_probe(tmp_path, settings)
    assert _mtimes(tmp_path) == first
    with pytest.raises(ValueError, match=r"ProbeSettings\.finetune_steps must be >= 0, got -1"):
        _tiny_grid(finetune_steps=-1)
