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
``(B, H, q, r + 1, s, d)`` blocks of keys and values, with no ``q x k`` score matrix. A decoder step is chosen by
device (:mod:`srformer.attention.step_choice`), both reading this state and giving the same output: on an
accelerator a fixed sequence of 19 operator calls per layer whatever the input length, without a host sync (the
gates, one ``topk`` of order keys with the scheduled segment first, one indexing each of keys, values and masks, one
``scaled_dot_product_attention``: :meth:`BlockTopkCrossAttention.accelerator_step`; a GPU's eager step costs its
launches); on the CPU, where that sequence costs more time at long inputs, the parallel path's selection and
gathers. There is no lean layout. Cost per head: one step ``O(m·d + m·log r + (r + 1)·s·d)`` (the gates, their
top ``r``, the softmax); the parallel path the same per query, ``O(q·(m·d + (r + 1)·s·d))``; building the state
``O(k·d)`` (the segment-major copy and the means). The state keeps every key and value, ``O(k·d)``.

Selection blocks smaller than a segment (``block_size`` b, beyond MoBA's one block per segment; NSA selects
blocks of a size of their own). Each segment is cut into ``n = ceil(s / b)`` blocks of ``b`` real positions (the
last one shorter when ``b`` does not divide ``s``), each with its own mean key; the scheduled segment is still
read whole (its ``n`` blocks), and the ``r`` chosen are blocks of other segments::

    O_t = softmax(scale * Q_t K_U^T) V_U,   U = S_{i(t)} ∪ (the r blocks B_j outside S_{i(t)} with the largest
                                                           scale * Q_t . mean(K_{B_j}); ties: the earlier block)

The mean of ``b`` keys tells more about each of them than the mean of ``s``: with many facts per segment a
segment's mean says little about any one, while a small block's still points to it. The price is ``k / b`` gates
instead of ``m``: a step costs ``O((k/b)·d + (k/b)·log r + (s + r·b)·d)``. ``b = s`` is the layout above
exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch.nn import functional as F

