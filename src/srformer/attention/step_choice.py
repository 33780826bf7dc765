"""Which of two decoder steps a mechanism runs, by device: ``knn``, ``block-topk`` and ``quest`` have a CPU step and
an accelerator step, which compute the same output from the same state; ``quest`` also builds its bounds a head and a
4,096-position chunk at a time on the CPU, and all heads in one pass on an accelerator (the same state).

On a GPU an eager decoder step is launch-bound: each operator call costs about one kernel launch (~20 µs) whatever
the input length, and a host sync stops the launches from running ahead of the kernels
(:mod:`srformer.benchmarks.operator_count`). The **accelerator step** is therefore a short fixed sequence of
operator calls without a host sync (the selection by one ``topk`` of order keys,
:func:`~srformer.attention.selection.ranked_top`; one indexing per tensor; one ``scaled_dot_product_attention``).
On the CPU that sequence mostly costs more time than the **CPU step**, whose host-side tie check and
``index_select`` gathers are cheap there, so the CPU keeps it: one layer's step at t5-small's 8 heads of 64, one
thread, took 3.3x the CPU step's time for ``knn`` at 4k and 16k tokens, and for ``block-topk-b4`` 0.8x at 4k but
1.6x at 16k, and for ``quest-tree`` about 1x at 4k but 11x at 16k. No GPU time of either step has been measured.

:data:`STEP_OVERRIDE` overrides the device's choice: tests run both steps on the CPU, and
:func:`srformer.benchmarks.operator_count.count_generation_operators` counts the accelerator step on any device.
"""

from __future__ import annotations

import torch

__all__ = ["STEP_KINDS", "STEP_OVERRIDE", "step_kind"]

#: The steps there are: ``"accelerator"`` (fixed launches, no host sync) and ``"cpu"``.
STEP_KINDS: tuple[str, ...] = ("accelerator", "cpu")

#: The step every device runs, one of :data:`STEP_KINDS`; None (default): by device (:func:`step_kind`).
STEP_OVERRIDE: str | None = None


def step_kind(device: torch.device) -> str:
    """The step to run on ``device``: :data:`STEP_OVERRIDE` when set, else ``"cpu"`` on the CPU and
    ``"accelerator"`` on any other device (CUDA, MPS, XPU, ...).

    Raises:
        ValueError: for a :data:`STEP_OVERRIDE` that is not one of :data:`STEP_KINDS`.
    """
    if STEP_OVERRIDE is not None:
        if STEP_OVERRIDE not in STEP_KINDS:
            raise ValueError(f"`STEP_OVERRIDE` must be None or one of {STEP_KINDS}, got {STEP_OVERRIDE!r}.")
        return STEP_OVERRIDE
    return "cpu" if device.type == "cpu" else "accelerator"
