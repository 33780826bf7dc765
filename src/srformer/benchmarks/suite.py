"""The whole benchmark: every measurement of ``srformer bench``, side by side, in one process.

:func:`run_suite` measures, for every benchmark variant (:data:`~srformer.benchmarks.records.BENCH_VARIANTS`),
encoder length ``k``, segment size ``s`` and batch size (loops ordered k -> batch -> variant so
that the variants of one shape run next to each other):

1. FLOPs: paper Table 1 counts, FlopCounterMode counts of the attention core (per example and
   head) and of one teacher-forced cross-attention module call, and the Figure 5 series
   (``k = 8q``, ``d = 64``, ``s = 64``, ``T = q``);
2. aten operator calls and host syncs of ``generate()``'s first step and of each further token, the measure of
   eager GPU cost that any device gives (:mod:`~srformer.benchmarks.operator_count`);
3. cross-attention time per decoder step (one layer; :mod:`~srformer.benchmarks.cross_attention_step`);
4. ``generate()`` throughput with the encoder excluded, and the cross-attention cache bytes
   (:mod:`~srformer.benchmarks.generation`);
5. training step time (:mod:`~srformer.benchmarks.training_step`);
6. peak memory during ``generate()`` (CPU: child processes, :mod:`~srformer.benchmarks.memory`;
   CUDA: measured with the generation runs).

With ``compiled`` set (``srformer bench --compiled``), the step and ``generate()`` sections also time each
variant compiled (records with ``compiled=True``; :mod:`~srformer.benchmarks.compiled`), after a probe that
inductor compiles on this machine at all (if not, the compiled column is skipped with the reason logged).

On the CPU, the largest shapes get fewer repeats and tokens (see :class:`SuiteSettings`) so that
the default run fits in about 15 minutes on 2 cores.

This module is the runner and the public face of the suite; its parts live beside it: the settings
(:mod:`~srformer.benchmarks.suite_settings`), the run's shared state and compile probe
(:mod:`~srformer.benchmarks.suite_context`) and one task builder per section (:mod:`~srformer.benchmarks.suite_flops`,
:mod:`~srformer.benchmarks.suite_operators`,
:mod:`~srformer.benchmarks.suite_step`, :mod:`~srformer.benchmarks.suite_generate`,
:mod:`~srformer.benchmarks.suite_training`, :mod:`~srformer.benchmarks.suite_memory`).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

import torch
import transformers
from tqdm.auto import tqdm

from srformer.benchmarks.compiled import compile_unavailable_reason
from srformer.benchmarks.records import BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task
from srformer.benchmarks.suite_flops import flop_tasks
from srformer.benchmarks.suite_generate import generate_tasks
from srformer.benchmarks.suite_memory import memory_tasks
from srformer.benchmarks.suite_operators import operator_tasks
from srformer.benchmarks.suite_settings import SECTIONS, SuiteSettings, with_overrides
from srformer.benchmarks.suite_step import step_tasks
from srformer.benchmarks.suite_training import training_tasks
from srformer.benchmarks.timing import resolve_device
from srformer.benchmarks.variants import quiet_schedule_warnings, segments_exceed_target

__all__ = ["SECTIONS", "SuiteSettings", "environment_summary", "run_suite", "with_overrides"]

#: The task builder of each of :data:`SECTIONS`.
_TASK_BUILDERS: dict[str, Callable[[SuiteContext], list[Task]]] = {
    "flops": flop_tasks,
    "operators": operator_tasks,
    "step": step_tasks,
    "generate": generate_tasks,
    "training": training_tasks,
    "memory": memory_tasks,
}


def environment_summary(device: torch.device) -> dict:
    """Versions and hardware of this run (for reports)."""
    summary = {
        "device": str(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
    if device.type == "cuda":
        summary["gpu"] = torch.cuda.get_device_name(device)
    return summary


def run_suite(
    settings: SuiteSettings,
    *,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    details: dict[str, list[dict]] | None = None,
) -> list[BenchRecord]:
    """Run every selected measurement and return the records.

    Args:
        settings: what to measure (:class:`SuiteSettings`; :meth:`SuiteSettings.quick` for CI).
        progress: show a tqdm progress bar (stderr) with the current measurement.
        log: receives one line per skipped measurement or caveat (default: printed above the bar).
        details: filled, when given, with the detail rows some sections keep beside their records, by output file
            name (``bytes_by_operator.json``: the ``operators`` section's bytes per operator).

    Returns:
        The records, in measurement order.

    Raises:
        ValueError: for a device that is not available.
        RuntimeError: if a measurement fails (e.g. a memory child process).
    """
    device = resolve_device(settings.device)
    messages = log or (lambda line: tqdm.write(line))
    ctx = SuiteContext(settings, device, messages, compile_unavailable_reason)
    for k in settings.encoder_lengths:
        for s in settings.segment_sizes:
            if segments_exceed_target(k, s, settings.target_length):
                messages(f"note: k={k}, s={s}: {-(-k // s)} segments > T={settings.target_length}; the schedule "
                         "skips segments (paper Sec. 4.2: s should be >= k/T); timed anyway")
    tasks: list[Task] = []
    for section in SECTIONS:
        if section in settings.sections:
            tasks.extend(_TASK_BUILDERS[section](ctx))
    records: list[BenchRecord] = []
    bar = tqdm(tasks, desc="srformer bench", unit="task", disable=not progress, dynamic_ncols=True)
    with quiet_schedule_warnings():
        for label, task in bar:
            bar.set_postfix_str(label, refresh=True)
            started = time.perf_counter()
            try:
                records.extend(task())
            except torch.OutOfMemoryError as error:
                messages(f"{label}: skipped, out of memory ({str(error).splitlines()[0]})")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            if not progress:
                messages(f"{label}: {time.perf_counter() - started:.1f}s")
    bar.close()
    ctx.models.clear()
    if details is not None:
        details.update(ctx.details)
    return records
