"""scripts/cpu_decode_pairs.py: interleaved per-token timings of long-input settings, on a tiny shape."""

from __future__ import annotations

import json

import pytest

from tests.script_loading import script_module


def test_a_run_records_each_variants_rounds_then_skips_the_lengths_it_has(tmp_path):
    arguments = ["--output", str(tmp_path), "--lengths", "200", "--tokens", "4", "--rounds", "2", "--shape", "t5-tiny",
                 "--variants", "segmented", "knn-loki-pages"]
    with script_module("cpu_decode_pairs") as module:
        assert module.main(arguments) == 0
        stored = json.loads((tmp_path / "pairs.json").read_text())
        (record,) = stored["records"]
        assert record["length"] == 200 and set(record["variants"]) == {"segmented", "knn-loki-pages"}
        for name, entry in record["variants"].items():
            assert [len(steps) for steps in entry["steps_seconds"]] == [3, 3]  # 4 tokens: 3 steps after the first
            low, high = entry["quartiles_ms"]
            assert 0 < low <= entry["median_ms"] <= high
            ratio = entry["ratio_to_first"]
            assert ratio["min"] <= ratio["median"] <= ratio["max"]
            if name == "segmented":
                assert ratio == {"min": 1.0, "median": 1.0, "max": 1.0}
        table = (tmp_path / "pairs.md").read_text()
        assert "| 200 |" in table and "`knn-loki-pages` ms per token" in table

        def measured_again(*args, **kwargs):
            raise AssertionError("a length already recorded was measured again")

        module.measure_length = measured_again
        assert module.main(arguments) == 0
        with pytest.raises(SystemExit, match="another measurement"):
            module.main([*arguments[:-2], "segmented"])
        with pytest.raises(SystemExit, match="--variants: unknown nope"):
            module.main([*arguments[:-2], "nope"])
