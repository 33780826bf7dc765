"""Float64 references of the sparse-pattern mechanisms over the segment schedule: ``bigbird`` (Zaheer et al.
2020), ``compressive`` (Rae et al. 2020), ``adaptive`` (Sukhbaatar et al. 2019), ``bp`` (Ye et al. 2019) and
``block-topk`` (MoBA, Lu et al. 2025), each query's key set (and ``adaptive``'s mask) written from the paper and the
choices of ``docs/design.md``, "Mechanisms of the efficient-transformer literature", with Python loops and sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from srformer.attention.naive.common import (
    check_call,
    num_segments,
    parameter,
    per_query,
    segment_of,
    segment_rows,
    softmax_attention,
)

if TYPE_CHECKING:
    from srformer.core import SRformerConfig


def _mix32(x: int) -> int:
    """The 32-bit integer hash of ``bigbird``'s random blocks, on Python integers: two rounds of
    ``x = ((x >> 16) ^ x) * 0x45d9f3b mod 2**32`` and a final ``(x >> 16) ^ x`` of ``x mod 2**32``."""
    x %= 2**32
    x = (((x >> 16) ^ x) * 0x45D9F3B) % 2**32
    x = (((x >> 16) ^ x) * 0x45D9F3B) % 2**32
    return (x >> 16) ^ x


def bigbird_random_blocks(
    seed: int, segment: int, segments: int, global_tokens: int, segment_size: int, random_blocks: int
) -> list[int]:
    """The random blocks of segment ``segment`` of an input of ``segments`` segments: the ``random_blocks``
    candidates ``j`` in ``global_tokens // segment_size .. segments - 1``, ``j != segment``, of smallest
    ``(h, j)`` with ``h = mix32(mix32(mix32(seed) + segment) + j)`` (all of them when there are fewer)."""
    candidates = [j for j in range(global_tokens // segment_size, segments) if j != segment]
    candidates.sort(key=lambda j: (_mix32(_mix32(_mix32(seed) + segment) + j), j))
    return candidates[:random_blocks]


def bigbird_attention(
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
    """``bigbird`` (Zaheer et al. 2020, Big Bird, Sec. 2, BigBird-ITC, with the scheduled segment as its window):
    softmax over the union of segment ``i(t)``, the first ``g`` real positions and the segments
    :func:`bigbird_random_blocks` of ``i(t)``, each position once."""
    check_call(settings, parameters, bigbird_attention)
    s, target = settings.resolved_segment_size(), settings.target_length
    g, r = settings.resolved_global_tokens(), settings.resolved_random_blocks()
    seed = settings.resolved_random_blocks_seed()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        n = len(k)
        m = num_segments(n, s)
        i = segment_of(t, m, target)
        attended = set(range(min(g, n)))
        for j in [i, *bigbird_random_blocks(seed, i, m, g, s, r)]:
            rows = segment_rows(j, n, s)
            attended |= set(range(rows.start, rows.stop))
        rows_list = sorted(attended)
        return softmax_attention(query, k[rows_list], v[rows_list], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def compressive_attention(
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
    """``compressive`` (Rae et al. 2020, Compressive Transformers, Sec. 3, mean-pooling compression with rate
    ``c``): softmax over segment ``i(t)``, its memory segment ``i(t) - 1`` and the compressed memory of every
    segment ``j <= i(t) - 2``: for each window ``j*s + u*c .. min(j*s + (u+1)*c, (j+1)*s, n) - 1`` holding a real
    position, one key and value, the mean of the window's keys and values. The stop-gradients of the memory
    and the compressed memory change gradients, not outputs, so they do not appear here."""
    check_call(settings, parameters, compressive_attention)
    s, target, c = settings.resolved_segment_size(), settings.target_length, settings.resolved_compression_rate()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        n = len(k)
        i = segment_of(t, num_segments(n, s), target)
        rows = list(range(max(i - 1, 0) * s, min((i + 1) * s, n)))  # memory and segment
        window_keys, window_values = [k[rows]], [v[rows]]
        for j in range(i - 1):
            for start in range(j * s, (j + 1) * s, c):
                window = slice(start, min(start + c, (j + 1) * s, n))
                if window.stop > window.start:
                    window_keys.append(k[window].mean(dim=0, keepdim=True))
                    window_values.append(v[window].mean(dim=0, keepdim=True))
        return softmax_attention(query, torch.cat(window_keys), torch.cat(window_values), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


#: The learned tensors of ``adaptive`` by their state-dict names: ``span_fraction`` (H,) or (1,), ``f`` with
#: the span ``z = S * clamp(f, 0, 1)``.
ADAPTIVE_PARAMETERS = ("span_fraction",)


def adaptive_attention(
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
    """``adaptive`` (Sukhbaatar et al. 2019, Adaptive Attention Span, Sec. 3): head ``h`` weights real position ``p``
    by ``m(p) exp(scale * Q_t K_p)``, renormalised, with ``m = min(max((R + z_h - x) / R, 0), 1)``, ``x`` the distance
    of ``p`` from segment ``i(t)`` (0 inside it), ``z_h = S * clamp(f_h, 0, 1)``, over the positions with ``x <= S``.
    ``parameters["span_fraction"]``: (H,) or (1,) ``f`` (default: ``span_init`` for every head)."""
    check_call(settings, parameters, adaptive_attention, ADAPTIVE_PARAMETERS)
    s, target = settings.resolved_segment_size(), settings.target_length
    ramp, max_span = settings.resolved_span_ramp(), settings.resolved_max_span()
    fraction = parameter(parameters, "span_fraction", settings.resolved_span_init()).reshape(-1)
    heads = queries.shape[1]
    spans = max_span * fraction.clamp(0.0, 1.0)
    if spans.numel() == 1:
        spans = spans.expand(heads)
    if spans.numel() != heads:
        raise ValueError(f"`span_fraction` has {spans.numel()} spans for {heads} heads; give one per head or one.")

    def one_query_of(span: float):  # noqa: ANN202 - a QueryFunction
        def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
            n = len(k)
            i = segment_of(t, num_segments(n, s), target)
            first, last = i * s, i * s + s - 1  # the scheduled segment's positions (the last one may be short)
            rows, masks = [], []
            for p in range(n):
                distance = first - p if p < first else (p - last if p > last else 0)
                mask = min(max((ramp + span - distance) / ramp, 0.0), 1.0)
                if distance <= max_span and mask > 0:
                    rows.append(p)
                    masks.append(mask)
            scores = scale * (k[rows] @ query)
            weights = torch.tensor(masks, dtype=torch.float64) * torch.exp(scores - scores.max())
            return (weights / weights.sum()) @ v[rows]

        return one_query

    outputs = [
        per_query(queries[:, h : h + 1], keys[:, h : h + 1], values[:, h : h + 1], key_valid, start_position,
                  one_query_of(float(spans[h])))
        for h in range(heads)
    ]
    return torch.cat(outputs, dim=1)


def bp_partition(segment: int, segments: int, span_nodes: int) -> list[tuple[int, int]]:
    """The span nodes ``(level, index)`` a query of segment ``segment`` attends in an input of ``segments``
    segments (BP-Transformer's partition over segment leaves, ``docs/design.md``): ``span_nodes`` nodes per level
    and side, one more where the boundary must be aligned to the next level; nodes wholly past the last segment
    are left out. Together with the segment itself they cover every segment exactly once."""
    nodes = []
    left, right, level = segment, segment + 1, 0
    while left > 0 or right * 2**level < segments:
        low = left - span_nodes
        if low > 0 and low % 2 == 1:
            low -= 1
        low = max(low, 0)
        high = right + span_nodes
        high += high % 2
        nodes += [(level, j) for j in range(low, left)]
        nodes += [(level, j) for j in range(right, high) if j * 2**level < segments]
        left, right, level = low // 2, high // 2, level + 1
    return nodes


def bp_attention(
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
    """``bp`` (Ye et al. 2019, BP-Transformer, Sec. 3, binary partitioning with segments as leaves): softmax over
    the real positions of segment ``i(t)`` and the span nodes of :func:`bp_partition`, node ``(l, j)`` having as key
    and value the mean of the real keys and values of segments ``j * 2**l .. (j + 1) * 2**l - 1``."""
    check_call(settings, parameters, bp_attention)
    s, target, k_nodes = settings.resolved_segment_size(), settings.target_length, settings.resolved_span_nodes()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        n = len(k)
        m = num_segments(n, s)
        i = segment_of(t, m, target)
        rows = segment_rows(i, n, s)
        node_keys, node_values = [k[rows]], [v[rows]]
        for level, j in bp_partition(i, m, k_nodes):
            span = slice(j * 2**level * s, min((j + 1) * 2**level * s, n))
            node_keys.append(k[span].mean(dim=0, keepdim=True))
            node_values.append(v[span].mean(dim=0, keepdim=True))
        return softmax_attention(query, torch.cat(node_keys), torch.cat(node_values), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def block_topk_attention(
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
    """Float64 reference: per query and head, softmax over the real positions of segment ``i(t)`` and of the ``r``
    blocks of other segments with the largest ``scale * Q_t . mean(K_B)`` (ties: the earlier block first; all of
    them when there are at most ``r``), a block being ``b`` consecutive real positions of one segment (its last
    block shorter when the segment is)."""
    check_call(settings, parameters, block_topk_attention)
    s, target, top = settings.resolved_segment_size(), settings.target_length, settings.resolved_top_segments()
    b = settings.resolved_block_size()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        m = num_segments(len(k), s)
        i = segment_of(t, m, target)
        rows = [segment_rows(j, len(k), s) for j in range(m)]
        others = [range(start, min(start + b, segment.stop)) for j, segment in enumerate(rows) if j != i
                  for start in range(segment.start, segment.stop, b)]  # in position order
        gates = [scale * float(k[block.start:block.stop].mean(dim=0) @ query) for block in others]
        chosen = sorted(range(len(others)), key=lambda j: (-gates[j], j))[:top]
        read = torch.cat([torch.arange(rows[i].start, rows[i].stop)]
                         + [torch.arange(others[j].start, others[j].stop) for j in chosen])
        return softmax_attention(query, k[read], v[read], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
