"""Top-k selection with a deterministic tie rule, for the mechanisms that read what scores highest (``knn``'s keys,
``block-topk``'s blocks).

``torch.topk`` leaves the choice among equal scores unspecified, and a full stable sort costs ``O(n·log n)`` per
row, which dominates a decoder step once there are a thousand candidates. Two functions take the ``width`` first
positions in the order (allowed first, score descending, position ascending) in ``O(n·log width)``:

* :func:`top_positions` (the CPU steps, the parallel paths, ``quest``): one ``torch.topk`` for the ``width``-th
  score and, where a tie at it is left out, a pass that settles it by position; on the CPU the check for such a tie
  is a free host read, elsewhere the pass always runs.
* :func:`grouped_topk` (the CPU steps of ``knn_index="loki"``, with pages or without): ``torch.topk``'s answer, up
  to the choice among equal scores, through the maxima of groups of scores, for long rows on a CPU.
* :func:`ranked_top` (the accelerator steps, :mod:`srformer.attention.step_choice`): a fixed sequence of four or
  five kernels and no host sync. Float32 (and narrower) scores are widened to float64 **order keys** that also
  encode the position, ``key_j = s_j + hypot(s_j, 2^-126) · o_j`` with the position term
  ``o_j = -(j + 1) · 2^-(25 + L)`` (``2^L > n``; :func:`position_order`). The term moves a score by less than
  ``2^-25`` of its magnitude, less than half the gap to the next float32, so distinct scores keep their order;
  the product is exact in float64 (24 bits times ``L <= 25``) and two equal scores' keys differ by at least
  ``|s|·2^-50``, two float64 units of ``s``, so they stay apart after the sum's one rounding, the earlier position
  above. All keys of a row are distinct: one ``topk`` is the exact answer. ``o_j = -inf`` puts a position after
  every other, and so does a floor of ``+inf`` in place of ``2^-126`` (every ``o_j`` is below 0: the term is
  ``-inf``), which a caller can build in one call fewer than an order with ``-inf`` added. Float64 scores have no
  spare bits for the position: :func:`top_positions`'s tie pass, without its host check.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

__all__ = ["GROUPED_TOPK_WIDTH", "ORDER_FLOOR", "grouped_topk", "position_order", "ranked_scores", "ranked_top",
           "top_positions"]

#: The smallest normal float32, ``2^-126``: the floor under a score's magnitude in its order key, so that a zero
#: score's key still carries its position (a 0-d CPU tensor: an operand of any device's elementwise kernels).
_FLOOR = torch.tensor(torch.finfo(torch.float32).tiny, dtype=torch.float32, device="cpu")
#: The same floor as a number: the value of :func:`ranked_top`'s ``floor`` at a position ranked as usual.
ORDER_FLOOR = torch.finfo(torch.float32).tiny
#: The widest position term: fewer than ``2^25`` positions keep two equal scores' keys two float64 units apart.
_MAX_POSITION_BITS = 25


def _position_shift(n: int) -> int:
    """``25 + L``, the exponent of a position term's step for ``n`` positions (``2^L > n``).

    Raises:
        ValueError: for ``2^25`` positions or more.
    """
    bits = max(n, 1).bit_length()
    if bits > _MAX_POSITION_BITS:
        raise ValueError(f"At most 2**{_MAX_POSITION_BITS} - 1 positions can be ranked, got {n}.")
    return 25 + bits


def position_order(allowed: torch.Tensor) -> torch.Tensor:
    """The position term of :func:`ranked_top`'s order keys along the last axis: ``-(j + 1) · 2^-(25 + L)`` at an
    allowed position ``j`` (``2^L > n``; below 0 everywhere, so that a floor of ``+inf`` makes the key ``-inf``),
    ``-inf`` at the others (ranked after every allowed one). Built once per sequence by the states that keep it
    (``knn``'s keys, ``block-topk``'s blocks, ``quest``'s slots and groups).

    Args:
        allowed: (..., n) bool.

    Returns:
        (..., n) float64.

    Raises:
        ValueError: for ``2^25`` positions or more.
    """
    n = allowed.shape[-1]
    step = torch.arange(1, n + 1, dtype=torch.float64, device=allowed.device) * -(2.0 ** -_position_shift(n))
    return step.masked_fill(~allowed, float("-inf"))


def _tie_pass(
    scores: torch.Tensor, allowed: torch.Tensor, width: int, first: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``width`` first positions along the last axis (``first`` ones before all, then allowed ones by score
    descending, then the others; ties to the earlier position), in ascending order, without a host sync: one
    ``topk`` for the ``width``-th score ``v``, every position above it and the earliest of those equal to it."""
    info = torch.finfo(scores.dtype)
    scores = torch.nan_to_num(scores, nan=info.min, posinf=info.max, neginf=info.min)
    scores = scores.masked_fill(~allowed, float("-inf"))  # below every allowed position
    if first is not None:
        scores = scores.masked_fill(first, float("inf"))  # above every other position
    cut = torch.topk(scores, width, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)
    return _earliest_at_cut(scores, scores == cut, cut, width)


def _earliest_at_cut(scores: torch.Tensor, at: torch.Tensor, cut: torch.Tensor, width: int) -> torch.Tensor:
    """Every position scoring above the ``width``-th score ``cut`` (..., 1) and the earliest of those scoring exactly
    ``cut`` (``at``), up to ``width``: (..., width) long, ascending."""
    above = scores > cut
    chosen = above | (at & (at.cumsum(-1) <= width - above.sum(-1, keepdim=True)))  # exactly width per row
    index = torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
    return torch.topk(index.masked_fill(~chosen, scores.shape[-1]), width, dim=-1, largest=False).values


def ranked_top(
    scores: torch.Tensor, order: torch.Tensor, width: int, first: torch.Tensor | None = None, *, finite: bool = False,
    floor: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``width`` positions first in the order along the last axis (``first`` ones, then those whose ``order`` is
    finite by score descending and position ascending, then the others), in no particular order: an accelerator
    step's selection. An ``order`` of ``+inf`` ranks its position first too (a finite score's order key is then
    ``+inf``), as ``first`` does, without a call of its own. Float32 (or narrower) scores: the order keys and one
    ``topk`` (module docstring: four kernels, a fifth for ``first``); float64: the tie pass of
    :func:`top_positions`. No host sync either way. NaN scores rank as the lowest finite score, ``+inf`` as the
    highest; positions whose ``order`` is ``-inf`` come after all others and ``first`` ones before all others, in
    any order among themselves.

    Args:
        scores: (..., n) selection scores in float32 or float64 (or narrower).
        order: float64 broadcastable to ``scores``, from :func:`position_order` (of ``scores``' positions), or
            ``+inf`` at positions to rank first.
        width: how many positions to return, ``1 <= width <= n``.
        first: bool broadcastable to ``scores``, or None: positions returned before any other (``block-topk``'s
            scheduled segment), at most ``width`` per row.
        finite: the caller knows every score is finite: one call fewer (no ``nan_to_num``). A NaN or infinite
            score then ranks above every finite one (its order key is NaN).
        floor: float32 broadcastable to ``scores``, or None (``2^-126`` everywhere): the floor under each score's
            magnitude in its order key, ``2^-126`` where the position is ranked as usual and ``+inf`` where it is
            ranked after every other, as an ``order`` of ``-inf`` ranks it (unless its ``order`` is ``+inf``: it is
            then ranked first). ``order`` must come from :func:`position_order` (below 0 at every position).

    Returns:
        (..., width) long in ``[0, n)``, distinct within a row.
    """
    if scores.dtype == torch.float64:
        allowed = order > float("-inf")
        allowed = (allowed if floor is None else allowed & (floor < float("inf"))).expand_as(scores)
        ahead = order == float("inf")  # what the order keys' +inf term does to a finite score
        first = ahead if first is None else first | ahead
        return _tie_pass(scores, allowed, width, first.expand_as(scores))
    keys = _order_keys(scores, order, finite, floor)
    if first is not None:
        keys = keys.masked_fill(first, float("inf"))
    return torch.topk(keys, width, dim=-1, sorted=False).indices


def ranked_scores(scores: torch.Tensor, order: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ranked_top` of finite ``scores`` (``finite=True``), and the chosen positions' scores: the softmax
    logits of a step that attends to what it ranked, without reading its scores or a padding mask again.

    For float32 (or narrower) scores the logits are the order keys ``topk`` returns, cast back to the scores'
    dtype: a key moves its score by less than half a float32 unit (module docstring), so the cast gives the score
    itself (for a score of magnitude at least ``2^-126``; below it, within one unit of it), and ``-inf`` at a
    position whose ``order`` is ``-inf``. No call beyond :func:`ranked_top`'s but the cast. Float64 scores: the
    tie pass, then the chosen scores gathered, ``-inf`` where ``order`` is ``-inf``.

    Args:
        scores: (..., n) finite float32 (or narrower, or float64) scores.
        order: float64 broadcastable to ``scores``, from :func:`position_order`.
        width: how many positions to return, ``1 <= width <= n``.

    Returns:
        ``(logits, chosen)``: (..., width) in ``scores``' dtype and (..., width) long in ``[0, n)``, in no particular
        order (ascending for float64).
    """
    if scores.dtype == torch.float64:
        chosen = ranked_top(scores, order, width, finite=True)
        logits = scores.gather(-1, chosen)
        return logits.masked_fill(order.expand_as(scores).gather(-1, chosen) == float("-inf"), float("-inf")), chosen
    top = torch.topk(_order_keys(scores, order, True, None), width, dim=-1, sorted=False)
    return top.values.to(scores.dtype), top.indices


def _order_keys(scores: torch.Tensor, order: torch.Tensor, finite: bool, floor: torch.Tensor | None) -> torch.Tensor:
    """The float64 order keys of float32 (or narrower) scores (module docstring), ``finite`` and ``floor`` as
    :func:`ranked_top` takes them."""
    if scores.dtype != torch.bfloat16:  # bfloat16 kept: float32's range, and the order keys are float64 anyway
        scores = scores.float()
    if not finite:
        info = torch.finfo(scores.dtype)
        scores = torch.nan_to_num(scores, nan=info.min, posinf=info.max, neginf=info.min)
    return torch.addcmul(scores, torch.hypot(scores, _FLOOR if floor is None else floor), order)


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
    return _earliest_at_cut(scores, at, cut, width)


#: :func:`grouped_topk`'s widest ``topk``: rows longer than this are cut into at most this many groups. On one CPU
#: thread, ``topk`` of 256 among 2,048 scores (8 rows) took about 46 µs and among 4,096 about 275 µs (it changes
#: method there); through at most 1,024 groups the 4,096 took about 105 µs and 16,384 about 400 µs against 930.
GROUPED_TOPK_WIDTH = 1024


def grouped_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of the ``k`` largest scores of each row, in no particular order: ``torch.topk``'s set, up to the
    choice among scores equal to the ``k``-th, in fewer operations than one ``topk`` for long rows on a CPU.

    A row of ``n > GROUPED_TOPK_WIDTH`` scores is cut into ``w <=`` :data:`GROUPED_TOPK_WIDTH` strided groups of
    ``g`` scores each (``g`` a power of two; score ``j`` in group ``j mod w``; ``-inf`` pads the row to ``g·w``).
    The ``k`` groups of largest maximum hold every score above the ``k``-th largest ``v`` (each such group's maximum
    exceeds ``v``, and fewer than ``k`` scores do) and, between them, enough scores equal to ``v``; the ``k``
    largest of their ``g·k`` scores, found the same way, are the answer. Rows of at most
    :data:`GROUPED_TOPK_WIDTH` scores, or with ``w < 2k`` groups (which would not narrow the search), take one
    ``topk``.

    Args:
        scores: (R, n), at least ``k`` of each row's finite (``-inf`` pads the groups: a row with fewer finite
            scores may get indices past ``n - 1``).
        k: ``1 <= k <= n``.

    Returns:
        (R, k) long in ``[0, n)``, distinct within a row.
    """
    rows, length = scores.shape
    size = 1 << max(0, math.ceil(math.log2(length / GROUPED_TOPK_WIDTH)))  # g, scores per group
    count = -(-length // size)  # w, groups
    if size == 1 or count < 2 * k:
        return torch.topk(scores, k, dim=-1, sorted=False).indices
    if size * count != length:
        scores = F.pad(scores, (0, size * count - length), value=-math.inf)
    # group c holds scores c, c + w, c + 2w, ...: its maximum is the column's over the (R, g, w) view
    best = torch.topk(scores.reshape(rows, size, count).amax(dim=1), k, dim=-1, sorted=False).indices  # (R, k)
    starts = torch.arange(0, size * count, count, device=scores.device)  # (g,)
    held = torch.add(best[:, None, :], starts[:, None]).view(rows, size * k)  # every score of those groups
    return held.gather(1, grouped_topk(scores.gather(1, held), k))
