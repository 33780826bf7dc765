"""Pages of low-rank keys (``knn_index="loki"`` with ``index_page``): a first stage that reads a few percent of the
channels :mod:`srformer.attention.knn_loki` would read, found by measurement for long inputs.

``knn_index="loki"`` scores every key on ``r`` channels of its head's principal basis, so a step reads ``H·r·k``
numbers per layer: about 5% of full attention's bytes at any length. With pages, the keys of each head are sorted
once, at the build, so that keys close in the principal basis share a page of ``b = index_page`` keys, and each
page keeps, per signed channel, the largest of its keys' values. A decoder step then:

1. bounds every page on the ``r`` channels the query weighs most: ``sum_i x_i max_{j in page} c_ji``, at least the
   low-rank score of each of its keys (Quest's page bounds, Tang et al. 2024, Sec. 3, taken in Loki's basis);
2. reads the ``r`` channels of the keys of the ``P = index_pages`` pages of best bound, and takes the
   ``index_candidates`` of best low-rank score among them, as ``knn_index="loki"`` does among all keys; with
   ``index_key_rank = r'``, it scores those keys on the query's ``r'`` largest channels instead (the bounds keep
   ``r``), so that fewer candidates hold the same top ``K``.

It reads ``H·r·(k/b + P·b)`` numbers instead of ``H·r·k``: at 262,144 tokens, pages of 16 and 256 pages read,
17 times fewer. On the CPU (:func:`paged_candidates`) both sums are ``embedding_bag`` calls; off the CPU
(:func:`read_page_candidates`) they are fused channel sums (:func:`~srformer.attention.gathered.channel_sums`),
which read the same entries in fewer operator calls. Every key is still reachable: when ``P`` pages hold every
key (``P·b >= k``) the candidates are ``knn_index="loki"``'s.

**The order** (:func:`page_order`), what makes a page's bound tight: each key's ``L = 6`` channels of largest
variance are cut into 8 levels at their real keys' octiles, and the keys are sorted by the Morton code of those
levels (their bits interleaved, the largest variance's first), ties by position, padded positions last: per head,
one ``sort`` of each of the ``L`` channels and one of the codes. Measured on the recall probe's keys (its seed-2
base; the share of the exact search's top 32 keys per head that the first stage finds): at 16,384 tokens, pages of
16 and 128 read, 65.7% with pages in encoder order, 95.8% with this order, 97.1% with a kd-tree's (a sort per level:
about 2.5 s per layer at 262,144 tokens on one CPU thread) and 98.2% without pages; at 65,536 tokens, 256 pages
read, 95.7% with this order and 95.7% without pages, but 82.5% with the levels cut at the standard normal's octiles
instead (the whitened channels are far from normal).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from srformer.attention.gathered import channel_sums
from srformer.attention.segmented import cast
from srformer.attention.selection import grouped_topk

__all__ = [
    "PAGE_CODE_BITS", "PAGE_CODE_CHANNELS", "keys_in_best_pages", "page_order", "page_tables", "paged_candidates",
    "paged_pool", "read_page_candidates",
]

#: ``L``: the channels of largest variance a key's page code is made of.
PAGE_CODE_CHANNELS = 6
#: The bits per channel of a key's page code: ``2^3 = 8`` levels.
PAGE_CODE_BITS = 3


def page_order(whitened: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    """Each head's keys in page order (module docstring): ascending Morton code of the levels of the ``L`` channels
    of largest variance, ties by position, padded positions last. A channel's levels are cut at its real keys'
    octiles: the ``floor(i·(n - 1) / 8)``-th smallest of the ``n`` real values, ``i = 1 .. 7``; a value's level is
    the number of cuts below it.

    Args:
        whitened: (B, H, m, k) every key's value on each kept channel divided by its spread, ``c_ji / s_i``, the
            largest variance last (:func:`~srformer.attention.knn_loki.loki_basis`'s order).
        key_valid: (B, k) bool, True at real positions, or None (all real).

    Returns:
        (B, H, k) long: the encoder position of each slot.
    """
    batch, heads, kept, length = whitened.shape
    channels = min(PAGE_CODE_CHANNELS, kept)
    top = whitened[:, :, kept - channels:].contiguous()  # (B, H, L, k), the largest variance last
    count = 2 ** PAGE_CODE_BITS
    step = torch.arange(1, count, device=top.device)
    if key_valid is None:
        real = torch.full((batch, 1), length, device=top.device)
        ranked = top.sort(dim=-1).values
    else:
        valid = key_valid.to(device=top.device, dtype=torch.bool)
        real = valid.sum(dim=-1, keepdim=True)  # (B, 1)
        ranked = top.masked_fill(~valid[:, None, None, :], math.inf).sort(dim=-1).values  # padding last
    which = torch.div(step * (real - 1), count, rounding_mode="floor").clamp_min(0)  # (B, 7)
    cuts = ranked.gather(-1, which[:, None, None, :].expand(-1, heads, channels, -1))  # (B, H, L, 7)
    levels = torch.searchsorted(cuts, top, out_int32=True)  # (B, H, L, k): the cuts below each value
    # bit b of the level of channel j (L - 1: the largest variance) goes to place b·L + j: one table of each
    # (channel, level)'s bits in place, looked up and summed over the channels (int32: 3·6 = 18 bits)
    table = _code_table(channels, top.device)  # (L·8,)
    offset = torch.arange(0, channels * count, count, device=top.device, dtype=torch.int32).view(1, 1, channels, 1)
    code = table[levels + offset].sum(dim=2, dtype=torch.int32)  # (B, H, k)
    if key_valid is not None:
        code = code.masked_fill(~valid[:, None, :], 1 << (PAGE_CODE_BITS * channels))
    return torch.sort(code, dim=-1, stable=True).indices


def _code_table(channels: int, device: torch.device) -> torch.Tensor:
    """(L·2^bits,) int32: entry ``j·2^bits + v``, the bits of level ``v`` of channel ``j`` at their places in the
    code, bit ``b`` at ``b·L + j``. Made by operator calls on the device (no host tensor copied in)."""
    count = 2 ** PAGE_CODE_BITS
    level = torch.arange(count, device=device, dtype=torch.int32)  # (8,)
    bit = torch.arange(PAGE_CODE_BITS, device=device, dtype=torch.int32)  # (bits,)
    channel = torch.arange(channels, device=device, dtype=torch.int32)  # (L,)
    place = bit[None, None, :] * channels + channel[:, None, None]  # (L, 1, bits)
    return (((level[None, :, None] >> bit) & 1) << place).sum(dim=-1, dtype=torch.int32).flatten()


def page_tables(
    rotated: torch.Tensor, padded: torch.Tensor | None, order: torch.Tensor, page: int, dtype: torch.dtype,
    padding_value: float,
) -> tuple[torch.Tensor, ...]:
    """The step's tables: the signed channels in pages, each page's largest values, and each slot's encoder
    position.

    The channels are kept **page-major**: a page's ``2m`` signed channels of ``b`` keys are one contiguous block, so
    that the keys of a page read are one stretch of memory, not ``r`` stretches a table apart. On one CPU thread,
    with each layer's tables out of cache (six layers in turn, 65,536 tokens), the ``embedding_bag`` of 256 pages'
    24 channels took about 0.66-0.93 ms in this layout against 0.89-1.24 ms channel-major.

    Args:
        rotated: (B, H, k, m) each key's whitened channels ``c_ji / s_i``, already in page order
            (:func:`page_order`), in float32 or wider.
        padded: (B, H, k) bool in page order, True at padded positions (which come last), or None.
        order: (B, H, k) long from :func:`page_order`.
        page: ``b``, keys per page.
        dtype: the tables' dtype (the channels are cast to it).
        padding_value: the channel value of a padded position in both signs, below 0, also that of the slots past
            the last key (the last page's rest, ``n·b - k`` of them).

    Returns:
        ``(paged, bounds, slot_position)``: (B·H, n, 2m, b) the channels ``c_ji / s_i`` then ``-c_ji / s_i``,
        ``n = ceil(k / b)`` pages per head; (B·H, 2m, n, 1) each page's largest value per signed channel (the
        table :func:`~srformer.attention.gathered.channel_sums` reads, a page's bound its one slot); (B·H, n, b)
        long each slot's encoder position. A slot past the last key holds the position of the head's last slot, a
        padded position when there is one: a step reads such a slot only when fewer keys than it needs are
        candidates, which needs padding (the pages read hold at least ``(P - 1)·b >= K`` keys,
        :meth:`~srformer.attention.knn.KNNSettings.validate`, and score above the empty slots unless every channel
        weight of the query is 0), and then reads it as that padded position.
    """
    batch, heads, length, kept = rotated.shape
    pages = -(-length // page)
    extra = pages * page - length
    slot_position = order
    if extra:  # the last page's empty slots
        rotated = F.pad(rotated, (0, 0, 0, extra))
        slot_position = torch.cat([order, order[..., -1:].expand(-1, -1, extra)], dim=-1)
    keys = rotated.view(batch * heads, pages, page, kept).transpose(2, 3)  # (B·H, n, m, b), a view
    paged = cast(torch.cat([keys, -keys], dim=2), dtype)  # (B·H, n, 2m, b)
    if padded is not None or extra:
        empty = padded if padded is not None else torch.zeros_like(order, dtype=torch.bool)
        empty = F.pad(empty, (0, extra), value=True) if extra else empty
        paged.masked_fill_(empty.view(batch * heads, pages, 1, page), padding_value)
    bounds = paged.amax(dim=-1).transpose(1, 2).contiguous().unsqueeze(-1)  # (B·H, 2m, n, 1)
    return paged, bounds, slot_position.reshape(batch * heads, pages, page)


def paged_pool(candidates: int, pages: int, page: int, length: int) -> int:
    """``C' = min(C, (P - 1)·b + 1, k)``: the candidates a step takes from its ``P`` pages, at most the keys they
    surely hold (``P - 1`` full pages and one key of the last, partly empty one), so that an empty slot is never a
    candidate where a key could be."""
    return min(candidates, (pages - 1) * page + 1, length)


def paged_candidates(
    rows: torch.Tensor, values: torch.Tensor, paged: torch.Tensor, bounds: torch.Tensor, pages: int, pool: int,
    bags: torch.Tensor, page_bags: torch.Tensor, key_rows: torch.Tensor, key_values: torch.Tensor,
) -> torch.Tensor:
    """A step's first stage through pages on the CPU (module docstring): the ``min(P, n)`` pages of best bound, the
    ``pool`` slots of best low-rank score in them, by two ``embedding_bag`` calls that read the query's ``r``
    channels only, each selection by :func:`~srformer.attention.selection.grouped_topk` (long rows in groups). No
    host sync.

    Args:
        rows: (B·H, r) long, each chosen signed channel's row in ``bounds`` seen as (B·H·2m, n)
            (``2m · (example·H + head) + channel``).
        values: (B·H, r) the query's values on them (positive), in the channels' dtype.
        paged, bounds: from :func:`page_tables`.
        pages: ``P``. pool: ``C'`` from :func:`paged_pool`.
        bags: (B·H,) long, ``r · arange(B·H)``.
        page_bags: (B·H·min(P, n),) long, ``r' · arange(B·H·min(P, n))``.
        key_rows: (B·H, r') long, the row of each signed channel the keys of the pages read are scored on (the
            query's ``r'`` largest, ``index_key_rank``) in the first page of its head in ``paged`` flattened to
            (B·H·n·2m, b): ``2m · n · (example·H + head) + channel``.
        key_values: (B·H, r') the query's values on those channels (positive), in the channels' dtype.

    Returns:
        (B·H, C') long slots (``page · b + offset`` in page order) of :func:`page_tables`' per-slot tables.
    """
    count = rows.shape[0]
    page, doubled, total = paged.shape[-1], paged.shape[-2], bounds.shape[2]
    read = min(pages, total)
    rough_pages = F.embedding_bag(rows.reshape(-1), bounds.view(-1, total), bags,
                                  per_sample_weights=values.reshape(-1), mode="sum")  # (B·H, n)
    chosen = grouped_topk(rough_pages, read)  # (B·H, P)
    # the rows of the chosen pages' values: row ((example·H + head)·n + page)·2m + channel of ``paged``
    page_rows = torch.add(key_rows[:, None, :], chosen[:, :, None], alpha=doubled)  # (B·H, P, r')
    # the query's values repeated for each page: (B·H, P·r') in page-major order
    rough = F.embedding_bag(page_rows.view(-1), paged.view(-1, page), page_bags,
                            per_sample_weights=key_values.repeat(1, read).view(-1), mode="sum")  # (B·H·P, b)
    best = grouped_topk(rough.view(count, read * page), pool)  # (B·H, C') in [0, P·b)
    which = torch.div(best, page, rounding_mode="floor")
    return torch.add(best, chosen.gather(1, which) - which, alpha=page)  # page·b + offset, in page order


def read_page_candidates(
    channels: torch.Tensor, values: torch.Tensor, paged: torch.Tensor, bounds: torch.Tensor,
    slot_position: torch.Tensor, pages: int, pool: int, heads_index: torch.Tensor, key_channels: torch.Tensor,
    key_values: torch.Tensor,
) -> torch.Tensor:
    """A step's first stage through pages off the CPU (module docstring), as :func:`paged_candidates`: the query's
    ``r`` channels of every page's bound and of the keys of the pages read, each summed by one
    :func:`~srformer.attention.gathered.channel_sums` (fused: it reads those channels' entries only), in the
    float32 the parallel path sums in. Eight operator calls (views included). No host sync.

    Args:
        channels: (B·H, r) long, the query's signed channels (in ``[0, 2m)``).
        values: (B·H, r) the query's values on them (positive), in the channels' dtype.
        paged, bounds, slot_position: from :func:`page_tables`.
        pages: ``P``. pool: ``C'`` from :func:`paged_pool`.
        heads_index: (B·H, 1) long, ``arange(B·H)`` (kept by the caller).
        key_channels, key_values: (B·H, r') as ``channels`` and ``values``, the channels the keys of the pages read
            are scored on (the query's ``r'`` largest, ``index_key_rank``).

    Returns:
        (B·H, C') long encoder positions of the candidates.
    """
    count, total, _, page = paged.shape
    read = min(pages, total)
    rough_pages = channel_sums(bounds, channels, values)  # (B·H, n)
    chosen = torch.topk(rough_pages, read, dim=-1, sorted=False).indices  # (B·H, P)
    rough = channel_sums(paged.transpose(1, 2), key_channels, key_values, chosen)  # (B·H, P·b), a view
    best = torch.topk(rough, pool, dim=-1, sorted=False).indices  # (B·H, C') in [0, P·b)
    positions = slot_position[heads_index, chosen].view(count, read * page)  # (B·H, P·b)
    return positions.gather(1, best)


def keys_in_best_pages(
    weights: torch.Tensor, stored: torch.Tensor, key_valid: torch.Tensor, whitened: torch.Tensor, page: int,
    pages: int, padding_value: float,
) -> torch.Tensor:
    """The parallel path's pages (training, teacher forcing): for every query, the keys of its ``P`` pages of best
    bound, the pages a step reads (:func:`page_tables`, :func:`paged_candidates`). A page's bound is
    ``sum_i w_i max_j c_ji`` over the query's signed weights ``w_i`` (``max`` where ``w_i > 0``, ``min`` below),
    padded positions and empty slots at ``padding_value`` in both signs, as the step keeps them.

    Args:
        weights: (B, H, q, m) the query's weights, zero off its ``r`` channels.
        stored: (B, H, k, m) the channels as the step stores them (rounded to its dtype).
        key_valid: (B, k) bool, True at real positions.
        whitened: (B, H, m, k) the channels before rounding, which the order is made of (:func:`page_order`).
        page: ``b``. pages: ``P``.
        padding_value: the step's padded channel value (below 0).

    Returns:
        (B, H, q, k) bool: True for the keys in the query's pages.
    """
    batch, heads, length, m = stored.shape
    total = -(-length // page)
    order = page_order(whitened, key_valid)  # (B, H, k)
    padded = ~key_valid[:, None, :, None]
    high = stored.masked_fill(padded, padding_value).gather(2, order[..., None].expand(-1, -1, -1, m))
    low = stored.masked_fill(padded, -padding_value).gather(2, order[..., None].expand(-1, -1, -1, m))
    extra = total * page - length
    high = F.pad(high, (0, 0, 0, extra), value=padding_value).view(batch, heads, total, page, m).amax(3)
    low = F.pad(low, (0, 0, 0, extra), value=-padding_value).view(batch, heads, total, page, m).amin(3)
    bounds = weights.clamp_min(0.0) @ high.mT + weights.clamp_max(0.0) @ low.mT  # (B, H, q, n)
    best = torch.topk(bounds, min(pages, total), dim=-1).indices
    chosen = torch.zeros_like(bounds, dtype=torch.bool).scatter_(-1, best, True)
    page_of = torch.empty_like(order).scatter_(-1, order, torch.arange(length, device=order.device).expand_as(order))
    page_of = torch.div(page_of, page, rounding_mode="floor")  # (B, H, k): each position's page
    return chosen.gather(-1, page_of[:, :, None, :].expand(-1, -1, chosen.shape[2], -1))
