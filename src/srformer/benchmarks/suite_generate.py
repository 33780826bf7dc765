"""The ``generate`` section of the benchmark suite: ``generate()`` throughput and cross-attention cache bytes.

The encoder is excluded (precomputed random encoder outputs); the variants timed are those of
:func:`generate_variants`. On CUDA the peak memory of each call is recorded with it. On the CPU, encoder lengths
from ``settings.cpu_large_encoder_length`` on are timed for the largest segment size only, with half the tokens,
one timed call per variant after one warm-up call shared by the variants.
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.generation import measure_generation
from srformer.benchmarks.records import DEFAULT_BENCH_VARIANTS, BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task

#: Variants of the default list whose ``generate()`` is timed (``segmented-lean`` is left to the step and
#: memory sections: it is the slowest to generate and adds nothing the others do not show). A variant outside the
#: default list (the paper's baselines, the mechanisms beyond the paper) is opt-in, so it is timed when requested.
GENERATE_VARIANTS: tuple[str, ...] = ("full-sdpa", "full-eager", "segmented", "srformer", "srformer-lean")
assert set(GENERATE_VARIANTS) <= set(DEFAULT_BENCH_VARIANTS)


def generate_variants(variants: tuple[str, ...]) -> tuple[str, ...]:
    """The requested ``variants`` whose ``generate()`` the suite times: those of :data:`GENERATE_VARIANTS` and every
    one outside :data:`DEFAULT_BENCH_VARIANTS`, in the requested order."""
    return tuple(v for v in variants if v in GENERATE_VARIANTS or v not in DEFAULT_BENCH_VARIANTS)


GENERATE_NOTE = "encoder excluded: precomputed random encoder_outputs; greedy, min_new_tokens = max_new_tokens"


def generate_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: one per ``k``, batch size and (variant, segment size) of :func:`generate_variants`
    (and its compiled twin when compiling works), after the shape's shared warm-up task where there is one."""
    settings = ctx.settings
    tasks: list[Task] = []

    def generate(k: int, batch: int, variant: str, s: int | None, compiled: bool = False) -> list[BenchRecord]:
        tokens, repeats, warmup = settings.new_tokens, settings.repeats, settings.warmup
        warmup_tokens = min(tokens, 4)
        if ctx.on_cpu:
            repeats = min(repeats, 2)
            if k >= settings.cpu_large_encoder_length:
                tokens, repeats, warmup = max(1, tokens // 2), 1, 0  # after the shape's shared warm-up
        if compiled:
            warmup = max(warmup, 1)

            def measure() -> list[BenchRecord]:
                result = measure_generation(
                    ctx.model(variant, s), batch_size=batch, encoder_length=k, new_tokens=tokens, repeats=repeats,
                    warmup=warmup, seed=settings.seed, compiled=True,
                )
                note = (f"compiled: cache_implementation='static', CompileConfig(fullgraph=True, dynamic=False, "
                        f"backend='inductor'); {GENERATE_NOTE}; {tokens} new tokens x batch {batch}; median of "
                        f"{repeats} calls after {warmup} warm-up (compiling) call(s) of {tokens} tokens")
                return [ctx.record(variant, k, s, batch, "generate_throughput", result.tokens_per_second, "tokens/s",
                                   q=tokens, note=note, compiled=True)]

            return ctx.compiled_or_skip(f"generate: {variant} k={k} s={s} B={batch}", measure)
        result = measure_generation(
            ctx.model(variant, s), batch_size=batch, encoder_length=k, new_tokens=tokens, repeats=repeats,
            warmup=warmup, warmup_tokens=warmup_tokens, seed=settings.seed,
        )
        warmed = f"{warmup} warm-up call(s)" if warmup else "a shared warm-up call at this shape"
        note = f"{GENERATE_NOTE}; {tokens} new tokens x batch {batch}; median of {repeats} calls after {warmed}"
        records = [
            ctx.record(variant, k, s, batch, "generate_throughput", result.tokens_per_second, "tokens/s", q=tokens,
                       note=note),
            ctx.record(variant, k, s, batch, "cross_attention_cache_bytes", result.cache_bytes, "bytes", q=tokens,
                       note="after generate(), all decoder layers; lean states count the encoder output once"),
        ]
        if result.cuda_peak_bytes:
            records.append(ctx.record(variant, k, s, batch, "generate_peak_memory", result.cuda_peak_bytes, "bytes",
                                      q=tokens, note="torch.cuda.max_memory_allocated minus the level before the call"))
        return records

    def shared_warmup(k: int, batch: int, variant: str, s: int | None) -> list[BenchRecord]:
        measure_generation(ctx.model(variant, s), batch_size=batch, encoder_length=k, new_tokens=2, repeats=1,
                           warmup=0, seed=settings.seed)
        return []

    for k in settings.encoder_lengths:
        large = ctx.on_cpu and k >= settings.cpu_large_encoder_length
        pairs = ctx.configurations(generate_variants(tuple(settings.variants)), largest_segment_only=large)
        if large:
            tokens = max(1, settings.new_tokens // 2)
            ctx.log(f"generate: k={k} on the CPU: s={max(settings.segment_sizes)} only, {tokens} tokens, "
                    "one timed call per variant after one shared warm-up call")
        for batch in settings.batch_sizes:
            if large and pairs:
                tasks.append((f"generate: warm-up k={k} B={batch}",
                              partial(shared_warmup, k, batch, *pairs[0])))
            for variant, s in pairs:
                tasks.append((f"generate: {variant} k={k} s={s} B={batch}",
                              partial(generate, k, batch, variant, s)))
                if ctx.can_compile():
                    tasks.append((f"generate (compiled): {variant} k={k} s={s} B={batch}",
                                  partial(generate, k, batch, variant, s, True)))
    return tasks
