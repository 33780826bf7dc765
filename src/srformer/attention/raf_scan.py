"""The RAF recurrence over every segment as one operator: ``srformer::raf_scan_`` (paper Eq. 13-16, Appendix A.2).

The RAF neuron is a nonlinear recurrence (threshold and soft reset), so segment ``j``'s output needs the membrane
after segment ``j - 1``: no batched tensor expression computes it. Everything around it is batched
(:meth:`srformer.attention.srformer.SRformerCrossAttention.init_state`); this module runs the recurrence itself,
for generation (no autograd), over all ``M`` segments of a layer in one operator call:

- on CUDA, one Triton kernel per layer when Triton is installed (it comes with PyTorch's CUDA wheels on Linux):
  every program owns a block of the ``(d, d)`` entries of one example and walks the segments in order, the
  membrane in registers; a launch instead of ``7 * M`` (``M`` = 4,096 segments at 262k tokens, ``s = 64``);
- elsewhere (the CPU, or CUDA without Triton) the loop of :func:`raf_scan_loop`, seven element-wise operations per
  segment on ``(B, H, d, d)`` slices, in place: the CPU path and the reference the kernel is tested against
  (through Triton's interpreter, ``TRITON_INTERPRET=1``, on the CPU).

It is registered with :func:`torch.library.custom_op`, so ``torch.compile`` keeps it as one opaque call (its fake
implementation only checks shapes) and an operator count (:mod:`srformer.benchmarks.operator_count`) sees one call.

The update, as :func:`srformer.attention.raf.update` (the ``paper`` neuron, Appendix A.2):
``mem = leak * mem + x_j``, ``p_j = mem / threshold - 1``, ``mem -= threshold`` where ``p_j > 0``, output
``relu(p_j)``; the ``two_sided`` neuron: ``p_j = mem / threshold``, ``mem -= threshold * sign(mem)`` where
``|p_j| > 1``, output ``sign(p_j) * relu(|p_j| - 1)``. A segment an example does not visit (``visited`` False)
carries its membrane and potential unchanged. The readout written for segment ``j`` is
``output_j * factor`` where visited, 0 elsewhere (no query reads an unvisited segment).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

__all__ = ["raf_scan_", "raf_scan_loop", "triton_available"]


def raf_scan_loop(
    inputs: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor, leak: torch.Tensor, threshold: torch.Tensor,
    two_sided: bool, *, weight: torch.Tensor | None = None, total: torch.Tensor | None = None,
) -> None:
    """The recurrence as a loop over segments, in place (the CPU path and the reference).

    With ``weight`` and ``total`` (the CPU state build's fused form), each slot of ``inputs`` holds the segment's
    product ``K_j^T V_j`` instead, and its input ``x_j = W K^T V - W K_j^T V_j`` (Eq. 15-16, ``W`` on the last axis)
    is formed here, one segment at a time, in a reused (B, H, d, d) buffer that stays in cache: no pass over an
    encoder-length ``V W^T`` temporary, no batched subtraction (about 70 ms of a 300 ms build at k=4096, batch 8,
    t5-small shape, on a CPU core).

    Args:
        inputs: (B, M, H, d, d) RAF inputs ``x_j = W P_j`` (Eq. 16), contiguous, or the products ``K_j^T V_j`` when
            ``weight`` is given; overwritten with the readouts ``output_j * factor`` (0 at unvisited segments).
        visited: (B, M) bool, the segments each example's schedule visits.
        factor: (B, H, 1, d) the readout factor (``scale / norm(K)``), broadcast over the rows of each ``(d, d)``.
        leak, threshold: 0-d tensors in ``inputs``' dtype.
        two_sided: the two-sided neuron instead of the paper's.
        weight: (d, d) ``W`` in ``inputs``' dtype, or None (``inputs`` hold ``x_j``).
        total: (B, H, d, d) ``W K^T V``, with ``weight``.
    """
    batch, max_segments = visited.shape
    membrane = inputs.new_zeros(inputs.shape[0], *inputs.shape[2:])  # (B, H, d, d)
    potential = torch.zeros_like(membrane)
    candidate, new_potential, spikes = (torch.empty_like(membrane) for _ in range(3))
    fires = visited.view(batch, max_segments, 1, 1, 1)
    every = bool(visited.all())  # on the CPU reading a flag costs nothing; every segment updates: no masking
    formed = None  # (W^T expanded over the batch, its (B, H, d, d) output, W K^T V), or None: ready inputs
    if weight is not None or total is not None:
        if weight is None or total is None:
            raise ValueError("`weight` (W) and `total` (W K^T V) go together: give both or neither.")
        formed = (weight.t().expand(batch, *weight.shape), torch.empty_like(membrane), total)
    rows = membrane.shape[1] * membrane.shape[2]  # a slot's (H, d, d) as (H*d, d) rows, W on the last axis
    for j in range(max_segments):
        slot = inputs[:, j]
        x = slot
        if formed is not None:  # x_j = W K^T V - W K_j^T V_j
            projector, projected, summed = formed
            torch.bmm(slot.view(batch, rows, -1), projector, out=projected.view(batch, rows, -1))
            x = torch.sub(summed, projected, out=projected)
        torch.addcmul(x, membrane, leak, out=candidate)  # leak * mem + x
        if two_sided:
            torch.div(candidate, threshold, out=new_potential)
            reset = torch.where(candidate > 0, threshold, -threshold)  # threshold * sign(mem)
            candidate.copy_(torch.where(new_potential.abs() > 1.0, candidate - reset, candidate))
        else:
            torch.div(candidate, threshold, out=new_potential).sub_(1.0)  # p = mem / threshold - 1
            torch.gt(new_potential, 0, out=spikes)  # soft reset where p > 0: mem -= threshold
            candidate.sub_(spikes.mul_(threshold))
        if every:
            membrane, candidate = candidate, membrane
            potential, new_potential = new_potential, potential
        else:  # an unvisited segment carries the neuron's state
            torch.where(fires[:, j], candidate, membrane, out=membrane)
            torch.where(fires[:, j], new_potential, potential, out=potential)
        if two_sided:
            slot.copy_(torch.nn.functional.softshrink(potential, 1.0))
        else:
            torch.clamp(potential, min=0.0, out=slot)  # relu(p)
        slot.mul_(factor)
    if not every:
        inputs.mul_(fires)


@functools.cache
def triton_available() -> bool:
    """Whether Triton can be imported (the CUDA kernel's compiler; not needed on the CPU)."""
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _kernel() -> Any:
    """The Triton kernel, compiled on first use (Triton is imported only here)."""
    import triton
    import triton.language as tl

    @triton.jit
    def raf_scan_kernel(
        inputs_ptr, visited_ptr, factor_ptr, parameters_ptr,
        max_segments, entries, d,  # entries = H * d * d per (example, segment)
        TWO_SIDED: tl.constexpr, BLOCK: tl.constexpr,
    ):
        """One program: BLOCK entries of one example's (H, d, d) slice, walked over the M segments."""
        example = tl.program_id(0)
        offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < entries
        head = offsets // (d * d)
        column = offsets % d
        scale = tl.load(factor_ptr + example * (entries // d) + head * d + column, mask=inside, other=0.0)
        leak = tl.load(parameters_ptr)
        threshold = tl.load(parameters_ptr + 1)
        membrane = tl.zeros([BLOCK], dtype=scale.dtype)
        potential = tl.zeros([BLOCK], dtype=scale.dtype)
        for j in range(0, max_segments):
            slot = inputs_ptr + (example * max_segments + j) * entries + offsets
            x = tl.load(slot, mask=inside, other=0.0)
            fire = tl.load(visited_ptr + example * max_segments + j) != 0
            new_membrane = membrane * leak + x
            if TWO_SIDED:
                new_potential = new_membrane / threshold
                reset = tl.where(new_membrane > 0, threshold, -threshold)
                new_membrane = tl.where(tl.abs(new_potential) > 1.0, new_membrane - reset, new_membrane)
            else:
                new_potential = new_membrane / threshold - 1.0
                new_membrane = tl.where(new_potential > 0, new_membrane - threshold, new_membrane)
            membrane = tl.where(fire, new_membrane, membrane)
            potential = tl.where(fire, new_potential, potential)
            if TWO_SIDED:
                magnitude = tl.maximum(tl.abs(potential) - 1.0, 0.0)
                output = tl.where(potential > 0, magnitude, -magnitude)
            else:
                output = tl.maximum(potential, 0.0)
            tl.store(slot, tl.where(fire, output * scale, 0.0), mask=inside)

    return raf_scan_kernel


#: Entries of a (H, d, d) slice per Triton program.
TRITON_BLOCK = 1024


def raf_scan_triton(
    inputs: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor, leak: torch.Tensor, threshold: torch.Tensor,
    two_sided: bool,
) -> None:
    """:func:`raf_scan_loop` as one Triton kernel launch; same arguments and result (equal up to the rounding of
    ``leak * mem + x``, which the kernel may fuse; no host sync: the neuron's parameters are read on the device). On
    the CPU it runs under ``TRITON_INTERPRET=1`` only (tests)."""
    batch, max_segments, heads, d, _ = inputs.shape
    entries = heads * d * d
    grid = (batch, -(-entries // TRITON_BLOCK))
    _kernel()[grid](
        inputs, visited.to(torch.int8).contiguous(), factor.contiguous(), torch.stack([leak, threshold]),
        max_segments, entries, d, TWO_SIDED=two_sided, BLOCK=TRITON_BLOCK,
    )


def _check(
    inputs: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor, weight: torch.Tensor | None = None,
    total: torch.Tensor | None = None,
) -> None:
    batch, max_segments, heads, d, width = inputs.shape
    if (weight is None) != (total is None):
        raise ValueError("`weight` (W) and `total` (W K^T V) go together: give both or neither.")
    if weight is not None and tuple(weight.shape) != (d, d):
        raise ValueError(f"`weight` must be (d, d) = {(d, d)}, got {tuple(weight.shape)}.")
    if total is not None and tuple(total.shape) != (batch, heads, d, d):
        raise ValueError(f"`total` must be (B, H, d, d) = {(batch, heads, d, d)}, got {tuple(total.shape)}.")
    if width != d or not inputs.is_contiguous():
        raise ValueError(f"`inputs` must be a contiguous (B, M, H, d, d) tensor, got {tuple(inputs.shape)}.")
    if tuple(visited.shape) != (batch, max_segments) or visited.dtype != torch.bool:
        raise ValueError(f"`visited` must be (B, M) = {(batch, max_segments)} bool, got {tuple(visited.shape)} "
                         f"{visited.dtype}.")
    if tuple(factor.shape) != (batch, heads, 1, d):
        raise ValueError(f"`factor` must be (B, H, 1, d) = {(batch, heads, 1, d)}, got {tuple(factor.shape)}.")


@torch.library.custom_op("srformer::raf_scan_", mutates_args=("inputs",))
def _raf_scan_op(
    inputs: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor, leak: torch.Tensor, threshold: torch.Tensor,
    two_sided: bool, weight: torch.Tensor | None, total: torch.Tensor | None,
) -> None:
    if inputs.device.type == "cuda" and triton_available() and weight is None:
        raf_scan_triton(inputs, visited, factor, leak, threshold, two_sided)
    else:
        raf_scan_loop(inputs, visited, factor, leak, threshold, two_sided, weight=weight, total=total)


@_raf_scan_op.register_fake
def _raf_scan_fake(
    inputs: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor, leak: torch.Tensor, threshold: torch.Tensor,
    two_sided: bool, weight: torch.Tensor | None, total: torch.Tensor | None,
) -> None:
    _check(inputs, visited, factor, weight, total)


def raf_scan_(
    inputs: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor, leak: torch.Tensor, threshold: torch.Tensor,
    two_sided: bool = False, *, weight: torch.Tensor | None = None, total: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run the RAF recurrence over every segment and write the readouts over ``inputs``: one operator call
    (see the module docstring). No autograd: the training path is :meth:`RecurrentAccumulateAndFire.scan`.

    Args:
        inputs: (B, M, H, d, d) contiguous RAF inputs ``x_j`` (Eq. 16) in the accumulation dtype, or the products
            ``K_j^T V_j`` with ``weight`` and ``total``.
        visited: (B, M) bool, the segments each example visits (the others carry the neuron's state).
        factor: (B, H, 1, d), multiplied into each readout (``scale / norm(K)``, Eq. 13).
        leak, threshold: 0-d tensors (the neuron's parameters), cast to ``inputs``' dtype.
        two_sided: the two-sided neuron.
        weight: (d, d) ``W``, cast to ``inputs``' dtype, or None. With it (and ``total``) each input is formed in
            the loop, ``x_j = total - W K_j^T V_j`` (:func:`raf_scan_loop`): the CPU build's form, run by the loop on
            every device (the Triton kernel takes ready inputs).
        total: (B, H, d, d) ``W K^T V`` in ``inputs``' dtype, with ``weight``; None without.

    Returns:
        ``inputs``, holding ``RAF_out_j * factor`` at visited segments and 0 elsewhere.

    Raises:
        ValueError: for shapes that do not match (B, M, H, d, d), (B, M), (B, H, 1, d), (d, d) and (B, H, d, d), a
            non-contiguous ``inputs``, or only one of ``weight`` and ``total``.
    """
    _check(inputs, visited, factor, weight, total)
    dtype = inputs.dtype
    if weight is not None:
        weight = weight.detach().to(dtype)
    _raf_scan_op(inputs, visited, factor.to(dtype), leak.detach().to(dtype), threshold.detach().to(dtype),
                 two_sided, weight, total)
    return inputs
