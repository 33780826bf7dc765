"""The ``flops`` section of the benchmark suite: paper Table 1 counts, FlopCounterMode counts and Figure 5.

Per encoder length ``k`` and segment size ``s``: the Table 1 computation (MACs) and memory (elements) of each
attention type, FlopCounterMode counts of the attention core (per example and head, teacher-forced forward and
generation), and of one teacher-forced cross-attention module call (projections included); then the Figure 5 series
(``k = 8q``, ``d = 64``, ``s = 64``, ``T = q``) at ``settings.figure5_measured_qs``.
"""

from __future__ import annotations

from functools import partial

from srformer.benchmarks.flops import (
    TABLE1_VARIANTS,
    attention_core_flops,
    cross_attention_forward_flops,
    table1_computation,
    table1_memory,
)
from srformer.benchmarks.generation import random_encoder_outputs
from srformer.benchmarks.plots import FIGURE5_NOTE
from srformer.benchmarks.records import CORE_VARIANT_NAMES, THEORY_DEVICE, BenchRecord
from srformer.benchmarks.suite_context import SuiteContext, Task
from srformer.benchmarks.suite_training import TRAINING_VARIANTS
from srformer.benchmarks.variants import MODEL_SHAPES, first_cross_attention, head_count_and_dim

#: Variants of the FLOP counts: cache layout (lean) and attention implementation (eager) do not
#: change the teacher-forced forward, so they are counted for the step only.
FORWARD_FLOP_VARIANTS: tuple[str, ...] = TRAINING_VARIANTS


def flop_tasks(ctx: SuiteContext) -> list[Task]:
    """The section's tasks: per ``k`` its Table 1 and attention-core counts and its module forward count, then
    one Figure 5 task per ``q`` of ``settings.figure5_measured_qs``."""
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
