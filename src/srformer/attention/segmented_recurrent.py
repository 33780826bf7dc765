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

    Raises:
        ValueError: if ``config.variant`` is ``full`` (that variant keeps the model's own module).
    """

    def __init__(self, config: SRformerConfig, head_dim: int) -> None:
        super().__init__()
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
        """Build the per-sequence state from the projected encoder keys/values (once per sequence).

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A fresh :class:`CrossAttentionState` (RAF membrane and output at zero, no segment visited).

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
            # One host sync per sequence (not per step): reject empty documents.
            if bool((lengths == 0).any()):
                bad = torch.nonzero(lengths == 0).flatten().tolist()
                raise ValueError(
                    f"Encoder input of batch example(s) {bad} has no real token (attention mask all zero): "
                    "empty documents cannot be summarized; remove them from the input."
                )
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

        state = CrossAttentionState(
            keys=keys,
            values=values,
            positions=order.to(torch.int32),
            lengths=lengths,
            num_segments=segments,
            last_segment=torch.full((batch,), -1, dtype=torch.long, device=device),
        )
        if self.has_recurrence:
            keys32 = keys.float().view(batch, heads, max_segments, s, d)
            values32 = values.float().view(batch, heads, max_segments, s, d)
            segment_products = torch.einsum("bhmsd,bhmse->bhmde", keys32, values32)  # K_j^T V_j
            total = segment_products.sum(dim=2, keepdim=True)  # K^T V over real positions
            if self.config.kv_clamp is not None:
                c = self.config.kv_clamp
                segment_products = segment_products.clamp(-c, c)
                total = total.clamp(-c, c)
            partial = total - segment_products  # P_j, Eq. 16
            state.raf_inputs = self.raf.project(partial)
            state.kv_total = total[:, :, 0]
            state.key_norm = keys.float().pow(2).sum(dim=2).sqrt() + self.config.norm_eps
            state.membrane = torch.zeros(batch, heads, d, d, dtype=torch.float32, device=device)
            state.raf_output = torch.zeros_like(state.membrane)
        return state

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
        """The lean layout of ``state``: drop keys, values and per-segment RAF inputs (see
        :class:`CrossAttentionState`); later steps project their segment from the encoder output."""
        return replace(state, keys=None, values=None, raf_inputs=None)

    def resume(self, fresh: CrossAttentionState, carried: CrossAttentionState) -> CrossAttentionState:
        """A standard-layout state rebuilt from the encoder output (``fresh``, from :meth:`init_state`)
        with the recurrent progress of ``carried`` (used when a lean state meets a multi-token chunk)."""
        return replace(
            fresh, last_segment=carried.last_segment, membrane=carried.membrane, raf_output=carried.raf_output
        )

    # ------------------------------------------------------------------ parallel path
    def forward(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        start_position: int = 0,
        scale: float = 1.0,
        dropout: float = 0.0,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for ``q`` consecutive decoder positions at once (teacher forcing).

        No Python loop over positions: segmented attention is one masked ``scaled_dot_product_attention``
        call, and the RAF recurrence loops over segments only.

        Args:
            queries: (B, H, q, d) projected decoder queries at positions
                ``start_position .. start_position + q - 1``.
            state: the sequence state (from :meth:`init_state`, or carried from earlier positions).
            start_position: absolute decoder position of the first query.
            scale: the model's attention scale (T5: 1.0, BART: d^-0.5).
            dropout: attention-probability dropout for ``O_S`` (training only).

        Returns:
            ``(output, state)``: output (B, H, q, d) in the queries' dtype, and the state after the
            last position.
        """
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
            scale=scale,
        )
        new_state = replace(state, last_segment=segments_of_query[:, -1])
        if self.has_recurrence:
            max_segments = state.raf_inputs.shape[2]
            visited = F.one_hot(segments_of_query, max_segments).any(dim=1)  # (B, M)
            fires = visited & (torch.arange(max_segments, device=queries.device)[None, :] > state.last_segment[:, None])
            outputs, membrane, raf_output = self.raf.scan(state.raf_inputs, fires, state.membrane, state.raf_output)
            # Q_t . out_j for every segment j in one batched matmul (q*M*d numbers per head, less than
            # materialising a (d, d) block per query), then keep each query's own segment.
            all_segments = torch.einsum("bhqd,bhmde->bhqme", queries.float() * scale, outputs)
            pick = segments_of_query[:, None, :, None, None].expand(batch, heads, q, 1, d)
            recurrent = torch.take_along_dim(all_segments, pick, dim=3)[:, :, :, 0]
            output = output + (recurrent / state.key_norm[:, :, None, :]).to(output.dtype)
            new_state = replace(new_state, membrane=membrane, raf_output=raf_output)
        return output, new_state

    # ------------------------------------------------------------------ incremental path
    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int,
        scale: float = 1.0,
        project_rows: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position, reading one segment and a (d, d) state per head.

        Algorithm 1: attend to segment ``i(t)`` with softmax; when ``i(t)`` differs from the previous
        step's segment, fire RAF once with ``W P_{i(t)}``; add ``Q_t . RAF_out / norm(K)``. The
        standard layout does O(s*d + d^2) work per head: no tensor of encoder length is touched and
        there is no host sync. The lean layout also projects the segment's ``s`` encoder rows
        (O(s * d_model * d) per head) and forms ``P = K^T V - K_i^T V_i`` and ``W P`` (O(s*d^2 + d^3)).

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (or a fresh state when ``position`` is 0).
            position: absolute decoder position ``t``.
            scale: the model's attention scale.
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
        positions = torch.tensor([position], device=device)
        segment = segment_index(positions, state.num_segments, self.config.target_length)[:, 0]  # (B,)
        rows = torch.arange(batch, device=device)
        key_positions = segment[:, None] * s + torch.arange(s, device=device)[None, :]  # (B, s) compacted
        allowed = key_positions < state.lengths[:, None]  # (B, s)
        if state.is_lean:
            if project_rows is None:
                raise ValueError("A lean SRformer state needs `project_rows` to project its segment.")
            encoder_positions = torch.gather(state.positions, 1, key_positions.to(torch.int64)).to(torch.int64)
            keys, values = project_rows(encoder_positions)
            row_mask = allowed[:, None, :, None].to(keys.dtype)
            keys, values = keys * row_mask, values * row_mask
        else:
            max_segments = state.keys.shape[2] // s
            keys = state.keys.reshape(batch, heads, max_segments, s, d)[rows, :, segment]  # (B, H, s, d)
            values = state.values.reshape(batch, heads, max_segments, s, d)[rows, :, segment]
        output = F.scaled_dot_product_attention(
            queries, keys.to(queries.dtype), values.to(queries.dtype), attn_mask=allowed[:, None, None, :], scale=scale
        )
        new_state = replace(state, last_segment=segment)
        if self.has_recurrence:
            if state.is_lean:
                products = torch.einsum("bhsd,bhse->bhde", keys.float(), values.float())
                if self.config.kv_clamp is not None:
                    products = products.clamp(-self.config.kv_clamp, self.config.kv_clamp)
                raf_input = self.raf.project(state.kv_total - products)
            else:
                raf_input = state.raf_inputs[rows, :, segment]
            changed = (segment != state.last_segment)[:, None, None, None]
            membrane, raf_output = self.raf.fire(state.membrane, raf_input)
            membrane = torch.where(changed, membrane, state.membrane)
            raf_output = torch.where(changed, raf_output, state.raf_output)
            recurrent = torch.einsum("bhqd,bhde->bhqe", queries.float() * scale, raf_output)
            output = output + (recurrent / state.key_norm[:, :, None, :]).to(output.dtype)
            new_state = replace(new_state, membrane=membrane, raf_output=raf_output)
        return output, new_state
