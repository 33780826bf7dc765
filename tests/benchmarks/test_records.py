"""BenchRecord validation and the bench.json round trip."""

from __future__ import annotations

import json
import math

import pytest

from srformer.benchmarks.records import (
    BENCH_VARIANTS,
    METRIC_UNITS,
    BenchRecord,
    RecordError,
    read_records_json,
    write_records_json,
)

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
        dict(variant="bigbird"),
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
    assert set(METRIC_UNITS.values()) <= {"ms", "s", "tokens/s", "bytes", "FLOPs", "MACs", "elements"}
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
