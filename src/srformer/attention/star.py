"""Star Transformer relay (Guo, Qiu, Liu, Shao, Xue & Zhang 2019, Star-Transformer, Sec. 3), as decoder cross
attention: the ``star`` variant.

Star-Transformer replaces full attention by a star topology: each satellite (token) attends its local
neighbourhood and one shared relay node, and the relay node summarises the whole sequence (it is
initialised as the average of the token embeddings, Sec. 3.2). As cross attention, the local
neighbourhood is the scheduled segment ``i(t)`` (:mod:`srformer.attention.schedule`) and the relay is
one token whose key and value are the mean of the example's real encoder keys and values (the
initial relay of the paper: the encoder is not modified, so the relay is not refined by further
rounds of attention). Decoder position ``t`` attends with one softmax to

    segment(i(t))  ∪  {relay},   relay key = mean_p K_p,  relay value = mean_p V_p   (s + 1 keys)

The schedule, compaction and both paths are those of
:class:`~srformer.attention.segmented.SegmentedCrossAttention`; the relay is its one
:meth:`~StarCrossAttention.global_tokens` entry, built once per sequence (:class:`StarState`). There is no
lean layout. Cost per head: one step ``O((s + 1)·d)``; building the relay ``O(k·d)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend


@dataclass(kw_only=True)
class StarState(SegmentState):
    """The ``star`` state: :class:`~srformer.attention.segmented.SegmentState` plus the relay token.

    Attributes:
        relay_key: (B, H, 1, d) mean of the example's real keys (zero for an empty document).
        relay_value: (B, H, 1, d) mean of its real values.
        relay_valid: (B, 1) bool, False for an empty document (which has no relay).
    """

    relay_key: torch.Tensor
    relay_value: torch.Tensor
    relay_valid: torch.Tensor


class StarCrossAttention(SegmentedCrossAttention):
    """The ``star`` variant for one decoder layer; arguments as :class:`SegmentedCrossAttention`."""

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> StarState:
        """:meth:`SegmentedCrossAttention.init_state` plus the relay (the mean of the real keys and values,
        averaged in float32 or wider, O(k·d) per head); arguments, errors and empty documents as there (an
        empty document has no relay: it attends its zero segment only)."""
        state = super().init_state(keys, values, key_valid)
        wide = accumulation_dtype(state.keys.dtype)
        count = state.lengths.clamp(min=1).to(wide)[:, None, None]  # padding is zero in the state

        def mean(tensor: torch.Tensor) -> torch.Tensor:  # (B, M, H, s, d) -> (B, H, 1, d)
            return (tensor.to(wide).sum(dim=(1, 3)) / count).unsqueeze(2).to(tensor.dtype)

        return extend(
            StarState, state, relay_key=mean(state.keys), relay_value=mean(state.values),
            relay_valid=(state.lengths > 0)[:, None],
        )

    def global_tokens(self, state: CrossAttentionState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The relay ``(key, value, valid)``: (B, H, 1, d) twice and (B, 1) bool."""
        assert isinstance(state, StarState), type(state)
        return state.relay_key, state.relay_value, state.relay_valid

    def global_token_spread(self, state: CrossAttentionState) -> torch.Tensor:
        """(B, 1, M*s): the relay is the mean of the real positions, ``1 / n`` each."""
        assert isinstance(state, StarState), type(state)
        batch, max_segments, _, s, _ = state.keys.shape
        wide = accumulation_dtype(state.keys.dtype)
        real = state.segment_valid.view(batch, 1, max_segments * s) & state.relay_valid[:, :, None]
        return real.to(wide) / state.lengths.clamp(min=1).to(wide)[:, None, None]
