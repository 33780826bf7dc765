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
"""

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
