"""Top-k selection with a deterministic tie rule, for the mechanisms that read what scores highest (``knn``'s keys,
``block-topk``'s blocks).

``torch.topk`` leaves the choice among equal scores unspecified, and a full stable sort costs ``O(n·log n)`` per
row, which dominates a decoder step once there are a thousand candidates. Both functions here take one
``torch.topk`` (``O(n·log width)``), without a host sync or a data-dependent branch:

* float32 (and narrower) scores: each score is widened to a float64 **order key** that also encodes the position,
  ``key_j = s_j + hypot(s_j, 2^-126) · o_j`` with the position term ``o_j = -j · 2^-(25 + L)`` (``2^L >= n``): the
  term moves a score by less than half the gap to the next lower float32, so distinct scores keep their order, and
  it is exact in float64 (a 24-bit factor times a ``L``-bit one), so equal scores are ordered by position (the
  earlier first). The keys are all distinct: one ``topk`` of them is the exact answer. ``o_j = -inf`` puts a
  position after every other (:func:`position_order`).
* float64 scores have no spare bits for the position: one ``topk`` finds the ``width``-th score and a second pass
  settles the ties at it by position.
"""

from __future__ import annotations

import torch

__all__ = ["position_order", "ranked_top", "top_positions"]

#: The smallest normal float32, ``2^-126``: the floor under a score's magnitude in its order key, so that a zero
#: score's key still carries its position (a 0-d CPU tensor: an operand of any device's elementwise kernels).
_FLOOR = torch.tensor(torch.finfo(torch.float32).tiny, dtype=torch.float32, device="cpu")
#: The widest position term: ``2^(52 - 25)`` positions keep their keys distinct in float64.
_MAX_POSITION_BITS = 26


def _position_shift(n: int) -> int:
    """``25 + L``, the exponent of a position term's step for ``n`` positions (``2^L >= n``)."""
    bits = max(n - 1, 1).bit_length()
    if bits > _MAX_POSITION_BITS:
        raise ValueError(f"At most 2**{_MAX_POSITION_BITS} positions can be ranked, got {n}.")
    return 25 + bits


