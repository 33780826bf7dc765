"""The segment-major layout shared by the segment-based mechanisms, and reads of its blocks.

Keys and values are kept as (B, M, H, s, d) blocks: block ``j`` holds compacted positions
``j*s .. j*s + s - 1`` (each example's real positions moved to the front, zeros after them). The (B, M)
axes flatten to a view, so a query (training) or a step (generation) reads its segment's block with one
``index_select`` over the flattened (B*M) axis: a softmax over a segment costs ``O(s*d)`` per query and
head, not ``O(k*d)``.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from srformer.attention.schedule import compaction_order


def block_index(segments: torch.Tensor, max_segments: int) -> torch.Tensor:
    """Flat index of segment blocks in a segment-major tensor whose first two axes (B, M) are flattened.

    Args:
        segments: (B, n) long, a segment index in ``[0, M - 1]`` per example and entry.
        max_segments: ``M``.

    Returns:
        (B*n,) long, ``b * M + segments[b, i]`` in row-major order.
    """
    batch = segments.shape[0]
    offsets = torch.arange(0, batch * max_segments, max_segments, device=segments.device)
    return (segments + offsets[:, None]).reshape(-1)


def take_blocks(blocks: torch.Tensor, index: torch.Tensor, count: int) -> torch.Tensor:
    """The blocks at ``index`` (from :func:`block_index`) of a (B, M, ...) segment-major tensor.

    One ``index_select`` over the flattened (B*M) axis: each block is contiguous, so this copies
    ``count`` dense blocks per example (no element-wise gather).

    Args:
        blocks: (B, M, ...) tensor whose (B, M) axes flatten to a view (the state's layout).
        index: (B*count,) long flat block index.
        count: blocks per example.

    Returns:
        (B, count, ...).
    """
    return blocks.flatten(0, 1).index_select(0, index).view(blocks.shape[0], count, *blocks.shape[2:])


def segment_order(
    key_valid: torch.Tensor | None, batch: int, key_length: int, segment_size: int, device: torch.device
) -> torch.Tensor:
    """The encoder position of each segment-major position, (B, M*s) long, ``M = ceil(k / s)``: each example's
    real positions first, in order (compaction, when ``key_valid`` is given), then 0 at padding positions.

    Args:
        key_valid: (B, k) bool, True at real positions; None when nothing is padded.
        batch, key_length, segment_size: ``B``, ``k`` and ``s`` (tokens).
        device: where the result lives.
    """
    padded = -(-key_length // segment_size) * segment_size
    if key_valid is None:
        return F.pad(torch.arange(key_length, device=device), (0, padded - key_length)).expand(batch, padded)
    order = compaction_order(key_valid.to(device=device, dtype=torch.bool))  # (B, k)
    return F.pad(order, (0, padded - key_length)) if padded != key_length else order


def segment_major(
    keys: torch.Tensor, values: torch.Tensor, key_valid: torch.Tensor | None, segment_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys and values (B, H, k, d) as segment-major blocks (B, M, H, s, d), ``M = ceil(k / s)``.

    With ``key_valid`` each example's real positions are moved to the front first (one
    ``index_select`` of whole (H, d) rows; padding rows read position 0 and the caller zeroes them);
    without it, positions after ``k`` are zero rows. The (B, M) axes always flatten to a view, so a
    step or a query reads its segment's block with one ``index_select``. The blocks are contiguous:
    one copy of the keys and one of the values (transformers' projections are (B, k, H, d) memory).

    Returns:
        ``(keys, values, order)``: the blocks, and (B, M*s) long, the encoder position of each
        segment-major position (0 at padding positions past ``k``).
    """
    batch, heads, k, d = keys.shape
    max_segments = -(-k // segment_size)
    padded = max_segments * segment_size
    device = keys.device
    rows_keys, rows_values = keys.transpose(1, 2), values.transpose(1, 2)  # (B, k, H, d)
    order = segment_order(key_valid, batch, k, segment_size, device)
    if key_valid is not None:
        flat = (order + torch.arange(0, batch * k, k, device=device)[:, None]).reshape(-1)
        rows_keys = rows_keys.reshape(batch * k, heads, d).index_select(0, flat)
        rows_values = rows_values.reshape(batch * k, heads, d).index_select(0, flat)
    else:
        if padded != k:
            rows_keys = F.pad(rows_keys, (0, 0, 0, 0, 0, padded - k))
            rows_values = F.pad(rows_values, (0, 0, 0, 0, 0, padded - k))

    def blocks(rows: torch.Tensor) -> torch.Tensor:
        # contiguous: every later kernel (the batched K_j^T V_j matmul, W, norm(K), the finiteness check,
        # a step's block reads) then runs on dense memory without copies of its own
        return rows.reshape(batch, max_segments, segment_size, heads, d).transpose(2, 3).contiguous()

    return blocks(rows_keys), blocks(rows_values), order
