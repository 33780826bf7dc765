"""Segmented recurrent cross attention as one ``nn.Module`` over projected queries/keys/values.

Implements paper Eq. 6 (segmented attention ``O_S``), Eq. 13-16 (recurrent attention ``O_R``)
and Eq. 11 (``O = O_S + O_R``) with the interpretation described in ``docs/design.md``
("Recurrent attention", "RAF neuron"):

* ``KV = sum_j K_j^T V_j`` over real positions only, all ``K_j^T V_j`` in one einsum;
  ``P_i = KV - K_i^T V_i`` (Eq. 16).
* RAF fires once each time the segment index changes (Algorithm 1), with ``W P_i`` as input.
* ``norm(K)``: L2 norm of the real keys over the sequence axis, per example, head and
  key-feature column, shape (d,), broadcast over the output's last axis, plus ``eps``.
* ``O_R[t] = (scale * Q_t) . RAF_out_{i(t)} / norm(K)``, ``scale`` being the model's own
  attention scale (T5: 1, BART: head_dim^-0.5).

Two paths compute the same function: :meth:`SegmentedRecurrentAttention.forward` for any number
of decoder positions at once (teacher forcing, and generation without a cache), and
:meth:`SegmentedRecurrentAttention.step` for one decoder position with a carried
:class:`~srformer.attention.state.CrossAttentionState` (O(s*d + d^2) work per head).

The segments an example visits, and therefore its whole RAF sequence, depend only on its encoder
output and the schedule, never on the generated tokens. The standard state layout therefore runs
the RAF recurrence over all visited segments once, when the state is built, and a step reads the
output of its segment. The lean layout keeps no per-segment tensors and fires RAF incrementally,
once per segment change, from ``K^T V``, the membrane and the last segment index (Algorithm 1).
Both give the same outputs (tested).

The same module computes the paper's segment-based baselines and ablations (``docs/design.md``,
"Baselines and ablations"; paper Figure 4 and Table 3): the softmax context of ``xl`` and ``longt5`` comes from
:mod:`srformer.attention.softmax_context`; the ablations change the recurrent term:

* (I) ``recurrent_only``: ``O = O_R`` (no ``O_S``).
* (II) ``no_norm``: ``O_R[t] = scale * Q_t . RAF_out_{i(t)}`` (``norm(K)`` replaced by 1).
* (III) ``no_raf``: ``O_R[t] = scale * Q_t . P_{i(t)} / norm(K)``: no neuron, no ``W``.
* (IV) ``segment_products``: RAF reads ``W K_i^T V_i`` instead of ``W P_i``, accumulating the
  segments seen so far in its membrane.

With ``mix_init`` set, ``O = sigma * O_S + (1 - sigma) * O_R`` (Eq. 10), ``sigma = sigmoid(a)``
with one learnable scalar ``a`` per layer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.raf import update as raf_update
from srformer.attention.registry import LEAN_VARIANTS
from srformer.attention.schedule import compaction_order, num_segments, real_lengths, segment_index, tracing
from srformer.attention.softmax_context import (
    SOFTMAX_VARIANTS,
    block_index,
    global_tokens,
    parallel_softmax,
    step_context,
    take_blocks,
)
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, required

if TYPE_CHECKING:  # srformer.config imports the attention registry
    from srformer.config import SRformerConfig


class SegmentedRecurrentAttention(nn.Module):
    """Cross attention of the segment-based variants (``segmented``, ``srformer`` and its ablations,
    ``xl``, ``longt5``) for one decoder layer.

    Args:
        config: the SRformer settings (variant in :data:`~srformer.attention.softmax_context.SOFTMAX_VARIANTS`).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the
            softmax of ``O_S`` and multiplied into ``Q`` for ``O_R``.

    The settings are kept as ``.settings``: by transformers' convention the ``.config`` of any
    submodule is the model's ``PretrainedConfig``.

    Raises:
        ValueError: for another variant (``full`` keeps the model's own module; ``linear`` is
            :class:`~srformer.attention.linear.LinearCrossAttention`).
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = float(scale)
        if config.variant not in SOFTMAX_VARIANTS:
            raise ValueError(
                f"SegmentedRecurrentAttention computes the variants {SOFTMAX_VARIANTS}, not {config.variant!r}; "
                "use srformer.attention.build_cross_attention(config, ...) to get the right module."
            )
        self.settings = config
        self.head_dim = head_dim
        self.raf = None
        if self.has_recurrence and config.ablation != "no_raf":
            self.raf = RecurrentAccumulateAndFire(
                head_dim, config.raf_leak_init, config.raf_threshold_init, config.raf_linear_init_scale
            )
        self.mix_logit = None
        if config.mix_init is not None and self.has_recurrence:
            self.mix_logit = nn.Parameter(torch.logit(torch.tensor(float(config.mix_init))))

    @property
    def has_recurrence(self) -> bool:
        """True when ``O_R`` is part of the output (variant ``srformer`` with recurrence on)."""
        return self.settings.variant == "srformer" and self.settings.recurrence

    @property
    def has_softmax(self) -> bool:
        """True when a softmax term (``O_S`` or a baseline's) is part of the output (not ablation I)."""
        return self.settings.ablation != "recurrent_only"

    def _project(self, products: torch.Tensor) -> torch.Tensor:
        """``W x`` on the last axis, or ``x`` itself under ablation III (no RAF, no ``W``)."""
        return products if self.raf is None else self.raf.project(products)

    def _combine(self, softmax_output: torch.Tensor | None, recurrent: torch.Tensor) -> torch.Tensor:
        """``O_S + O_R`` (Eq. 11), ``sigma O_S + (1 - sigma) O_R`` (Eq. 10), or ``O_R`` (ablation I)."""
        if softmax_output is None:
            return recurrent
        recurrent = _cast(recurrent, softmax_output.dtype)
        if self.mix_logit is None:
            return softmax_output + recurrent
        sigma = torch.sigmoid(self.mix_logit).to(softmax_output.dtype)
        return sigma * softmax_output + (1.0 - sigma) * recurrent

    # ------------------------------------------------------------------ state
    @autocast_off
    def init_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> CrossAttentionState:
        """Build the per-sequence state (standard layout) from the projected encoder keys/values.

        Cost, once per sequence: O(k*d^2) per head for ``W`` on the values and the ``K_j^T (V_j W^T)``
        products (two batched matmuls), an m-step RAF recurrence on (d, d) matrices (paper Table 1),
        and one copy of the keys/values into the segment-major layout (with compaction when padded).

        An example whose mask is all zero (an empty document) is given one segment whose ``s``
        positions hold zero keys and values and are all attendable: its softmax term averages zero
        values and its recurrent term is RAF of a zero input, so its output is that of an empty
        memory, 0, and the other rows are unaffected (``docs/design.md``, "Empty encoder inputs").

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`CrossAttentionState` with segment-major keys/values (B, M, H, s, d), the
            segment table and masks, the recurrent readout of every visited segment, ``raf_total``
            and ``key_norm``; no segment visited yet.

        Raises:
            ValueError: with ``strict_schedule``, if an example has more segments than ``target_length``
                (checked in eager mode only: the check needs a host sync).
        """
        batch, heads, k, d = keys.shape
        s = self.settings.segment_size
        device = keys.device
        lengths, compact = real_lengths(key_valid, batch, k, device)
        max_segments = -(-k // s)
        padded = max_segments * s
        keys, values, order = _segment_major(keys, values, key_valid if compact else None, s)
        position_valid = torch.arange(padded, device=device)[None, :] < lengths[:, None]  # (B, M*s)
        real_valid = position_valid.view(batch, max_segments, s)
        if compact or padded != k:
            mask = real_valid[:, :, None, :, None].to(keys.dtype)
            keys, values = keys * mask, values * mask
        empty = lengths == 0
        segments = num_segments(lengths, s).clamp(min=1)  # an empty example has one (empty) segment
        if not tracing():
            self._check_schedule(segments)
        # attendable positions: the real ones; all of segment 0 (zero keys/values) for an empty example
        first_segment = torch.arange(max_segments, device=device)[None, :, None] == 0
        segment_valid = real_valid | (empty[:, None, None] & first_segment)

        target = self.settings.target_length
        state = CrossAttentionState(
            keys=keys,
            values=values,
            positions=order.to(torch.int32),
            lengths=lengths,
            num_segments=segments,
            last_segment=torch.full((batch,), -1, dtype=torch.long, device=device),
            segment_table=segment_index(torch.arange(target + 1, device=device), segments, target),
            segment_valid=segment_valid,
        )
        if self.settings.variant == "longt5":
            state.global_keys, state.global_values, state.global_valid = global_tokens(keys, values, real_valid)
        if self.has_recurrence:
            wide = accumulation_dtype(keys.dtype)
            if self.settings.ablation == "no_norm":  # ablation II
                state.key_norm = torch.ones(batch, heads, d, dtype=wide, device=device)
            else:  # (B, H, d); the norm's gradient is 0, not NaN, at an all-zero column (an empty example)
                state.key_norm = torch.linalg.vector_norm(keys.to(wide), dim=(1, 3)) + self.settings.norm_eps
            factor = self.scale / state.key_norm[:, :, None, :]  # (B, H, 1, d)
            segment_products, total = self._segment_products(keys, values)  # (B, M, H, d, d), (B, 1, H, d, d)
            state.raf_total = total[:, 0]
            visited = self._visited(segments, max_segments)
            if torch.is_grad_enabled() and segment_products.requires_grad:  # training: the autograd formulation
                raf_inputs = self._recurrent_input(total, segment_products)
                if self.raf is None:  # ablation III: P_j itself
                    raf_outputs = raf_inputs
                else:
                    zeros = raf_inputs.new_zeros(batch, heads, d, d)
                    raf_outputs, _, _ = self.raf.scan(raf_inputs, visited, zeros, zeros, axis=1)
                state.raf_readout = raf_outputs * factor[:, None]
            else:
                state.raf_readout = self._readout_in_place(segment_products, total[:, 0], visited, factor)
        return state

    def _readout_in_place(
        self, segment_products: torch.Tensor, total: torch.Tensor, visited: torch.Tensor, factor: torch.Tensor
    ) -> torch.Tensor:
        """The readouts ``scale * RAF_out_j / norm(K)`` of every segment without autograd, written over
        ``segment_products`` (B, M, H, d, d) one segment at a time.

        The same operations as the autograd path (:meth:`RecurrentAccumulateAndFire.scan`, then the
        factor), in the same order, so the same numbers; but the RAF inputs, potentials and outputs of a
        segment are (B, H, d, d) temporaries that stay in cache, and the only (B, M, H, d, d) tensor is
        the products' buffer, read once and overwritten with the readouts (no stacked copies).

        Args:
            segment_products: ``W K_j^T V_j`` (clamped when ``kv_clamp`` is set), consumed.
            total: (B, H, d, d) ``W K^T V``.
            visited: (B, M) bool, the segments the schedule visits (:meth:`_visited`).
            factor: (B, H, 1, d) ``scale / norm(K)``.

        Returns:
            ``segment_products``' storage holding the readouts.
        """
        batch, max_segments, heads, d, _ = segment_products.shape
        every_segment_fires = False if tracing() else bool(visited.all())  # eager: one host sync
        membrane = potential = segment_products.new_zeros(batch, heads, d, d)
        raf = self.raf
        if raf is not None:
            leak = raf.leak.to(segment_products.dtype)
            threshold = raf.threshold.to(segment_products.dtype)
        for j in range(max_segments):
            slot = segment_products[:, j]
            raf_input = self._recurrent_input(total, slot)
            if raf is None:  # ablation III: the readout is P_j itself
                torch.mul(raf_input, factor, out=slot)
                continue
            fire_j = None if every_segment_fires else visited[:, j].view(-1, 1, 1, 1)
            membrane, potential = raf_update(membrane, potential, raf_input, leak, threshold, fire_j)
            torch.mul(torch.relu(potential), factor, out=slot)
        return segment_products

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
        if self.settings.ablation == "segment_products":
            return segment_products
        return total - segment_products

    def _visited(self, segments: torch.Tensor, max_segments: int) -> torch.Tensor:
        """(B, M) bool: segment j is attended at some decoder position t >= 0 (the schedule may skip
        segments when an input has more segments than ``target_length``)."""
        j = torch.arange(max_segments, device=segments.device)[None, :]
        m = segments[:, None]
        first_step = torch.div(j * self.settings.target_length + m - 1, m, rounding_mode="floor")  # ceil(j T / m)
        # segment j is visited iff the schedule floor(t m / T) maps its first candidate step to j itself
        attended_at_first_step = torch.div(first_step * m, self.settings.target_length, rounding_mode="floor") == j
        return (j < m) & (attended_at_first_step | (j == m - 1))

    def _check_schedule(self, segments: torch.Tensor) -> None:
        target = self.settings.target_length
        worst = int(segments.max())
        if worst > target:
            message = (
                f"An encoder input has {worst} segments of {self.settings.segment_size} tokens but target_length is "
                f"{target}: segments after step {target} are never attended by segmented attention. "
                "Increase `segment_size` (to at least input_length / target_length) or `target_length`."
            )
            if self.settings.strict_schedule:
                raise ValueError(message)
            warnings.warn(message, stacklevel=3)

    @autocast_off
    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The lean layout of a standard ``state`` (see :class:`CrossAttentionState`).

        Drops keys, values and the per-segment RAF outputs; keeps ``K^T V``, ``norm(K)`` and the
        RAF membrane/output after ``state.last_segment`` (recomputed by one recurrence over the
        segments visited so far), from which later steps fire RAF incrementally.
        """
        if self.settings.variant not in LEAN_VARIANTS:
            raise ValueError(f"The lean cache layout is not implemented for variant {self.settings.variant!r}.")
        lean = replace(state, keys=None, values=None, raf_readout=None)
        if self.raf is None:  # no recurrence, or ablation III (its output is recomputed at each step)
            return lean
        batch, max_segments, heads, d, _ = required(state.raf_readout, "raf_readout").shape
        # The RAF inputs are not kept in the standard layout; rebuild them for the visited prefix.
        raf_inputs, _ = self._raf_inputs(required(state.keys, "keys"), required(state.values, "values"))
        done = self._visited(state.num_segments, max_segments)
        done &= torch.arange(max_segments, device=done.device)[None, :] <= state.last_segment[:, None]
        zeros = raf_inputs.new_zeros(batch, heads, d, d)
        _, membrane, raf_output = self.raf.scan(raf_inputs, done, zeros, zeros, axis=1)
        return replace(lean, membrane=membrane, raf_output=raf_output)

    # ------------------------------------------------------------------ parallel path
    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int | torch.Tensor = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions at once (teacher forcing).

        No Python loop over positions: each query gathers its own segment's key/value block and RAF
        readout (one ``index_select`` each over the segment-major state) and takes one softmax over
        its ``s`` keys, so the work is O(q*s*d + q*d^2) per head, not O(q*k*d)
        (:func:`~srformer.attention.softmax_context.parallel_softmax`).

        Args:
            queries: (B, H, q, d) projected decoder queries at positions
                ``start_position .. start_position + q - 1``.
            state: a standard-layout state (from :meth:`init_state`).
            start_position: absolute decoder position of the first query (an int, or a 0-d long
                tensor, e.g. from a static cache).
            dropout: attention-probability dropout for ``O_S`` (training only).

        Returns:
            ``(output, state)``: output (B, H, q, d) in the queries' dtype, and the state after the
            last position.

        Raises:
            ValueError: for a lean-layout state.
        """
        if state.is_lean:
            raise ValueError("The parallel path needs a standard-layout state; rebuild it with init_state().")
        q = queries.shape[2]
        positions = torch.arange(q, device=queries.device) + start_position
        segments_of_query = segment_index(positions, state.num_segments, self.settings.target_length)  # (B, q)

        output = None
        if self.has_softmax:
            output = parallel_softmax(
                self.settings.variant, queries, state, segments_of_query, self.scale, dropout
            )
        if self.has_recurrence:
            # each query's own readout block (B, q, H, d, d): O(q*d^2) per head
            raf_readout = required(state.raf_readout, "raf_readout")
            index = block_index(segments_of_query, raf_readout.shape[1])
            readout = take_blocks(raf_readout, index, q)
            query_rows = queries.transpose(1, 2).unsqueeze(-2).to(raf_readout.dtype)  # (B, q, H, 1, d)
            recurrent = torch.matmul(query_rows, readout).squeeze(-2).transpose(1, 2)  # (B, H, q, d)
            output = self._combine(output, recurrent.to(queries.dtype))
        assert output is not None, "every variant has softmax or recurrent attention (SRformerConfig checks)"
        return output, replace(state, last_segment=segments_of_query[:, -1])

    # ------------------------------------------------------------------ incremental path
    def _segment_at(self, state: CrossAttentionState, position: int | torch.Tensor) -> torch.Tensor:
        """(B,) long ``i(t)`` read from the state's segment table; ``position`` is an int (a view, no
        kernel) or a 0-d tensor (static caches: clamped and read on the device, no host sync)."""
        segment_table = required(state.segment_table, "segment_table")
        target = self.settings.target_length
        if isinstance(position, torch.Tensor):
            column = position.reshape(1).clamp(max=target).to(device=segment_table.device, dtype=torch.long)
            return segment_table.index_select(1, column)[:, 0]
        return segment_table[:, min(position, target)]

    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int | torch.Tensor,
        project_rows: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position, reading one segment and a (d, d) matrix per head.

        Algorithm 1: attend to segment ``i(t)`` with softmax and add ``Q_t . RAF_out_{i(t)} / norm(K)``.
        Standard layout: the segment's key/value block and its RAF readout are read with one
        ``index_select`` each from the segment-major state; the work is O(s*d + d^2) per head, no
        tensor of encoder length is touched and there is no host sync. Lean layout: the
        segment's ``s`` encoder rows are projected (O(s * d_model * d) per head) and, when
        ``i(t)`` differs from the previous step's segment, RAF fires once with
        ``W K^T V - W K_i^T V_i`` (O(s*d^2 + d^3)). ``xl`` reads 2s keys and ``longt5`` s + m
        (see :func:`~srformer.attention.softmax_context.step_context`).

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (or a fresh state when ``position`` is 0).
            position: absolute decoder position ``t`` (an int, or a 0-d long tensor).
            project_rows: lean layout only: maps (B, s) encoder positions to the projected
                (keys, values), each (B, H, s, d).

        Returns:
            ``(output, state)``: output (B, H, 1, d) and the updated state.

        Raises:
            ValueError: a lean state without ``project_rows``.
        """
        segment = self._segment_at(state, position)  # (B,) i(t)
        segment_valid = required(state.segment_valid, "segment_valid")
        max_segments = segment_valid.shape[1]
        # (B,) flat block index b * M + i_b(t) (block_index without its reshapes: fewer ops per step)
        index = segment + torch.arange(0, segment.shape[0] * max_segments, max_segments, device=segment.device)
        new_state = replace(state, last_segment=segment)
        readout = None
        if state.is_lean:
            keys, values, allowed, readout, new_state = self._lean_segment(state, new_state, index, project_rows)
        elif self.has_softmax:  # ablation I reads no keys in the standard layout
            keys, values, allowed = step_context(self.settings.variant, state, index, segment)
        output = None
        if self.has_softmax:
            output = F.scaled_dot_product_attention(
                queries, _cast(keys, queries.dtype), _cast(values, queries.dtype), attn_mask=allowed[:, None, None, :],
                scale=self.scale,
            )
        if self.has_recurrence:
            if readout is None:  # standard layout: scale * RAF_out_i / norm(K), (B, H, d, d)
                readout = required(state.raf_readout, "raf_readout").flatten(0, 1).index_select(0, index)
            recurrent = torch.matmul(_cast(queries, readout.dtype), readout)
            output = self._combine(output, _cast(recurrent, queries.dtype))
        assert output is not None, "every variant has softmax or recurrent attention (SRformerConfig checks)"
        return output, new_state

    def _lean_segment(
        self,
        state: CrossAttentionState,
        new_state: CrossAttentionState,
        index: torch.Tensor,
        project_rows: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, CrossAttentionState]:
        """Lean layout: the current segment's keys, values, mask and readout.

        They are projected (and RAF fired) once per segment change and kept in the state; a step in
        the same segment as the previous one reuses them. Eager mode decides this on the host (one
        sync per step); under ``torch.compile``/``torch.export`` every step projects (sync-free, the
        same numbers).

        Returns:
            ``(keys, values, allowed, readout, new_state)``: (B, H, s, d) twice, (B, s) bool, the
            (B, H, d, d) readout (None without recurrence) and the updated state.

        Raises:
            ValueError: without ``project_rows``.
        """
        segment = new_state.last_segment
        keys, values, allowed = state.segment_keys, state.segment_values, state.segment_allowed
        if (
            keys is not None and values is not None and allowed is not None and not tracing()
            and not bool((segment != state.last_segment).any())  # same segment for every row: reuse
        ):
            return keys, values, allowed, state.segment_readout, new_state
        if project_rows is None:
            raise ValueError("A lean SRformer state needs `project_rows` to project its segment.")
        segment_valid = required(state.segment_valid, "segment_valid")
        allowed = segment_valid.flatten(0, 1).index_select(0, index)  # (B, s)
        positions = required(state.positions, "positions")
        encoder_positions = positions.view(index.shape[0] * segment_valid.shape[1], -1).index_select(0, index)
        keys, values = project_rows(encoder_positions.to(torch.int64))
        # real rows only (an empty example's attendable positions are padding rows of the encoder output)
        row_mask = (allowed & (state.lengths > 0)[:, None])[:, None, :, None].to(keys.dtype)
        keys, values = keys * row_mask, values * row_mask
        readout = None
        if self.has_recurrence:
            readout, new_state = self._lean_readout(keys, values, segment, state, new_state)
        new_state = replace(
            new_state, segment_keys=keys, segment_values=values, segment_allowed=allowed, segment_readout=readout
        )
        return keys, values, allowed, readout, new_state

    @autocast_off
    def _lean_readout(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        segment: torch.Tensor,
        state: CrossAttentionState,
        new_state: CrossAttentionState,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Lean layout: fire RAF when the segment changes (Algorithm 1) and return the step's readout
        ``scale * RAF_out_i / norm(K)`` (B, H, d, d) with the updated state. ``keys``/``values``
        (B, H, s, d) are the current segment's, zero at padding."""
        wide = accumulation_dtype(keys.dtype)
        products = torch.einsum("bhsd,bhse->bhde", keys.to(wide), values.to(wide))  # K_i^T V_i
        if self.settings.kv_clamp is not None:
            products = products.clamp(-self.settings.kv_clamp, self.settings.kv_clamp)
        # W P_i (ablation III: no W)
        raf_input = self._recurrent_input(required(state.raf_total, "raf_total"), self._project(products))
        if self.raf is None:  # ablation III: the output depends only on the segment
            raf_output = raf_input
        else:
            changed = (segment != state.last_segment)[:, None, None, None]
            previous_membrane = required(state.membrane, "membrane")
            membrane, raf_output = self.raf.fire(previous_membrane, raf_input)
            raf_output = torch.where(changed, raf_output, required(state.raf_output, "raf_output"))
            membrane = torch.where(changed, membrane, previous_membrane)
            new_state = replace(new_state, membrane=membrane, raf_output=raf_output)
        return raf_output * (self.scale / required(state.key_norm, "key_norm")[:, :, None, :]), new_state


def _cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)``, skipped (no dispatcher call) when the dtype already matches: a decode step
    is a few dozen small operations, so even no-op calls show in its time."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def _segment_major(
    keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None, segment_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys and values (B, H, k, d) as segment-major blocks (B, M, H, s, d), ``M = ceil(k / s)``.

    With ``key_valid`` each example's real positions are moved to the front first (one
    ``index_select`` of whole (H, d) rows; padding rows read position 0 and the caller zeroes them);
    without it, positions after ``k`` are zero rows. The (B, M) axes always flatten to a view, so a
    step or a query reads its segment's block with one ``index_select``. The blocks are contiguous:
    one copy of the keys and one of the values (transformers' projections are (B, k, H, d) memory).

    Returns:
        ``(keys, values, order)``: the blocks, and (B, M*s) long, the encoder position of each
        segment-major position (0 at padding positions past ``k``).
    """
    batch, heads, k, d = keys.shape
    max_segments = -(-k // segment_size)
    padded = max_segments * segment_size
    device = keys.device
    rows_keys, rows_values = keys.transpose(1, 2), values.transpose(1, 2)  # (B, k, H, d)
    if key_valid is not None:
        order = compaction_order(key_valid.to(device=device, dtype=torch.bool))  # (B, k)
        if padded != k:
            order = F.pad(order, (0, padded - k))
        flat = (order + torch.arange(0, batch * k, k, device=device)[:, None]).reshape(-1)
        rows_keys = rows_keys.reshape(batch * k, heads, d).index_select(0, flat)
        rows_values = rows_values.reshape(batch * k, heads, d).index_select(0, flat)
    else:
        order = F.pad(torch.arange(k, device=device), (0, padded - k)).expand(batch, padded)
        if padded != k:
            rows_keys = F.pad(rows_keys, (0, 0, 0, 0, 0, padded - k))
            rows_values = F.pad(rows_values, (0, 0, 0, 0, 0, padded - k))

    def blocks(rows: torch.Tensor) -> torch.Tensor:
        # contiguous: every later kernel (the batched K_j^T V_j matmul, W, norm(K), the finiteness check,
        # a step's block reads) then runs on dense memory without copies of its own
        return rows.reshape(batch, max_segments, segment_size, heads, d).transpose(2, 3).contiguous()

    return blocks(rows_keys), blocks(rows_values), order
