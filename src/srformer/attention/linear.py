"""Linear cross attention (Katharopoulos et al. 2020), the ``linear`` baseline.

``O[t] = phi(Q_t) (phi(K)^T V) / (phi(Q_t) . sum_j phi(K_j) + eps)`` with ``phi(x) = elu(x) + 1``,
over every real encoder position (``docs/design.md``, "Baselines and ablations": the special case of
recurrent attention with s = 1 and no RAF, with its own normaliser). Cross attention has no causal mask, so
``phi(K)^T V`` (d x d per head) and ``sum_j phi(K_j)`` (d per head) are computed once per sequence
and every decoder step costs O(d^2) per head, whatever the encoder length.

Choices where the paper is silent: the wrapped model's attention scale is not applied (the
elu+1 kernel is not a softmax, and Katharopoulos et al. use none), attention dropout is not
applied (there are no attention probabilities), and ``eps`` is ``config.norm_eps``. Products and
sums accumulate in float32 (in float64 for a float64 model; see ``accumulation_dtype``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from srformer.attention.base import ProjectBlock, sum_over_blocks
from srformer.attention.schedule import real_lengths
from srformer.attention.segment_free import SegmentFreeCrossAttention
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off


@dataclass(kw_only=True)
class LinearState(CrossAttentionState):
    """The ``linear`` state: two sums over the real encoder positions, ``O(heads * d^2)`` numbers whatever the
    encoder length (so it counts as lean). ``num_segments`` is 1 (no segments). Accumulation dtype
    (:func:`~srformer.attention.state.accumulation_dtype`).

    Attributes:
        linear_kv: (B, H, d, d) ``phi(K)^T V`` over real positions.
        linear_key_sum: (B, H, d) ``sum_j phi(K_j)`` over real positions.
    """

    linear_kv: torch.Tensor
    linear_key_sum: torch.Tensor

    is_lean = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.linear_kv, self.linear_kv


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """``phi(x) = elu(x) + 1`` (Katharopoulos et al. 2020, Sec. 3.2), element-wise, always > 0.

    ``x`` is made contiguous first: for a transposed input (transformers' projections are (B, n, H, d)
    memory seen as (B, H, n, d)) AOT autograd (torch.compile, torch 2.13) mispredicts the strides of
    elu's gradient and the compiled backward fails.
    """
    return F.elu(x.contiguous()) + 1.0


class LinearCrossAttention(SegmentFreeCrossAttention):
    """The ``linear`` variant for one decoder layer; same interface as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention`.

    Args:
        config: SRformer settings with ``variant='linear'`` (only ``norm_eps`` is used).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale; accepted for interface compatibility, unused.

    Attributes:
        has_softmax, has_recurrence: False (no softmax term, no recurrence).

    Raises:
        ValueError: if ``config.variant`` is not a variant whose registry entry names this class.
    """

    has_softmax = False

    @autocast_off
    def init_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> LinearState:
        """``phi(K)^T V`` and ``sum_j phi(K_j)`` over real positions.

        An example whose mask is all zero (an empty document) has ``phi(K)^T V = 0`` and
        ``sum_j phi(K_j) = 0``, so its output is that of an empty memory, 0.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A state with ``linear_kv`` (B, H, d, d) and ``linear_key_sum`` (B, H, d), in float32 or the keys' dtype
            when wider; it holds no encoder-length tensor.
        """
        batch, _, k, _ = keys.shape
        lengths, padded = real_lengths(key_valid, batch, k, keys.device)
        wide = accumulation_dtype(keys.dtype)
        features = feature_map(keys.to(wide))
        if padded and key_valid is not None:  # real_lengths reports padding only for a given mask
            features = features * key_valid.to(device=keys.device, dtype=features.dtype)[:, None, :, None]
        return self._state(lengths, torch.matmul(features.transpose(-1, -2), values.to(wide)), features.sum(dim=2))

    @staticmethod
    def _state(lengths: torch.Tensor, linear_kv: torch.Tensor, linear_key_sum: torch.Tensor) -> LinearState:
        return LinearState(
            lengths=lengths,
            num_segments=torch.ones_like(lengths),
            last_segment=torch.full_like(lengths, -1),
            linear_kv=linear_kv,
            linear_key_sum=linear_key_sum,
        )

    def streamed_state(
        self, project_block: ProjectBlock, key_length: int, key_valid: torch.Tensor | None, block: int
    ) -> CrossAttentionState | None:
        """The state from ``block`` positions at a time: ``phi(K)^T V`` and ``sum_j phi(K_j)`` are sums over
        positions, accumulated per block (padding zeroed). See
        :meth:`~srformer.attention.base.CrossAttentionMechanism.streamed_state`."""
        def parts(keys: torch.Tensor, values: torch.Tensor, real: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
            features = feature_map(keys)
            if real is not None:
                features = features * real.to(features.dtype)[:, None, :, None]
            return torch.matmul(features.transpose(-1, -2), values), features.sum(dim=2)

        kv, key_sum = sum_over_blocks(project_block, key_length, key_valid, block, parts)
        lengths, _ = real_lengths(key_valid, kv.shape[0], key_length, kv.device)
        return self._state(lengths, kv, key_sum)

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        if not isinstance(state, LinearState):
            raise ValueError(f"LinearCrossAttention needs a LinearState, got a {type(state).__name__}.")
        linear_kv, key_sum = state.linear_kv, state.linear_key_sum
        features = feature_map(queries.to(linear_kv.dtype))  # (B, H, q, d)
        numerator = torch.matmul(features, linear_kv)
        denominator = (features * key_sum[:, :, None, :]).sum(dim=-1, keepdim=True) + self.settings.norm_eps
        return (numerator / denominator).to(queries.dtype)
