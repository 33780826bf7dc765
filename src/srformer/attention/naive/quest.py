"""Float64 reference of ``quest`` (Tang et al. 2024, Quest, Sec. 3: a block's score is the upper bound
``sum_c max(q_c · min_c, q_c · max_c)`` of its keys' products with the query), with the scheduled segment read
exactly and an optional first level of groups of leaves (:mod:`srformer.attention.quest`, module docstring).

One example, one head, one query at a time, with Python lists: the bounds are computed from the float64 keys of
each block, blocks are ranked by (bound descending, index ascending), and the output is one softmax over the union
of the segment's positions and the chosen leaves' positions.
"""

from __future__ import annotations

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
    from srformer.config import SRformerConfig


def _bound(query: torch.Tensor, keys: torch.Tensor) -> float:
    """``sum_c max(q_c · min_x K_xc, q_c · max_x K_xc)`` over the rows of ``keys`` (n, d), n >= 1."""
    low, high = keys.min(dim=0).values, keys.max(dim=0).values
    return float(torch.maximum(query * low, query * high).sum())


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
    With it, groups of ``g`` consecutive leaves are candidates when they hold a candidate leaf; the ``p`` candidate
    groups of largest bound (over all their positions) are taken, and the ``r`` candidate leaves of largest bound
    among theirs are chosen. Ties go to the earlier block.

    Args and returns: as every reference (:mod:`srformer.attention.naive`).
    """
    check_call(settings, parameters, "quest")
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
            groups = [range(start, min(start + g, len(leaves))) for start in range(0, len(leaves), g)]
            group_candidates = [G for G, group in enumerate(groups) if any(j in candidates for j in group)]
            group_scores = [_bound(query, k[leaves[groups[G][0]].start:leaves[groups[G][-1]].stop])
                            for G in group_candidates]
            kept = {group_candidates[x] for x in _first(group_scores, p)}
            candidates = [j for j in candidates if j // g in kept]
        scores = [_bound(query, k[leaves[j].start:leaves[j].stop]) for j in candidates]
        chosen = [candidates[x] for x in _first(scores, r)]
        read = sorted(set(range(segment.start, segment.stop)).union(x for j in chosen for x in leaves[j]))
        rows = torch.tensor(read, dtype=torch.long)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
