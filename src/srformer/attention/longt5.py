"""LongT5-style transient global tokens (Guo et al. 2022), the ``longt5`` baseline of the paper (Sec. 4.2, Figure 4).

Decoder position ``t`` attends with one softmax to the keys of segment ``i(t)`` plus one global token per
segment of the example, the mean of that segment's real keys/values (s + m keys; the current segment's own
global token included, as in LongT5's TGlobal attention). The schedule and both paths are those of
:class:`~srformer.attention.segmented.SegmentedCrossAttention`; this module adds the global tokens to its
state and to what the softmax reads (``docs/design.md``, "Baselines and ablations"). There is no lean layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend


@dataclass(kw_only=True)
class LongT5State(SegmentState):
    """The ``longt5`` state: :class:`~srformer.attention.segmented.SegmentState` plus the global tokens.

    Attributes:
        global_keys: (B, H, M, d) mean of each segment's real keys (zero for a segment without one).
        global_values: (B, H, M, d) mean of each segment's real values.
        global_valid: (B, M) bool, segments holding a real token.
    """

    global_keys: torch.Tensor
    global_values: torch.Tensor
    global_valid: torch.Tensor


def global_tokens(
    keys: torch.Tensor, values: torch.Tensor, segment_valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LongT5-style global tokens: the mean of each segment's real keys and values.

    Args:
        keys: (B, M, H, s, d) segment-major keys, zero at padded positions.
        values: (B, M, H, s, d) values, same layout.
        segment_valid: (B, M, s) bool, real positions of each segment.

    Returns:
        ``(global_keys, global_values, global_valid)``: (B, H, M, d) each in the keys' dtype
        (averaged in float32 or wider), and (B, M) bool, True for segments that hold a real token.
    """
    count = segment_valid.sum(dim=2)  # (B, M)
    wide = accumulation_dtype(keys.dtype)
    divisor = count.clamp(min=1).to(wide)[:, :, None, None]
    global_keys = (keys.to(wide).sum(dim=3) / divisor).transpose(1, 2).contiguous()
    global_values = (values.to(wide).sum(dim=3) / divisor).transpose(1, 2).contiguous()
    return global_keys.to(keys.dtype), global_values.to(values.dtype), count > 0


class LongT5CrossAttention(SegmentedCrossAttention):
    """The ``longt5`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`."""

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> LongT5State:
        """:meth:`SegmentedCrossAttention.init_state` plus the global tokens (:func:`global_tokens`), O(k*d)
        per head more; arguments, errors and empty documents as there (an empty document has no valid
        global token: it attends its zero segment only)."""
        state = super().init_state(keys, values, key_valid)
        real_valid = state.segment_valid & (state.lengths > 0)[:, None, None]  # an empty example has none
        global_keys, global_values, global_valid = global_tokens(state.keys, state.values, real_valid)
        return extend(
            LongT5State, state, global_keys=global_keys, global_values=global_values, global_valid=global_valid
        )

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The state's global tokens ``(keys, values, valid)``: (B, H, M, d) twice and (B, M) bool."""
        assert isinstance(state, LongT5State), type(state)
        return state.global_keys, state.global_values, state.global_valid

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """(B, M, M*s): global token ``j`` is the mean of segment ``j``'s real positions, ``1 / count_j`` each
        (:meth:`SegmentedCrossAttention.global_token_spread`)."""
        assert isinstance(state, LongT5State), type(state)
        real = state.segment_valid & (state.lengths > 0)[:, None, None]  # (B, M, s)
        batch, max_segments, s = real.shape
        wide = accumulation_dtype(state.keys.dtype)
        share = real.to(wide) / real.sum(dim=2, keepdim=True).clamp(min=1).to(wide)  # (B, M, s)
        own_block = torch.eye(max_segments, dtype=share.dtype, device=share.device)[None, :, :, None]
        return (own_block * share[:, None]).view(batch, max_segments, max_segments * s)
