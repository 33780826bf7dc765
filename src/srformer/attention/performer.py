"""Performer's FAVOR+ (Choromanski et al. 2021, Rethinking Attention with Performers, Sec. 2-3), as decoder cross
attention: the ``performer`` variant.

FAVOR+ replaces the softmax kernel ``exp(x . y)`` by an unbiased estimate from ``m`` positive random features
(Sec. 2.3, Lemma 1)::

    phi(x) = exp(W x - |x|^2 / 2)            (W: m x d, rows orthogonal random features, Sec. 2.4)
    exp(x . y) ~= phi(x) . phi(y) / m

With ``x = sqrt(scale) Q_t`` and ``y = sqrt(scale) K_j`` the kernel is the model's ``exp(scale * Q_t . K_j)``.
Cross attention has no causal mask, so the sums over the encoder are built once per sequence (Sec. 2.2,
Eq. 4) and every decoder step reads them::

    O[t] = phi(Q_t) (phi(K)^T V) / (phi(Q_t) . sum_j phi(K_j))

Numerical stabiliser (as the paper's code): before the exponential, ``phi`` of a query subtracts the largest of
its own ``m`` exponents, and ``phi`` of the keys subtracts the largest exponent over the example's real keys and
all features (one number per example and head, kept in the state as ``key_offset``); ``eps = norm_eps`` is added
to every feature after the exponential, so the denominator is never 0. A constant factor common to all keys or
to all features of one query cancels between numerator and denominator; what remains (the ``eps``) depends only
on the query itself and on the example's real keys, so the parallel and incremental paths compute the same
numbers, and padding (masked out of the key maximum and the sums) does not matter. The ``1/m`` of the estimator
cancels and is left out.

The features: ``m = num_random_features`` rows (default ``d * ceil(ln d)``, at least ``d``: Theorem 4's
``m = Theta(d log d)``), drawn in blocks of ``d`` orthonormal rows (QR of a Gaussian matrix) each row scaled by
the norm of an independent Gaussian ``d``-vector, so each row is marginally ``N(0, I_d)`` (Sec. 2.4, "orthogonal
random features"). They are drawn once from ``random_feature_seed`` and kept in a persistent buffer
(``random_features``): a saved and reloaded model computes the same output. They are not redrawn during
training (the paper's optional feature redrawing is left out, so the model is one deterministic function).

Under autocast the features and sums are computed in float32 or wider (autocast off), in both paths: the
exponential turns a bf16 exponent's relative rounding into a relative error of the feature itself.

Costs per head: build ``O(k·m·d)``, step ``O(m·d)``, state ``m·d + m + 1`` numbers (its own lean layout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srformer.attention.initialization import InitFunctions
from srformer.attention.schedule import real_lengths
from srformer.attention.segment_free import SegmentFreeCrossAttention
from srformer.attention.state import CrossAttentionState, accumulation_dtype, autocast_off
from srformer.core import MechanismSettings, integer_setting

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


@dataclass(frozen=True)
class PerformerSettings(MechanismSettings):
    """The settings of the ``performer`` variant (``SRformerConfig(variant='performer', ...)``;
    None: the default named below).

    Attributes:
        num_random_features: ``m``, the number of positive orthogonal random features of the ``performer`` variant
            (Choromanski et al. 2021, FAVOR+). At least 1. None (default): ``d * ceil(ln d)`` for head size ``d`` (at
            least ``d``; Theorem 4's ``m = Theta(d log d)``: 320 at d = 64).
        random_feature_seed: the seed the ``performer`` features are drawn from (once, at construction; they are also
            kept in the model's state dict, so a reloaded model is the same). A non-negative integer. None (default): 0.
    """

    num_random_features: int | None = integer_setting(1)
    random_feature_seed: int | None = integer_setting(0)

    def resolved_feature_seed(self, config: SRformerConfig) -> int:
        """The seed of the features: ``random_feature_seed``, or 0 when it is None."""
        return self.random_feature_seed if self.random_feature_seed is not None else 0


@dataclass(kw_only=True)
class PerformerState(CrossAttentionState):
    """The ``performer`` state: the random-feature sums of one sequence, in float32 or wider.

    Attributes:
        feature_values: (B, H, m, d) ``phi(K)^T V`` over the real positions.
        feature_sum: (B, H, m) ``sum_j phi(K_j)`` over the real positions.
        key_offset: (B, H) the keys' stabiliser (the largest exponent over the real keys and features; 0 for an
            empty document).
    """

    feature_values: torch.Tensor
    feature_sum: torch.Tensor
    key_offset: torch.Tensor

    is_lean = True

    def anchors(self) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102 - see the base class
        return self.feature_values, self.feature_values


def default_num_features(head_dim: int) -> int:
    """``m = d * ceil(ln d)``, at least ``d`` (Theorem 4: ``m = Theta(d log d)`` features suffice)."""
    return head_dim * max(1, math.ceil(math.log(head_dim))) if head_dim > 1 else 1


def orthogonal_random_features(num_features: int, head_dim: int, seed: int) -> torch.Tensor:
    """``m`` orthogonal random features (Sec. 2.4): blocks of ``d`` orthonormal rows (QR of a Gaussian ``d x d``
    matrix, with the signs of ``R``'s diagonal moved into ``Q`` so that ``Q`` is uniform), the last block cut to
    ``m mod d`` rows, each row scaled by the norm of an independent Gaussian ``d``-vector (so every row is
    marginally ``N(0, I_d)``), all from a CPU generator seeded with ``seed``.

    Returns:
        (num_features, head_dim) float32, the same for the same arguments on any machine that runs the same
        torch version.
    """
    generator = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(math.ceil(num_features / head_dim)):
        gaussian = torch.randn(head_dim, head_dim, generator=generator, dtype=torch.float64)
        orthonormal, triangular = torch.linalg.qr(gaussian)
        # signs of R's diagonal moved into Q: Q is then Haar-distributed, so each row is a uniform direction
        # (Householder QR alone biases the directions and with them the kernel estimate)
        orthonormal = orthonormal * torch.sign(torch.diagonal(triangular))[None, :]
        blocks.append(orthonormal.T)  # rows orthonormal
    rows = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, head_dim, generator=generator, dtype=torch.float64).norm(dim=1)
    return (rows * norms[:, None]).to(torch.float32)


class PerformerCrossAttention(SegmentFreeCrossAttention):
    """The ``performer`` variant for one decoder layer; same interface as
    :class:`~srformer.attention.segmented.SegmentedCrossAttention`.

    Args:
        config: settings with ``variant='performer'`` (``num_random_features``, ``random_feature_seed``,
            ``norm_eps``).
        head_dim: ``d``.
        scale: the wrapped model's attention scale: the kernel is ``exp(scale * q . k)``.

    Attributes:
        random_features: (m, d) persistent buffer ``W``, shared by the heads, drawn from the seed.
        has_softmax, has_recurrence: False (a kernel estimate, no softmax; no recurrence).

    Raises:
        ValueError: if ``config.variant`` is not ``performer``.
    """

    has_softmax = False
    random_features: torch.Tensor

    def __init__(self, config: SRformerConfig, head_dim: int, scale: float = 1.0) -> None:
        super().__init__(config, head_dim, scale)
        self.num_features = config.num_random_features or default_num_features(head_dim)
        self.register_buffer("random_features", self.drawn_features(), persistent=True)

    def drawn_features(self) -> torch.Tensor:
        """The features this module's settings draw (:func:`orthogonal_random_features`), (m, d) float32."""
        return orthogonal_random_features(self.num_features, self.head_dim, self.settings.resolved_feature_seed())

    def initialize_parameters(self, init: InitFunctions) -> None:
        """The random features redrawn from their seed (the same values as at construction)."""
        init.copy_(self.random_features, self.drawn_features())

    def exponents(self, x: torch.Tensor) -> torch.Tensor:
        """``W y - |y|^2 / 2`` with ``y = sqrt(scale) x``, (..., d) -> (..., m) in ``x``'s dtype."""
        y = x * math.sqrt(self.scale)
        return torch.matmul(y, self.random_features.to(x.dtype).T) - 0.5 * (y * y).sum(dim=-1, keepdim=True)

    def query_features(self, queries: torch.Tensor) -> torch.Tensor:
        """``phi(Q_t)`` with the query's own stabiliser: ``exp(e - max_f e_f) + eps``, (..., d) -> (..., m)."""
        exponents = self.exponents(queries)
        return torch.exp(exponents - exponents.amax(dim=-1, keepdim=True)) + self.settings.norm_eps

    def key_features(
        self, keys: torch.Tensor, key_valid: torch.Tensor | None, key_offset: torch.Tensor
    ) -> torch.Tensor:
        """``phi(K_j) = exp(e_j - key_offset) + eps`` at the real positions, 0 at padding.

        Args:
            keys: (B, H, k, d). key_valid: (B, k) bool or None. key_offset: (B, H) the keys' stabiliser.

        Returns:
            (B, H, k, m).
        """
        exponents = self.exponents(keys) - key_offset[:, :, None, None]
        if key_valid is None:
            return torch.exp(exponents) + self.settings.norm_eps
        valid = key_valid.to(device=keys.device, dtype=torch.bool)[:, None, :, None]
        # padding is masked before the exponential: a large padded key must not overflow to inf (inf * 0 = NaN)
        features = torch.exp(exponents.masked_fill(~valid, float("-inf"))) + self.settings.norm_eps
        return features * valid.to(features.dtype)

    @autocast_off
    def init_state(self, keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None) -> PerformerState:
        """``phi(K)^T V``, ``sum_j phi(K_j)`` and the keys' stabiliser over the real positions, ``O(k·m·d)`` per head.

        Args:
            keys: (B, H, k, d) projected encoder keys.
            values: (B, H, k, d) projected encoder values.
            key_valid: (B, k) bool, True at real encoder positions; None when nothing is padded.

        Returns:
            A :class:`PerformerState` in float32 or the keys' dtype when wider (no encoder-length tensor). An
            empty document has zero sums, and output 0.
        """
        batch, _, k, _ = keys.shape
        lengths, _ = real_lengths(key_valid, batch, k, keys.device)
        wide = accumulation_dtype(keys.dtype)
        keys, values = keys.to(wide), values.to(wide)
        exponents = self.exponents(keys)  # (B, H, k, m)
        if key_valid is not None:
            valid = key_valid.to(device=keys.device, dtype=torch.bool)[:, None, :, None]
            exponents = exponents.masked_fill(~valid, float("-inf"))
        key_offset = exponents.amax(dim=(2, 3))  # (B, H); -inf for an empty document
        key_offset = torch.where(torch.isfinite(key_offset), key_offset, torch.zeros_like(key_offset))
        features = self.key_features(keys, key_valid, key_offset)
        return PerformerState(
            lengths=lengths,
            num_segments=torch.ones_like(lengths),
            last_segment=torch.full_like(lengths, -1),
            feature_values=torch.matmul(features.transpose(-1, -2), values),
            feature_sum=features.sum(dim=2),
            key_offset=key_offset,
        )

    def _state(self, state: CrossAttentionState) -> PerformerState:
        if not isinstance(state, PerformerState):
            raise ValueError(f"PerformerCrossAttention needs a PerformerState, got a {type(state).__name__}.")
        return state

    def denominator(self, query_features: torch.Tensor, state: PerformerState) -> torch.Tensor:
        """``phi(Q_t) . sum_j phi(K_j)``, (B, H, q, 1); 1 for an empty document (whose numerator is 0)."""
        total = (query_features * state.feature_sum[:, :, None, :]).sum(dim=-1, keepdim=True)
        empty = (state.lengths == 0).to(total.dtype)[:, None, None, None]
        return total + empty

    @autocast_off  # the exponential amplifies a bf16 exponent's rounding (2^-8 relative) into the features
    def _read(self, queries: torch.Tensor, state: CrossAttentionState, dropout: float) -> torch.Tensor:
        state = self._state(state)
        features = self.query_features(queries.to(state.feature_values.dtype))  # (B, H, q, m)
        numerator = torch.matmul(features, state.feature_values)
        return (numerator / self.denominator(features, state)).to(queries.dtype)

    @autocast_off
    def attention_weights(
        self, queries: torch.Tensor, keys: torch.Tensor, state: CrossAttentionState, key_valid: torch.Tensor | None
    ) -> torch.Tensor:
        """``A[t, j] = phi(Q_t) . phi(K_j) / (phi(Q_t) . sum_l phi(K_l))``, for which ``O = A V`` exactly:
        non-negative, zero at padding, rows summing to 1 (all zero for an empty document).

        Args:
            queries: (B, H, q, d). keys: (B, H, k, d) in encoder order. state: from :meth:`init_state`.
            key_valid: (B, k) bool, or None.

        Returns:
            (B, H, q, k) in the queries' dtype.
        """
        state = self._state(state)
        wide = state.feature_values.dtype
        query_features = self.query_features(queries.to(wide))
        key_features = self.key_features(keys.to(wide), key_valid, state.key_offset)
        numerator = torch.matmul(query_features, key_features.transpose(-1, -2))
        return (numerator / self.denominator(query_features, state)).to(queries.dtype)
