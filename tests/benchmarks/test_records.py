"""BenchRecord validation and the bench.json round trip."""

from __future__ import annotations

import json
import math

import pytest

from srformer.benchmarks.records import (
    BENCH_VARIANTS,
    DEFAULT_BENCH_VARIANTS,
    METRIC_UNITS,
    OWN_ATTENTION_IMPLEMENTATIONS,
    VARIANT_SPECS,
    BenchRecord,
    RecordError,
    changes_module_settings,
    read_records_json,
    write_records_json,
)
from srformer.core import NAMED_SETTINGS, REGISTRY, TABLE1_VARIANTS, keeps_own_attention, named_config
from tests.registry_cases import bench_variants, bench_variants_of

GOOD = dict(variant="srformer", encoder_length=4096, segment_size=64, batch_size=8,
            metric="cross_attention_step_time", value=1.25, unit="ms", device="cpu")


def test_a_good_record_round_trips_through_json(tmp_path):
    records = [BenchRecord(**GOOD), BenchRecord(**dict(GOOD, variant="full-sdpa", segment_size=None)),
               BenchRecord(**dict(GOOD, metric="table1_computation", unit="MACs", value=4718592, device="theory",
                                  decoder_length=128, note="paper example")),
               BenchRecord(**dict(GOOD, compiled=True))]
    path = write_records_json(tmp_path / "bench.json", records)
    assert read_records_json(path) == records
    rows = json.loads(path.read_text())
    assert set(rows[0]) == {"variant", "encoder_length", "segment_size", "batch_size", "metric", "value", "unit",
                            "device", "decoder_length", "note", "compiled"}
    assert [row["compiled"] for row in rows] == [False, False, False, True]


@pytest.mark.parametrize(
    "change",
    [
        dict(variant="no-such-variant"),
        dict(variant="linear"),  # linear attention has no segments (GOOD has s = 64)
        dict(metric="speed"),
        dict(unit="s"),  # a known unit, but not the metric's
        dict(unit="parsecs"),
        dict(value=0.0),
        dict(value=-1.0),
        dict(value=math.nan),
        dict(value=math.inf),
        dict(value="1.0"),
        dict(value=True),
        dict(encoder_length=0),
        dict(encoder_length=512.0),
        dict(batch_size=True),
        dict(segment_size=None),  # segmented variants need s
        dict(variant="full-eager"),  # full variants have no s (GOOD has s = 64)
        dict(device="tpu"),
        dict(device="cuda:x"),
        dict(decoder_length=0),
        dict(note=None),
    ],
)
def test_malformed_records_raise(change):
    with pytest.raises(RecordError):
        BenchRecord(**dict(GOOD, **change))


def test_record_error_is_a_value_error():
    assert issubclass(RecordError, ValueError)


def test_every_metric_has_a_known_unit_and_cuda_devices_are_accepted():
    assert set(METRIC_UNITS.values()) <= {"ms", "s", "tokens/s", "bytes", "FLOPs", "MACs", "elements", "calls", "syncs"}
    assert BenchRecord(**dict(GOOD, device="cuda:1")).device == "cuda:1"
    assert "srformer-lean" in BENCH_VARIANTS and "full-sdpa" in BENCH_VARIANTS


@pytest.mark.parametrize(
    "payload",
    [
        {"not": "a list"},
        [dict(GOOD, extra=1)],
        [{key: value for key, value in GOOD.items() if key != "unit"}],
        ["a string"],
    ],
)
def test_reading_a_malformed_file_raises(tmp_path, payload):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(RecordError):
        read_records_json(path)


def test_reading_invalid_json_raises(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text("[{")
    with pytest.raises(RecordError):
        read_records_json(path)


def test_writing_something_else_than_records_raises(tmp_path):
    with pytest.raises(RecordError):
        write_records_json(tmp_path / "bench.json", [GOOD])


def test_bench_variants_are_derived_from_the_registry():
    """Every registered variant is benchmarked, in registry order (a variant without a module of its own, ``full``,
    under each attention implementation), a ``-lean`` variant follows exactly where the lean layout saves memory,
    then every named setting that changes its module's settings; the defaults are the Table 1 rows."""
    expected = []
    for name, entry in REGISTRY.items():
        if keeps_own_attention(name):
            expected += [f"{name}-{implementation}" for implementation in OWN_ATTENTION_IMPLEMENTATIONS]
            continue
        expected.append(name)
        if entry.capabilities.lean_layout and entry.capabilities.state_grows_with_input:
            expected.append(f"{name}-lean")
    expected += [setting for entry in REGISTRY.values() for setting in entry.named_settings
                 if changes_module_settings(setting)]
    assert BENCH_VARIANTS == tuple(expected) == tuple(bench_variants())
    assert {spec.srformer_variant for spec in VARIANT_SPECS.values()} == set(REGISTRY)
    assert bench_variants_of("full") == ["full-sdpa", "full-eager"]
    assert all(VARIANT_SPECS[name].lean_cache == name.endswith("-lean") for name in BENCH_VARIANTS)
    assert {VARIANT_SPECS[n].srformer_variant for n in DEFAULT_BENCH_VARIANTS} == set(TABLE1_VARIANTS)


def test_named_settings_with_their_own_module_settings_are_bench_variants_and_the_ablations_are_not():
    """``knn-4`` and ``srformer-gated-taylor`` change their module's settings, so they are timed under their own
    names; the srformer ablations and ``srformer-two-sided`` run srformer's module as it is and get no entry."""
    own = {name: spec for name, spec in VARIANT_SPECS.items() if spec.setting is not None}
    assert {name: spec.srformer_variant for name, spec in own.items()} == {
        setting: name for name, entry in REGISTRY.items() for setting in entry.named_settings
        if changes_module_settings(setting)}
    assert {"knn-4", "block-topk-b4"} <= set(own)
    assert all(spec.setting == name for name, spec in own.items())
    assert not {"ablation-I", "ablation-III", "srformer-two-sided", "srformer-sigma"} & set(VARIANT_SPECS)
    assert changes_module_settings("knn-4") and not changes_module_settings("knn")
    assert not changes_module_settings("ablation-III")


@pytest.mark.parametrize("setting", list(NAMED_SETTINGS))
def test_changes_module_settings_reads_the_registry_as_the_configs_say(setting):
    """The registry's entry tells, without importing the mechanism, what the configs built from it say: a named
    setting changes its module's settings when its config's settings differ from its variant's."""
    config = named_config(setting, segment_size=8, target_length=16)
    plain = named_config(config.variant, segment_size=8, target_length=16)
    assert changes_module_settings(setting) == (config.variant != setting and config.settings != plain.settings)
