"""Binary-partition context (Ye, Guo, Gan, Qiu & Zhang 2019, BP-Transformer: Modelling Long-Range Context via Binary
Partitioning, Sec. 3), as decoder cross attention: the ``bp`` variant.

BP-Transformer builds a binary partition tree over the sequence (a node at level ``l`` spans ``2**l``
consecutive leaves, aligned at multiples of ``2**l``) and lets a token attend, on each side, ``k`` nodes per
level: the nearest ones at the finest level, then coarser and coarser spans further away, so that the
contexts cover the sequence once with ``O(k log n)`` nodes. As cross attention over the segment schedule
(:mod:`srformer.attention.schedule`), the tree's leaves are the segments (a node's key and value are the
mean of the real keys and values it spans) and decoder position ``t`` attends with one softmax to

* the fine-grained keys: the ``s`` positions of its scheduled segment ``i = i(t)``, token by token;
* the span nodes of its partition: starting from ``b_0 = i`` (left) and ``e_0 = i + 1`` (right), at each level
  ``l = 0, 1, ...``

      left:  lo = b_l - k, lowered by one when odd and positive, clipped at 0; nodes lo .. b_l - 1;  b_{l+1} = lo / 2
      right: hi = e_l + k, raised by one when odd;                             nodes e_l .. hi - 1;  e_{l+1} = hi / 2

  (``k = span_nodes``, default 2: ``k`` or ``k + 1`` nodes per level and side, the extra one aligning the
  boundary to the next level). The spans are contiguous and disjoint and, with the scheduled segment, cover
  every segment exactly once; a node without a real position is not attended.

The nodes of every level are built once per sequence (:class:`BPState`, ``2m - 1`` nodes at most: ``m`` leaves,
then halving) and enter the softmax as :meth:`~BPCrossAttention.global_tokens`; which of them a query reads is
computed on the device from ``i(t)`` with one pass per level (:meth:`~BPCrossAttention.global_token_allowed`),
no table and no host sync. The softmax is taken over all nodes with a mask, so a step costs ``O((s + 2m)·d)``
per head (the attended set has ``s + O(k log m)`` keys). There is no lean layout.
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
class BPSettings(MechanismSettings):
    """The settings of the ``bp`` variant (``SRformerConfig(variant='bp', ...)``;
    None: the default named below).

    Attributes:
        span_nodes: ``k``, the span nodes per level and side of the ``bp`` variant (Ye et al. 2019, Sec. 3): a query
            attends its segment token by token and ``k`` (or ``k + 1``, to align) nodes of each level of a binary
            partition tree over the segments on each side. At least 1. None (default): 2.
    """

    span_nodes: int | None = integer_setting(1, None, "span nodes per tree level and side")

    def resolved_span_nodes(self, config: SRformerConfig) -> int:
        """``k``: ``span_nodes``, or 2 when it is None."""
        return self.span_nodes if self.span_nodes is not None else 2


@dataclass(kw_only=True)
class BPState(SegmentState):
    """The ``bp`` state: :class:`~srformer.attention.segmented.SegmentState` plus the partition's span nodes.

    Shapes: G = ``sum_l ceil(M / 2**l)`` over the levels ``l = 0 .. ceil(log2 M)`` (the nodes of level ``l`` after
    those of the levels below it, in order).

    Attributes:
        node_keys: (B, H, G, d) mean of each node's real keys (zero for a node without one).
        node_values: (B, H, G, d) mean of each node's real values.
        node_valid: (B, G) bool, nodes spanning a real position.
    """

    node_keys: torch.Tensor
    node_values: torch.Tensor
    node_valid: torch.Tensor


def tree_levels(max_segments: int) -> list[int]:
    """The number of nodes of each level ``l = 0 .. ceil(log2 M)`` over ``M`` leaves: ``ceil(M / 2**l)``."""
    counts = [max_segments]
    while counts[-1] > 1:
        counts.append(-(-counts[-1] // 2))
    return counts


class BPCrossAttention(SegmentedCrossAttention):
    """The ``bp`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`
    (``config.resolved_span_nodes()`` is ``k``)."""

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> BPState:
        """:meth:`SegmentedCrossAttention.init_state` plus the span nodes of every level (sums of sums, averaged in
        float32 or wider, ``O(m·d)`` per head more); arguments, errors and empty documents as there (an empty
        document has no valid node: it attends its zero segment only)."""
        state = super().init_state(keys, values, key_valid)
        batch, max_segments, heads, _, d = state.keys.shape
        wide = accumulation_dtype(state.keys.dtype)
        real = state.segment_valid & (state.lengths > 0)[:, None, None]
        level_keys = [state.keys.to(wide).sum(dim=3).transpose(1, 2)]  # (B, H, M, d) segment sums
        level_values = [state.values.to(wide).sum(dim=3).transpose(1, 2)]
        level_counts = [real.sum(dim=2).to(wide)]  # (B, M)
        for count in tree_levels(max_segments)[1:]:  # each node of level l + 1 sums two nodes of level l
            extra = 2 * count - level_counts[-1].shape[1]  # one zero node when level l has an odd count
            level_keys.append(F.pad(level_keys[-1], (0, 0, 0, extra)).view(batch, heads, count, 2, d).sum(dim=3))
            level_values.append(F.pad(level_values[-1], (0, 0, 0, extra)).view(batch, heads, count, 2, d).sum(dim=3))
            level_counts.append(F.pad(level_counts[-1], (0, extra)).view(batch, count, 2).sum(dim=2))
        counts = torch.cat(level_counts, dim=1)  # (B, G)
        divisor = counts.clamp(min=1)[:, None, :, None]
        return extend(
            BPState, state,
            node_keys=(torch.cat(level_keys, dim=2) / divisor).to(state.keys.dtype),
            node_values=(torch.cat(level_values, dim=2) / divisor).to(state.values.dtype),
            node_valid=counts > 0,
        )

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The span nodes ``(keys, values, valid)``: (B, H, G, d) twice and (B, G) bool."""
        assert isinstance(state, BPState), type(state)
        return state.node_keys, state.node_values, state.node_valid

    def global_token_allowed(
        self, state: CrossAttentionState, valid: torch.Tensor, segments: torch.Tensor
    ) -> torch.Tensor:
        """(B, n, G) bool: the valid nodes of the partition of each query's segment (module docstring), one pass
        per level (:meth:`SegmentedCrossAttention.global_token_allowed`)."""
        assert isinstance(state, BPState), type(state)
        k = self.settings.resolved_span_nodes()
        device = segments.device
        left, right = segments, segments + 1  # b_l and e_l, (B, n)
        parts = []
        for count in tree_levels(state.segment_valid.shape[1]):
            node = torch.arange(count, device=device)[None, None, :]
            low = left - k
            low = torch.where((low > 0) & (low % 2 == 1), low - 1, low).clamp(min=0)
            high = right + k
            high = high + high % 2
            parts.append(
                ((node >= low[..., None]) & (node < left[..., None]))
                | ((node >= right[..., None]) & (node < high[..., None]))
            )
            left, right = low // 2, high // 2
        return torch.cat(parts, dim=-1) & valid[:, None, :]

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """(B, G, M*s): node ``(l, j)`` is the mean of the real positions of segments ``j*2**l .. (j+1)*2**l - 1``,
        ``1 / count`` each (:meth:`SegmentedCrossAttention.global_token_spread`)."""
        assert isinstance(state, BPState), type(state)
        batch, max_segments, _, s, _ = state.keys.shape
        device = state.keys.device
        segment_of_position = torch.arange(max_segments * s, device=device) // s  # (M*s,)
        members = []
        for level, count in enumerate(tree_levels(max_segments)):
            node = torch.arange(count, device=device)[:, None]
            members.append((segment_of_position[None, :] >> level) == node)  # (count, M*s)
        wide = accumulation_dtype(state.keys.dtype)
        real = (state.segment_valid & (state.lengths > 0)[:, None, None]).view(batch, 1, max_segments * s).to(wide)
        share = torch.cat(members, dim=0)[None].to(wide) * real  # (B, G, M*s)
        return share / share.sum(dim=-1, keepdim=True).clamp(min=1)
