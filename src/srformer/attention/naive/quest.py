"""Float64 reference of ``quest`` (Tang et al. 2024, Quest, Sec. 3: a block's score is the upper bound
``sum_c max(q_c · min_c, q_c · max_c)`` of its keys' products with the query), with the scheduled segment read
exactly and an optional first level of groups of leaves (:mod:`srformer.attention.quest`, module docstring).

One example, one head, one query at a time, with Python lists: the bounds are computed from the float64 keys of
each block, blocks are ranked by (bound descending, index ascending), and the output is one softmax over the union
of the segment's positions and the chosen leaves' positions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from srformer.attention.naive.common import (
    check_call,
    num_segments,
    per_query,
    segment_of,
    segment_rows,
    softmax_attention,
)

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


def _bound(query: torch.Tensor, keys: torch.Tensor) -> float:
    """``sum_c max(q_c · min_x K_xc, q_c · max_x K_xc)`` over the rows of ``keys`` (n, d), n >= 1."""
    low, high = keys.min(dim=0).values, keys.max(dim=0).values
    return float(torch.maximum(query * low, query * high).sum())


def _tree_order(leaves: list[torch.Tensor], group: int) -> list[int]:
    """``π``: the leaves (each (n_j, d) float64 keys) ordered by the principal-direction tree over their box centres
    ``(min + max) / 2``: ``g·2^D`` slots (indices ``>= L`` empty), ``D`` halvings, each node sorted (stably) by the
    projection of its real leaves' centres, less their mean, on the direction that 4 power iterations reach from
    the fixed start (a seeded standard normal vector), empty slots last."""
    count = len(leaves)
    centres = [(leaf.min(dim=0).values + leaf.max(dim=0).values) / 2 for leaf in leaves]
    depth = max(0, math.ceil(count / group) - 1).bit_length()
    slots = group << depth
    start = torch.randn(len(centres[0]), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    order = list(range(slots))
    for level in range(depth):
        size = slots >> level
        ordered: list[int] = []
        for node in range(1 << level):
            members = order[node * size:(node + 1) * size]
            real = [j for j in members if j < count]
            if not real:
                ordered += members
                continue
            mean = torch.stack([centres[j] for j in real]).mean(dim=0)
            centred = {j: centres[j] - mean for j in real}
            direction = start.clone()
            for _ in range(4):
                direction = sum((centred[j] * float(centred[j] @ direction) for j in real), torch.zeros_like(start))
                norm = float(direction.norm())
                direction = direction / norm if norm > 0 else direction * 0
            projection = {j: float(centred[j] @ direction) if j < count else math.inf for j in members}
            ordered += sorted(members, key=lambda j: projection[j])  # stable: ties keep their order
        order = ordered
    return order


def _first(scores: list[float], count: int) -> list[int]:
    """The ``count`` indices first by (score descending, index ascending)."""
    return sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:count]


def quest_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_valid: torch.Tensor | None,
    settings: SRformerConfig,
    *,
    scale: float = 1.0,
    parameters: Mapping[str, torch.Tensor] | None = None,
    start_position: int = 0,
) -> torch.Tensor:
    """Per query and head: softmax over the real positions of segment ``i(t)`` and of the chosen leaves.

    Leaves are ``b`` consecutive real positions (the last one shorter); a leaf is a candidate when it holds a
    position outside segment ``i(t)``. Without ``group_size``, the ``r`` candidates of largest bound are chosen.
    With it, the leaves are ordered by :func:`_tree_order` and cut into groups of ``g``; the ``p`` groups (with a
    real leaf) of largest bound over all their positions are taken (ties: the earlier group), and the ``r``
    candidate leaves of largest bound among theirs are chosen (ties: the earlier in the groups' order). Without
    groups, ties go to the earlier leaf.

    Args and returns: as every reference (:mod:`srformer.attention.naive`).
    """
    check_call(settings, parameters, quest_attention)
    s, target = settings.resolved_segment_size(), settings.target_length
    b, r = settings.resolved_leaf_size(), settings.resolved_top_leaves()
    g, p = settings.group_size, settings.resolved_top_groups()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        n = len(k)
        i = segment_of(t, num_segments(n, s), target)
        segment = segment_rows(i, n, s)
        leaves = [range(start, min(start + b, n)) for start in range(0, n, b)]
        candidates = [j for j, leaf in enumerate(leaves) if any(x < segment.start or x >= segment.stop for x in leaf)]
        if g is not None:
            order = _tree_order([k[leaf.start:leaf.stop] for leaf in leaves], g)
            groups = [[j for j in order[start:start + g] if j < len(leaves)] for start in range(0, len(order), g)]
            real = [G for G, group in enumerate(groups) if group]
            group_scores = [_bound(query, torch.cat([k[leaves[j].start:leaves[j].stop] for j in groups[G]]))
                            for G in real]
            kept = sorted(real[x] for x in _first(group_scores, p))
            candidates = [j for G in kept for j in groups[G] if j in candidates]
        scores = [_bound(query, k[leaves[j].start:leaves[j].stop]) for j in candidates]
        chosen = [candidates[x] for x in _first(scores, r)]
        read = sorted(set(range(segment.start, segment.stop)).union(x for j in chosen for x in leaves[j]))
        rows = torch.tensor(read, dtype=torch.long)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
