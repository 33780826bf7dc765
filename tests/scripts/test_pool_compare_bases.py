"""scripts/pool_compare_bases.py on synthetic grids: per-base and pooled paired differences against the reference,
settings missing from a grid left out, mismatched grids refused before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from srformer.evaluation.statistics import paired_difference
from tests.script_loading import script_module


def _grid(folder, scores, ids=None):
    """A results folder whose cells hold ``scores`` {name: [(rouge1 list, rouge2 list) per seed]}."""
    cells = [{"name": name, "seed": seed, "per_document": {"rouge1": r1, "rouge2": r2}}
             for name, seeds in scores.items() for seed, (r1, r2) in enumerate(seeds)]
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"cells": cells}))
    if ids is not None:
        (folder / "predictions").mkdir()
        rows = "".join(json.dumps({"id": i, "prediction": "x"}) + "\n" for i in ids)
        (folder / "predictions" / "full-seed0.jsonl").write_text(rows)
    return folder


def test_pooled_difference_is_the_paired_bootstrap_of_the_per_document_means_over_bases(tmp_path):
    first = _grid(tmp_path / "a", {"full": [([30.0, 40.0, 50.0], [5.0, 6.0, 7.0])],
                                   "knn": [([29.0, 41.0, 45.0], [5.0, 5.0, 5.0])],
                                   "linear": [([10.0, 10.0, 10.0], [1.0, 1.0, 1.0])]}, ids=["p", "q", "r"])
    second = _grid(tmp_path / "b", {"full": [([20.0, 30.0, 40.0], [4.0, 4.0, 4.0])],
                                    "knn": [([22.0, 28.0, 41.0], [3.0, 4.0, 5.0]),
                                            ([24.0, 30.0, 39.0], [3.0, 4.0, 5.0])]},
                   ids=["p", "q", "r"])
    with script_module("pool_compare_bases") as script:
        assert script.main([str(first), str(second), "--output", str(tmp_path / "out"), "--labels", "s0", "s1"]) == 0
    pooled = json.loads((tmp_path / "out" / "pooled.json").read_text())
    assert [setting["name"] for setting in pooled["settings"]] == ["full", "knn"]
    assert pooled["left_out"] == ["linear"]
    knn = pooled["settings"][1]
    assert knn["per_base"][0]["rouge1"] == pytest.approx(115.0 / 3)
    assert knn["per_base"][1]["rouge1"] == pytest.approx((23.0 + 29.0 + 40.0) / 3)  # two seeds averaged first
    expected = paired_difference(np.mean([[30, 40, 50], [20, 30, 40]], axis=0), [(29 + 23) / 2, (41 + 29) / 2,
                                                                                   (45 + 40) / 2])
    assert knn["pooled"]["minus"]["rouge1"] == pytest.approx(expected.to_dict())
    assert knn["per_base"][0]["minus"]["rouge1"]["mean"] == pytest.approx((1.0 - 1.0 + 5.0) / 3)
    table = (tmp_path / "out" / "pooled.md").read_text()
    assert "| `knn` | 38.33 | 30.67 |" in table and "ROUGE-1, s1" in table and "linear" in table


@pytest.mark.parametrize("case", ["reference", "documents", "ids", "one"])
def test_mismatched_grids_are_refused_before_anything_is_written(tmp_path, case):
    first = _grid(tmp_path / "a", {"full": [([1.0, 2.0], [1.0, 2.0])]}, ids=["p", "q"])
    other = {"reference": ({"knn": [([1.0, 2.0], [1.0, 2.0])]}, None),
             "documents": ({"full": [([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])]}, None),
             "ids": ({"full": [([1.0, 2.0], [1.0, 2.0])]}, ["q", "p"]),
             "one": None}[case]
    grids = [str(first)] if other is None else [str(first), str(_grid(tmp_path / "b", *other))]
    with script_module("pool_compare_bases") as script, pytest.raises(SystemExit):
        script.main([*grids, "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
