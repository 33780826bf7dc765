"""The whole benchmark: every measurement of ``srformer bench``, side by side, in one process.

:func:`run_suite` measures, for every benchmark variant (:data:`~srformer.benchmarks.records.BENCH_VARIANTS`),
encoder length ``k``, segment size ``s`` and batch size (loops ordered k -> batch -> variant so
that the variants of one shape run next to each other):

1. FLOPs: paper Table 1 counts, FlopCounterMode counts of the attention core (per example and
   head) and of one teacher-forced cross-attention module call, and the Figure 5 series
   (``k = 8q``, ``d = 64``, ``s = 64``, ``T = q``);
2. cross-attention time per decoder step (one layer; :mod:`~srformer.benchmarks.cross_attention_step`);
3. ``generate()`` throughput with the encoder excluded, and the cross-attention cache bytes
   (:mod:`~srformer.benchmarks.generation`);
4. training step time (:mod:`~srformer.benchmarks.training_step`);
5. peak memory during ``generate()`` (CPU: child processes, :mod:`~srformer.benchmarks.memory`;
   CUDA: measured with the generation runs).

With ``compiled`` set (``srformer bench --compiled``), the step and ``generate()`` sections also time each
variant compiled (records with ``compiled=True``; :mod:`~srformer.benchmarks.compiled`), after a probe that
inductor compiles on this machine at all (if not, the compiled column is skipped with the reason logged).

On the CPU, the largest shapes get fewer repeats and tokens (see :class:`SuiteSettings`) so that
the default run fits in about 15 minutes on 2 cores.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch
import transformers
from tqdm.auto import tqdm

from srformer.benchmarks.compiled import compile_unavailable_reason
from srformer.benchmarks.cross_attention_step import measure_cross_attention_step
from srformer.benchmarks.flops import (
    TABLE1_VARIANTS,
    attention_core_flops,
    cross_attention_forward_flops,
    table1_computation,
    table1_memory,
)
from srformer.benchmarks.generation import measure_generation, random_encoder_outputs
from srformer.benchmarks.memory import MemoryJob, measure_cpu_peak_memory
from srformer.benchmarks.plots import FIGURE5_NOTE
from srformer.benchmarks.records import (
    BENCH_VARIANTS,
    CORE_VARIANT_NAMES,
    DEFAULT_BENCH_VARIANTS,
    THEORY_DEVICE,
    VARIANT_SPECS,
    BenchRecord,
)
from srformer.benchmarks.timing import resolve_device
from srformer.benchmarks.training_step import measure_training_step
from srformer.benchmarks.variants import (
    MODEL_SHAPES,
    build_model,
    first_cross_attention,
    head_count_and_dim,
    quiet_schedule_warnings,
    segments_exceed_target,
    variant_spec,
)

#: Sections of the suite, in run order.
SECTIONS: tuple[str, ...] = ("flops", "step", "generate", "training", "memory")

#: Variants of the default list whose ``generate()`` is timed (``segmented-lean`` is left to the step and
#: memory sections: it is the slowest to generate and adds nothing the others do not show). A variant outside the
#: default list (the paper's baselines, the mechanisms beyond the paper) is opt-in, so it is timed when requested.
GENERATE_VARIANTS: tuple[str, ...] = ("full-sdpa", "full-eager", "segmented", "srformer", "srformer-lean")
assert set(GENERATE_VARIANTS) <= set(DEFAULT_BENCH_VARIANTS)


def generate_variants(variants: tuple[str, ...]) -> tuple[str, ...]:
    """The requested ``variants`` whose ``generate()`` the suite times: those of :data:`GENERATE_VARIANTS` and every
    one outside :data:`DEFAULT_BENCH_VARIANTS`, in the requested order."""
    return tuple(v for v in variants if v in GENERATE_VARIANTS or v not in DEFAULT_BENCH_VARIANTS)

#: Variants whose training step is timed: the default ones without the lean cache (it only exists in generation).
TRAINING_VARIANTS: tuple[str, ...] = tuple(v for v in DEFAULT_BENCH_VARIANTS if not VARIANT_SPECS[v].lean_cache)

#: Variants of the FLOP counts: cache layout (lean) and attention implementation (eager) do not
#: change the teacher-forced forward, so they are counted for the step only.
FORWARD_FLOP_VARIANTS: tuple[str, ...] = TRAINING_VARIANTS

GENERATE_NOTE = "encoder excluded: precomputed random encoder_outputs; greedy, min_new_tokens = max_new_tokens"

#: One unit of the suite's work: a progress label and the call that measures and returns its records.
Task = tuple[str, Callable[[], list[BenchRecord]]]


@dataclass(frozen=True)
class SuiteSettings:
    """What :func:`run_suite` measures and how hard.

    Attributes:
        encoder_lengths: ``k`` values (tokens).
        segment_sizes: ``s`` values (tokens).
        batch_sizes: batch sizes of the step and generation measurements.
        variants: benchmark variants (a subset of :data:`BENCH_VARIANTS`; default
            :data:`~srformer.benchmarks.records.DEFAULT_BENCH_VARIANTS`, without the baselines).
        target_length: ``T`` (tokens): the schedule's decoder length, and the label length of the
            training step and the ``q`` of the FLOP counts.
        model_shape: a key of :data:`~srformer.benchmarks.variants.MODEL_SHAPES`.
        device: ``cpu``, ``cuda`` or ``auto``.
        repeats: timed repeats (medians are reported).
        warmup: discarded runs before them.
        step_positions: decoder positions timed per step run (``t = 1 .. n``).
        new_tokens: tokens per sequence in the timed ``generate()`` calls.
        training_batch_size: sequences per training step.
        training_repeats: timed training steps (at most ``repeats``).
        cpu_training_max_encoder_length: on the CPU, training steps are skipped above this ``k`` (logged).
        cpu_training_single_step_encoder_length: on the CPU, from this ``k`` on, training is timed
            for the largest segment size only, one step per variant after one warm-up step shared by
            the variants (noted in the record and the log).
        memory_new_tokens: tokens per sequence in the CPU peak-memory ``generate()`` calls.
        memory_batch_size: batch size of the CPU peak-memory measurements (default: the largest batch size).
        memory_segment_size: ``s`` of the CPU peak-memory measurements (default: 64 if measured, else the largest).
        memory_one_process: measure all variants' CPU peak memory in one child process (default: one
            child per variant).
        cpu_large_encoder_length: on the CPU, from this ``k`` on: step repeats at most 3; ``generate()``
            for the largest segment size only, with half the tokens, one timed call per variant after
            one warm-up call shared by the variants. (On the CPU ``generate()`` is otherwise timed at
            most twice, after a warm-up call of 4 tokens.)
        figure5_qs: summary lengths ``q`` of the Figure 5 theoretical curves.
        figure5_measured_qs: the ``q`` values with FlopCounterMode points in Figure 5.
        sections: which of :data:`SECTIONS` to run.
        seed: seed of the weights and the random inputs.
        compiled: also time the step and ``generate()`` compiled (``torch.compile`` with inductor, fullgraph;
            :mod:`~srformer.benchmarks.compiled`). Off by default: compiling every variant and shape takes
            seconds to minutes each.
    """

    encoder_lengths: tuple[int, ...] = (512, 1024, 4096, 16384)
    segment_sizes: tuple[int, ...] = (16, 64)
    batch_sizes: tuple[int, ...] = (1, 8)
    variants: tuple[str, ...] = DEFAULT_BENCH_VARIANTS
    target_length: int = 128
    model_shape: str = "t5-small"
    device: str = "auto"
    repeats: int = 5
    warmup: int = 1
    step_positions: int = 32
    new_tokens: int = 64
    training_batch_size: int = 1
    training_repeats: int = 2
    cpu_training_max_encoder_length: int = 4096
    cpu_training_single_step_encoder_length: int = 2048
    memory_new_tokens: int = 16
    memory_batch_size: int | None = None
    memory_segment_size: int | None = None
    memory_one_process: bool = False
    cpu_large_encoder_length: int = 8192
    figure5_qs: tuple[int, ...] = (128, 256, 384, 512, 640, 768, 896, 1024)
    figure5_measured_qs: tuple[int, ...] = (128, 256, 512, 1024)
    sections: tuple[str, ...] = SECTIONS
    seed: int = 0
    compiled: bool = False

    def __post_init__(self) -> None:
        for name in ("encoder_lengths", "segment_sizes", "batch_sizes", "figure5_qs", "figure5_measured_qs"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"`{name}` must be a non-empty list of positive integers, got {values!r}.")
        for name in ("target_length", "repeats", "step_positions", "new_tokens", "training_batch_size",
                     "training_repeats", "memory_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)!r}.")
        if self.warmup < 0:
            raise ValueError(f"`warmup` must be >= 0, got {self.warmup!r}.")
        unknown = [v for v in self.variants if v not in BENCH_VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f"Unknown benchmark variant(s) {unknown}; known variants are {', '.join(BENCH_VARIANTS)}.")
        unknown = [s for s in self.sections if s not in SECTIONS]
        if unknown:
            raise ValueError(f"Unknown section(s) {unknown}; sections are {', '.join(SECTIONS)}.")
        if self.model_shape not in MODEL_SHAPES:
            raise ValueError(f"Unknown model shape {self.model_shape!r}; known shapes are {', '.join(MODEL_SHAPES)}.")

    @classmethod
    def quick(cls, **overrides) -> SuiteSettings:
        """The ``--quick`` settings (CI): a t5-tiny-sized model, k in {64, 128}, s = 16, batch 1,
        one repeat, a few positions and tokens; ``overrides`` replace any field."""
        quick: dict[str, Any] = dict(
            encoder_lengths=(64, 128),
            segment_sizes=(16,),
            batch_sizes=(1,),
            target_length=32,
            model_shape="t5-tiny",
            repeats=1,
            warmup=1,
            step_positions=8,
            new_tokens=8,
            training_repeats=1,
            memory_new_tokens=4,
            memory_one_process=True,
            figure5_measured_qs=(128,),
        )
        quick.update(overrides)
        return cls(**quick)

    def summary(self) -> dict:
        """The settings as a plain dict (for reports)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class _Context:
    settings: SuiteSettings
    device: torch.device
    log: Callable[[str], None]
    models: dict = field(default_factory=dict)
    compile_probe: list[str | None] = field(default_factory=list)  # [reason or None] once probed

    @property
    def device_name(self) -> str:
        return "cuda" if self.device.type == "cuda" else "cpu"

    @property
    def on_cpu(self) -> bool:
        return self.device.type == "cpu"

    def model(self, variant: str, segment_size: int | None):
        key = (variant, segment_size)
        if key not in self.models:
            self.models[key] = build_model(
                self.settings.model_shape,
                variant,
                segment_size=segment_size,
                target_length=self.settings.target_length,
                device=self.device,
                seed=self.settings.seed,
                longest_input=max(self.settings.encoder_lengths),
            )
        return self.models[key]

    def configurations(self, variants, *, largest_segment_only: bool = False) -> list[tuple[str, int | None]]:
        """(variant, segment size) pairs of the selected variants, in the settings' order."""
        pairs: list[tuple[str, int | None]] = []
        all_sizes = (max(self.settings.segment_sizes),) if largest_segment_only else self.settings.segment_sizes
        for variant in self.settings.variants:
            if variant not in variants:
                continue
            sizes = all_sizes if variant_spec(variant).uses_segments else (None,)
            pairs.extend((variant, s) for s in sizes)
        return pairs

    def record(self, variant, k, s, batch, metric, value, unit, *, q=None, note="", device=None,
               compiled=False) -> BenchRecord:
        return BenchRecord(
            variant=variant, encoder_length=k, segment_size=s, batch_size=batch, metric=metric, value=value,
            unit=unit, device=device or self.device_name, decoder_length=q, note=note, compiled=compiled,
        )

    def can_compile(self) -> bool:
        """Whether the compiled column is measured: ``settings.compiled`` and inductor works here (the
        first call probes it and logs the reason when it does not)."""
        if not self.settings.compiled:
            return False
        if not self.compile_probe:
            reason = compile_unavailable_reason(self.device.type)
            self.compile_probe.append(reason)
            if reason is not None:
                self.log(f"compiled column skipped: inductor cannot compile on this machine ({reason})")
        return self.compile_probe[0] is None

    def compiled_or_skip(self, label: str, measure: Callable[[], list[BenchRecord]]) -> list[BenchRecord]:
        """``measure()``, or no records and a logged line when compiling this variant fails."""
        try:
            return measure()
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # a compiler failure skips this cell, not the run
            lines = str(error).strip().splitlines()
            self.log(f"{label}: compiled measurement skipped ({type(error).__name__}: {lines[0] if lines else ''})")
            return []


