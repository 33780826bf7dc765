"""The Triton kernels of :mod:`srformer.attention.gathered`, compiled on first use (Triton is imported only here).

Each program owns one example-and-head row ``i`` (``B·H`` of them) and a block of its outputs, loads the indices it
needs, then the picked rows or channel entries straight from the table (no copy), and accumulates in float32
(float64 for float64 inputs). Run on the CPU only by Triton's interpreter (``TRITON_INTERPRET=1``, the tests); no
GPU has run them yet.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from srformer.attention.raf_scan import triton_available

__all__ = ["channel_sums_triton", "gathered_mix_triton", "gathered_scores_triton", "triton_available"]

#: Outputs per program (candidates, channels of the mix, page slots), and the rows' columns loaded at once.
BLOCK = 64
COLUMNS = 64


@functools.cache
def _kernels() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def scores_kernel(rows_ptr, positions_ptr, queries_ptr, out_ptr, heads, pool, width,
                      row_example, row_position, row_column, query_row,
                      WIDE: tl.constexpr, BLOCK: tl.constexpr, COLUMNS: tl.constexpr):
        """out[i, c] = queries[i] . rows[i // heads, positions[i, c]]."""
        i = tl.program_id(0).to(tl.int64)  # 64-bit offsets: an example's rows pass 2^31 entries at 1M tokens x 8
        block = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = block < pool
        position = tl.load(positions_ptr + i * pool + block, mask=inside, other=0)
        start = rows_ptr + (i // heads) * row_example + position * row_position  # (BLOCK,)
        total = tl.zeros([BLOCK], dtype=WIDE)
        for first in range(0, width, COLUMNS):
            column = first + tl.arange(0, COLUMNS)
            present = column < width
            query = tl.load(queries_ptr + i * query_row + column, mask=present, other=0.0).to(WIDE)
            row = tl.load(start[:, None] + column[None, :] * row_column, mask=inside[:, None] & present[None, :],
                          other=0.0).to(WIDE)
            total += tl.sum(row * query[None, :], axis=1)
        tl.store(out_ptr + i * pool + block, total, mask=inside)

    @triton.jit
    def mix_kernel(rows_ptr, positions_ptr, chosen_ptr, weights_ptr, out_ptr, heads, pool, count, width,
                   row_example, row_position, row_column,
                   WIDE: tl.constexpr, BLOCK: tl.constexpr, COLUMNS: tl.constexpr):
        """out[i, 0, :] = sum_s weights[i, s] rows[i // heads, positions[i, chosen[i, s]]]."""
        i = tl.program_id(0).to(tl.int64)
        column = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
        present = column < width
        total = tl.zeros([COLUMNS], dtype=WIDE)
        for first in range(0, count, BLOCK):
            slot = first + tl.arange(0, BLOCK)
            inside = slot < count
            which = tl.load(chosen_ptr + i * count + slot, mask=inside, other=0)
            position = tl.load(positions_ptr + i * pool + which, mask=inside, other=0)
            weight = tl.load(weights_ptr + i * count + slot, mask=inside, other=0.0).to(WIDE)
            start = rows_ptr + (i // heads) * row_example + position * row_position
            row = tl.load(start[:, None] + column[None, :] * row_column, mask=inside[:, None] & present[None, :],
                          other=0.0).to(WIDE)
            total += tl.sum(row * weight[:, None], axis=0)
        tl.store(out_ptr + i * width + column, total, mask=present)

    @triton.jit
    def channel_kernel(table_ptr, channels_ptr, weights_ptr, pages_ptr, out_ptr, read, entries, page,
                       table_row, table_channel, table_page, table_slot,
                       HAS_PAGES: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
        """out[i, p·b + s] = sum_c weights[i, c] table[i, channels[i, c], pages[i, p] (or p), s]."""
        i = tl.program_id(0).to(tl.int64)
        entry = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # p·b + s
        inside = entry < entries
        which = entry // page
        if HAS_PAGES:
            which = tl.load(pages_ptr + i * (entries // page) + which, mask=inside, other=0)
        start = table_ptr + i * table_row + which * table_page + (entry % page) * table_slot
        total = tl.zeros([BLOCK], dtype=WIDE)
        for c in range(0, read):
            channel = tl.load(channels_ptr + i * read + c)
            weight = tl.load(weights_ptr + i * read + c).to(WIDE)
            total += weight * tl.load(start + channel * table_channel, mask=inside, other=0.0).to(WIDE)
        tl.store(out_ptr + i * entries + entry, total, mask=inside)

    return scores_kernel, mix_kernel, channel_kernel


def _wide(dtype: torch.dtype) -> Any:
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


def gathered_scores_triton(rows: torch.Tensor, positions: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """:func:`~srformer.attention.gathered.gathered_scores` in one kernel launch (same arguments and result, up to
    the order of the sums)."""
    count, pool = positions.shape
    width = rows.shape[2]
    positions = positions.contiguous()
    out = queries.new_empty(count, pool)
    grid = (count, -(-pool // BLOCK))
    _kernels()[0][grid](rows, positions, queries, out, count // rows.shape[0], pool, width, rows.stride(0),
                        rows.stride(1), rows.stride(2), queries.stride(0), WIDE=_wide(queries.dtype), BLOCK=BLOCK,
                        COLUMNS=COLUMNS)
    return out


def gathered_mix_triton(rows: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                        weights: torch.Tensor) -> torch.Tensor:
    """:func:`~srformer.attention.gathered.gathered_mix` in one kernel launch."""
    count, width = chosen.shape[0], rows.shape[2]
    positions, chosen, weights = positions.contiguous(), chosen.contiguous(), weights.contiguous()
    out = weights.new_empty(count, 1, width)
    grid = (count, -(-width // COLUMNS))
    _kernels()[1][grid](rows, positions, chosen, weights, out, count // rows.shape[0], positions.shape[1],
                        chosen.shape[1], width, rows.stride(0), rows.stride(1), rows.stride(2),
                        WIDE=_wide(weights.dtype), BLOCK=BLOCK, COLUMNS=COLUMNS)
    return out


def channel_sums_triton(table: torch.Tensor, channels: torch.Tensor, weights: torch.Tensor,
                        pages: torch.Tensor | None) -> torch.Tensor:
    """:func:`~srformer.attention.gathered.channel_sums` in one kernel launch."""
    count, _, total, page = table.shape
    read = total if pages is None else pages.shape[1]
    wide = torch.float64 if table.dtype == torch.float64 else torch.float32
    channels, weights = channels.contiguous(), weights.contiguous()
    has_pages = pages is not None
    pages = channels if pages is None else pages.contiguous()  # an unused pointer without pages
    out = torch.empty(count, read * page, dtype=wide, device=table.device)
    grid = (count, -(-read * page // BLOCK))
    _kernels()[2][grid](table, channels, weights, pages, out, channels.shape[1], read * page, page,
                        table.stride(0), table.stride(1), table.stride(2), table.stride(3),
                        HAS_PAGES=has_pages, WIDE=_wide(table.dtype), BLOCK=BLOCK)
    return out