from srformer.attention.base import ProjectRows
from srformer.attention.schedule import kept_per_shape, segment_index
from srformer.attention.segmented import SegmentedCrossAttention, SegmentState, cast
from srformer.attention.selection import position_order, ranked_top, top_positions
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend
from srformer.attention.step_choice import step_kind
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class BlockTopkSettings(MechanismSettings):
    """The settings of the ``block-topk`` variant (``SRformerConfig(variant='block-topk', ...)``).

    Attributes:
        top_segments: ``r``, the blocks besides segment ``i(t)`` each query reads, chosen per query and head by
            ``Q_t . mean(K_{B_j})`` (MoBA's top-k blocks); a block is a segment unless ``block_size`` is set. At
            least 1. ``r`` at least the number of other blocks reads all of an example (full attention). None
            (default): 3.
        block_size: ``b``, the real (compacted) encoder positions per selection block: each segment is cut into
            ``n = ceil(s / b)`` blocks of ``b`` (its last block shorter when ``b`` does not divide ``s``), which are
            gated and chosen one by one, while the scheduled segment is still read whole. At least 1; a block size
            of ``s`` or more is one block per segment. None (default): ``b = s`` (MoBA's layout). A smaller block
            makes the mean-pooled key a sharper summary and the gates ``n`` times as many.
    """

    top_segments: int | None = integer_setting(1, None, "blocks read besides the scheduled segment")
    block_size: int | None = integer_setting(1, None, "encoder positions per selection block")

    def resolved_top_segments(self, config: SRformerConfig) -> int:
        """``r``: ``top_segments``, or 3 when it is None."""
        return self.top_segments if self.top_segments is not None else 3

    def resolved_block_size(self, config: SRformerConfig) -> int:
        """``b``: ``block_size`` (at most the segment size: a block never spans two segments), or the segment size
        when it is None (a block is a segment)."""
        s = config.resolved_segment_size()
        return min(self.block_size, s) if self.block_size is not None else s

    def whole_input_length(self, config: SRformerConfig) -> int:
        """``s (1 + floor(r / ceil(s / b)))``: every block of the other segments is chosen when their number,
        at most ``(m - 1) ceil(s / b)``, is at most ``r``."""
        s = config.resolved_segment_size()
        blocks_per_segment = -(-s // self.resolved_block_size(config))
        return s * (1 + self.resolved_top_segments(config) // blocks_per_segment)


@dataclass(kw_only=True)
class BlockTopkState(SegmentState):
    """The ``block-topk`` state: :class:`~srformer.attention.segmented.SegmentState` plus each selection block's mean
    key.

    Attributes:
        mean_keys: (B, H, M·n, d), built as a transposed view of a (B, H, d, M·n) tensor: the mean of each
            selection block's real keys, block ``j`` holding positions ``(j % n)·b ..`` (at most ``b``, within the
            segment) of segment ``j // n`` (``n = ceil(s / b)`` blocks per segment; the gates' keys; detached, in
            float32 or the keys' dtype when wider); zero for a block without real positions.
        block_real: (B, M·n) bool, True for a block with at least one real position (only those are candidates).
        rank_order: (B, 1, M·n) float64, each block's term of the order keys the accelerator step ranks the gates by
            (:func:`~srformer.attention.selection.position_order`): ``-inf`` for a block without real positions.
    """

    mean_keys: torch.Tensor
    block_real: torch.Tensor
    rank_order: torch.Tensor

    @property
    def blocks_per_segment(self) -> int:
        """``n = ceil(s / b)``, the selection blocks of one segment."""
        return self.mean_keys.shape[2] // self.keys.shape[1]


def take_blocks(
    tensor: torch.Tensor, blocks: torch.Tensor, blocks_per_segment: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions of the selection blocks ``blocks`` chose per query and head, from a segment-major tensor.

    Block ``j`` is positions ``(j % n)·b .. (j % n)·b + b - 1`` of segment ``j // n`` (``n = blocks_per_segment``,
    ``b = block_size``); a position past the segment's end (the last block of a segment when ``b`` does not divide
    ``s``) is returned as the segment's last row and marked outside. One ``index_select`` of rows from the tensor
    viewed as ``(B·M·H·s, ...)`` (or ``(B·M·s,)``), of whole blocks where they tile the segments: on the CPU several
    times faster than advanced indexing with one index tensor per dimension, which it equals. A non-contiguous
    tensor (not a state built by ``init_state``) takes the advanced-indexing path.

    Args:
        tensor: (B, M, H, s, ...) per head (the state's keys and values) or (B, M, s) shared by the heads (its
            ``segment_valid``, its positions).
        blocks: (B, H, q, N) long block indices in ``[0, M·n - 1]``.
        blocks_per_segment: ``n = ceil(s / b)``.
        block_size: ``b``, at most ``s``.

    Returns:
        ``(rows, inside)``: (B, H, q, N, b, ...) gathered, ``O(N·b·d)`` per query and head; (B, H, q, N, b) bool,
        False at positions past a segment's end.
    """
    batch, heads = blocks.shape[0], blocks.shape[1]
    shared = tensor.dim() == 3
    segments, s = tensor.shape[1], tensor.shape[2 if shared else 3]
    offset = (blocks % blocks_per_segment) * block_size
    position = offset[..., None] + torch.arange(block_size, device=blocks.device)  # (B, H, q, N, b)
    inside = position < s
    if s % block_size == 0 and tensor.is_contiguous():  # blocks tile the segments: one index per block, not per row
        return _take_whole_blocks(tensor, blocks, blocks_per_segment), inside
    position = position.clamp(max=s - 1)
    batch_index = torch.arange(batch, device=blocks.device)[:, None, None, None, None]
    segment = (blocks // blocks_per_segment)[..., None]
    if shared:
        if not tensor.is_contiguous():
            return tensor[batch_index, segment, position], inside
        rows = (batch_index * segments + segment) * s + position
        return tensor.reshape(-1).index_select(0, rows.reshape(-1)).view(position.shape), inside
    head_index = torch.arange(heads, device=blocks.device)[None, :, None, None, None]
    if not tensor.is_contiguous():
        return tensor[batch_index, segment, head_index, position], inside
    # rows of one dimension: index_select on a 2-D view is an order of magnitude faster than on (rows, b, d)
    flat = tensor.reshape(batch * segments * heads * s, -1)
    rows = ((batch_index * segments + segment) * heads + head_index) * s + position
    return flat.index_select(0, rows.reshape(-1)).view(*position.shape, *tensor.shape[4:]), inside


def _take_whole_blocks(tensor: torch.Tensor, blocks: torch.Tensor, n: int) -> torch.Tensor:
    """:func:`take_blocks` for blocks that tile the segments (``b·n = s``) of a contiguous tensor: one row of the
    tensor viewed as ``(B·M·H·n, b·...)`` (or ``(B·M·n, b)``) per block."""
    batch, heads = blocks.shape[0], blocks.shape[1]
    segments = tensor.shape[1]
    batch_index = torch.arange(batch, device=blocks.device)[:, None, None, None]
    if tensor.dim() == 3:
        flat = tensor.reshape(batch * segments * n, -1)
        return flat.index_select(0, (batch_index * segments * n + blocks).reshape(-1)).view(*blocks.shape, -1)
    head_index = torch.arange(heads, device=blocks.device)[None, :, None, None]
    flat = tensor.reshape(batch * segments * heads * n, -1)  # 2-D: index_select is far faster than on (rows, b, d)
    rows = ((batch_index * segments + blocks // n) * heads + head_index) * n + blocks % n
    return flat.index_select(0, rows.reshape(-1)).view(*blocks.shape, -1, *tensor.shape[4:])


class _StepTables(NamedTuple):
    """The index tensors of :meth:`BlockTopkCrossAttention.accelerator_step`'s indexing, for ``B`` examples, ``H``
    heads, ``M`` segments of ``s`` positions and ``n`` blocks of ``b`` per segment (block ``j`` is positions
    ``(j % n)·b ..`` of segment ``j // n``)."""

    example: torch.Tensor  # (B, 1, 1, 1) long, b
    head: torch.Tensor  # (1, H, 1, 1) long, h
    zero: torch.Tensor  # (1,) long, 0: the mask's singleton axes (a 0-d index would be read on the host)
    block_segment: torch.Tensor  # (M·n,) long, j // n
    segment: torch.Tensor  # (M·n, 1) long, j // n
    position: torch.Tensor  # (M·n, b) long, the block's positions in its segment, at most s - 1
    outside: torch.Tensor | None  # (M·n, b) bool, True past the segment's end; None when b divides s


def _step_tables(
    batch: int, heads: int, segments: int, s: int, n: int, block: int, device: torch.device
) -> _StepTables:
    """The :class:`_StepTables` of these sizes, on ``device``."""
    block_segment = torch.arange(segments * n, device=device) // n
    position = (torch.arange(segments * n, device=device) % n * block)[:, None] + torch.arange(block, device=device)
    return _StepTables(
        example=torch.arange(batch, device=device).view(batch, 1, 1, 1),
        head=torch.arange(heads, device=device).view(1, heads, 1, 1),
        zero=torch.zeros(1, dtype=torch.long, device=device),
        block_segment=block_segment,
        segment=block_segment[:, None],
        position=position.clamp(max=s - 1),
        outside=None if s % block == 0 else position >= s,
    )


class BlockTopkCrossAttention(SegmentedCrossAttention):
    """The ``block-topk`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_top_segments()`` is ``r``)."""

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self._tables: dict[tuple[int | torch.device, ...], _StepTables] = {}  # see _tables_for

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> BlockTopkState:
        """:meth:`SegmentedCrossAttention.init_state` plus each segment's mean key (one sum over the segment-major
        keys, ``O(k·d)`` per head); arguments, errors and empty documents as there (an empty document has one
        segment of zero keys and values: its output is 0)."""
        state = super().init_state(keys, values, key_valid)
        batch, segments, heads, s, d = state.keys.shape
        block = self.settings.resolved_block_size()
        n = -(-s // block)
        spare = n * block - s  # positions past the segment's end in its last block: padded, never real
        wide = accumulation_dtype(state.keys.dtype)
        # the keys are zero at padding, so the sum runs over the real positions only
        real = F.pad(state.segment_valid, (0, spare)).view(batch, segments, n, block)
        real = real & (state.lengths > 0)[:, None, None, None]  # an empty document has no real block
        counts = real.sum(dim=-1).clamp(min=1).to(wide)  # (B, M, n)
        padded = state.keys.detach().to(wide)  # (B, M, H, n·b, d): the keys themselves where no block is short
        if spare:
            padded = F.pad(padded, (0, 0, 0, spare))  # a temporary copy
        sums = padded.view(batch, segments, heads, n, block, d).sum(dim=4)  # (B, M, H, n, d)
        mean_keys = sums / counts[:, :, None, :, None]
        # head-major and stored transposed, (B, H, d, M·n) in memory: a step's gates are one batched product with
        # the blocks as the contiguous dimension, a third faster than with the transposed view
        mean_keys = mean_keys.permute(0, 2, 4, 1, 3).reshape(batch, heads, d, segments * n).transpose(-1, -2)
        block_real = real.any(dim=-1).flatten(1)
        return extend(BlockTopkState, state, mean_keys=mean_keys, block_real=block_real,
                      rank_order=position_order(block_real[:, None, :]))

    def finite_check_fields(self, state: CrossAttentionState) -> tuple[str, ...]:
        """The base's fields less ``rank_order``, built from the mask alone (``-inf`` on purpose)."""
        return tuple(name for name in super().finite_check_fields(state) if name != "rank_order")

    def select_segments(
        self, queries: torch.Tensor, state: BlockTopkState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks each query reads, per head: the ``n`` blocks of segment ``i(t)``, then the ``R = min(r, M·n - n)``
        candidates of largest gate (ties: the lower block), in ascending block order
        (:func:`~srformer.attention.selection.top_positions`: ``O(M·n·log R)``, no full sort).

        Args:
            queries: (B, H, q, d) projected decoder queries.
            state: the layer's state.
            segments: (B, q) long, ``i(t)`` of each query.

        Returns:
            ``(blocks, valid)``: (B, H, q, n + R) long block indices and (B, H, q, n + R) bool, False at slots
            left empty (an example with fewer than ``r`` other blocks; the slot's index is then unused).
        """
        mean_keys, n = state.mean_keys, state.blocks_per_segment
        heads, max_blocks = queries.shape[1], mean_keys.shape[2]
        # the scale on the (q, d) queries rather than on the (q, M·n) gates
        gates = (queries.detach().to(mean_keys.dtype) * self.scale) @ mean_keys.transpose(-1, -2)  # (B, H, q, M·n)
        block = torch.arange(max_blocks, device=segments.device)
        candidate = state.block_real[:, None, :] & (block // n != segments[:, :, None])  # (B, q, M·n)
        candidate = candidate[:, None].expand_as(gates)
        # the R largest gates among the candidates (ties: the lower block), in ascending block order; a slot past
        # an example's candidates holds a non-candidate, marked invalid below
        chosen = top_positions(gates, candidate, min(self.settings.resolved_top_segments(), max_blocks - n))
        scheduled = (segments[:, None, :, None] * n + torch.arange(n, device=segments.device)).expand(
            -1, heads, -1, -1)
        blocks = torch.cat([scheduled, chosen], dim=-1)
        valid = torch.cat([torch.ones_like(scheduled, dtype=torch.bool), candidate.gather(-1, chosen)], dim=-1)
        return blocks, valid

    def probabilities(
        self, queries: torch.Tensor, state: BlockTopkState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The softmax over the real keys of each query's selected blocks (:meth:`select_segments`).

        Args:
            queries: (B, H, q, d) projected decoder queries. state: the layer's state.
            segments: (B, q) long, ``i(t)`` of each query.

        Returns:
            ``(probabilities, blocks)``: (B, H, q, n + R, b) in the queries' dtype, zero at padding and at empty
            slots; and the (B, H, q, n + R) long block of each slot.
        """
        blocks, valid = self.select_segments(queries, state, segments)
        n, b = state.blocks_per_segment, self.settings.resolved_block_size()
        keys = take_blocks(state.keys, blocks, n, b)[0].to(queries.dtype)  # (B, H, q, n + R, b, d)
        real, inside = take_blocks(state.segment_valid, blocks, n, b)
        allowed = real & inside & valid[..., None]  # (B, H, q, n + R, b)
        # per query and head, (n + R)·b keys times one query: an einsum, several times faster than a batch of
        # matrix-vector products on the CPU, and no transposed copy of the keys
        logits = torch.einsum("bhqkd,bhqd->bhqk", keys.flatten(-3, -2), queries) * self.scale
        logits = logits.masked_fill(~allowed.flatten(-2), float("-inf"))
        # every query has an allowed key: its scheduled segment has one (state invariant)
        return torch.softmax(logits, dim=-1).view(allowed.shape), blocks

    def _attend(
        self, queries: torch.Tensor, state: BlockTopkState, segments: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """``A V`` over the selected blocks: (B, H, q, d) in the queries' dtype (both paths)."""
        probabilities, blocks = self.probabilities(queries, state, segments)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        n, b = state.blocks_per_segment, self.settings.resolved_block_size()
        values = take_blocks(state.values, blocks, n, b)[0].to(queries.dtype)  # (B, H, q, n + R, b, d)
        # (B, H, q, 1, (n + R)·b) @ (B, H, q, (n + R)·b, d)
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
        """Cross attention for one decoder position: the gates of the ``M·n`` blocks, their top ``r``, and one
        softmax over the ``s + r·b`` gathered keys; no tensor of encoder length is touched, no host sync. The step of
        the queries' device (:func:`~srformer.attention.step_choice.step_kind`): on an accelerator
        :meth:`accelerator_step`, a fixed sequence of about twenty kernels (a GPU's eager step costs its launches);
        on the CPU the parallel path's selection and gathers (:meth:`select_segments`, :func:`take_blocks`), which
        take less time there. Both read the same blocks and give the same output.

        Args:
            queries: (B, H, 1, d) projected decoder query at ``position`` (several positions take the CPU step).
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
        new_state = replace(state, last_segment=segment)
        if queries.shape[2] == 1 and state.segment_bias is not None and step_kind(queries.device) == "accelerator":
            return self.accelerator_step(queries, state, segment), new_state
        return self._attend(queries, state, segment[:, None], 0.0), new_state

    def accelerator_step(self, queries: torch.Tensor, state: BlockTopkState, segment: torch.Tensor) -> torch.Tensor:
        """One decoder position in 18 operator calls (20 where ``b`` does not divide ``s``; :meth:`step` adds one,
        reading ``i(t)``) whatever the input length, without a host sync: the gates of the ``M·n`` blocks (one product
        and one sum), the ``n`` blocks of segment ``i(t)`` placed first and the ``R`` other real blocks of largest
        gate in one ``topk`` of order keys (:func:`~srformer.attention.selection.ranked_top`: the tie rule without a
        second pass), one indexing each of the chosen blocks' keys, values and masks in the segment-major state (the
        layout the CPU step reads), and one ``scaled_dot_product_attention`` over the ``(n + R)·b`` keys. The same
        blocks and output as the parallel path (:meth:`select_segments`): an empty slot holds a block without
        attendable positions, masked.

        Args:
            queries: (B, H, 1, d) projected decoder query.
            state: the layer's state (with ``segment_bias``).
            segment: (B,) long, ``i(t)``.

        Returns:
            (B, H, 1, d) in the queries' dtype.
        """
        assert state.segment_bias is not None
        batch, heads = queries.shape[:2]
        segments, s = state.segment_valid.shape[1:]
        n, block = state.blocks_per_segment, self.settings.resolved_block_size()
        width = n + min(self.settings.resolved_top_segments(), (segments - 1) * n)
        tables = self._tables_for(batch, heads, segments, s, n, block, queries.device)
        with torch.no_grad(), torch.autocast(device_type=queries.device.type, enabled=False):
            query = cast(queries, state.mean_keys.dtype)
            if self.scale != 1.0:
                query = query * self.scale
            # (B, H, M·n): one product and one sum, two launches where a batched matrix-vector product takes four
            gates = (state.mean_keys * query).sum(dim=-1)
            scheduled = tables.block_segment == segment.view(batch, 1, 1)  # (B, 1, M·n)
            chosen = ranked_top(gates, state.rank_order, width, first=scheduled)  # (B, H, n + R)
        within, position = tables.segment[chosen], tables.position[chosen]  # (B, H, n + R, 1), (B, H, n + R, b)
        keys = state.keys[tables.example, within, tables.head, position]  # (B, H, n + R, b, d)
        values = state.values[tables.example, within, tables.head, position]
        mask = state.segment_bias[tables.example, within, tables.zero, tables.zero, position]  # (B, H, n + R, b)
        if tables.outside is not None:  # a segment's last block reaches past its end: those rows repeat its last
            mask = mask.masked_fill(tables.outside[chosen], torch.finfo(mask.dtype).min)
        dtype, d = queries.dtype, queries.shape[-1]
        return F.scaled_dot_product_attention(
            queries, cast(keys.view(batch, heads, -1, d), dtype), cast(values.view(batch, heads, -1, d), dtype),
            attn_mask=cast(mask.view(batch, heads, 1, -1), dtype), scale=self.scale,
        )

    def _tables_for(
        self, batch: int, heads: int, segments: int, s: int, n: int, block: int, device: torch.device
    ) -> _StepTables:
        """The accelerator step's index tensors: made once per shape and device in eager mode and kept on the module
        (no operator call per step), made in the graph when traced."""
        return kept_per_shape(self._tables, (batch, heads, segments, s, n, block, device),
                              lambda: _step_tables(batch, heads, segments, s, n, block, device))

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
        encoder_positions = take_blocks(state.positions.to(torch.long).view(state.segment_valid.shape), blocks,
                                        state.blocks_per_segment, self.settings.resolved_block_size())[0]
        weights = queries.new_zeros(*queries.shape[:3], keys.shape[2])
        # masked keys have probability exactly 0, so the positions they carry (padding) receive nothing
        weights.scatter_add_(3, encoder_positions.flatten(3), probabilities.flatten(3))
        return weights * (state.lengths > 0).to(weights.dtype)[:, None, None, None]