def _flop_tasks(ctx: _Context) -> list[Task]:
    settings = ctx.settings
    _, d = head_count_and_dim(settings.model_shape)
    q = settings.target_length
    tasks: list[Task] = []

    def table1_and_core(k: int) -> list[BenchRecord]:
        records = []
        for s in settings.segment_sizes:
            for variant in TABLE1_VARIANTS:
                if variant == "full" and s != settings.segment_sizes[0]:
                    continue
                seg = None if variant == "full" else s
                note = f"per example and head, d = {d}"
                records.append(ctx.record(variant, k, seg, 1, "table1_computation",
                                          table1_computation(variant, q=q, k=k, d=d, s=s), "MACs", q=q,
                                          note=note, device=THEORY_DEVICE))
                records.append(ctx.record(variant, k, seg, 1, "table1_memory",
                                          table1_memory(variant, q=q, k=k, d=d, s=s), "elements", q=q,
                                          note=note, device=THEORY_DEVICE))
                for mode in ("forward", "generation"):
                    flops = attention_core_flops(variant, q=q, k=k, d=d, s=s, mode=mode, device=ctx.device,
                                                 seed=settings.seed)
                    records.append(ctx.record(CORE_VARIANT_NAMES[variant], k, seg, 1, f"attention_core_{mode}_flops",
                                              flops, "FLOPs", q=q, note=f"FlopCounterMode, attention only, {note}"))
        return records

    def module_forward(k: int) -> list[BenchRecord]:
        records = []
        encoder_outputs, _ = random_encoder_outputs(1, k, MODEL_SHAPES[settings.model_shape]["d_model"],
                                                    device=ctx.device, seed=settings.seed)
        encoder_states = encoder_outputs.last_hidden_state
        assert encoder_states is not None, "random_encoder_outputs sets last_hidden_state"
        for variant, s in ctx.configurations(FORWARD_FLOP_VARIANTS):
            module = first_cross_attention(ctx.model(variant, s))
            flops = cross_attention_forward_flops(module, encoder_states, q, seed=settings.seed)
            records.append(ctx.record(variant, k, s, 1, "cross_attention_forward_flops", flops, "FLOPs", q=q,
                                      note="FlopCounterMode, one layer, teacher forced, projections included"))
        return records

    def figure5(q5: int) -> list[BenchRecord]:
        records = []
        k5, d5, s5 = 8 * q5, 64, 64
        note = f"{FIGURE5_NOTE} k = 8q, d = 64, s = 64, T = q; per example and head"
        for variant in TABLE1_VARIANTS:
            seg = None if variant == "full" else s5
            for mode in ("forward", "generation"):
                flops = attention_core_flops(variant, q=q5, k=k5, d=d5, s=s5, mode=mode, device=ctx.device,
                                             seed=settings.seed)
                records.append(ctx.record(CORE_VARIANT_NAMES[variant], k5, seg, 1, f"attention_core_{mode}_flops",
                                          flops, "FLOPs", q=q5, note=note))
        return records

    for k in settings.encoder_lengths:
        tasks.append((f"flops: Table 1 and attention core, k={k}", partial(table1_and_core, k)))
        tasks.append((f"flops: module forward, k={k}", partial(module_forward, k)))
    for q5 in settings.figure5_measured_qs:
        tasks.append((f"flops: Figure 5, q={q5}", partial(figure5, q5)))
    return tasks


