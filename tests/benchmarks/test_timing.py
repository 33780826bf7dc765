"""The timing helpers (no assertion on how long anything takes: timings are noisy)."""

from __future__ import annotations

import pytest
import torch

from srformer.benchmarks.timing import TimingSummary, measure, repeat_samples, resolve_device, synchronize, time_call


def test_repeat_samples_discards_warmup_and_takes_the_median():
    script = iter([100.0, 3.0, 1.0, 2.0])
    summary = repeat_samples(lambda: next(script), repeats=3, warmup=1)
    assert summary.samples == (3.0, 1.0, 2.0)
    assert summary.median_s == 2.0 and summary.median_ms == 2000.0
    assert summary.repeats == 3 and summary.warmup == 1


def test_measure_calls_warmup_plus_repeats_times_and_returns_seconds():
    calls = []
    summary = measure(lambda: calls.append(1), device="cpu", repeats=4, warmup=2)
    assert len(calls) == 6
    assert isinstance(summary, TimingSummary) and summary.repeats == 4
    assert all(sample >= 0 for sample in summary.samples)


def test_time_call_returns_the_result():
    result, seconds = time_call(lambda: torch.ones(3).sum().item(), "cpu")
    assert result == 3.0 and seconds >= 0
    synchronize("cpu")  # a no-op on the CPU


@pytest.mark.parametrize("kwargs", [dict(repeats=0), dict(repeats=1, warmup=-1)])
def test_bad_repeat_counts_raise(kwargs):
    with pytest.raises(ValueError):
        repeat_samples(lambda: 1.0, **kwargs)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), None])
def test_a_bad_sample_raises(bad):
    with pytest.raises(ValueError):
        repeat_samples(lambda: bad, repeats=1, warmup=0)


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")
