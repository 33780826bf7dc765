"""The ``operators`` section of the benchmark suite: aten operator calls and host syncs of ``generate()``.

Per encoder length ``k``, segment size and variant (batch 1): the calls of the first step (every layer's cache fill
or state build plus one step) and of each further token, and the host syncs among them
(:mod:`srformer.benchmarks.operator_count`). On a GPU an eager step costs about one launch per call whatever the
input length, so these counts, measured on any device, say how a variant's eager decoding compares with full
attention's there (``docs/benchmarks.md``, "Operator calls").
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.operator_count import count_generation_operators
from srformer.benchmarks.records import BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task

#: The section's metrics: (metric, field of :class:`~srformer.benchmarks.operator_count.OperatorCount`, unit).
OPERATOR_METRICS: tuple[tuple[str, str, str], ...] = (
    ("first_step_operator_calls", "first_step_calls", "calls"),
    ("operator_calls_per_token", "calls_per_token", "calls"),
    ("first_step_host_syncs", "first_step_syncs", "syncs"),
    ("host_syncs_per_token", "syncs_per_token", "syncs"),
)

OPERATOR_NOTE = ("aten calls through a TorchDispatchMode (views included), batch 1, greedy generate() from random "
                 "encoder_outputs; per token: (calls of 5 tokens - calls of 1) / 4")


def operator_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: one per ``k``, counting every (variant, segment size) pair at batch 1."""

    def count(k: int) -> list[BenchRecord]:
        records = []
        for variant, s in ctx.configurations(ctx.settings.variants):
            result = count_generation_operators(ctx.model(variant, s), k, seed=ctx.settings.seed)
            for metric, name, unit in OPERATOR_METRICS:
                records.append(ctx.record(variant, k, s, 1, metric, float(getattr(result, name)), unit,
                                          note=OPERATOR_NOTE))
        return records

    return [(f"operators: k={k}", partial(count, k)) for k in ctx.settings.encoder_lengths]
