"""Child process of :func:`srformer.benchmarks.memory.measure_cpu_peak_memory`.

Reads a JSON list of :class:`~srformer.benchmarks.memory.MemoryJob` fields on standard input
(consecutive jobs of the same model share it; a model is built when the next job needs another),
and prints one JSON line ``{"peaks": [bytes, ...], "method": "VmHWM" | "ru_maxrss"}``: the peak
resident set size during each job's ``generate()`` minus the resident set size before it.
Run as ``python -m srformer.benchmarks.memory_probe``; see :mod:`srformer.benchmarks.memory` for
the method and its caveats.
"""

from __future__ import annotations

import ctypes
import gc
import json
import resource
import sys
from pathlib import Path

import torch
from transformers import T5ForConditionalGeneration

from srformer.benchmarks.generation import generate_fixed, random_encoder_outputs
from srformer.benchmarks.variants import build_model, quiet_schedule_warnings

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def return_free_memory() -> bool:
    """Give the memory ``malloc`` holds free back to the system (glibc's ``malloc_trim(0)``: the heap's top and its
    free pages), so that the resident set counts what is in use; False where the C library has no such call."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


def status_kib(field: str) -> int | None:
    """``field`` (``VmRSS``, ``VmHWM``) of /proc/self/status in KiB, or None where it cannot be read."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def status_bytes(field: str) -> int:
    """``field`` of /proc/self/status in bytes, where resetting the peak showed that it is readable."""
    kib = status_kib(field)
    if kib is None:
        raise RuntimeError(f"/proc/self/status has no {field} line, although it had one when the peak was reset.")
    return kib * 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs); False where that is not possible."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return status_kib("VmHWM") is not None


def _maxrss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB, macOS bytes
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _model_key(job: dict) -> tuple:
    return (job["shape"], job["variant"], job["segment_size"], job["target_length"],
            tuple(map(tuple, job.get("settings", ()))))


def _load(job: dict) -> T5ForConditionalGeneration:
    model = build_model(job["shape"], job["variant"], segment_size=job["segment_size"],
                        target_length=job["target_length"], longest_input=job.get("longest_input"),
                        settings=dict(map(tuple, job.get("settings", ()))))
    tiny_outputs, tiny_mask = random_encoder_outputs(1, 16, model.config.d_model)
    with torch.no_grad():
        generate_fixed(model, tiny_outputs, tiny_mask, 2)  # warm-up: kernels, first arenas
    return model


def main() -> int:
    """Measure the jobs read from standard input; print the JSON result line."""
    jobs = json.loads(sys.stdin.read())
    peaks: list[int] = []
    model: T5ForConditionalGeneration | None = None
    loaded: tuple | None = None
    can_reset = None
    with quiet_schedule_warnings():
        for job in jobs:
            if model is None or _model_key(job) != loaded:
                model = None
                gc.collect()
                model, loaded = _load(job), _model_key(job)
            if can_reset is None:
                can_reset = reset_peak()
            elif not can_reset:
                break  # ru_maxrss cannot be reset: one measurement per process
            encoder_outputs, mask = random_encoder_outputs(
                job["batch_size"], job["encoder_length"], model.config.d_model
            )
            gc.collect()
            if can_reset:
                reset_peak()
                before = status_bytes("VmRSS")
            else:
                current = status_kib("VmRSS")
                before = current * 1024 if current is not None else _maxrss_bytes()
            with torch.no_grad():
                output = generate_fixed(model, encoder_outputs, mask, job["new_tokens"])
            peak = status_bytes("VmHWM") if can_reset else _maxrss_bytes()
            peaks.append(max(0, peak - before))
            del output, encoder_outputs, mask
            gc.collect()
    print(json.dumps({"peaks": peaks, "method": "VmHWM" if can_reset else "ru_maxrss"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
