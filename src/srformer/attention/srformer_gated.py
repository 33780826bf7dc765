"""Gated SRformer cross attention, the ``srformer-gated`` variant (beyond the paper).

The SRformer structure (Long, Chowdhury & Roy): decoder position ``t`` attends exactly, with a softmax, to the
scheduled segment ``S_i``, ``i = i(t)`` (:mod:`srformer.attention.schedule`), and reads a fixed-size memory of the
other segments. Here the memory is read as linear attention (Katharopoulos et al. 2020) under one normaliser
shared with the softmax, as the hybrid normalisers of Infini-attention (Munkhdalai et al. 2024) and Based
(Arora et al. 2024) do::

    O_t = (sum_{p in S_i} e^{c q.k_p} v_p + phi(q)^T (S - S_i)) / (sum_{p in S_i} e^{c q.k_p} + phi(q)^T (z - z_i))

with ``c`` the model's attention scale, ``S = sum_p phi(k_p) v_p^T`` and ``z = sum_p phi(k_p)`` over the example's
real positions, ``S_i`` and ``z_i`` the same sums over segment ``i``, and ``phi`` a positive feature map
(``feature_map``): ``"elu"``, ``elu(x) + 1`` (Katharopoulos et al. 2020, the default; no parameters), or
``"taylor"``, the second-order Taylor features of ``exp`` of Based,
``[1, y / D'^(1/4), vec(y y^T) / (sqrt(2) sqrt(D'))]`` with ``y = W x`` a learned projection from ``d`` to ``D'``
(``feature_dim``), so that ``phi(q) . phi(k) = 1 + a + a^2 / 2`` with ``a = (W q) . (W k) / sqrt(D')``.

Every weight is positive, so the output is a convex mix of the values: unlike the paper's ``O_S + O_R`` it stays on
the scale of the softmax output, and a memory that matches the query takes weight from the segment.

Stabiliser: with ``Z = sum_{p in S_i} e^{c q.k_p}`` and ``D = phi(q)^T (z - z_i)``, the output is computed as
``g O_S + (1 - g) N / D`` with ``O_S`` the softmax over ``S_i``, ``N = phi(q)^T (S - S_i)`` and the gate
``g = sigmoid(log Z - log D)``: ``log Z`` is a log-sum-exp, so no exponent overflows, and the memory keeps its weight
whatever the scores' size (dividing both sums by ``e^max(log Z, log D)``, in log space). ``D = 0`` (no other
segment, e.g. one segment when ``s >= k``) gives ``g = 1`` exactly: the output is then ``segmented``'s.

``S - S_i`` is held for every segment, as the sum of an exclusive prefix sum and an exclusive suffix sum over the
segments (no subtraction, so it is exactly 0 with one segment and never negative); a step reads one block,
``O(s*d + D*d)`` per head, ``D = d`` (elu) or ``1 + D' + D'^2`` (taylor).

Initialisation of the Taylor projection: ``W = sqrt(sqrt(D') * c) [I | 0]``, the identity on the first
``min(D', d)`` coordinates, so that at conversion ``a = c (q . k)`` over those coordinates: the memory's kernel is
the second-order Taylor expansion of the softmax's own ``e^{c q.k}`` there (exact in the limit ``D' >= d``,
up to the expansion's order).

Choices: attention dropout applies to the softmax probabilities over ``S_i`` (the memory has none); the memory
terms accumulate in float32 (float64 for a float64 model; ``accumulation_dtype``); there is no lean layout.
For ``output_attentions`` the returned weights are the softmax over ``S_i`` (as for ``srformer``); the output is
computed from them as ``g A V + (1 - g) N / D``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from srformer.attention.base import ProjectRows
from srformer.attention.initialization import InitFunctions
from srformer.attention.layout import block_index, take_blocks
from srformer.attention.schedule import segment_index
from srformer.attention.segmented import SegmentedCrossAttention, SegmentState
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off, extend
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig

#: The feature maps ``phi`` of the memory (setting ``feature_map``).
FEATURE_MAPS: tuple[str, ...] = ("elu", "taylor")


@dataclass(frozen=True)
class GatedSettings(MechanismSettings):
    """The settings of the ``srformer-gated`` variant.

    Attributes:
        feature_map: ``phi``, ``"elu"`` (``elu(x) + 1``) or ``"taylor"`` (Based's second-order Taylor features of
            ``exp`` over a learned projection). None (default): ``"elu"``.
        feature_dim: ``D'``, the size the Taylor feature map projects ``q`` and ``k`` to before the expansion (its
            memory holds ``(1 + D' + D'^2) x d`` numbers per segment and head, so it grows with ``D'^2``; no upper
            bound). At least 1; only with ``feature_map="taylor"``. None (default): 16.
    """

    feature_map: str | None = None
    feature_dim: int | None = integer_setting(1, None, "the Taylor feature map's projected size D'")

    def resolved_feature_map(self, config: SRformerConfig) -> str:
        """``phi``: ``feature_map``, or ``"elu"`` when it is None."""
        return self.feature_map if self.feature_map is not None else "elu"

    def resolved_feature_dim(self, config: SRformerConfig) -> int:
        """``D'``: ``feature_dim``, or 16 when it is None."""
        return self.feature_dim if self.feature_dim is not None else 16

    def validate(self, config: SRformerConfig) -> None:
        """The base checks, and: ``feature_map`` is one of :data:`FEATURE_MAPS`; ``feature_dim`` is given only with
        ``feature_map="taylor"``.

        Raises:
            ValueError: naming the setting and the fix.
        """
        super().validate(config)
        if self.feature_map is not None and self.feature_map not in FEATURE_MAPS:
            raise ValueError(f"`feature_map` must be one of {', '.join(FEATURE_MAPS)}, got {self.feature_map!r}.")
        if self.feature_dim is not None and self.resolved_feature_map(config) != "taylor":
            raise ValueError("`feature_dim` sizes the Taylor feature map; set feature_map='taylor' or leave it None.")


