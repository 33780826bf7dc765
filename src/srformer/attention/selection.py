"""Top-k selection with a deterministic tie rule, for the mechanisms that read what scores highest (``knn``'s keys,
``block-topk``'s blocks).

``torch.topk`` leaves the choice among equal scores unspecified, and a full stable sort costs ``O(n·log n)`` per
row, which dominates a decoder step once there are a thousand candidates. :func:`top_positions` takes one
``torch.topk`` for the ``width``-th score and settles ties by position, in ``O(n·log width)``.
"""

from __future__ import annotations

import torch

__all__ = ["top_positions"]


def top_positions(scores: torch.Tensor, allowed: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width`` positions first in the order (allowed first, score descending, position ascending), in
    ascending position order: one ``torch.topk`` for the ``width``-th score ``v``, every position scoring above
    ``v``, and the earliest of those scoring exactly ``v`` up to ``width``. ``O(n·log width)`` per row. NaN scores
    rank as the lowest finite score, ``+inf`` as the highest. On the CPU (outside ``torch.compile``), when no row
    leaves out a position tied at ``v``, the topk's own positions are returned, sorted: the same answer, without
    the pass that settles ties (elsewhere that check would be a device sync, so the tie pass always runs).

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
    lowest = torch.finfo(scores.dtype).min
    scores = torch.nan_to_num(scores, nan=lowest, posinf=torch.finfo(scores.dtype).max, neginf=lowest)
    scores = scores.masked_fill(~allowed, float("-inf"))  # below every allowed position
    top = torch.topk(scores, width, dim=-1)
    cut = top.values[..., -1:]
    at = scores == cut
    # no tie at the cut left out (the usual case): topk's own positions are the answer; on the CPU checking costs no
    # device sync
    on_host = scores.device.type == "cpu" and not torch.compiler.is_compiling()
    if on_host and torch.equal(at.sum(-1), (top.values == cut).sum(-1)):
        return top.indices.sort(dim=-1).values
    above = scores > cut
    chosen = above | (at & (at.cumsum(-1) <= width - above.sum(-1, keepdim=True)))  # exactly width per row
    index = torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
    return torch.topk(index.masked_fill(~chosen, scores.shape[-1]), width, dim=-1, largest=False).values
