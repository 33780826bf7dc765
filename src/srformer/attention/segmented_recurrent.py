"""Segmented recurrent cross attention as one ``nn.Module`` over projected queries/keys/values.

Implements paper Eq. 6 (segmented attention ``O_S``), Eq. 13-16 (recurrent attention ``O_R``)
and Eq. 11 (``O = O_S + O_R``) with the interpretation fixed by SRFORMER_NOTES:

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
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from srformer.attention.raf import RecurrentAccumulateAndFire
from srformer.attention.schedule import compaction_order, num_segments, segment_index
from srformer.attention.state import CrossAttentionState
from srformer.config import SRformerConfig


class SegmentedRecurrentAttention(nn.Module):
    """Cross attention of the ``segmented`` and ``srformer`` variants for one decoder layer.

    Args:
        config: the SRformer settings (variant ``segmented`` or ``srformer``).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale (T5: 1.0, BART: head_dim^-0.5), used by the
            softmax of ``O_S`` and multiplied into ``Q`` for ``O_R``.

    Raises:
        ValueError: if ``config.variant`` is ``full`` (that variant keeps the model's own module).
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = float(scale)
        if config.variant == "full":
            raise ValueError("The 'full' variant keeps the model's own attention; no SRformer module is needed.")
        self.config = config
        self.head_dim = head_dim
        self.raf = None
        if self.has_recurrence:
            self.raf = RecurrentAccumulateAndFire(
                head_dim, config.raf_leak_init, config.raf_threshold_init, config.raf_linear_init_scale
            )

    @property
    def has_recurrence(self) -> bool:
        """True when ``O_R`` is part of the output (variant ``srformer`` with recurrence on)."""
        return self.config.variant == "srformer" and self.config.recurrence

    # ------------------------------------------------------------------ state
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> CrossAttentionState:
        """Build the per-sequence state (standard layout) from the projected encoder keys/values.

        Cost, once per sequence: O(k*d^2) per head for the ``K_j^T V_j`` products (one einsum),
        O(m*d^3) for ``W P_j`` and an m-step RAF recurrence (paper Table 1).

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`CrossAttentionState` with keys/values, the segment table and masks, the
            recurrent readout of every visited segment, ``raf_total`` and ``key_norm``; no segment
            visited yet.

        Raises:
            ValueError: if an example has no real encoder token (an empty document), or, with
                ``strict_schedule``, if an example has more segments than ``target_length``.
        """
        batch, heads, k, d = keys.shape
        s = self.config.segment_size
        device = keys.device
        if key_valid is None:
            lengths = torch.full((batch,), k, dtype=torch.long, device=device)
            order = torch.arange(k, device=device).expand(batch, k)
        else:
            key_valid = key_valid.to(device=device, dtype=torch.bool)
            lengths = key_valid.sum(dim=1)
            # One host sync per sequence (not per step): reject empty documents, skip compaction
            # when nothing is padded.
            shortest = int(lengths.min())
            if shortest == 0:
                bad = torch.nonzero(lengths == 0).flatten().tolist()
                raise ValueError(
                    f"Encoder input of batch example(s) {bad} has no real token (attention mask all zero): "
                    "empty documents cannot be summarized; remove them from the input."
                )
            if shortest == k:
                order = torch.arange(k, device=device).expand(batch, k)
            else:
                order = compaction_order(key_valid)
                gather = order[:, None, :, None].expand(batch, heads, k, d)
                keys = torch.gather(keys, 2, gather)
                values = torch.gather(values, 2, gather)
        segments = num_segments(lengths, s)
        max_segments = -(-k // s)
        padded = max_segments * s
        if padded != k:
            keys = F.pad(keys, (0, 0, 0, padded - k))
            values = F.pad(values, (0, 0, 0, padded - k))
            order = F.pad(order, (0, padded - k))
        position_valid = torch.arange(padded, device=device)[None, :] < lengths[:, None]  # (B, M*s)
        mask = position_valid[:, None, :, None].to(keys.dtype)
        keys = keys * mask
        values = values * mask
        self._check_schedule(segments)

        target = self.config.target_length
        state = CrossAttentionState(
            keys=keys,
            values=values,
            positions=order.to(torch.int32),
            lengths=lengths,
            num_segments=segments,
            last_segment=torch.full((batch,), -1, dtype=torch.long, device=device),
            segment_table=segment_index(torch.arange(target + 1, device=device), segments, target),
            segment_valid=position_valid.view(batch, max_segments, s),
        )
        if self.has_recurrence:
            raf_inputs, state.raf_total = self._raf_inputs(keys, values)
            zeros = torch.zeros(batch, heads, d, d, dtype=torch.float32, device=device)
            raf_outputs, _, _ = self.raf.scan(raf_inputs, self._visited(segments, max_segments), zeros, zeros)
            state.key_norm = keys.float().pow(2).sum(dim=2).sqrt() + self.config.norm_eps
            state.raf_readout = raf_outputs * (self.scale / state.key_norm[:, :, None, None, :])
        return state

    def _raf_inputs(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RAF inputs ``x_j = W P_j`` of every segment, (B, H, M, d, d), and ``W K^T V``, (B, H, d, d),
        in float32 from compacted, zero-padded keys/values (B, H, M*s, d) (Eq. 14-16, A.2).

        ``W`` acts on the last (value) axis, so ``(K_j^T V_j) W^T = K_j^T (V_j W^T)``: without a clamp
        the values are projected first and every segment costs O(s*d^2) (2*k*d^2 per head in all)
        instead of O(s*d^2 + d^3) (k*d^2 + m*d^3, 2.5x more at s = d/4). With ``kv_clamp`` the
        products are clamped before ``W``, as the BART authors did.
        """
        batch, heads, _, d = keys.shape
        shape = (batch, heads, -1, self.config.segment_size, d)
        keys32 = keys.float().view(shape)
        if self.config.kv_clamp is None:
            projected_values = self.raf.project(values.float()).view(shape)
            segment_products = torch.einsum("bhmsd,bhmse->bhmde", keys32, projected_values)  # W K_j^T V_j
            total = segment_products.sum(dim=2, keepdim=True)
        else:
            c = self.config.kv_clamp
            segment_products = torch.einsum("bhmsd,bhmse->bhmde", keys32, values.float().view(shape))
            total = self.raf.project(segment_products.sum(dim=2, keepdim=True).clamp(-c, c))
            segment_products = self.raf.project(segment_products.clamp(-c, c))
        return total - segment_products, total[:, :, 0]

    def _visited(self, segments: torch.Tensor, max_segments: int) -> torch.Tensor:
        """(B, M) bool: segment j is attended at some decoder position t >= 0 (the schedule may skip
        segments when an input has more segments than ``target_length``)."""
        j = torch.arange(max_segments, device=segments.device)[None, :]
        m = segments[:, None]
        first_step = torch.div(j * self.config.target_length + m - 1, m, rounding_mode="floor")  # ceil(j T / m)
        return (j < m) & ((torch.div(first_step * m, self.config.target_length, rounding_mode="floor") == j) | (j == m - 1))

    def _check_schedule(self, segments: torch.Tensor) -> None:
        target = self.config.target_length
        worst = int(segments.max())
        if worst > target:
            message = (
                f"An encoder input has {worst} segments of {self.config.segment_size} tokens but target_length is "
                f"{target}: segments after step {target} are never attended by segmented attention. "
                "Increase `segment_size` (to at least input_length / target_length) or `target_length`."
            )
            if self.config.strict_schedule:
                raise ValueError(message)
            warnings.warn(message, stacklevel=3)

    def lean(self, state: CrossAttentionState) -> CrossAttentionState:
        """The lean layout of a standard ``state`` (see :class:`CrossAttentionState`).

        Drops keys, values and the per-segment RAF outputs; keeps ``K^T V``, ``norm(K)`` and the
        RAF membrane/output after ``state.last_segment`` (recomputed by one recurrence over the
        segments visited so far), from which later steps fire RAF incrementally.
        """
        lean = replace(state, keys=None, values=None, raf_readout=None)
        if not self.has_recurrence:
            return lean
        batch, heads, max_segments, d, _ = state.raf_readout.shape
        # The RAF inputs are not kept in the standard layout; rebuild them for the visited prefix.
        raf_inputs, _ = self._raf_inputs(state.keys, state.values)
        done = self._visited(state.num_segments, max_segments)
        done &= torch.arange(max_segments, device=done.device)[None, :] <= state.last_segment[:, None]
        zeros = torch.zeros(batch, heads, d, d, dtype=torch.float32, device=done.device)
        _, membrane, raf_output = self.raf.scan(raf_inputs, done, zeros, zeros)
        return replace(lean, membrane=membrane, raf_output=raf_output)

    # ------------------------------------------------------------------ parallel path
    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int = 0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions at once (teacher forcing).

        No Python loop over positions: segmented attention is one masked ``scaled_dot_product_attention``
        call, and each query reads the RAF output of its segment from the state.

        Args:
            queries: (B, H, q, d) projected decoder queries at positions
                ``start_position .. start_position + q - 1``.
            state: a standard-layout state (from :meth:`init_state`).
            start_position: absolute decoder position of the first query.
            dropout: attention-probability dropout for ``O_S`` (training only).

        Returns:
            ``(output, state)``: output (B, H, q, d) in the queries' dtype, and the state after the
            last position.

        Raises:
            ValueError: for a lean-layout state.
        """
        if state.is_lean:
            raise ValueError("The parallel path needs a standard-layout state; rebuild it with init_state().")
        batch, heads, q, d = queries.shape
        s = self.config.segment_size
        positions = torch.arange(start_position, start_position + q, device=queries.device)
        segments_of_query = segment_index(positions, state.num_segments, self.config.target_length)  # (B, q)

        key_positions = torch.arange(state.keys.shape[2], device=queries.device)
        in_segment = torch.div(key_positions, s, rounding_mode="floor")[None, None, :] == segments_of_query[:, :, None]
        allowed = in_segment & (key_positions[None, None, :] < state.lengths[:, None, None])  # (B, q, M*s)
        output = F.scaled_dot_product_attention(
            queries,
            state.keys.to(queries.dtype),
            state.values.to(queries.dtype),
            attn_mask=allowed[:, None],
            dropout_p=dropout,
            scale=self.scale,
        )
        if self.has_recurrence:
            # Q_t . out_j for every segment j in one batched matmul (q*M*d numbers per head, less than
            # materialising a (d, d) block per query), then keep each query's own segment.
            all_segments = torch.einsum("bhqd,bhmde->bhqme", queries.float(), state.raf_readout)
            pick = segments_of_query[:, None, :, None, None].expand(batch, heads, q, 1, d)
            recurrent = torch.take_along_dim(all_segments, pick, dim=3)[:, :, :, 0]
            output = output + recurrent.to(output.dtype)
        return output, replace(state, last_segment=segments_of_query[:, -1])

    # ------------------------------------------------------------------ incremental path
    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int,
        project_rows: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position, reading one segment and a (d, d) matrix per head.

        Algorithm 1: attend to segment ``i(t)`` with softmax and add ``Q_t . RAF_out_{i(t)} / norm(K)``.
        Standard layout: the RAF output is read from the state; the work is O(s*d + d^2) per head,
        no tensor of encoder length is touched and there is no host sync. Lean layout: the
        segment's ``s`` encoder rows are projected (O(s * d_model * d) per head) and, when
        ``i(t)`` differs from the previous step's segment, RAF fires once with
        ``W K^T V - W K_i^T V_i`` (O(s*d^2 + d^3)).

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (or a fresh state when ``position`` is 0).
            position: absolute decoder position ``t``.
            project_rows: lean layout only: maps (B, s) encoder positions to the projected
                (keys, values), each (B, H, s, d).

        Returns:
            ``(output, state)``: output (B, H, 1, d) and the updated state.

        Raises:
            ValueError: a lean state without ``project_rows``.
        """
        batch, heads, _, d = queries.shape
        s = self.config.segment_size
        device = queries.device
        segment = state.segment_table[:, min(position, self.config.target_length)]  # (B,) i(t)
        rows = torch.arange(batch, device=device)
        allowed = state.segment_valid[rows, segment]  # (B, s)
        if state.is_lean:
            if project_rows is None:
                raise ValueError("A lean SRformer state needs `project_rows` to project its segment.")
            max_segments = state.positions.shape[1] // s
            encoder_positions = state.positions.view(batch, max_segments, s)[rows, segment].to(torch.int64)
            keys, values = project_rows(encoder_positions)
            row_mask = allowed[:, None, :, None].to(keys.dtype)
            keys, values = keys * row_mask, values * row_mask
        else:
            max_segments = state.keys.shape[2] // s
            keys = state.keys.view(batch, heads, max_segments, s, d)[rows, :, segment]  # (B, H, s, d)
            values = state.values.view(batch, heads, max_segments, s, d)[rows, :, segment]
        output = F.scaled_dot_product_attention(
            queries, keys.to(queries.dtype), values.to(queries.dtype), attn_mask=allowed[:, None, None, :],
            scale=self.scale,
        )
        new_state = replace(state, last_segment=segment)
        if self.has_recurrence:
            if state.is_lean:
                products = torch.einsum("bhsd,bhse->bhde", keys.float(), values.float())  # K_i^T V_i
                if self.config.kv_clamp is not None:
                    products = products.clamp(-self.config.kv_clamp, self.config.kv_clamp)
                changed = (segment != state.last_segment)[:, None, None, None]
                raf_input = state.raf_total - self.raf.project(products)  # W P_i = W K^T V - W K_i^T V_i
                membrane, raf_output = self.raf.fire(state.membrane, raf_input)
                raf_output = torch.where(changed, raf_output, state.raf_output)
                new_state = replace(
                    new_state, membrane=torch.where(changed, membrane, state.membrane), raf_output=raf_output
                )
                readout = raf_output * (self.scale / state.key_norm[:, :, None, :])
            else:
                readout = state.raf_readout[rows, :, segment]  # scale * RAF_out_i / norm(K), (B, H, d, d)
            output = output + torch.matmul(queries.float(), readout).to(output.dtype)
        return output, new_state