@dataclass(kw_only=True)
class GatedState(SegmentState):
    """Standard-layout ``srformer-gated`` state: :class:`~srformer.attention.segmented.SegmentState` plus the memory
    of the other segments for every segment (``2*k*d + m*D*(d + 1)`` numbers per head). Memory tensors in the
    accumulation dtype (:func:`~srformer.attention.state.accumulation_dtype`).

    Attributes:
        memory_kv: (B, M, H, D, d) ``S - S_j``, the sum of ``phi(k_p) v_p^T`` over the real positions outside
            segment ``j``.
        memory_key_sum: (B, M, H, D) ``z - z_j``, the sum of ``phi(k_p)`` over the same positions.
    """

    memory_kv: torch.Tensor
    memory_key_sum: torch.Tensor


def other_segments(blocks: torch.Tensor) -> torch.Tensor:
    """For each segment ``j``, the sum of the other segments' blocks: (B, M, ...) -> (B, M, ...), computed as an
    exclusive prefix sum plus an exclusive suffix sum over axis 1 (sums of the blocks themselves, never a
    difference: exactly 0 for one segment, non-negative for non-negative blocks)."""
    zeros = torch.zeros_like(blocks[:, :1])
    before = torch.cat([zeros, blocks[:, :-1].cumsum(1)], dim=1)
    after = torch.cat([blocks[:, 1:].flip(1).cumsum(1).flip(1), zeros], dim=1)
    return before + after


def elu_features(x: torch.Tensor) -> torch.Tensor:
    """``elu(x) + 1`` (Katharopoulos et al. 2020), element-wise, written as ``x + 1`` for ``x > 0`` and ``e^x``
    otherwise: the same function as ``F.elu(x) + 1``, without its cancellation for very negative ``x`` (``expm1(x)
    + 1`` keeps few correct digits below ``x = -20`` and is 0 in float32 there, which would empty the memory)."""
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))


def taylor_features(projected: torch.Tensor) -> torch.Tensor:
    """Based's second-order Taylor features of ``exp`` (Arora et al. 2024): (..., D') -> (..., 1 + D' + D'^2),
    ``[1, y / D'^(1/4), vec(y y^T) / (sqrt(2) sqrt(D'))]``, so ``phi(x) . phi(y) = 1 + a + a^2 / 2``,
    ``a = x . y / sqrt(D')``."""
    size = projected.shape[-1]
    outer = (projected[..., :, None] * projected[..., None, :]).flatten(-2) / math.sqrt(2.0 * size)
    return torch.cat([torch.ones_like(projected[..., :1]), projected / size**0.25, outer], dim=-1)


