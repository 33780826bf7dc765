"""Float64 references of the softmax mechanisms over a chosen set of keys: full, segmented, xl, window,
strided, star and longt5 (their per-query key sets written from each paper)."""

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
    from srformer.core import SRformerConfig


def full_attention(
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
    """``full``: ``O[t] = softmax(scale * Q_t K^T) V`` over every real position (paper Eq. 1-2, 5)."""
    check_call(settings, parameters, full_attention)
    return per_query(
        queries, keys, values, key_valid, start_position, lambda query, k, v, t: softmax_attention(query, k, v, scale)
    )


def segmented_attention(
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
    """``segmented``: ``O_S[t] = softmax(scale * Q_t K_{S_i}^T) V_{S_i}`` with ``i = i(t)`` (paper Eq. 4, 6)."""
    check_call(settings, parameters, segmented_attention)
    s, target = settings.resolved_segment_size(), settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def xl_attention(
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
    """``xl`` (Transformer-XL-style memory, Dai et al. 2019; paper Sec. 4.2): softmax over segment
    ``i(t) - 1`` and segment ``i(t)`` together (2s keys; at ``i(t) = 0`` the current segment only).
    The memory's stop-gradient changes gradients, not outputs, so it does not appear here."""
    check_call(settings, parameters, xl_attention)
    s, target = settings.resolved_segment_size(), settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        i = segment_of(t, num_segments(len(k), s), target)
        first = segment_rows(max(i - 1, 0), len(k), s).start
        rows = slice(first, segment_rows(i, len(k), s).stop)
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def window_attention(
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
    """``window`` (Longformer's sliding window, Beltagy et al. 2020, Sec. 3.1, centred by the schedule):
    softmax over the real positions ``p`` with ``start <= p < start + w``, ``start = i(t) * s + floor(s / 2) -
    floor(w / 2)``, ``w = settings.resolved_window_size()`` (the window cut at both ends of the input)."""
    check_call(settings, parameters, window_attention)
    s, target, w = settings.resolved_segment_size(), settings.target_length, settings.resolved_window_size()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        start = segment_of(t, num_segments(len(k), s), target) * s + s // 2 - w // 2
        rows = slice(max(start, 0), min(start + w, len(k)))
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def strided_attention(
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
    """``strided`` (Sparse Transformer's strided/fixed pattern, Child et al. 2019, Sec. 4.2-4.3, the scheduled
    segment as its local part): softmax over the union of segment ``i(t)``'s real positions and the real
    positions ``p`` with ``p mod l = l - 1``, ``l = settings.resolved_stride()``, each position once."""
    check_call(settings, parameters, strided_attention)
    s, target, stride = settings.resolved_segment_size(), settings.target_length, settings.resolved_stride()

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        segment = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        rows = sorted(set(range(segment.start, segment.stop)) | set(range(stride - 1, len(k), stride)))
        return softmax_attention(query, k[rows], v[rows], scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def star_attention(
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
    """``star`` (Star-Transformer's relay node, Guo et al. 2019, Sec. 3, with the scheduled segment as the
    satellites' neighbourhood): softmax over segment ``i(t)`` plus one relay token whose key and value are the
    mean of all the example's real keys and values (s + 1 keys)."""
    check_call(settings, parameters, star_attention)
    s, target = settings.resolved_segment_size(), settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        rows = segment_rows(segment_of(t, num_segments(len(k), s), target), len(k), s)
        relay_key, relay_value = k.mean(dim=0, keepdim=True), v.mean(dim=0, keepdim=True)
        return softmax_attention(query, torch.cat([k[rows], relay_key]), torch.cat([v[rows], relay_value]), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)


def longt5_attention(
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
    """``longt5`` (LongT5-style transient global tokens, Guo et al. 2022; paper Sec. 4.2): softmax over
    segment ``i(t)`` plus one global token per segment, whose key and value are the mean of that
    segment's real keys and values (s + m keys; the current segment's own global token included)."""
    check_call(settings, parameters, longt5_attention)
    s, target = settings.resolved_segment_size(), settings.target_length

    def one_query(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: int) -> torch.Tensor:
        m = num_segments(len(k), s)
        segments = [segment_rows(j, len(k), s) for j in range(m)]
        global_keys = torch.stack([k[rows].mean(dim=0) for rows in segments])  # (m, d)
        global_values = torch.stack([v[rows].mean(dim=0) for rows in segments])
        rows = segments[segment_of(t, m, target)]
        return softmax_attention(query, torch.cat([k[rows], global_keys]), torch.cat([v[rows], global_values]), scale)

    return per_query(queries, keys, values, key_valid, start_position, one_query)
