"""Peak memory of ``generate()``: CUDA allocator statistics, or the resident set size of a child process.

CUDA: :func:`cuda_peak_increase` resets the allocator's peak statistics, runs the call, and
reports ``torch.cuda.max_memory_allocated`` minus the memory allocated before the call: the
extra memory the call needed at its peak (weights and inputs excluded).

CPU: the resident set size (RSS) is a process-wide quantity, so :func:`measure_cpu_peak_memory`
runs ``generate()`` in a fresh Python process (``python -m srformer.benchmarks.memory_probe``)
that builds the model, runs a tiny warm-up ``generate()`` (to load kernels and allocate the
allocator's first arenas), and then, for each shape, reports the peak RSS during the call minus
the RSS just before it. The peak is read from ``VmHWM`` in ``/proc/self/status`` after resetting
it with ``/proc/self/clear_refs`` (Linux >= 4.0), so one child can measure several shapes in a
row; where that reset is not possible, the child falls back to ``resource.getrusage(...).ru_maxrss``
and measures one shape per process. Caveats:

* RSS counts pages touched, not bytes allocated: allocator slack, page granularity and memory
  returned late to the OS are included; it is an upper bound on what ``generate()`` needed.
* glibc's ``malloc`` keeps freed memory below its mmap threshold for reuse, which hides allocations
  from later shapes; the child pins that threshold (``MALLOC_MMAP_THRESHOLD_=65536``) so that
  tensor memory is returned to the OS when freed and every shape starts from its own baseline.
* Memory allocated before the call (weights, the encoder output, the warm-up's arenas) is not
  counted, and a shape whose peak stays inside memory the process already holds reads low.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch

T = TypeVar("T")

#: Environment given to the child process (see the module docstring).
CHILD_ENVIRONMENT = {"MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONWARNINGS": "ignore"}


def cuda_peak_increase(fn: Callable[[], T], device: torch.device | str) -> tuple[T, int]:
    """Run ``fn()`` and measure its peak CUDA memory above the level before the call.

    Returns:
        ``(result, bytes)``: ``fn``'s result and ``max_memory_allocated - memory_allocated``
        (before the call), in bytes.

    Raises:
        ValueError: if ``device`` is not a CUDA device.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"cuda_peak_increase needs a CUDA device, got {device}.")
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    return result, int(torch.cuda.max_memory_allocated(device) - before)


@dataclass(frozen=True)
class MemoryJob:
    """One CPU peak-memory measurement: a ``generate()`` call of one model at one shape.

    Attributes:
        shape: a key of :data:`srformer.benchmarks.variants.MODEL_SHAPES`.
        variant: a benchmark variant name.
        segment_size: ``s`` in tokens (None for ``full*``).
        target_length: ``T`` in tokens.
        encoder_length: ``k`` in tokens.
        batch_size: sequences per call.
        new_tokens: tokens generated per sequence.
        longest_input: the run's longest ``k`` (``build_model``'s ``longest_input``: linformer's
            ``max_source_length``), or None for the defaults.
        settings: the variant's SRformerConfig settings beyond its named setting's (``build_model``'s
            ``settings``), as ``(name, value)`` pairs.
    """

    shape: str
    variant: str
    segment_size: int | None
    target_length: int
    encoder_length: int
    batch_size: int
    new_tokens: int
    longest_input: int | None = None
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def model_key(self) -> tuple:
        """Jobs with the same key share one child process (and one model)."""
        return (self.shape, self.variant, self.segment_size, self.target_length, self.settings)


@dataclass(frozen=True)
class MemoryResult:
    """Peak RSS increase of one :class:`MemoryJob`.

    Attributes:
        job: the measurement.
        peak_bytes: peak RSS during ``generate()`` minus RSS before it, in bytes.
        method: ``"VmHWM"`` (peak reset with clear_refs) or ``"ru_maxrss"`` (one shape per process).
    """

    job: MemoryJob
    peak_bytes: int
    method: str


def measure_cpu_peak_memory(
    jobs: list[MemoryJob], *, timeout_s: float = 900.0, one_process: bool = False
) -> list[MemoryResult]:
    """Measure each job's peak RSS increase during ``generate()`` in child processes.

    Jobs with the same model share a child (run in the given order), or all jobs share one child
    with ``one_process``; a child that cannot reset the peak measures only its first job and the
    rest go to new children.

    Args:
        jobs: the measurements.
        timeout_s: time limit of one child process, in seconds.
        one_process: run all jobs in one child (models built one after the other; faster, less isolated).

    Returns:
        One :class:`MemoryResult` per job, in order.

    Raises:
        RuntimeError: if a child process fails (its stderr is included) or returns no result.
        subprocess.TimeoutExpired: if a child runs past ``timeout_s``.
    """
    groups: dict[tuple, list[int]] = {}
    for index, job in enumerate(jobs):
        groups.setdefault(() if one_process else job.model_key, []).append(index)
    results: dict[int, MemoryResult] = {}
    for indices in groups.values():
        pending = list(indices)
        while pending:
            measured = _run_child([jobs[i] for i in pending], timeout_s)
            if not measured:
                raise RuntimeError("The memory probe process returned no measurement.")
            for index, (peak, method) in zip(pending, measured, strict=False):
                results[index] = MemoryResult(jobs[index], peak, method)
            pending = pending[len(measured):]
    return [results[i] for i in range(len(jobs))]


def _run_child(jobs: list[MemoryJob], timeout_s: float) -> list[tuple[int, str]]:
    environment = dict(os.environ, **CHILD_ENVIRONMENT)
    completed = subprocess.run(
        [sys.executable, "-m", "srformer.benchmarks.memory_probe"],
        input=json.dumps([asdict(job) for job in jobs]),
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout_s,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"The memory probe process failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"The memory probe process printed no result:\n{completed.stderr[-4000:]}")
    payload = json.loads(lines[-1])
    return [(int(peak), payload["method"]) for peak in payload["peaks"]]
