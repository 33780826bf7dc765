"""Top-r block selection by mean-pooled keys (Lu et al. 2025, MoBA: Mixture of Block Attention for Long-Context
LLMs: a query's gate for a block is its product with the block's mean-pooled keys, and it attends the top-k blocks;
the selection branch of Native Sparse Attention, Yuan et al. 2025: one softmax over the top-n selected blocks), as
decoder cross attention: the ``block-topk`` variant.

MoBA splits the keys into blocks, scores each block for a query by the query's product with the block's
mean-pooled keys (its gate), and lets the query attend the top-``r`` blocks. As cross attention the blocks are the
segments of ``s`` real (compacted) encoder positions, and the segment the schedule gives decoder position ``t``,
``i(t)`` (:mod:`srformer.attention.schedule`), is always read (MoBA's current block). Per query and per head::

    gate_j(t) = scale * Q_t . mean(K_{S_j})                 (the mean of segment j's real keys)
    chosen(t) = the r segments j != i(t), j < m, with the largest gate_j(t) (ties: the lower j first)
    O_t = softmax(scale * Q_t K_U^T) V_U,   U = S_{i(t)} ∪ S_{chosen(t)}

one softmax over the union of the selected segments' real keys. ``r`` is ``top_segments`` (default 3). For an
example with ``m`` segments, ``r >= m - 1`` reads every segment (full attention); since ``m`` varies per example
this clamp is the documented behaviour, not an error. A positive ``scale`` does not change the ranking; it is kept
so that a gate is on the scale of the softmax's logits.

The selection is a hard top-``r`` (as MoBA's): no gradient flows through the choice (the gates only pick indices,
and are computed from detached queries and keys), only through the softmax over the selected keys. An example's
choice depends on its own keys only: padded positions never enter a mean, and segments past its ``m`` (padding in
the batch's segment-major state) are never candidates, so the output does not depend on the padding or the batch.

The schedule, compaction and segment-major state are those of
:class:`~srformer.attention.segmented.SegmentedCrossAttention`; the state adds each segment's mean key
(:class:`BlockTopkState`). The segment blocks are chosen per query *and head*, which the base's
``context_blocks`` hooks (one block per query) cannot express, so both paths gather per (query, head):
``(B, H, q, r + 1, s, d)`` blocks of keys and values, with no ``q x k`` score matrix. There is no lean layout.
Cost per head: one step ``O(m·d + m·log m + (r + 1)·s·d)`` (the gates, their sort, the softmax); the parallel
path the same per query, ``O(q·(m·d + (r + 1)·s·d))``; building the state ``O(k·d)`` (the segment-major copy
and the means). The state keeps every key and value, ``O(k·d)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from srformer.attention.base import ProjectRows
from srformer.attention.naive.common import (
    check_call,
    num_segments,
    per_query,
    segment_of,
    segment_rows,
    softmax_attention,
)
from srformer.attention.schedule import segment_index
from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.settings import MechanismSettings, integer_setting
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend

if TYPE_CHECKING:  # srformer.config imports the attention registry
    from srformer.config import SRformerConfig


@dataclass(frozen=True)
class BlockTopkSettings(MechanismSettings):
    """The settings of the ``block-topk`` variant (``SRformerConfig(variant='block-topk', ...)``).

    Attributes:
        top_segments: ``r``, the segments besides ``i(t)`` each query reads, chosen per query and head by
            ``Q_t . mean(K_{S_j})`` (MoBA's top-k blocks). At least 1. ``r >= m - 1`` reads all ``m`` segments of
            an example (full attention). None (default): 3.
    """

    top_segments: int | None = integer_setting(1, None, "segments read besides the scheduled one")

    def resolved_top_segments(self, config: SRformerConfig) -> int:
        """``r``: ``top_segments``, or 3 when it is None."""
        return self.top_segments if self.top_segments is not None else 3


@dataclass(kw_only=True)
class BlockTopkState(SegmentState):
    """The ``block-topk`` state: :class:`~srformer.attention.segmented.SegmentState` plus each segment's mean key.

    Attributes:
        mean_keys: (B, H, M, d) the mean of each segment's real keys (the gates' keys; detached, in float32 or
            the keys' dtype when wider); zero for a segment without real positions.
    """

    mean_keys: torch.Tensor


def take_per_head(tensor: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """The segment blocks ``blocks`` chose per query and head, from a segment-major tensor.

    One ``index_select`` of whole rows from the tensor viewed as ``(B·M·H, s, ...)`` (or ``(B·M, s)``): on the CPU
    several times faster than advanced indexing with one index tensor per dimension, which it equals. A
    non-contiguous tensor (not a state built by ``init_state``) takes the advanced-indexing path.

    Args:
        tensor: (B, M, H, s, ...) per head (the state's keys and values) or (B, M, s) shared by the heads (its
            ``segment_valid``, its positions).
        blocks: (B, H, q, n) long segment indices in ``[0, M - 1]``.

    Returns:
        (B, H, q, n, s, ...): one gather, ``O(n·s·d)`` per query and head.
    """
    batch, heads = blocks.shape[0], blocks.shape[1]
    segments = tensor.shape[1]
    batch_index = torch.arange(batch, device=blocks.device)[:, None, None, None]
    rows = batch_index * segments + blocks  # (B, H, q, n) row of (b, segment) in the (B·M, ...) view
    if tensor.dim() == 3:
        if not tensor.is_contiguous():
            return tensor[batch_index, blocks]
        flat = tensor.view(batch * segments, *tensor.shape[2:])
        return flat.index_select(0, rows.reshape(-1)).view(*blocks.shape, *tensor.shape[2:])
    head_index = torch.arange(heads, device=blocks.device)[None, :, None, None]
    if not tensor.is_contiguous():
        return tensor[batch_index, blocks, head_index]
    flat = tensor.view(batch * segments * heads, *tensor.shape[3:])
    picked = flat.index_select(0, (rows * heads + head_index).reshape(-1))
    return picked.view(*blocks.shape, *tensor.shape[3:])


class BlockTopkCrossAttention(SegmentedCrossAttention):
    """The ``block-topk`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_top_segments()`` is ``r``)."""

    variants = ("block-topk",)

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> BlockTopkState:
        """:meth:`SegmentedCrossAttention.init_state` plus each segment's mean key (one sum over the segment-major
        keys, ``O(k·d)`` per head); arguments, errors and empty documents as there (an empty document has one
        segment of zero keys and values: its output is 0)."""
        state = super().init_state(keys, values, key_valid)
        wide = accumulation_dtype(state.keys.dtype)
        # the keys are zero at padding, so the sum runs over the real positions only
        counts = state.segment_valid.sum(dim=-1).clamp(min=1).to(wide)  # (B, M)
        mean_keys = state.keys.detach().to(wide).sum(dim=3) / counts[:, :, None, None]  # (B, M, H, d)
        # head-major, so that a step's gates are one batched product with no copy of the mean keys
        return extend(BlockTopkState, state, mean_keys=mean_keys.transpose(1, 2).contiguous())

    def select_segments(
        self, queries: torch.Tensor, state: BlockTopkState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The segments each query reads, per head: ``i(t)``, then the chosen ``R = min(r, M - 1)`` slots in
        decreasing gate (ties: lower segment first).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: the layer's state.
            segments: (B, q) long, ``i(t)`` of each query.

        Returns:
            ``(blocks, valid)``: (B, H, q, R + 1) long segment indices and (B, H, q, R + 1) bool, False at slots
            left empty (an example with fewer than ``r + 1`` segments; the slot's index is then unused).
        """
        mean_keys = state.mean_keys
        heads, max_segments = queries.shape[1], mean_keys.shape[2]
        gates = (queries.detach().to(mean_keys.dtype) @ mean_keys.transpose(-1, -2)) * self.scale  # (B, H, q, M)
        segment = torch.arange(max_segments, device=segments.device)
        candidate = (segment < state.num_segments[:, None, None]) & (segment != segments[:, :, None])  # (B, q, M)
        candidate = candidate[:, None].expand_as(gates)
        # stable descending sort: equal gates keep index order; non-candidates (-inf) sort after every candidate
        order = torch.where(candidate, gates, float("-inf")).sort(dim=-1, descending=True, stable=True).indices
        chosen = order[..., : min(self.settings.resolved_top_segments(), max_segments - 1)]  # (B, H, q, R)
        scheduled = segments[:, None, :, None].expand(-1, heads, -1, 1)
        blocks = torch.cat([scheduled, chosen], dim=-1)
        valid = torch.cat([torch.ones_like(scheduled, dtype=torch.bool), candidate.gather(-1, chosen)], dim=-1)
        return blocks, valid

    def probabilities(
        self, queries: torch.Tensor, state: BlockTopkState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The softmax over the real keys of each query's selected segments (:meth:`select_segments`).

        Args:
            queries: (B, H, q, d) projected decoder queries. state: the layer's state.
            segments: (B, q) long, ``i(t)`` of each query.

        Returns:
            ``(probabilities, blocks)``: (B, H, q, R + 1, s) in the queries' dtype, zero at padding and at empty
            slots; and the (B, H, q, R + 1) long segment of each slot.
        """
        blocks, valid = self.select_segments(queries, state, segments)
        keys = take_per_head(state.keys, blocks).to(queries.dtype)  # (B, H, q, R + 1, s, d)
        allowed = take_per_head(state.segment_valid, blocks) & valid[..., None]  # (B, H, q, R + 1, s)
        # (B, H, q, (R + 1)·s, d) @ (B, H, q, d, 1): a batched matrix-vector product, no transposed copy of the keys
        logits = (keys.flatten(-3, -2) @ queries.unsqueeze(-1)).squeeze(-1) * self.scale
        logits = logits.masked_fill(~allowed.flatten(-2), float("-inf"))
        # every query has an allowed key: its scheduled segment has one (state invariant)
        return torch.softmax(logits, dim=-1).view(allowed.shape), blocks

    def _attend(
        self, queries: torch.Tensor, state: BlockTopkState, segments: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """``A V`` over the selected segments: (B, H, q, d) in the queries' dtype (both paths)."""
        probabilities, blocks = self.probabilities(queries, state, segments)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        values = take_per_head(state.values, blocks).to(queries.dtype)  # (B, H, q, R + 1, s, d)
        # (B, H, q, 1, (R + 1)·s) @ (B, H, q, (R + 1)·s, d)
        return (probabilities.flatten(-2).unsqueeze(-2) @ values.flatten(-3, -2)).squeeze(-2)

    def _output(
        self, queries: torch.Tensor, state: SegmentState, segments_of_query: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """The parallel path's output: every query over its own selected segments (see the module docstring)."""
        assert isinstance(state, BlockTopkState), type(state)
        return self._attend(queries, state, segments_of_query, dropout)

    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int | torch.Tensor,
        project_rows: ProjectRows | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """Cross attention for one decoder position: the gates of the ``m`` segments, their top ``r``, and one
        softmax over the ``(r + 1)·s`` gathered keys; no tensor of encoder length is touched, no host sync.

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position``.
            state: the state after ``position - 1`` (a fresh one at position 0), from :meth:`init_state`.
            position: absolute decoder position ``t`` (an int, or a 0-d long tensor).
            project_rows: unused (there is no lean layout).

        Returns:
            ``(output, state)``: output (B, H, 1, d) and the updated state.

        Raises:
            ValueError: for a state of another class.
        """
        if not isinstance(state, BlockTopkState):
            raise ValueError(f"{type(self).__name__} cannot step a {type(state).__name__}; build it with init_state().")
        segment = self._segment_at(state, position)  # (B,) i(t)
        return self._attend(queries, state, segment[:, None], 0.0), replace(state, last_segment=segment)

    def attention_weights(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        state: CrossAttentionState,
        key_valid: torch.Tensor | None,
        *,
        start_position: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """The softmax weights at the encoder positions, for ``output_attentions``: ``O = A V`` exactly.

        Args:
            queries: (B, H, q, d) projected decoder queries at positions ``start_position ..``.
            keys: (B, H, k, d) projected encoder keys in encoder order (only ``k`` is read: the state holds them).
            state: the layer's state. key_valid: unused (the state holds the real positions).
            start_position: absolute decoder position of the first query (an int or a 0-d long tensor).

        Returns:
            (B, H, q, k) in the queries' dtype: each row sums to 1 over the selected segments' real positions,
            zero elsewhere; all-zero rows for an example without real encoder tokens.
        """
        assert isinstance(state, BlockTopkState), type(state)
        positions = torch.arange(queries.shape[2], device=queries.device) + start_position
        segments = segment_index(positions, state.num_segments, self.settings.target_length)  # (B, q)
        probabilities, blocks = self.probabilities(queries, state, segments)
        encoder_positions = take_per_head(state.positions.to(torch.long).view(state.segment_valid.shape), blocks)
        weights = queries.new_zeros(*queries.shape[:3], keys.shape[2])
        # masked keys have probability exactly 0, so the positions they carry (padding) receive nothing
        weights.scatter_add_(3, encoder_positions.flatten(3), probabilities.flatten(3))
        return weights * (state.lengths > 0).to(weights.dtype)[:, None, None, None]


def block_topk_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    settings: SRformerConfig,
    *,
    scale: float = 1.0,
    parameters: Mapping[str, torch.Tensor] | None = None,
    start_position: int = 0,
) -> torch.Tensor:
    """Float64 reference: per query and head, softmax over the real positions of segment ``i(t)`` and of the ``r``
    other segments with the largest ``scale * Q_t . mean(K_{S_j})`` (ties: lower ``j`` first; all of them when
    there are at most ``r``)."""
    check_call(settings, parameters, "block-topk")
    s, target, top = settings.resolved_segment_size(), settings.target_length, settings.resolved_top_segments()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        m = num_segments(len(k), s)
        i = segment_of(t, m, target)
        rows = [segment_rows(j, len(k), s) for j in range(m)]
        gates = [scale * float(k[segment].mean(dim=0) @ query) for segment in rows]
        chosen = sorted((j for j in range(m) if j != i), key=lambda j: (-gates[j], j))[:top]
        read = torch.cat([torch.arange(rows[j].start, rows[j].stop) for j in (i, *chosen)])
        return softmax_attention(query, k[read], v[read], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
