"""``srformer probe --quick``: the CLI runs the whole (tiny) grid and writes well-formed outputs; a re-run
skips finished cells."""

from __future__ import annotations

import json
import math

import pytest
from PIL import Image

from srformer.cli.main import main
from srformer.cli.probe_command import QUICK
from srformer.probe.grid import PROTOCOLS, ProbeSettings, grid_cells
from srformer.probe.tasks import TASKS


def _check_fraction(value) -> None:
    assert value is None or (isinstance(value, float) and 0.0 <= value <= 1.0 and math.isfinite(value))


LAYER_KEYS = {"firing_fraction", "discarded_input", "recurrent_to_softmax", "grad_weight", "grad_leak",
              "grad_threshold", "leak", "threshold"}


def _check_layers(layers) -> None:
    assert len(layers) == ProbeSettings().shape.num_decoder_layers
    for layer in layers:
        assert set(layer) == LAYER_KEYS
        _check_fraction(layer["firing_fraction"])
        _check_fraction(layer["discarded_input"])
        for key in ("recurrent_to_softmax", "grad_weight", "grad_leak", "grad_threshold", "threshold"):
            assert isinstance(layer[key], float) and math.isfinite(layer[key]) and layer[key] >= 0.0
        assert math.isfinite(layer["leak"])


def _check_diagnostics(record) -> None:
    """The recurrent-term measurements of an srformer cell: at step 0 and the last step (the quick budget is
    below ``diagnostics_every``), then on held-out examples."""
    steps = record["steps"]
    assert [d["step"] for d in record["diagnostics"]] == [0, steps - 1]
    for entry in record["diagnostics"]:
        assert set(entry) == {"step", "loss", "length", "layers"}
        assert math.isfinite(entry["loss"]) and 2 <= entry["length"] <= record["length"]
        _check_layers(entry["layers"])
    final = record["diagnostics_eval"]
    assert final["examples"] == min(64, QUICK["eval_examples"]) and final["length"] == record["length"]
    _check_layers(final["layers"])


@pytest.mark.slow
def test_quick_probe_writes_well_formed_outputs(tmp_path, capsys):
    output = tmp_path / "probe"
    assert main(["probe", "--quick", "--output", str(output), "--no-progress"]) == 0
    payload = json.loads((output / "results.json").read_text())
    records = payload["records"]
    expected = grid_cells(ProbeSettings(**QUICK))
    assert [r["key"] for r in records] == [c.key for c in expected]
    assert {r["task"] for r in records} == set(TASKS)
    assert {r["protocol"] for r in records} == set(PROTOCOLS)
    for record in records:
        metrics = record["metrics"]
        for key in ("token_accuracy", "exact_match", "on_token_accuracy", "off_token_accuracy",
                    "on_exact_match", "off_exact_match"):
            _check_fraction(metrics[key])
        assert metrics["examples"] == QUICK["eval_examples"]
        assert metrics["on_positions"] + metrics["off_positions"] > 0
        assert (metrics["on_positions"] == 0) == (metrics["on_token_accuracy"] is None)
        assert record["steps"] == (QUICK["steps"] if record["protocol"] == "scratch" else QUICK["finetune_steps"])
        assert 0.0 < record["chance"] < 1.0 and math.isfinite(record["final_loss"])
        assert (record["segment_size"] is None) == (record["name"] == "full")
        if record["name"] == "srformer":
            assert set(record["gap_recovered"]) == {"token_accuracy", "off_token_accuracy"}
            _check_diagnostics(record)
        else:  # no recurrent term to measure
            assert record["diagnostics"] == [] and record["diagnostics_eval"] is None
    table = (output / "results.md").read_text()
    assert "## Protocol: scratch" in table and "## Protocol: convert" in table
    assert sum(line.startswith("| recall |") for line in table.splitlines()) == sum(
        r["task"] == "recall" for r in records
    )
    for name in ("recall_vs_n.png", "recall_vs_length.png"):
        with Image.open(output / name) as image:
            assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100
    assert (output / "bases").is_dir()
    layers = ProbeSettings().shape.num_decoder_layers
    section = table.split("## Recurrent term")[1]
    assert sum(line.startswith("| scratch/") or line.startswith("| convert/") for line in section.splitlines()) == (
        layers * sum(r["name"] == "srformer" for r in records)
    )
    with Image.open(output / "recurrent_term.png") as image:
        assert image.format == "PNG" and image.size[0] > 100

    # A re-run finds every cell finished: the records are read back, not retrained.
    before = {p: p.stat().st_mtime_ns for p in (output / "cells").rglob("cell.json")}
    assert main(["probe", "--quick", "--output", str(output), "--no-progress"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (output / "cells").rglob("cell.json")} == before
    assert len(json.loads((output / "results.json").read_text())["records"]) == len(records)
    assert "cells; results in" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_probe_with_zero_finetuning_steps_scores_the_converted_models(tmp_path):
    """convert+0 end to end: the convert cells are scored straight after conversion, recorded with 0 steps, and
    recognised as finished on a re-run."""
    output = tmp_path / "probe"
    argv = ["probe", "--quick", "--tasks", "recall", "--finetune-steps", "0", "--output", str(output), "--no-progress"]
    assert main(argv) == 0
    records = json.loads((output / "results.json").read_text())["records"]
    converted = [r for r in records if r["protocol"] == "convert"]
    assert len(converted) == len(records) // 2 == len(QUICK["variants"]) * len(QUICK["recall_sizes"]) * len(
        QUICK["lengths"])
    for record in converted:
        assert record["steps"] == 0 and record["budget"]["train"]["steps"] == 0 and record["final_loss"] is None
        assert record["train_seconds"] == 0.0 and record["diagnostics"] == []
        assert record["metrics"]["examples"] == QUICK["eval_examples"]
    assert all(r["steps"] == QUICK["steps"] for r in records if r["protocol"] == "scratch")
    assert "## Protocol: convert" in (output / "results.md").read_text()
    before = {p: p.stat().st_mtime_ns for p in (output / "cells").rglob("cell.json")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in (output / "cells").rglob("cell.json")} == before


def test_probe_rejects_bad_grid(tmp_path, capsys):
    assert main(["probe", "--quick", "--output", str(tmp_path), "--steps", "0"]) == 2
    assert "steps" in capsys.readouterr().err


def test_probe_rejects_negative_finetuning_steps(tmp_path, capsys):
    assert main(["probe", "--quick", "--output", str(tmp_path), "--finetune-steps", "-1"]) == 2
    assert "finetune_steps must be >= 0, got -1" in capsys.readouterr().err


@pytest.mark.parametrize("argv,expected", [([], 2), (["--min-curriculum-segments", "1"], 1),
                                           (["--min-curriculum-segments", "4"], 4)])
def test_the_curriculum_floor_option_reaches_every_scratch_cells_budget(argv, expected):
    from srformer.cli.main import build_parser
    from srformer.cli.probe_command import settings_from_args
    from srformer.probe.budget import cell_budget

    settings = settings_from_args(build_parser().parse_args(["probe", "--output", "x", *argv]))
    assert settings.min_curriculum_segments == expected
    assert cell_budget(settings, "scratch")["train"]["min_curriculum_segments"] == expected
    assert cell_budget(settings, "convert")["base"]["train"]["min_curriculum_segments"] == expected


def test_probe_rejects_a_curriculum_floor_below_one(tmp_path, capsys):
    assert main(["probe", "--quick", "--output", str(tmp_path), "--min-curriculum-segments", "0"]) == 2
    assert "min_curriculum_segments" in capsys.readouterr().err
