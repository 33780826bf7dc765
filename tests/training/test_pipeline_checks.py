"""Shape checks of the training pipeline: documents that fit in one segment are counted and warned about."""

from __future__ import annotations

import json
import warnings

import pytest

from srformer.config import SRformerConfig
from srformer.training.pipeline import RunSpec, differing_run_settings, warn_single_segment_documents


def spec(variant: str = "srformer", segment_size: int = 64) -> RunSpec:
    settings = SRformerConfig(variant=variant, segment_size=segment_size, target_length=128)
    return RunSpec(model="t5-tiny", srformer=settings, max_source_length=512)


def features(*lengths: int) -> list[dict[str, list[int]]]:
    return [{"input_ids": [5] * n, "labels": [1]} for n in lengths]


def test_documents_no_longer_than_one_segment_are_counted_and_warned_about():
    with pytest.warns(
        UserWarning,
        match=r"3 of 4 training documents \(75\.0%\) have at most --segment-size 64 tokens \(after truncation to "
        r"--max-source-length 512\), so each is a single segment: for them srformer attention is full attention\. "
        r"They are trained on as they are; use a smaller --segment-size to split them\.",
    ):
        assert warn_single_segment_documents(features(10, 20, 64, 65), spec()) == 3


def test_no_warning_when_every_document_has_two_segments_or_for_full_attention():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_single_segment_documents(features(65, 400), spec()) == 0
        assert warn_single_segment_documents(features(10, 20), spec(variant="full")) == 0


def test_a_local_model_written_relative_and_absolute_is_the_same_model(tmp_path, monkeypatch):
    """Resuming a run whose base model path was saved relative (and is now given absolute, or the other way
    round) is not a different run; two different directories, or hub names, still differ."""
    from srformer.training.pipeline import same_local_model

    (tmp_path / "base").mkdir()
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    assert same_local_model("base", str(tmp_path / "base"))
    assert same_local_model(str(tmp_path / "base"), "./base")
    assert not same_local_model("base", "other")
    assert not same_local_model("t5-small", "google/t5-small")
    assert not same_local_model("missing", str(tmp_path / "missing"))
    assert not same_local_model(None, "base")


def test_a_run_file_with_the_older_flat_srformer_settings_resumes_and_a_changed_setting_does_not():
    requested = spec(variant="window", segment_size=16)
    flat = {field: None for field in ("window_size", "stride", "num_buckets", "max_span", "projected_length")}
    saved = json.loads(json.dumps(requested.to_dict()))
    saved["srformer"] = {**{k: v for k, v in saved["srformer"].items() if k != "settings"}, **flat}
    assert "settings" in requested.to_dict()["srformer"]  # the current form nests the variant's settings
    assert differing_run_settings(saved, requested) == []
    saved["srformer"]["window_size"] = 96
    saved["max_source_length"] = 256
    assert differing_run_settings(saved, requested) == ["max_source_length", "srformer"]
