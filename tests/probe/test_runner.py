"""Probe grid: cells, the schedule length, gap recovered on records, settings validation."""

from __future__ import annotations

import pytest

from srformer.config import NAMED_SETTINGS
from srformer.probe.runner import ProbeSettings, add_gap_recovered, grid_cells, schedule_length
from srformer.probe.tasks import TaskSpec


def test_default_variants_are_the_compare_names():
    assert ProbeSettings().variants == tuple(NAMED_SETTINGS)


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
