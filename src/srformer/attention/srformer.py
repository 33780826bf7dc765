"""Segmented recurrent cross attention, the ``srformer`` variant: segmented attention plus RAF recurrent attention.

Implements paper Eq. 6 (segmented attention ``O_S``, from
:class:`~srformer.attention.segmented.SegmentedCrossAttention`), Eq. 13-16 (recurrent attention ``O_R``)
and Eq. 11 (``O = O_S + O_R``) with the interpretation described in ``docs/design.md``
("Recurrent attention", "RAF neuron"):

* ``KV = sum_j K_j^T V_j`` over real positions only, all ``K_j^T V_j`` in one batched matmul;
  ``P_i = KV - K_i^T V_i`` (Eq. 16).
* RAF fires once each time the segment index changes (Algorithm 1), with ``W P_i`` as input.
* ``norm(K)``: L2 norm of the real keys over the sequence axis, per example, head and
  key-feature column, shape (d,), broadcast over the output's last axis, plus ``eps``.
* ``O_R[t] = (scale * Q_t) . RAF_out_{i(t)} / norm(K)``, ``scale`` being the model's own
  attention scale (T5: 1, BART: head_dim^-0.5).

The segments an example visits, and therefore its whole RAF sequence, depend only on its encoder
output and the schedule, never on the generated tokens. The standard state layout (:class:`SRformerState`)
therefore runs the RAF recurrence over all visited segments once, when the state is built, and a step reads
the output of its segment (O(s*d + d^2) per head). The lean layout (:class:`LeanSRformerState`) keeps no
per-segment tensors and fires RAF incrementally, once per segment change, from ``K^T V``, the membrane and
the last segment index (Algorithm 1). Both give the same outputs (tested).

The paper's ablations (``docs/design.md``, "Baselines and ablations"; Table 3) are resolved once, at
construction, into the module's attributes:

* (I) ``recurrent_only``: ``O = O_R`` (no ``O_S``): ``has_softmax`` is False.
* (II) ``no_norm``: ``O_R[t] = scale * Q_t . RAF_out_{i(t)}`` (``norm(K)`` replaced by 1): ``divides_by_key_norm``.
* (III) ``no_raf``: ``O_R[t] = scale * Q_t . P_{i(t)} / norm(K)``: no neuron, no ``W`` (``raf`` is None).
* (IV) ``segment_products``: RAF reads ``W K_i^T V_i`` instead of ``W P_i``, accumulating the segments seen
  so far in its membrane: ``raf_reads_segment_products``.

With ``mix_init`` set, ``O = sigma * O_S + (1 - sigma) * O_R`` (Eq. 10), ``sigma = sigmoid(a)`` with one
learnable scalar ``a`` per layer (``mix_logit``). With ``recurrence=False`` the module computes ``O_S`` alone
(``segmented``) and builds the segmented states.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from srformer.attention.base import ProjectBlock, sum_over_blocks
from srformer.attention.initialization import InitFunctions
from srformer.attention.layout import block_index, take_blocks
from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.raf_scan import raf_scan_
from srformer.attention.schedule import segment_index, tracing
from srformer.attention.segmented import LeanSegmentState, SegmentedCrossAttention, SegmentState, cast
from srformer.attention.state import (
    CrossAttentionState,
    accumulation_dtype,
    autocast_off,
    extend,
    required,
    shares_storage,
)
from srformer.attention.step_choice import step_kind

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(kw_only=True)
class SRformerState(SegmentState):
    """Standard-layout ``srformer`` state: :class:`~srformer.attention.segmented.SegmentState` plus the recurrent
    readouts (paper Table 1 memory: ``2*k*d + m*d^2`` per head). Tensors in the accumulation dtype
    (:func:`~srformer.attention.state.accumulation_dtype`).

    Attributes:
        raf_readout: (B, V, H, d, d) ``scale * RAF_out_j / norm(K)``: the RAF output in force while segment ``j``
            is attended (Eq. 13-16, A.2), computed once for every visited segment, with the attention scale and
            ``norm(K)`` folded in, so that ``O_R[t] = Q_t . raf_readout[slot(i(t))]``. One slot per segment the
            schedule can visit: ``V = min(M, T + 1)`` (the decoder positions ``0 .. T`` visit at most ``T + 1``
            segments), so an input of many more segments than ``T`` keeps ``(T + 1) d^2`` numbers per head, not
            ``m d^2``; 0 in the slots past an example's visited segments.
        readout_slot: (B, M) long, the slot of each segment's readout (segment ``j`` itself when ``V = M``).
        raf_total: (B, H, d, d) ``W K^T V`` over real positions (Eq. 15; ``W`` is the RAF linear layer, applied on
            the last axis; no ``W`` under ablation III).
        key_norm: (B, H, d) ``norm(K) + eps`` over real positions (Eq. 13); ones under ablation II.
    """

    raf_readout: torch.Tensor
    readout_slot: torch.Tensor
    raf_total: torch.Tensor
    key_norm: torch.Tensor


@dataclass(kw_only=True)
class LeanSRformerState(LeanSegmentState):
    """Lean-layout ``srformer`` state: :class:`~srformer.attention.segmented.LeanSegmentState` plus
    ``O(heads * d^2)`` numbers of recurrent state. Tensors in the accumulation dtype.

    Attributes:
        raf_total, key_norm: as in :class:`SRformerState`.
        membrane: (B, H, d, d) RAF membrane potential after ``last_segment``; None under ablation III (no neuron).
        raf_output: (B, H, d, d) RAF output of ``last_segment``; None under ablation III.
        segment_readout: (B, H, d, d) readout of the current segment; None before the first step.
    """

    raf_total: torch.Tensor
    key_norm: torch.Tensor
    membrane: torch.Tensor | None = None
    raf_output: torch.Tensor | None = None
    segment_readout: torch.Tensor | None = None


class SRformerCrossAttention(SegmentedCrossAttention):
    """The ``srformer`` variant (and its ablations) for one decoder layer.

    Args:
        config: the SRformer settings with ``variant='srformer'``.
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the
            softmax of ``O_S`` and multiplied into ``Q`` for ``O_R``.

    Attributes:
        raf: the RAF neuron with its linear layer ``W`` (parameters ``raf.linear.weight``, ``raf.leak``,
            ``raf.threshold``); None without recurrence and under ablation III.
        mix_logit: the Eq. 10 mix's ``a``, or None (Eq. 11).
        monitor: None, or an observer of the recurrent term (a plain attribute, not a module: never in the
            state dict), e.g. :class:`srformer.evaluation.recurrent_term.RecurrentTermMonitor`'s per-layer
            record. When set, the autograd branch of :meth:`init_state` calls ``monitor.observe_raf(raf_inputs,
            raf_outputs, visited)`` and :meth:`_output` calls ``monitor.observe_output(softmax_output,
            recurrent)``, with detached tensors; it must not change them.
        divides_by_key_norm: ``O_R`` is divided by ``norm(K)`` (False under ablation II).
        raf_reads_segment_products: RAF reads ``W K_i^T V_i`` (ablation IV) instead of ``W P_i``.

    Raises:
        ValueError: for another variant.
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.has_recurrence = bool(config.recurrence)
        self.has_softmax = config.ablation != "recurrent_only"  # ablation I
        self.divides_by_key_norm = config.ablation != "no_norm"  # ablation II
        self.raf_reads_segment_products = config.ablation == "segment_products"  # ablation IV
        self.raf: RecurrentAccumulateAndFire | None = None
        if self.has_recurrence and config.ablation != "no_raf":  # ablation III: no neuron, no W
            self.raf = RecurrentAccumulateAndFire(
                head_dim, config.raf_leak_init, config.raf_threshold_init, config.raf_linear_init_scale,
                config.raf_neuron, config.raf_surrogate_slope,
            )
        self.mix_logit: nn.Parameter | None = None
        if config.mix_init is not None and self.has_recurrence:
            self.mix_logit = nn.Parameter(torch.logit(torch.tensor(float(config.mix_init))))
        self.monitor: Any = None

    def initialize_parameters(self, init: InitFunctions) -> None:
        """The Eq. 10 mix logit ``a = logit(mix_init)`` where the module has one (its RAF and ``W`` are modules of
        their own and initialise themselves)."""
        if self.mix_logit is not None and self.settings.mix_init is not None:
            # the same float32 expression as at construction, so both paths give the same number
            init.copy_(self.mix_logit, torch.logit(torch.tensor(float(self.settings.mix_init))))

    def _project(self, products: torch.Tensor) -> torch.Tensor:
        """``W x`` on the last axis, or ``x`` itself under ablation III (no RAF, no ``W``)."""
        return products if self.raf is None else self.raf.project(products)

    def _combine(self, softmax_output: torch.Tensor | None, recurrent: torch.Tensor) -> torch.Tensor:
        """``O_S + O_R`` (Eq. 11), ``sigma O_S + (1 - sigma) O_R`` (Eq. 10), or ``O_R`` (ablation I)."""
        if softmax_output is None:
            return recurrent
        recurrent = cast(recurrent, softmax_output.dtype)
        if self.mix_logit is None:
            return softmax_output + recurrent
        sigma = torch.sigmoid(self.mix_logit).to(softmax_output.dtype)
        return sigma * softmax_output + (1.0 - sigma) * recurrent

    # ------------------------------------------------------------------ state
    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> SegmentState:
        """Build the per-sequence state (standard layout) from the projected encoder keys/values.

        Cost, once per sequence: the segment-major copy of :meth:`SegmentedCrossAttention.init_state`, O(k*d^2)
        per head for the ``K_j^T V_j`` products and ``W`` (on the values: :meth:`_raf_inputs_without_autograd`),
        ``norm(K)`` and an m-step RAF recurrence on (d, d) matrices (paper Table 1). Without autograd (generation)
        every step but the recurrence is batched and the recurrence is one operator call
        (:func:`~srformer.attention.raf_scan.raf_scan_`, a Triton kernel on CUDA), writing the readouts over the
        inputs' buffer: a fixed number of operator calls and no host sync, whatever the number of segments; with
        autograd (training, or any RAF parameter requiring a gradient) the differentiable scan runs.

        An empty document (all-zero mask row) has one segment of zero keys and values: its recurrent term is
        RAF of a zero input, so its output is that of an empty memory, 0 (``docs/design.md``, "Empty encoder
        inputs").

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            An :class:`SRformerState` (a :class:`~srformer.attention.segmented.SegmentState` without recurrence);
            no segment visited yet.

        Raises:
            ValueError: with ``strict_schedule``, if an example has more segments than ``target_length``
                (checked in eager mode only: the check needs a host sync).
        """
        return self._build_state(keys, values, key_valid, donated=None)

    @autocast_off
    def init_state_from_donated(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> SegmentState:
        """:meth:`init_state`, the readouts written into the donated memory of ``keys`` when it has exactly their
        size (``m*d^2 = k*d`` per head: ``s = d`` and ``k`` a multiple of ``s``, the layout transformers' projections
        leave, no autograd): the segment-major copy has been made by then, so the projection is dead, and its
        already-touched pages spare the build a fresh (B, M, H, d, d) buffer and its first-touch page faults
        (about 30 ms of a 610 ms build at k=4096, s=64, batch 8, t5-small shape, on a CPU core). Otherwise as
        :meth:`init_state`. Same arguments, result and errors."""
        return self._build_state(keys, values, key_valid, donated=keys)

    def _build_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None, donated: torch.Tensor | None
    ) -> SegmentState:
        """The body of :meth:`init_state`; ``donated``: memory the readouts may be written into (see
        :meth:`init_state_from_donated`), or None."""
        state = super().init_state(keys, values, key_valid)
        if not self.has_recurrence:
            return state
        keys, values = state.keys, state.values  # (B, M, H, s, d), zero at padding
        batch, max_segments, heads, _, d = keys.shape
        visited = self._visited(state.num_segments, max_segments)
        if not self._tracks_gradients(keys, values):  # generation: the RAF scan one operator call
            loops = self._builds_in_loops(keys)
            key_norm = self._key_norm_by_segments(keys) if loops else self._key_norm(keys, dim=(1, 3))  # (B, H, d)
            factor = self.scale / key_norm[:, :, None, :]  # (B, H, 1, d)
            buffer = None if donated is None else _donated_buffer(donated, (batch, max_segments, heads, d, d),
                                                                  accumulation_dtype(keys.dtype), (keys, values))
            fused = loops and self._projects_in_scan()
            if fused:  # the CPU: K_j^T V_j here, W and the subtraction inside the scan's loop
                inputs, total = self._segment_products_without_autograd(
                    keys, values.to(accumulation_dtype(values.dtype)), buffer)
                total = self._project(total)  # W K^T V
            else:
                inputs, total = self._raf_inputs_without_autograd(keys, values, buffer)
            readout_slot, slot_segment, fires = self._readout_slots(visited)
            if slot_segment is not None:  # only the visited segments' inputs, in order (the others carry the neuron)
                inputs = self._in_slots(inputs, slot_segment)
            if self.raf is None:  # ablation III: the readout is P_j itself
                raf_readout = inputs.mul_(factor[:, None]).mul_(fires[:, :, None, None, None])
            elif fused:
                raf_readout = self._scan_products(inputs, total, fires, factor)
            else:
                raf_readout = raf_scan_(inputs, fires, factor, self.raf.leak, self.raf.threshold, self.raf.two_sided)
            return extend(SRformerState, state, raf_readout=raf_readout, readout_slot=readout_slot, raf_total=total,
                          key_norm=key_norm)
        # training: the autograd formulation
        key_norm = self._key_norm(keys, dim=(1, 3))
        factor = self.scale / key_norm[:, :, None, :]  # (B, H, 1, d)
        segment_products, total = self._segment_products(keys, values)  # (B, M, H, d, d), (B, 1, H, d, d)
        raf_inputs = self._recurrent_input(total, segment_products)
        if self.raf is None:  # ablation III: P_j itself
            raf_outputs = raf_inputs
        else:
            zeros = raf_inputs.new_zeros(batch, heads, d, d)
            raf_outputs, _, _ = self.raf.scan(raf_inputs, visited, zeros, zeros, axis=1)
        if self.monitor is not None:
            self.monitor.observe_raf(raf_inputs.detach(), raf_outputs.detach(), visited)
        raf_readout = raf_outputs * factor[:, None]
        readout_slot, slot_segment, fires = self._readout_slots(visited)
        if slot_segment is not None:
            raf_readout = self._in_slots(raf_readout, slot_segment) * fires[:, :, None, None, None]
        return extend(SRformerState, state, raf_readout=raf_readout, readout_slot=readout_slot, raf_total=total[:, 0],
                      key_norm=key_norm)

    def _readout_slots(self, visited: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The readout slots of :class:`SRformerState` from the visited segments (B, M) bool.

        Returns:
            ``(readout_slot, slot_segment, fires)``: (B, M) long, each segment's slot (its rank among the example's
            visited segments; an unvisited one, which no query reads, the previous visited one's); (B, V) long, the
            segment of each slot, or None when ``V = M`` (slot = segment); (B, V) bool, the slots that hold a
            visited segment (``visited`` itself when ``V = M``).
        """
        batch, max_segments = visited.shape
        slots = min(max_segments, self.settings.target_length + 1)
        if slots == max_segments:
            segments = torch.arange(max_segments, device=visited.device)
            return segments.expand(batch, -1).contiguous(), None, visited
        rank = visited.long().cumsum(dim=1) - 1  # (B, M): 0 for segment 0, which every example visits
        target = torch.where(visited, rank, slots)  # unvisited segments land in a spare column, then dropped
        segments = torch.arange(max_segments, device=visited.device).expand(batch, -1)
        slot_segment = rank.new_zeros(batch, slots + 1).scatter_(1, target, segments)[:, :slots]
        fires = torch.arange(slots, device=visited.device)[None, :] < visited.sum(dim=1, keepdim=True)
        return rank.clamp(min=0), slot_segment, fires

    def _in_slots(self, per_segment: torch.Tensor, slot_segment: torch.Tensor) -> torch.Tensor:
        """(B, M, H, d, d) per-segment tensors gathered to the readout slots: (B, V, H, d, d), contiguous."""
        batch, max_segments = per_segment.shape[:2]
        gathered = per_segment.flatten(0, 1).index_select(0, block_index(slot_segment, max_segments))
        return gathered.view(batch, slot_segment.shape[1], *per_segment.shape[2:])

    def _readout_index(self, state: SRformerState, segments: torch.Tensor) -> torch.Tensor:
        """Flat indices into ``state.raf_readout.flatten(0, 1)`` of the segments (B, q) long: (B*q,) long."""
        slots = state.raf_readout.shape[1]
        if slots != state.readout_slot.shape[1]:  # V < M: segment -> slot
            segments = state.readout_slot.gather(1, segments)
        return block_index(segments, slots)

    def finite_check_fields(self, state: CrossAttentionState) -> tuple[str, ...]:
        """The base's fields less the segment-major ``keys`` and ``values`` when ``raf_total`` witnesses them:
        ``W K^T V`` sums ``K_j^T V_j`` over every real position, so a NaN or an infinity in a key or a value (or an
        overflowing product) makes it non-finite (``inf * 0`` and NaN propagate; ``W`` cannot cancel them). Not
        with ``kv_clamp``, which maps an infinite product to a finite one. Saves two reads of the keys' and the
        values' memory at the first step (about 5 ms at k=4096, batch 8, t5-small shape, on a CPU core)."""
        names = super().finite_check_fields(state)
        if isinstance(state, SRformerState) and self.settings.kv_clamp is None:
            return tuple(name for name in names if name not in ("keys", "values"))
        return names

    def _tracks_gradients(self, keys: torch.Tensor, values: torch.Tensor) -> bool:
        """Whether the state build must be differentiable: autograd is on and the keys, the values or a
        RAF parameter (``W``, leak, threshold) requires a gradient."""
        if not torch.is_grad_enabled():
            return False
        parameters = () if self.raf is None else tuple(self.raf.parameters())
        return keys.requires_grad or values.requires_grad or any(p.requires_grad for p in parameters)

    def _builds_in_loops(self, keys: torch.Tensor) -> bool:
        """Whether the no-autograd build of ``keys``' state takes its CPU form: on the CPU route
        (:func:`~srformer.attention.step_choice.step_kind`), in eager mode. There loops over segments whose
        (B, H, s, d) or (B, H, d, d) buffers stay in cache beat batched passes over encoder-length tensors
        (:meth:`_key_norm_by_segments`, :meth:`_scan_products`); an accelerator runs the batched form and one scan
        kernel (a fixed number of operator calls, whatever the number of segments), and a traced graph keeps the
        scan one opaque call."""
        return step_kind(keys.device) == "cpu" and not tracing()

    def _projects_in_scan(self) -> bool:
        """Whether the CPU build leaves ``W`` and ``x_j = W K^T V - W K_j^T V_j`` to the scan's loop
        (:meth:`_scan_products`): for the paper's inputs (a RAF neuron, no ``kv_clamp``, not ablation IV)."""
        return self.raf is not None and self.settings.kv_clamp is None and not self.raf_reads_segment_products

    def _key_norm_by_segments(self, keys: torch.Tensor) -> torch.Tensor:
        """:meth:`_key_norm` of segment-major keys (B, M, H, s, d), zero at padding, for the CPU build: the squares
        of one segment at a time, through a reused (B, H, s, d) buffer in the accumulation dtype that stays in
        cache, summed over its positions into a (B, H, d) accumulator (one strided reduction over every position
        cost about 3.5 times as much at k=4096, batch 8, t5-small shape, on a CPU core). Same result up to the
        order of the sums; ones under ablation II."""
        if not self.divides_by_key_norm:
            return self._key_norm(keys, dim=(1, 3))
        batch, max_segments, heads, s, d = keys.shape
        wide = accumulation_dtype(keys.dtype)
        squares = keys.new_empty(batch, heads, s, d, dtype=wide)
        sums = keys.new_zeros(batch, heads, d, dtype=wide)
        for j in range(max_segments):
            block = keys[:, j]
            if block.dtype == wide:
                torch.mul(block, block, out=squares)
            else:  # square in the accumulation dtype, not in bf16/fp16
                squares.copy_(block).square_()
            sums.add_(squares.sum(dim=2))
        return sums.sqrt_().add_(self.settings.norm_eps)

    def _segment_products_without_autograd(
        self, keys: torch.Tensor, right: torch.Tensor, buffer: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every segment's ``K_j^T R_j`` (B, M, H, d, d), contiguous, in ``buffer`` when given, and their sum over the
        segments (B, H, d, d), in the accumulation dtype, from segment-major keys (B, M, H, s, d) and ``right``
        (B, M, H, s, d) in that dtype (the values, or the values through ``W``), zero at padding: one batched
        matrix product and one sum."""
        s, d = keys.shape[-2:]
        wide = accumulation_dtype(keys.dtype)
        products = keys.new_empty(*keys.shape[:3], d, d, dtype=wide) if buffer is None else buffer
        torch.bmm(keys.to(wide).reshape(-1, s, d).transpose(1, 2), right.reshape(-1, s, d),
                  out=products.view(-1, d, d))
        return products, products.sum(dim=1)

    def _scan_products(
        self, products: torch.Tensor, total: torch.Tensor, fires: torch.Tensor, factor: torch.Tensor
    ) -> torch.Tensor:
        """The RAF readouts over ``products`` (B, V, H, d, d) ``K_j^T V_j`` in their slots, written in place, with
        ``x_j = total - W K_j^T V_j`` formed one slot at a time (:func:`~srformer.attention.raf_scan.raf_scan_`
        with ``weight``); ``total`` (B, H, d, d) ``W K^T V``, ``fires`` (B, V) bool, ``factor`` (B, H, 1, d)."""
        raf = self.raf
        assert raf is not None  # _projects_in_scan
        return raf_scan_(products, fires, factor, raf.leak, raf.threshold, raf.two_sided, weight=raf.linear.weight,
                         total=total)

    def _raf_inputs_without_autograd(
        self, keys: torch.Tensor, values: torch.Tensor, buffer: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The RAF inputs of every segment and ``W K^T V`` for the no-autograd build, batched (Eq. 14-16): a fixed
        number of operator calls whatever the number of segments.

        ``W`` acts on the last axis, so ``(K_j^T V_j) W^T = K_j^T (V_j W^T)``: without ``kv_clamp`` the values are
        projected first (``k*d^2`` multiply-adds per head, a temporary of the values' size), then one batched
        matrix product gives every ``W K_j^T V_j``; with ``kv_clamp`` the products are clamped before ``W``, as the
        BART authors did; under ablation III there is no ``W``.

        Args:
            keys, values: (B, M, H, s, d) segment-major, zero at padding.
            buffer: (B, M, H, d, d) contiguous memory in the accumulation dtype for the products (the donated
                projection, :meth:`init_state_from_donated`), or None for a fresh one.

        Returns:
            ``(inputs, total)``: (B, M, H, d, d) ``x_j = W P_j = W K^T V - W K_j^T V_j`` (``W K_j^T V_j`` under
            ablation IV), contiguous, in ``buffer`` when given; (B, H, d, d) ``W K^T V``.
        """
        wide = accumulation_dtype(keys.dtype)
        clamp = self.settings.kv_clamp
        project_values = self.raf is not None and clamp is None
        right = self._project(values.to(wide)) if project_values else values.to(wide)
        # K_j^T V_j (W K_j^T V_j when the values were projected) and their sum, (B, H, d, d)
        products, total = self._segment_products_without_autograd(keys, right, buffer)
        del right
        if clamp is not None:
            total = total.clamp(-clamp, clamp)
            products.clamp_(-clamp, clamp)
        if not project_values:
            total = self._project(total)
            if self.raf is not None:  # kv_clamp: W after the clamp, back into the products' memory
                products.copy_(self._project(products))
        if not self.raf_reads_segment_products:
            torch.sub(total.unsqueeze(1), products, out=products)  # x_j = W K^T V - W K_j^T V_j
        return products, total

    def _key_norm(self, keys: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
        """``norm(K) + eps`` (Eq. 13), (B, H, d) in the accumulation dtype: the L2 norm of each key feature over the
        positions on ``dim`` (keys zero at padding), computed in that dtype without a widened copy of the keys;
        ones under ablation II. Its gradient is 0, not NaN, at an all-zero column."""
        wide = accumulation_dtype(keys.dtype)
        if not self.divides_by_key_norm:
            reduced = (dim,) if isinstance(dim, int) else dim
            return keys.new_ones([n for axis, n in enumerate(keys.shape) if axis not in reduced], dtype=wide)
        return torch.linalg.vector_norm(keys, dim=dim, dtype=wide) + self.settings.norm_eps

    def _segment_products(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``W K_j^T V_j`` of every segment, (B, M, H, d, d), and ``W K^T V``, (B, 1, H, d, d), in the
        accumulation dtype, from segment-major keys/values (B, M, H, s, d); clamped before ``W`` when
        ``kv_clamp`` is set (see :meth:`_raf_inputs`)."""
        wide = accumulation_dtype(keys.dtype)
        keys_wide = keys.to(wide)
        if self.settings.kv_clamp is None:
            projected_values = self._project(values.to(wide))
            segment_products = torch.matmul(keys_wide.transpose(-1, -2), projected_values)  # W K_j^T V_j
            return segment_products, segment_products.sum(dim=1, keepdim=True)
        c = self.settings.kv_clamp
        segment_products = torch.matmul(keys_wide.transpose(-1, -2), values.to(wide))
        total = self._project(segment_products.sum(dim=1, keepdim=True).clamp(-c, c))
        return self._project(segment_products.clamp(-c, c)), total

    def _raf_inputs(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RAF inputs ``x_j = W P_j`` of every segment, (B, M, H, d, d), and ``W K^T V``, (B, H, d, d),
        in :func:`~srformer.attention.state.accumulation_dtype` (float32, or float64 for a float64
        model) from segment-major, zero-padded keys/values (B, M, H, s, d) (Eq. 14-16, A.2).
        Under ablation III there is no ``W`` (``x_j = P_j``); under ablation IV ``x_j = W K_j^T V_j``.

        ``W`` acts on the last (value) axis, so ``(K_j^T V_j) W^T = K_j^T (V_j W^T)``: without a clamp
        the values are projected first and every segment costs O(s*d^2) (2*k*d^2 per head in all)
        instead of O(s*d^2 + d^3) (k*d^2 + m*d^3, 2.5x more at s = d/4). With ``kv_clamp`` the
        products are clamped before ``W``, as the BART authors did.
        """
        segment_products, total = self._segment_products(keys, values)
        return self._recurrent_input(total, segment_products), total[:, 0]

    def _recurrent_input(self, total: torch.Tensor, segment_products: torch.Tensor) -> torch.Tensor:
        """The RAF input from ``W K^T V`` and ``W K_i^T V_i`` (any matching shapes): ``W P_i`` (Eq. 16),
        or ``W K_i^T V_i`` itself under ablation IV."""
        if self.raf_reads_segment_products:
            return segment_products
        return total - segment_products

    @autocast_off
    def init_lean_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> LeanSegmentState:
        """The lean layout built directly, equal to ``self.lean(self.init_state(...))`` before any step:
        ``W K^T V`` as ``(K^T V) W^T`` over the real positions (O(k*d^2) per head, one bmm per example, then O(d^3)),
        ``norm(K)`` and a zero membrane; no segment-major copy, no per-segment products, no readouts.
        Arguments and errors as :meth:`init_state`."""
        lean = super().init_lean_state(keys, values, key_valid)
        if not self.has_recurrence:
            return lean
        batch, heads, _, d = keys.shape
        wide = accumulation_dtype(keys.dtype)
        keys, values = keys.to(wide), values.to(wide)
        if key_valid is not None:  # padding positions contribute nothing (compaction does not change sums)
            real = key_valid.to(device=keys.device, dtype=torch.bool)[:, None, :, None]
            keys = keys.masked_fill(~real, 0.0)
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):
            products = torch.matmul(keys.transpose(-1, -2), values)  # K^T V, (B, H, d, d)
            key_norm = self._key_norm(keys, dim=2)
        else:  # one bmm per example on the projections' (k, H, d) memory: a 4-D matmul of these transposed views
            products = keys.new_empty(batch, heads, d, d)  # copies both to contiguous memory first (4x the time)
            for b in range(batch):
                torch.bmm(keys[b].transpose(-1, -2), values[b], out=products[b])
            key_norm = self._key_norm(keys, dim=2)
        return self._lean_from_sums(lean, products, key_norm)

    def _lean_from_sums(
        self, lean: LeanSegmentState, products: torch.Tensor, key_norm: torch.Tensor
    ) -> LeanSegmentState:
        """The lean state from its schedule fields, ``K^T V`` (B, H, d, d) and ``norm(K) + eps`` (B, H, d):
        ``W K^T V`` (after the ``kv_clamp``) and a zero membrane."""
        if self.settings.kv_clamp is not None:
            products = products.clamp(-self.settings.kv_clamp, self.settings.kv_clamp)
        total = self._project(products)  # W K^T V (ablation III: K^T V)
        lean = extend(LeanSRformerState, lean, raf_total=total, key_norm=key_norm)
        if self.raf is None:
            return lean
        zeros = total.new_zeros(total.shape)
        return replace(lean, membrane=zeros, raf_output=zeros)

    def streamed_state(
        self, project_block: ProjectBlock, key_length: int, key_valid: torch.Tensor | None, block: int
    ) -> CrossAttentionState | None:
        """With ``lean_cache``, the lean state from ``block`` positions at a time: ``K^T V`` and the squares of
        ``norm(K)`` (Eq. 13) are sums over positions, accumulated per block (padding zeroed) in the accumulation
        dtype. None without ``lean_cache``. See :meth:`CrossAttentionMechanism.streamed_state`."""
        if not self.settings.lean_cache:
            return None
        if not self.has_recurrence:
            return super().streamed_state(project_block, key_length, key_valid, block)

        def parts(keys: torch.Tensor, values: torch.Tensor, real: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
            if real is not None:
                keys = keys.masked_fill(~real[:, None, :, None], 0.0)
            return torch.matmul(keys.transpose(-1, -2), values), keys.square().sum(dim=2)

        products, squares = sum_over_blocks(project_block, key_length, key_valid, block, parts)
        batch, heads, d = squares.shape
        if self.divides_by_key_norm:
            key_norm = squares.sqrt() + self.settings.norm_eps
        else:
            key_norm = squares.new_ones(batch, heads, d)
        lean = self._lean_schedule(batch, key_length, key_valid, products.device)
        with torch.autocast(device_type=products.device.type, enabled=False):  # W K^T V in float32 or wider
            return self._lean_from_sums(lean, products, key_norm)

    @autocast_off
    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The lean layout of a standard ``state`` (:class:`LeanSRformerState`).

        Drops keys, values and the per-segment RAF readouts; keeps ``W K^T V``, ``norm(K)`` and the
        RAF membrane/output after ``state.last_segment`` (recomputed by one recurrence over the
        segments visited so far), from which later steps fire RAF incrementally.
        """
        lean = super().lean(state)
        if not self.has_recurrence:
            return lean
        assert isinstance(state, SRformerState) and isinstance(lean, LeanSegmentState), type(state)
        lean = extend(LeanSRformerState, lean, raf_total=state.raf_total, key_norm=state.key_norm)
        if self.raf is None:  # ablation III: its output is recomputed at each step
            return lean
        batch, max_segments, heads, _, d = state.keys.shape
        # The RAF inputs are not kept in the standard layout; rebuild them for the visited prefix.
        raf_inputs, _ = self._raf_inputs(state.keys, state.values)
        done = self._visited(state.num_segments, max_segments)
        done &= torch.arange(max_segments, device=done.device)[None, :] <= state.last_segment[:, None]
        zeros = raf_inputs.new_zeros(batch, heads, d, d)
        _, membrane, raf_output = self.raf.scan(raf_inputs, done, zeros, zeros, axis=1)
        return replace(lean, membrane=membrane, raf_output=raf_output)

    # ------------------------------------------------------------------ outputs
    def _output(
        self, queries: torch.Tensor, state: SegmentState, segments_of_query: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """``O_S`` (unless ablation I) combined with ``O_R``: each query reads its own readout block
        (B, q, H, d, d) with one ``index_select``, O(q*d^2) per head."""
        output = self._softmax(queries, state, segments_of_query, dropout) if self.has_softmax else None
        if not self.has_recurrence:
            assert output is not None
            return output
        assert isinstance(state, SRformerState), type(state)
        q = queries.shape[2]
        readout = take_blocks(state.raf_readout, self._readout_index(state, segments_of_query), q)
        query_rows = queries.transpose(1, 2).unsqueeze(-2).to(readout.dtype)  # (B, q, H, 1, d)
        recurrent = torch.matmul(query_rows, readout).squeeze(-2).transpose(1, 2)  # (B, H, q, d)
        if self.monitor is not None:
            self.monitor.observe_output(None if output is None else output.detach(), recurrent.detach())
        return self._combine(output, recurrent.to(queries.dtype))

    def output_from_weights(
        self, weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        state: CrossAttentionState, *, start_position: int | torch.Tensor, key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """``O_S = A V`` from the returned weights, combined with ``O_R`` as in :meth:`forward` (Eq. 10/11).
        ``O_R`` has no weights; it is read from the state's readouts as in the step. Under ablation I (no
        softmax term) the output is ``O_R`` alone and does not depend on the (zero) weights. Arguments as in
        the base class."""
        softmax_output = super().output_from_weights(
            weights, queries, keys, values, state, start_position=start_position, key_valid=key_valid
        ) if self.has_softmax else None
        if not self.has_recurrence:
            assert softmax_output is not None
            return softmax_output
        if isinstance(state, LeanSRformerState):  # a lean state exists at single-token steps only
            readout = required(state.segment_readout, "segment_readout")[:, None]  # (B, 1, H, d, d)
        else:
            assert isinstance(state, SRformerState), type(state)
            q = queries.shape[2]
            positions = torch.arange(q, device=queries.device) + start_position
            segments = segment_index(positions, state.num_segments, self.settings.target_length)  # (B, q)
            readout = take_blocks(state.raf_readout, self._readout_index(state, segments), q)
        query_rows = queries.transpose(1, 2).unsqueeze(-2).to(readout.dtype)  # (B, q, H, 1, d)
        recurrent = torch.matmul(query_rows, readout).squeeze(-2).transpose(1, 2)  # (B, H, q, d)
        return self._combine(softmax_output, recurrent.to(queries.dtype))

    def _step_output(
        self,
        queries: torch.Tensor,
        softmax_output: torch.Tensor | None,
        state: CrossAttentionState,
        new_state: CrossAttentionState,
        index: torch.Tensor,
    ) -> torch.Tensor:
        """``O_S`` (unless ablation I) combined with ``Q_t . RAF_out_i / norm(K)`` (scale folded in): standard
        layout, the segment's readout read with one ``index_select``; lean layout, the readout the step kept
        (:meth:`_enter_segment`)."""
        if not self.has_recurrence:
            return super()._step_output(queries, softmax_output, state, new_state, index)
        if isinstance(new_state, LeanSRformerState):
            readout = required(new_state.segment_readout, "segment_readout")
        else:  # standard layout: scale * RAF_out_i / norm(K), (B, H, d, d)
            assert isinstance(state, SRformerState), type(state)
            slots = state.raf_readout.shape[1]
            if slots != state.readout_slot.shape[1]:  # V < M: the segment's slot, then its flat index
                slot = state.readout_slot.view(-1).index_select(0, index)
                index = slot + self._block_offsets(slot.shape[0], slots, slot.device)
            readout = state.raf_readout.flatten(0, 1).index_select(0, index)
        if (softmax_output is not None and self.mix_logit is None and readout.dtype == queries.dtype
                and softmax_output.dtype == queries.dtype):
            # O_S + Q_t . readout (Eq. 11) as one batched multiply-add over the B*H heads: (B*H, 1, d) rows
            batch, heads, _, d = queries.shape
            rows = torch.baddbmm(softmax_output.reshape(batch * heads, 1, d), queries.reshape(batch * heads, 1, d),
                                 readout.reshape(batch * heads, d, d))
            return rows.view(batch, heads, 1, d)
        recurrent = torch.matmul(cast(queries, readout.dtype), readout)
        return self._combine(softmax_output, cast(recurrent, queries.dtype))

    @autocast_off
    def _enter_segment(
        self, keys: torch.Tensor, values: torch.Tensor, state: LeanSegmentState, new_state: LeanSegmentState
    ) -> LeanSegmentState:
        """Lean layout: fire RAF when the segment changes (Algorithm 1) and keep the step's readout
        ``scale * RAF_out_i / norm(K)`` (B, H, d, d) in the new state. ``keys``/``values`` (B, H, s, d)
        are the current segment's, zero at padding."""
        if not self.has_recurrence:
            return new_state
        assert isinstance(state, LeanSRformerState) and isinstance(new_state, LeanSRformerState), type(state)
        segment = new_state.last_segment
        wide = accumulation_dtype(keys.dtype)
        products = torch.einsum("bhsd,bhse->bhde", keys.to(wide), values.to(wide))  # K_i^T V_i
        if self.settings.kv_clamp is not None:
            products = products.clamp(-self.settings.kv_clamp, self.settings.kv_clamp)
        # W P_i (ablation III: no W)
        raf_input = self._recurrent_input(state.raf_total, self._project(products))
        if self.raf is None:  # ablation III: the output depends only on the segment
            raf_output = raf_input
        else:
            changed = (segment != state.last_segment)[:, None, None, None]
            previous_membrane = required(state.membrane, "membrane")
            membrane, raf_output = self.raf.fire(previous_membrane, raf_input)
            raf_output = torch.where(changed, raf_output, required(state.raf_output, "raf_output"))
            membrane = torch.where(changed, membrane, previous_membrane)
            new_state = replace(new_state, membrane=membrane, raf_output=raf_output)
        readout = raf_output * (self.scale / state.key_norm[:, :, None, :])
        return replace(new_state, segment_readout=readout)


def _donated_buffer(
    donated: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, state_tensors: Sequence[torch.Tensor]
) -> torch.Tensor | None:
    """``donated``'s memory as a contiguous tensor of ``shape`` and ``dtype``, or None where it cannot serve:
    another dtype, a tensor that requires a gradient, not the dense (B, k, H, d) memory of a projection seen as
    (B, H, k, d), another number of elements (the state would then pin memory it does not use, or need more), or
    memory that a tensor of the state shares (a segment-major copy that came back as a view)."""
    if donated.dtype != dtype or donated.requires_grad or donated.dim() != 4:
        return None
    rows = donated.transpose(1, 2)  # transformers' projections: (B, k, H, d) memory
    if not rows.is_contiguous() or rows.numel() != math.prod(shape):
        return None
    if any(shares_storage(tensor, donated) for tensor in state_tensors):
        return None
    return rows.view(shape)
