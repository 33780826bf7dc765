"""``srformer bench``: speed, memory and FLOPs of the cross-attention variants, side by side.

Public API:

- :class:`SuiteSettings` and :func:`run_suite` (:mod:`~srformer.benchmarks.suite`): run every
  measurement, get :class:`BenchRecord` objects back.
- :func:`write_outputs`: write ``bench.json``, ``bench.md``, ``step_time.png`` and ``figure5.png``.
- :class:`BenchRecord`, :func:`write_records_json`, :func:`read_records_json`
  (:mod:`~srformer.benchmarks.records`): one validated measurement, and its JSON file.
- :func:`table1_computation`, :func:`table1_memory`, :func:`count_flops`
  (:mod:`~srformer.benchmarks.flops`): paper Table 1 counts and FlopCounterMode counts.
- :func:`measure`, :func:`repeat_samples` (:mod:`~srformer.benchmarks.timing`): synchronised
  median timing.

The names are imported on first use (PEP 562, :mod:`srformer.core.lazy`), so that the light modules of the package
(:mod:`~srformer.benchmarks.records`, :mod:`~srformer.benchmarks.suite_settings`, ...) import no torch or
transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from srformer.core.lazy import lazy_exports

if TYPE_CHECKING:
    from srformer.benchmarks.flops import count_flops, table1_computation, table1_memory
    from srformer.benchmarks.outputs import write_outputs
    from srformer.benchmarks.records import (
        BENCH_VARIANTS,
        DEFAULT_BENCH_VARIANTS,
        METRIC_UNITS,
        BenchRecord,
        RecordError,
        read_records_json,
        write_records_json,
    )
    from srformer.benchmarks.suite import SuiteSettings, run_suite
    from srformer.benchmarks.timing import TimingSummary, measure, repeat_samples

__all__ = [
    "BENCH_VARIANTS",
    "DEFAULT_BENCH_VARIANTS",
    "METRIC_UNITS",
    "BenchRecord",
    "RecordError",
    "SuiteSettings",
    "TimingSummary",
    "count_flops",
    "measure",
    "read_records_json",
    "repeat_samples",
    "run_suite",
    "table1_computation",
    "table1_memory",
    "write_outputs",
    "write_records_json",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "srformer.benchmarks.flops": ("count_flops", "table1_computation", "table1_memory"),
    "srformer.benchmarks.outputs": ("write_outputs",),
    "srformer.benchmarks.records": (
        "BENCH_VARIANTS", "DEFAULT_BENCH_VARIANTS", "METRIC_UNITS", "BenchRecord", "RecordError", "read_records_json",
        "write_records_json",
    ),
    "srformer.benchmarks.suite": ("SuiteSettings", "run_suite"),
    "srformer.benchmarks.timing": ("TimingSummary", "measure", "repeat_samples"),
})
