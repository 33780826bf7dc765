"""The ``operators`` section of the benchmark suite: aten operator calls, host syncs and bytes of ``generate()``.

Per encoder length ``k``, segment size and variant (batch 1): the calls of the first step (every layer's cache fill
or state build plus one step) and of each further token, and the host syncs among them
(:mod:`srformer.benchmarks.operator_count`). On a GPU an eager step costs about one launch per call whatever the
input length, so these counts, measured on any device, say how a variant's eager decoding compares with full
attention's there (``docs/benchmarks.md``, "Operator calls"). Then the bytes of the same steps, on the route an
accelerator runs and on the CPU's (:mod:`srformer.benchmarks.byte_count`): everything eager moves, and the persistent
bytes (weights, encoder output, states) a fused kernel must read, which bound a compiled step at long inputs; the
bytes per operator go to ``bytes_by_operator.json``.
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.byte_count import count_generation_bytes
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

#: The byte metrics without their route prefix, each a field of :class:`~srformer.benchmarks.byte_count.ByteCount`.
BYTE_METRICS: tuple[str, ...] = (
    "first_step_bytes", "first_step_persistent_bytes", "bytes_per_token", "persistent_bytes_per_token",
)

#: The routes whose bytes are counted: (metric prefix, count the accelerator's route whatever the device).
BYTE_ROUTES: tuple[tuple[str, bool], ...] = (("", True), ("cpu_route_", False))

BYTE_NOTE = ("bytes of non-view aten calls (inputs and outputs; an indexing call: what it picks), persistent: those "
             "read from tensors made before the decoder step (weights, encoder output, states); batch 1, greedy "
             "generate() from random encoder_outputs; per token: (5 tokens - 1) / 4")


def operator_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: one per ``k``, counting every (variant, segment size) pair at batch 1."""

    def count(k: int) -> list[BenchRecord]:
        records = []
        for variant, s in ctx.configurations(ctx.settings.variants):
            result = count_generation_operators(ctx.model(variant, s), k, seed=ctx.settings.seed)
            for metric, name, unit in OPERATOR_METRICS:
                records.append(ctx.record(variant, k, s, 1, metric, float(getattr(result, name)), unit,
                                          note=OPERATOR_NOTE))
            for prefix, on_accelerator in BYTE_ROUTES:
                counted = count_generation_bytes(ctx.model(variant, s), k, seed=ctx.settings.seed,
                                                 as_on_accelerator=on_accelerator)
                for metric in BYTE_METRICS:
                    records.append(ctx.record(variant, k, s, 1, prefix + metric, float(getattr(counted, metric)),
                                              "bytes", note=f"{counted.route} route; {BYTE_NOTE}"))
                ctx.details.setdefault("bytes_by_operator.json", []).extend(
                    {"variant": variant, "encoder_length": k, "segment_size": s, "route": counted.route, "step": step,
                     "operator": operator, "bytes": eager, "persistent_bytes": persistent}
                    for step, table in (("per_token", counted.per_token_by_operator),
                                        ("first_step", counted.first_step_by_operator))
                    for operator, (eager, persistent) in table.items()
                )
        return records

    return [(f"operators: k={k}", partial(count, k)) for k in ctx.settings.encoder_lengths]
