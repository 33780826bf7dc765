"""The ``memory`` section of the benchmark suite: peak memory during ``generate()`` on the CPU.

Measured in child processes (:mod:`~srformer.benchmarks.memory`), one per variant or one for all
(``settings.memory_one_process``), at one batch size and segment size. On CUDA the section adds nothing: the peak
memory is measured with the generation runs.
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.memory import MemoryJob, measure_cpu_peak_memory
from srformer.benchmarks.records import BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task
from srformer.benchmarks.variants import variant_spec


def memory_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: one per variant, or one for all (``settings.memory_one_process``); none on CUDA
    (logged)."""
    settings = ctx.settings
    if not ctx.on_cpu:
        ctx.log("memory: measured on CUDA with the generation runs (torch.cuda.max_memory_allocated)")
        return []
    batch = settings.memory_batch_size or max(settings.batch_sizes)
    segment = settings.memory_segment_size or (64 if 64 in settings.segment_sizes else max(settings.segment_sizes))

    def probe(pairs: list[tuple[str, int | None]]) -> list[BenchRecord]:
        jobs = [
            MemoryJob(settings.model_shape, variant, s, settings.target_length, k, batch, settings.memory_new_tokens,
                      longest_input=max(settings.encoder_lengths),
                      settings=tuple(sorted(settings.variant_settings.get(variant, {}).items())))
            for variant, s in pairs
            for k in settings.encoder_lengths
        ]
        records = []
        for result in measure_cpu_peak_memory(jobs, one_process=settings.memory_one_process):
            job = result.job
            if result.peak_bytes <= 0:
                ctx.log(f"memory: {job.variant} k={job.encoder_length}: no RSS increase measured; no record")
                continue
            note = (f"peak RSS increase during generate() in a child process ({result.method}); "
                    f"{job.new_tokens} new tokens; encoder excluded")
            records.append(ctx.record(job.variant, job.encoder_length, job.segment_size, batch, "generate_peak_memory",
                                      result.peak_bytes, "bytes", q=job.new_tokens, note=note))
        return records

    pairs = [(v, segment if variant_spec(v).uses_segments else None) for v in settings.variants]
    if settings.memory_one_process:
        return [(f"memory: all variants s={segment} B={batch} (one child process)", lambda: probe(pairs))]
    return [(f"memory: {v} s={s} B={batch} (child process)", partial(probe, [(v, s)])) for v, s in pairs]
