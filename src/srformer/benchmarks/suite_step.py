"""The ``step`` section of the benchmark suite: cross-attention time per decoder step, one layer.

For every encoder length ``k``, batch size and (variant, segment size): the mean time of one decoder step of the
first decoder layer's cross attention (:mod:`~srformer.benchmarks.cross_attention_step`), the time of its first call
(the prefill) and, where counted, its FLOPs per step; with the compiled column on, also the step time compiled.
The variants of one shape share one random encoder output, freed after the shape's last measurement.
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.cross_attention_step import measure_cross_attention_step
from srformer.benchmarks.generation import random_encoder_outputs
from srformer.benchmarks.records import BENCH_VARIANTS, BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task
from srformer.benchmarks.suite_settings import MODEL_SHAPES
from srformer.benchmarks.variants import first_cross_attention


def step_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: one per ``k``, batch size and (variant, segment size), eager and, when
    :meth:`~srformer.benchmarks.suite_context.SuiteContext.can_compile`, compiled."""
    settings = ctx.settings
    d_model = MODEL_SHAPES[settings.model_shape]["d_model"]
    tasks: list[Task] = []

    def step(k: int, batch: int, variant: str, s: int | None, encoder: dict, last: bool,
             compiled: bool = False) -> list[BenchRecord]:
        if "states" not in encoder:
            encoder["states"] = random_encoder_outputs(batch, k, d_model, device=ctx.device,
                                                       seed=settings.seed)[0].last_hidden_state
        repeats = settings.repeats
        if ctx.on_cpu and k >= settings.cpu_large_encoder_length:
            repeats = min(repeats, 3)
        module = first_cross_attention(ctx.model(variant, s))
        states = encoder["states"]
        if last:
            encoder.clear()  # the shape's last measurement: free the encoder output afterwards
        if compiled:
            warmup = max(settings.warmup, 1)

            def measure() -> list[BenchRecord]:
                result = measure_cross_attention_step(module, states, positions=settings.step_positions,
                                                      repeats=repeats, warmup=warmup, count=False, compiled=True)
                note = (f"compiled: torch.compile(module, fullgraph=True, dynamic=False, backend='inductor'), static "
                        f"self-attention cache; one decoder layer (layer 0); mean over "
                        f"t = 1..{settings.step_positions}, median of {repeats} runs after {warmup} warm-up "
                        "(compiling) run(s)")
                return [ctx.record(variant, k, s, batch, "cross_attention_step_time", result.step_ms, "ms", note=note,
                                   compiled=True)]

            return ctx.compiled_or_skip(f"step: {variant} k={k} s={s} B={batch}", measure)
        result = measure_cross_attention_step(
            module, states, positions=settings.step_positions, repeats=repeats, warmup=settings.warmup
        )
        note = (f"one decoder layer (layer 0); mean over t = 1..{settings.step_positions}, "
                f"median of {repeats} runs after {settings.warmup} warm-up")
        records = [
            ctx.record(variant, k, s, batch, "cross_attention_step_time", result.step_ms, "ms", note=note),
            ctx.record(variant, k, s, batch, "cross_attention_prefill_time", 1000.0 * result.fill_seconds, "ms",
                       note="one layer, first call (t = 0): K/V projection or state build; median of "
                            f"{repeats} fills after {min(settings.warmup, 1)} warm-up fill"),
        ]
        if result.flops_per_step:
            note = f"FlopCounterMode, one layer, mean over t = 1..{settings.step_positions}"
            records.append(ctx.record(variant, k, s, batch, "cross_attention_step_flops", result.flops_per_step,
                                      "FLOPs", note=note))
        return records

    for k in settings.encoder_lengths:
        for batch in settings.batch_sizes:
            encoder: dict = {}
            pairs = ctx.configurations(BENCH_VARIANTS)
            modes = (False, True) if ctx.can_compile() else (False,)
            for index, (variant, s) in enumerate(pairs):
                for compiled in modes:
                    last = index == len(pairs) - 1 and compiled == modes[-1]
                    label = f"step{' (compiled)' if compiled else ''}: {variant} k={k} s={s} B={batch}"
                    tasks.append((label, partial(step, k, batch, variant, s, encoder, last, compiled)))
    return tasks