def _step_tasks(ctx: _Context) -> list[Task]:
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


def _generate_tasks(ctx: _Context) -> list[Task]:
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


def _training_tasks(ctx: _Context) -> list[Task]:
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


def _memory_tasks(ctx: _Context) -> list[Task]:
    settings = ctx.settings
    if not ctx.on_cpu:
        ctx.log("memory: measured on CUDA with the generation runs (torch.cuda.max_memory_allocated)")
        return []
    batch = settings.memory_batch_size or max(settings.batch_sizes)
    segment = settings.memory_segment_size or (64 if 64 in settings.segment_sizes else max(settings.segment_sizes))

    def probe(pairs: list[tuple[str, int | None]]) -> list[BenchRecord]:
        jobs = [
            MemoryJob(settings.model_shape, variant, s, settings.target_length, k, batch, settings.memory_new_tokens,
                      longest_input=max(settings.encoder_lengths))
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


_TASK_BUILDERS = {
    "flops": _flop_tasks,
    "step": _step_tasks,
    "generate": _generate_tasks,
    "training": _training_tasks,
    "memory": _memory_tasks,
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
) -> list[BenchRecord]:
    """Run every selected measurement and return the records.

    Args:
        settings: what to measure (:class:`SuiteSettings`; :meth:`SuiteSettings.quick` for CI).
        progress: show a tqdm progress bar (stderr) with the current measurement.
        log: receives one line per skipped measurement or caveat (default: printed above the bar).

    Returns:
        The records, in measurement order.

    Raises:
        ValueError: for a device that is not available.
        RuntimeError: if a measurement fails (e.g. a memory child process).
    """
    device = resolve_device(settings.device)
    messages = log or (lambda line: tqdm.write(line))
    ctx = _Context(settings, device, messages)
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
    return records


def with_overrides(settings: SuiteSettings, **overrides) -> SuiteSettings:
    """``settings`` with the given fields replaced (None values are ignored)."""
    return replace(settings, **{key: value for key, value in overrides.items() if value is not None})
