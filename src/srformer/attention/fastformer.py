"""Fastformer additive attention (Wu, Wu, Qi, Huang & Xie 2021, Fastformer: Additive Attention Can Be All You
Need, Sec. 3, Eq. 3-6), adapted to decoder cross attention: the ``fastformer`` variant.

Fastformer (self attention over ``N`` tokens) summarises the queries into a global query ``q`` by additive
attention (Eq. 3-4), multiplies it element-wise into every key (``p_i = q * k_i``), summarises those into a
global key ``k`` by additive attention (Eq. 5-6: ``beta_i = softmax_i(w_k^T p_i / sqrt(d))``,
``k = sum_i beta_i p_i``), multiplies the global key element-wise into every value (``u_i = k * v_i``) and
applies a linear map to each (``r_i = W u_i``, added to the query ``q_i``).

Cross attention has one decoder query per step and no encoder-side query, so the adaptation is:

* the global query is the decoder query ``Q_t`` itself (Eq. 4 over one query: ``alpha = 1``);
* the keys are summarised before they meet the query: ``beta_i = softmax_i(w_k^T K_i / sqrt(d))`` over the
  real encoder positions (Eq. 5 with ``p_i = K_i``), ``K_g = sum_i beta_i K_i`` and, with the same weights,
  ``V_g = sum_i beta_i V_i``. With the query inside ``beta`` (``p_i = Q_t * K_i``) every step would read all
  ``k`` keys again (``O(k·d)``); summarising first makes the state two d-vectors built once (``O(k·d)``)
  and a step ``O(d)``;
* the query then interacts with the global key by element-wise product (``Q_t * K_g``, the paper's
  ``p = q * k``), and the result with the values (``u = k * v``) pooled by the same ``beta``::

      O[t] = Q_t * K_g * V_g        (element-wise; = sum_i beta_i (Q_t * K_g) * V_i)

* the per-position linear map ``W`` of the paper is left out: the wrapped model's output projection
  already applies a learned linear map to every head's output, and ``W`` would compose with it into one
  linear map; the query residual (``+ q_i``) is left to the decoder layer's own residual connection.

The learned ``w_k`` (``key_weight``, ``d`` numbers, shared by the heads like SRformer's RAF weights)
starts at zero, so ``beta`` starts uniform (``K_g``, ``V_g`` the means of the real keys and values). No
segments (``segment_size`` is unused), no attention scale (``scale`` is unused: ``beta`` has the paper's
``1 / sqrt(d)``), no dropout. The state holds no encoder-length tensor, so it is its own lean layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from srformer.attention.initialization import InitFunctions
from srformer.attention.schedule import real_lengths
from srformer.attention.segment_free import SegmentFreeCrossAttention
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(kw_only=True)
class FastformerState(CrossAttentionState):
    """The ``fastformer`` state: the global key and value of one sequence, in float32 or wider.

    Attributes:
        global_key: (B, H, d) ``K_g = sum_i beta_i K_i`` over the real positions (0 for an empty document).
        global_value: (B, H, d) ``V_g = sum_i beta_i V_i`` (0 for an empty document, whose output is 0).
    """

    global_key: torch.Tensor
    global_value: torch.Tensor

    is_lean = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.global_key, self.global_value


def additive_weights(keys: torch.Tensor, key_weight: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    """Fastformer's additive attention weights over the keys, ``beta_i = softmax_i(w_k^T K_i / sqrt(d))``
    (Eq. 5 with ``p_i = K_i``), over the real positions.

    Args:
        keys: (B, H, k, d) projected encoder keys.
        key_weight: (d,) ``w_k``.
        key_valid: (B, k) bool, True at real positions, or None (nothing padded).

    Returns:
        (B, H, k) in the keys' dtype: zero at padding, summing to 1 over the real positions; all zero for an
        example without real positions.
    """
    logits = torch.matmul(keys, key_weight.to(keys.dtype)) / math.sqrt(keys.shape[-1])  # (B, H, k)
    if key_valid is None:
        return torch.softmax(logits, dim=-1)
    valid = key_valid.to(device=keys.device, dtype=torch.bool)[:, None, :]
    # an example without real positions takes a finite softmax (no NaN, in values or gradients), then zeros
    logits = logits.masked_fill(~valid, float("-inf")).masked_fill(~valid.any(dim=-1, keepdim=True), 0.0)
    return torch.softmax(logits, dim=-1) * valid.to(logits.dtype)


class FastformerCrossAttention(SegmentFreeCrossAttention):
    """The ``fastformer`` variant for one decoder layer; same interface as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention`.

    Args:
        config: SRformer settings with ``variant='fastformer'`` (no setting of its own is read).
        head_dim: ``d``, size of one attention head.
        scale: the wrapped model's attention scale; accepted for interface compatibility, unused.

    Attributes:
        key_weight: (d,) learned ``w_k`` of Eq. 5, initialised to zero (uniform ``beta``).
        has_softmax, has_recurrence: False (no softmax attention term, no recurrence).

    Raises:
        ValueError: if ``config.variant`` is not a variant whose registry entry names this class.
    """

    has_softmax = False

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.key_weight = nn.Parameter(torch.zeros(head_dim))

    def initialize_parameters(self, init: InitFunctions) -> None:
        """``w_k = 0`` (uniform additive weights: the global key and value start as the means)."""
        init.zeros_(self.key_weight)

    @autocast_off
    def init_state(
        self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None
    ) -> FastformerState:
        """The global key and value, ``O(k·d)`` per head, in float32 or the keys' dtype when wider.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`FastformerState` (no encoder-length tensor). An empty document has zero global key and
            value, so its output is that of an empty memory, 0.
        """
        batch, _, k, _ = keys.shape
        lengths, _ = real_lengths(key_valid, batch, k, keys.device)
        wide = accumulation_dtype(keys.dtype)
        keys, values = keys.to(wide), values.to(wide)
        weights = additive_weights(keys, self.key_weight.to(wide), key_valid)[..., None]  # (B, H, k, 1)
        return FastformerState(
            lengths=lengths,
            num_segments=torch.ones_like(lengths),
            last_segment=torch.full_like(lengths, -1),
            global_key=(weights * keys).sum(dim=2),
            global_value=(weights * values).sum(dim=2),
        )

    def output_from_weights(
        self, weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        state: CrossAttentionState, *, start_position: int | torch.Tensor, key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """``Q_t * (A K)_t * (A V)_t`` (element-wise): the global key and value pooled with the returned weights
        ``beta``, as :meth:`forward` computes them. Arguments as in the base class."""
        pooled_keys = torch.matmul(weights, keys.to(weights.dtype))
        pooled_values = torch.matmul(weights, values.to(weights.dtype))
        return (queries.to(weights.dtype) * pooled_keys * pooled_values).to(queries.dtype)

    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        if not isinstance(state, FastformerState):
            raise ValueError(f"FastformerCrossAttention needs a FastformerState, got a {type(state).__name__}.")
        summary = (state.global_key * state.global_value)[:, :, None, :]  # (B, H, 1, d)
        return (queries.to(summary.dtype) * summary).to(queries.dtype)
