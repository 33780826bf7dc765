"""Wall-clock timing: synchronised on CUDA, median of repeats after warm-up runs.

CUDA kernels run asynchronously, so every timed region starts and ends with
``torch.cuda.synchronize(device)``; on the CPU there is nothing to wait for.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")


def resolve_device(name: str) -> torch.device:
    """The device for ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (CUDA when available).

    Raises:
        ValueError: for another name, or ``cuda`` requested on a machine without CUDA.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name != "cpu" and not name.startswith("cuda"):
        raise ValueError(f"Unknown device {name!r}: use cpu, cuda or auto.")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but torch sees no CUDA device; use --device cpu or auto.")
    return device


def synchronize(device: torch.device | str) -> None:
    """Wait for all queued work on ``device`` (a no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], T], device: torch.device | str) -> tuple[T, float]:
    """Run ``fn()`` once and measure it.

    Returns:
        ``(result, seconds)``: ``fn``'s result and its wall-clock time in seconds, the device
        synchronised before the start and before the end.
    """
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


@dataclass(frozen=True)
class TimingSummary:
    """Timed samples of one measurement.

    Attributes:
        samples: seconds of each timed repeat (warm-up runs excluded), in run order.
        warmup: how many runs were discarded before them.
    """

    samples: tuple[float, ...]
    warmup: int

    @property
    def median_s(self) -> float:
        """Median sample in seconds."""
        return statistics.median(self.samples)

    @property
    def median_ms(self) -> float:
        """Median sample in milliseconds."""
        return 1000.0 * self.median_s

    @property
    def repeats(self) -> int:
        """Number of timed samples."""
        return len(self.samples)


def repeat_samples(sample: Callable[[], float], *, repeats: int, warmup: int = 1) -> TimingSummary:
    """Call ``sample()`` ``warmup`` times (results discarded), then ``repeats`` times.

    ``sample`` measures one run itself and returns its duration in seconds; this lets a run time
    only part of its work (e.g. the decoder steps but not the cache bookkeeping between them).

    Raises:
        ValueError: if ``repeats < 1`` or ``warmup < 0``, or a sample is not a finite number >= 0.
    """
    if repeats < 1:
        raise ValueError(f"`repeats` must be >= 1, got {repeats}.")
    if warmup < 0:
        raise ValueError(f"`warmup` must be >= 0, got {warmup}.")
    for _ in range(warmup):
        sample()
    samples = []
    for _ in range(repeats):
        seconds = sample()
        valid = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if not valid or not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"A timing sample must be a finite number of seconds >= 0, got {seconds!r}.")
        samples.append(float(seconds))
    return TimingSummary(tuple(samples), warmup)


def measure(fn: Callable[[], object], *, device: torch.device | str, repeats: int, warmup: int = 1) -> TimingSummary:
    """Time whole calls of ``fn``: ``warmup`` discarded runs, then ``repeats`` synchronised runs.

    Returns:
        A :class:`TimingSummary` in seconds (``median_ms`` for milliseconds).

    Raises:
        ValueError: if ``repeats < 1`` or ``warmup < 0``.
    """
    return repeat_samples(lambda: time_call(fn, device)[1], repeats=repeats, warmup=warmup)
