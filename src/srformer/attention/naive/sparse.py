"""Float64 references of the sparse-pattern mechanisms over the segment schedule: ``bigbird`` (Zaheer et al.
2020) and ``compressive`` (Rae et al. 2020), each query's key set written from the paper (and the choices of
``docs/design.md``, "Mechanisms of the efficient-transformer literature") with Python loops and sets."""

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
    check_call(settings, parameters, "bigbird")
    s, target = settings.segment_size, settings.target_length
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
    check_call(settings, parameters, "compressive")
    s, target, c = settings.segment_size, settings.target_length, settings.resolved_compression_rate()

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
