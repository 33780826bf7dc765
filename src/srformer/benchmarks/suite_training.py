"""The ``training`` section of the benchmark suite: the time of one training step (forward and backward).

The variants timed are :data:`TRAINING_VARIANTS`. On the CPU, encoder lengths above
``settings.cpu_training_max_encoder_length`` are skipped, and from ``settings.cpu_training_single_step_encoder_length``
on one step per variant is timed, for the largest segment size only, after one warm-up step shared by the variants.
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.records import DEFAULT_BENCH_VARIANTS, VARIANT_SPECS, BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task
from srformer.benchmarks.training_step import measure_training_step

#: Variants whose training step is timed: the default ones without the lean cache (it only exists in generation).
TRAINING_VARIANTS: tuple[str, ...] = tuple(v for v in DEFAULT_BENCH_VARIANTS if not VARIANT_SPECS[v].lean_cache)


def training_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: one per ``k`` and (variant, segment size) of :data:`TRAINING_VARIANTS`, after the
    shape's shared warm-up task where there is one; skipped ``k`` values are logged."""
    settings = ctx.settings
    tasks: list[Task] = []

    def train(k: int, variant: str, s: int | None, single: bool) -> list[BenchRecord]:
        repeats, warmup = min(settings.training_repeats, settings.repeats), settings.warmup
        if single:
            repeats, warmup = 1, 0  # after the shape's shared warm-up step
        timing = measure_training_step(
            ctx.model(variant, s), batch_size=settings.training_batch_size, encoder_length=k,
            label_length=settings.target_length, repeats=repeats, warmup=warmup, seed=settings.seed,
        )
        warmed = f"{warmup} warm-up step(s)" if warmup else "a shared warm-up step at this shape"
        note = (f"forward + backward of the whole model, {settings.target_length} label tokens; "
                f"median of {repeats} after {warmed}")
        return [ctx.record(variant, k, s, settings.training_batch_size, "training_step_time", timing.median_s, "s",
                           q=settings.target_length, note=note)]

    def shared_warmup(k: int, variant: str, s: int | None) -> list[BenchRecord]:
        measure_training_step(ctx.model(variant, s), batch_size=settings.training_batch_size, encoder_length=k,
                              label_length=settings.target_length, repeats=1, warmup=0, seed=settings.seed)
        return []

    for k in settings.encoder_lengths:
        if ctx.on_cpu and k > settings.cpu_training_max_encoder_length:
            ctx.log(f"training: k={k} skipped on the CPU (above cpu_training_max_encoder_length "
                    f"{settings.cpu_training_max_encoder_length})")
            continue
        single = ctx.on_cpu and k >= settings.cpu_training_single_step_encoder_length
        pairs = ctx.configurations(TRAINING_VARIANTS, largest_segment_only=single)
        if single and pairs:
            if len(settings.segment_sizes) > 1:
                ctx.log(f"training: k={k} on the CPU: s={max(settings.segment_sizes)} only, one timed step per "
                        "variant after one shared warm-up step")
            tasks.append((f"training: warm-up k={k}", partial(shared_warmup, k, *pairs[0])))
        for variant, s in pairs:
            tasks.append((f"training: {variant} k={k} s={s}",
                          partial(train, k, variant, s, single)))
    return tasks
