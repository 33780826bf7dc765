"""Compressive Transformer memory (Rae, Potapenko, Jayakumar, Hillier & Lillicrap 2020, Compressive Transformers
for Long-Range Sequence Modelling, Sec. 3), as decoder cross attention: the ``compressive`` variant.

The Compressive Transformer keeps Transformer-XL's memory of the previous segment and, instead of
discarding older memories, compresses them with rate ``c`` into a compressed memory that every query
also attends. As cross attention over the segment schedule (:mod:`srformer.attention.schedule`), decoder
position ``t`` attends with one softmax to

* segment ``i(t)``;
* the memory: segment ``i(t) - 1``, a stop-gradient copy in training, exactly as ``xl``
  (:mod:`srformer.attention.xl`);
* the compressed memory: every segment ``j <= i(t) - 2``, each compressed to ``ceil(s / c)`` rows, row ``u``
  of segment ``j`` having as key and value the mean of the real keys and values at compacted positions
  ``j*s + u*c .. min(j*s + (u+1)*c, (j+1)*s) - 1`` (the last window of a segment may be shorter; a row
  without a real position is not attended).

The compression function is the paper's mean pooling (its cheapest, parameter-free function, with
``c = compression_rate``, default 4, our choice); since the memories it compresses are stop-gradient, so are the
compressed rows (built from detached keys and values, in both paths); mean pooling has no parameters, so
the paper's auxiliary reconstruction loss has nothing to train. The paper's fixed compressed-memory size
(oldest compressed rows discarded) bounds the memory of an unbounded stream; a cross-attention input is
finite, so every older segment is kept: ``(i(t) - 1) * ceil(s / c)`` compressed rows at step ``t``.

The schedule, compaction and both paths are those of :class:`~srformer.attention.segmented.SegmentedCrossAttention`:
the memory is a further :meth:`~CompressiveCrossAttention.context_blocks` block, the compressed rows are
:meth:`~CompressiveCrossAttention.global_tokens` built once per sequence (:class:`CompressiveState`), of which a
query reads those before its memory (:meth:`~CompressiveCrossAttention.global_token_allowed`). There is no lean
layout. Cost per head: one step ``O((2s + m*ceil(s/c))·d)``, about ``O((2s + k/c)·d)``; building the
compressed rows ``O(k·d)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class CompressiveSettings(MechanismSettings):
    """The settings of the ``compressive`` variant (``SRformerConfig(variant='compressive', ...)``;
    None: the default named below).

    Attributes:
        compression_rate: ``c``, the compression rate of the ``compressive`` variant (Rae et al. 2020, Sec. 3): each
            segment before ``i(t) - 1`` is kept as ``ceil(s / c)`` compressed rows, the means of ``c`` consecutive
            positions (the last window of a segment may be shorter). At least 1 (1: no compression). None (default): 4
            (our choice: at ``s = 64`` an older segment keeps 16 rows).
    """

    compression_rate: int | None = integer_setting(1, None, "positions per compressed row")

    def resolved_compression_rate(self, config: SRformerConfig) -> int:
        """``c``: ``compression_rate``, or 4 when it is None."""
        return self.compression_rate if self.compression_rate is not None else 4


@dataclass(kw_only=True)
class CompressiveState(SegmentState):
    """The ``compressive`` state: :class:`~srformer.attention.segmented.SegmentState` plus the compressed rows.

    Shapes: R = ``ceil(s / c)`` compressed rows per segment; row ``j*R + u`` is row ``u`` of segment ``j``.

    Attributes:
        compressed_keys: (B, H, M*R, d) mean of each window's real keys (zero for a window without one);
            no gradient.
        compressed_values: (B, H, M*R, d) mean of each window's real values; no gradient.
        compressed_valid: (B, M*R) bool, windows holding a real position.
    """

    compressed_keys: torch.Tensor
    compressed_values: torch.Tensor
    compressed_valid: torch.Tensor


def rows_per_segment(segment_size: int, compression_rate: int) -> int:
    """``R = ceil(s / c)``, the compressed rows of one segment."""
    return -(-segment_size // compression_rate)


class CompressiveCrossAttention(SegmentedCrossAttention):
    """The ``compressive`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_compression_rate()`` is ``c``)."""

    def _real(self, state: SegmentState) -> torch.Tensor:
        """(B, M, s) bool, the real positions (an empty document's zero segment excluded)."""
        return state.segment_valid & (state.lengths > 0)[:, None, None]

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> CompressiveState:
        """:meth:`SegmentedCrossAttention.init_state` plus the compressed rows (window means of the detached
        keys and values, averaged in float32 or wider, ``O(k·d)`` per head); arguments, errors and empty
        documents as there (an empty document has no compressed row)."""
        state = super().init_state(keys, values, key_valid)
        batch, max_segments, heads, s, d = state.keys.shape
        c = self.settings.resolved_compression_rate()
        rows = rows_per_segment(s, c)
        wide = accumulation_dtype(state.keys.dtype)
        real = F.pad(self._real(state), (0, rows * c - s)).view(batch, max_segments, rows, c)
        count = real.sum(dim=-1)  # (B, M, R)
        divisor = count.clamp(min=1).to(wide)[:, :, None, :, None]

        def compress(tensor: torch.Tensor) -> torch.Tensor:  # (B, M, H, s, d) -> (B, H, M*R, d), zero at padding
            padded = F.pad(tensor.detach().to(wide), (0, 0, 0, rows * c - s))
            means = padded.view(batch, max_segments, heads, rows, c, d).sum(dim=4) / divisor
            return means.transpose(1, 2).reshape(batch, heads, max_segments * rows, d).to(tensor.dtype)

        return extend(
            CompressiveState, state, compressed_keys=compress(state.keys), compressed_values=compress(state.values),
            compressed_valid=(count > 0).view(batch, max_segments * rows),
        )

    def context_blocks(
        self, segments: torch.Tensor, index: torch.Tensor, max_segments: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
        """Segment ``i(t)``, then the memory, segment ``i(t) - 1`` (stop-gradient, masked out at ``i(t) = 0``), as
        ``xl``; arguments and result as :meth:`SegmentedCrossAttention.context_blocks`."""
        has_previous = segments > 0
        return [(index, None, False), (index - has_previous.to(index.dtype), has_previous, True)]

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The compressed rows ``(keys, values, valid)``: (B, H, M*R, d) twice and (B, M*R) bool."""
        assert isinstance(state, CompressiveState), type(state)
        return state.compressed_keys, state.compressed_values, state.compressed_valid

    def global_token_allowed(
        self, state: CrossAttentionState, valid: torch.Tensor, segments: torch.Tensor
    ) -> torch.Tensor:
        """(B, n, M*R) bool: a query of segment ``i`` reads the valid compressed rows of segments ``j <= i - 2``
        (:meth:`SegmentedCrossAttention.global_token_allowed`)."""
        rows = rows_per_segment(self.settings.resolved_segment_size(), self.settings.resolved_compression_rate())
        row_segment = torch.arange(valid.shape[1], device=valid.device) // rows  # (M*R,) j of each row
        return valid[:, None, :] & (row_segment[None, None, :] <= segments[:, :, None] - 2)

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """(B, M*R, M*s): compressed row ``j*R + u`` is the mean of its window's real positions, ``1 / count``
        each (:meth:`SegmentedCrossAttention.global_token_spread`)."""
        assert isinstance(state, CompressiveState), type(state)
        batch, max_segments, _, s, _ = state.keys.shape
        c = self.settings.resolved_compression_rate()
        rows = rows_per_segment(s, c)
        device = state.keys.device
        position = torch.arange(max_segments * s, device=device)
        row_of_position = (position // s) * rows + (position % s) // c  # (M*s,)
        member = row_of_position[None, :] == torch.arange(max_segments * rows, device=device)[:, None]  # (M*R, M*s)
        wide = accumulation_dtype(state.keys.dtype)
        real = self._real(state).view(batch, 1, max_segments * s).to(wide)
        share = member[None].to(wide) * real  # (B, M*R, M*s)
        return share / share.sum(dim=-1, keepdim=True).clamp(min=1)