def taylor_projection_init(feature_dim: int, head_dim: int, scale: float) -> torch.Tensor:
    """The Taylor projection's initial value, (D', d): ``sqrt(sqrt(D') * scale)`` times the identity on the first
    ``min(D', d)`` coordinates, zero elsewhere (so that ``a = scale * q . k`` over those coordinates)."""
    eye = torch.eye(feature_dim, head_dim)
    return eye * math.sqrt(math.sqrt(feature_dim) * scale)


class GatedCrossAttention(SegmentedCrossAttention):
    """The ``srformer-gated`` variant for one decoder layer; arguments as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention`.

    Attributes:
        feature_map_name: ``"elu"`` or ``"taylor"`` (``phi``).
        projection: (D', d) the Taylor feature map's learned projection ``W``; None for ``elu`` (no parameters).
    """

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.feature_map_name = config.resolved_feature_map()
        self.projection: nn.Parameter | None = None
        if self.feature_map_name == "taylor":
            self.projection = nn.Parameter(torch.empty(config.resolved_feature_dim(), head_dim))
            self.reset_parameters()

    def initialize_parameters(self, init: InitFunctions) -> None:
        """The Taylor projection ``W`` (:func:`taylor_projection_init`); nothing for ``elu``."""
        if self.projection is not None:
            feature_dim, head_dim = self.projection.shape
            init.copy_(self.projection, taylor_projection_init(feature_dim, head_dim, self.scale))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``phi(x)``: (..., d) -> (..., D), positive, in ``x``'s dtype."""
        if self.projection is None:
            return elu_features(x)
        return taylor_features(torch.matmul(x, self.projection.to(x.dtype).t()))

    # ------------------------------------------------------------------ state
    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> GatedState:
        """The segment-major state of :meth:`SegmentedCrossAttention.init_state` plus ``S - S_j`` and ``z - z_j``
        for every segment ``j``: O(k*D*d) per head, once per sequence. Arguments and errors as the base class.

        An empty document has no real position: its memory is zero and its softmax averages zero values, so its
        output is 0."""
        state = super().init_state(keys, values, key_valid)
        wide = accumulation_dtype(state.keys.dtype)
        real = state.segment_valid & (state.lengths > 0)[:, None, None]  # (B, M, s)
        features = self.features(state.keys.to(wide)) * real[:, :, None, :, None].to(wide)  # (B, M, H, s, D)
        segment_kv = torch.matmul(features.transpose(-1, -2), state.values.to(wide))  # (B, M, H, D, d)
        return extend(
            GatedState, state,
            memory_kv=other_segments(segment_kv), memory_key_sum=other_segments(features.sum(dim=-2)),
        )

    # ------------------------------------------------------------------ the shared read
    def _gate_and_memory(
        self, log_softmax_sum: torch.Tensor, queries: torch.Tensor, memory_kv: torch.Tensor, key_sum: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The gate ``g = Z / (Z + D)`` and the memory read ``N / D`` (module docstring), for any leading shape.

        Args:
            log_softmax_sum: (...,) ``log Z``, the log-sum-exp of the scaled scores over ``S_i``.
            queries: (..., d) the queries, in ``memory_kv``'s dtype.
            memory_kv: (..., D, d) ``S - S_i``. key_sum: (..., D) ``z - z_i``.

        Returns:
            ``(gate, memory)``: (..., 1) and (..., d); ``gate`` is 1 and ``memory`` 0 where ``D = 0``.
        """
        query_features = self.features(queries)
        denominator = (query_features * key_sum).sum(dim=-1)
        numerator = torch.matmul(query_features.unsqueeze(-2), memory_kv).squeeze(-2)
        has_memory = denominator > 0
        safe = torch.where(has_memory, denominator, torch.ones_like(denominator))
        log_denominator = torch.where(has_memory, safe.log(), torch.full_like(safe, float("-inf")))
        gate = torch.sigmoid(log_softmax_sum - log_denominator).unsqueeze(-1)
        return gate, numerator / safe.unsqueeze(-1)

    def _segment_parts(
        self, queries: torch.Tensor, state: GatedState, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each query's scaled, masked scores over its segment and its segment's values and memory.

        Args:
            queries: (B, H, q, d). state: the standard-layout state. segments: (B, q) long, ``i(t)``.

        Returns:
            ``(logits, values, memory_kv, key_sum)``: (B, q, H, s), (B, q, H, s, d), (B, q, H, D, d), (B, q, H, D),
            in the accumulation dtype; ``-inf`` scores outside the segment's real positions.
        """
        q = segments.shape[1]
        index = block_index(segments, state.segment_valid.shape[1])
        wide = state.memory_kv.dtype
        block_keys = take_blocks(state.keys, index, q).to(wide)  # (B, q, H, s, d)
        rows = queries.transpose(1, 2).unsqueeze(-2).to(wide)  # (B, q, H, 1, d)
        logits = torch.matmul(rows, block_keys.transpose(-1, -2)).squeeze(-2) * self.scale
        allowed = take_blocks(state.segment_valid, index, q)[:, :, None, :]  # (B, q, 1, s)
        return (
            logits.masked_fill(~allowed, float("-inf")),
            take_blocks(state.values, index, q).to(wide),
            take_blocks(state.memory_kv, index, q),
            take_blocks(state.memory_key_sum, index, q),
        )

    def _read(self, queries: torch.Tensor, state: GatedState, segments: torch.Tensor, dropout: float) -> torch.Tensor:
        """The output for (B, H, q, d) ``queries`` of segments (B, q) ``i(t)``: ``g O_S + (1 - g) N / D``,
        (B, H, q, d) in the queries' dtype."""
        logits, values, memory_kv, key_sum = self._segment_parts(queries, state, segments)
        probabilities = torch.softmax(logits, dim=-1)  # every query has an allowed key (state invariant)
        if dropout > 0.0:
            probabilities = F.dropout(probabilities, p=dropout, training=True)
        local = torch.matmul(probabilities.unsqueeze(-2), values).squeeze(-2)  # (B, q, H, d)
        rows = queries.transpose(1, 2).to(memory_kv.dtype)
        gate, memory = self._gate_and_memory(torch.logsumexp(logits, dim=-1), rows, memory_kv, key_sum)
        return (gate * local + (1.0 - gate) * memory).transpose(1, 2).to(queries.dtype)

    def _state(self, state: CrossAttentionState) -> GatedState:
        if not isinstance(state, GatedState):
            raise ValueError(f"{type(self).__name__} needs a GatedState from init_state(), got {type(state).__name__}.")
        return state

    # ------------------------------------------------------------------ paths
    def _output(
        self, queries: torch.Tensor, state: SegmentState, segments_of_query: torch.Tensor, dropout: float
    ) -> torch.Tensor:
        """The parallel path's output (:meth:`_read`): O(q*(s*d + D*d)) per head."""
        return self._read(queries, self._state(state), segments_of_query, dropout)

    def step(
        self,
        queries: torch.Tensor,
        state: CrossAttentionState,
        *,
        position: int | torch.Tensor,
        project_rows: ProjectRows | None = None,
    ) -> tuple[torch.Tensor, CrossAttentionState]:
        """One decoder position: the segment's block and memory read from the state (:meth:`_read`),
        O(s*d + D*d) per head, no host sync. Arguments and result as
        :meth:`SegmentedCrossAttention.step` (standard layout only; ``project_rows`` is not used).

        Raises:
            ValueError: for a state that is not a :class:`GatedState`.
        """
        gated = self._state(state)
        segment = self._segment_at(gated, position)  # (B,) i(t)
        return self._read(queries, gated, segment[:, None], 0.0), replace(gated, last_segment=segment)

    def output_from_weights(
        self, weights: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        state: CrossAttentionState, *, start_position: int | torch.Tensor, key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """``g A V + (1 - g) N / D`` from the returned weights ``A`` (the softmax over ``S_i``); arguments as in the
        base class."""
        gated = self._state(state)
        local = super().output_from_weights(
            weights, queries, keys, values, state, start_position=start_position, key_valid=key_valid
        )  # (B, H, q, d)
        positions = torch.arange(queries.shape[2], device=queries.device) + start_position
        segments = segment_index(positions, gated.num_segments, self.settings.target_length)  # (B, q)
        logits, _, memory_kv, key_sum = self._segment_parts(queries, gated, segments)
        rows = queries.transpose(1, 2).to(memory_kv.dtype)
        gate, memory = self._gate_and_memory(torch.logsumexp(logits, dim=-1), rows, memory_kv, key_sum)
        mixed = gate * local.transpose(1, 2).to(memory.dtype) + (1.0 - gate) * memory
        return mixed.transpose(1, 2).to(queries.dtype)