def position_order(allowed: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The position term of :func:`ranked_top`'s order keys: ``-j · 2^-(25 + L)`` at an allowed position ``j``
    (``2^L >= n``), ``-inf`` at the others (ranked after every allowed one). Built once per sequence by the
    mechanisms that keep it in their state.

    Args:
        allowed: bool, ``n`` positions along ``dim``.
        dim: the positions' axis.

    Returns:
        float64, ``allowed``'s shape.
    """
    n = allowed.shape[dim]
    shape = [1] * allowed.dim()
    shape[dim] = n
    step = torch.arange(n, dtype=torch.float64, device=allowed.device) * -(2.0 ** -_position_shift(n))
    return step.view(shape).masked_fill(~allowed, float("-inf"))


def _order_keys(scores: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """float64 keys of float32-or-narrower ``scores`` in the order (score descending, position ascending): NaN as the
    lowest finite score, ``+inf`` as the highest; ``-inf`` where ``order`` is ``-inf``. Three elementwise kernels."""
    scores = scores.float()  # exact (a no-op for float32)
    info = torch.finfo(torch.float32)
    scores = torch.nan_to_num(scores, nan=info.min, posinf=info.max, neginf=info.min)
    return torch.addcmul(scores, torch.hypot(scores, _FLOOR), order)  # float64 (order's dtype)


def _tie_pass(
    scores: torch.Tensor, allowed: torch.Tensor, width: int, first: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``width`` first positions along the last axis (``first`` ones before all, then allowed ones, score
    descending, position ascending; among the positions not allowed, the earlier), in ascending order: one ``topk``
    for the ``width``-th score ``v``, every position above it and the earliest of those equal to it (any floating
    dtype)."""
    info = torch.finfo(scores.dtype)
    scores = torch.nan_to_num(scores, nan=info.min, posinf=info.max, neginf=info.min)
    scores = scores.masked_fill(~allowed, float("-inf"))  # below every allowed position
    if first is not None:
        scores = scores.masked_fill(first, float("inf"))  # above every other position
    cut = torch.topk(scores, width, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)
    at = scores == cut
    above = scores > cut
    chosen = above | (at & (at.cumsum(-1) <= width - above.sum(-1, keepdim=True)))  # exactly width per row
    index = torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
    return torch.topk(index.masked_fill(~chosen, scores.shape[-1]), width, dim=-1, largest=False).values


def ranked_top(
    scores: torch.Tensor, order: torch.Tensor, width: int, dim: int = -1, first: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``width`` positions first in the order (``first`` ones, then those whose ``order`` is finite, score
    descending, position ascending), in no particular order: a decoder step's selection (``knn``'s keys,
    ``block-topk``'s blocks). Float32 scores: the order keys and one ``topk`` (module docstring; four kernels, a fifth
    for ``first``, no host sync); float64: :func:`top_positions`'s tie pass. Positions whose ``order`` is ``-inf``
    come after all others, in any order among themselves; ``first`` ones before all others, in any order.

    Args:
        scores: (..., n, ...) selection scores, ``n`` along ``dim``, float32 or float64 (or narrower).
        order: float64 broadcastable to ``scores``, from :func:`position_order` (on ``scores``' positions).
        width: how many positions to return, ``1 <= width <= n``.
        dim: the positions' axis.
        first: bool broadcastable to ``scores``, or None: positions returned before any other (``block-topk``'s
            scheduled segment), at most ``width`` per row.

    Returns:
        long, ``scores``' shape with ``width`` along ``dim``.
    """
    if scores.dtype != torch.float64:
        keys = _order_keys(scores, order)
        if first is not None:
            keys = keys.masked_fill(first, float("inf"))
        return torch.topk(keys, width, dim=dim, sorted=False).indices
    allowed = (order > float("-inf")).expand_as(scores)
    tail = None if first is None else first.expand_as(scores).transpose(dim, -1)
    chosen = _tie_pass(scores.transpose(dim, -1), allowed.transpose(dim, -1), width, tail)
    return chosen.transpose(dim, -1)


def top_positions(scores: torch.Tensor, allowed: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width`` positions first in the order (allowed first, score descending, position ascending), in
    ascending position order; among positions not allowed (when fewer than ``width`` are), the earlier.
    ``O(n·log width)`` per row, no host sync: float32 scores (and narrower) through order keys (module docstring),
    float64 through a tie pass (one ``torch.topk`` for the ``width``-th score ``v``, every position scoring above
    ``v``, and the earliest of those scoring exactly ``v`` up to ``width``). NaN scores rank as the lowest finite
    score, ``+inf`` as the highest.

    Args:
        scores: (..., n) selection scores (``knn``: ``Q_t . K_j``; ``block-topk``: a block's gate), in float32 or
            wider.
        allowed: bool, broadcastable to ``scores``: False at positions that may be returned only when fewer than
            ``width`` are allowed (padding, non-candidates); the caller tells them apart.
        width: how many positions to return, ``0 <= width <= n``.

    Returns:
        (..., width) long in ``[0, n)``, ascending; of a row with ``a`` allowed positions, ``min(width, a)`` are
        allowed ones.
    """
    if width == 0:
        return torch.zeros(*scores.shape[:-1], 0, dtype=torch.long, device=scores.device)
    allowed = allowed.expand_as(scores)
    if scores.dtype == torch.float64:
        return _tie_pass(scores, allowed, width)
    position = position_order(torch.ones_like(allowed[..., :1]).expand_as(scores))  # every position's term
    keys = _order_keys(scores, position)
    # a position not allowed: below every allowed key (those are above -2^129), the earlier first, exactly
    keys = torch.where(allowed, keys, (position - 1.0) * 2.0**1000)
    return torch.topk(keys, width, dim=-1, sorted=False).indices.sort(dim=-1).values
