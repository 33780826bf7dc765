"""The segment schedule: which encoder segment a decoder step attends to.

Paper Sec. 3.1 and Algorithm 1: ``i(t) = min(floor(t * m / T), m - 1)`` with ``m = ceil(k / s)``
segments of ``s`` encoder tokens. As described in ``docs/design.md`` ("Segment schedule"), ``T`` is a
fixed target length (the same in training and generation) and ``m`` is computed per example from its
real, unpadded encoder length.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def num_segments(lengths: torch.Tensor, segment_size: int) -> torch.Tensor:
    """Number of segments ``m = ceil(k / s)`` of each example.

    Args:
        lengths: (batch,) long, real encoder lengths in tokens (padding excluded).
        segment_size: ``s`` in tokens.

    Returns:
        (batch,) long tensor.
    """
    return torch.div(lengths + segment_size - 1, segment_size, rounding_mode="floor")


def segment_index(positions: torch.Tensor, segments: torch.Tensor, target_length: int) -> torch.Tensor:
    """Segment attended by each decoder position, ``i(t) = min(floor(t * m / T), m - 1)``.

    Args:
        positions: (q,) long decoder input positions ``t`` (0-based and absolute: position 0
            holds the decoder start token, whose output is the first summary token).
        segments: (batch,) long number of segments ``m`` of each example (>= 1).
        target_length: ``T``, the fixed target length in tokens.

    Returns:
        (batch, q) long segment indices in ``[0, m_b - 1]``.
    """
    raw = torch.div(positions[None, :] * segments[:, None], target_length, rounding_mode="floor")
    return torch.minimum(raw, segments[:, None] - 1)


def segment_at(table: torch.Tensor, position: int | torch.Tensor, target_length: int) -> torch.Tensor:
    """``i(t)`` of one decoder position read from a table of the schedule.

    Args:
        table: (batch, T + 1) long, :func:`segment_index` of the positions ``0 .. T`` (later ones read ``i(T)``).
        position: the decoder position ``t``: an int (a view, no kernel) or a 0-d tensor (static caches: clamped and
            read on the table's device, no host sync).
        target_length: ``T`` in tokens.

    Returns:
        (batch,) long.
    """
    if isinstance(position, torch.Tensor):
        column = position.reshape(1).clamp(max=target_length).to(device=table.device, dtype=torch.long)
        return table.index_select(1, column)[:, 0]
    return table[:, min(position, target_length)]


def compaction_order(key_valid: torch.Tensor) -> torch.Tensor:
    """Gather index that moves each example's real encoder positions to the front, in order.

    Segments are defined over an example's real tokens only, so left padding, right padding
    or any other padding pattern gives the same segments.

    Args:
        key_valid: (batch, k) bool, True at real (unpadded) encoder positions.

    Returns:
        (batch, k) long index for ``torch.gather`` along the key axis.
    """
    return torch.argsort((~key_valid).to(torch.int8), dim=1, stable=True)


def tracing() -> bool:
    """True while ``torch.compile`` or ``torch.export`` traces the code: the paths then skip every
    data-dependent host decision (see :func:`real_lengths`) and run their sync-free form."""
    return bool(torch.compiler.is_compiling())


#: The most entries a module keeps in a cache of :func:`kept_per_shape` (beams, batch sizes, lengths, dtypes and
#: devices change across calls).
KEPT_ENTRIES = 8


def kept_per_shape(cache: dict[Any, T], key: Hashable, make: Callable[[], T]) -> T:
    """``make()`` kept in ``cache`` under ``key``: the constant index tensors of a decoder step, made once per shape
    (batch size, length, dtype, device, ...) in eager mode so that a step makes no operator call for them, and
    made in the graph when traced (a graph must not read tensors an eager call left on the module). The cache holds
    at most :data:`KEPT_ENTRIES`; a full one is emptied before the next entry.

    Args:
        cache: the module's dict for these tensors.
        key: everything the tensors depend on.
        make: builds them.
    """
    if tracing():
        return make()
    value = cache.get(key)
    if value is None:
        if len(cache) >= KEPT_ENTRIES:
            cache.clear()
        value = cache[key] = make()
    return value


def real_lengths(
    key_valid: torch.Tensor | None, batch: int, key_length: int, device: torch.device
) -> tuple[torch.Tensor, bool]:
    """Real (unpadded) encoder length of each example, and whether compaction is needed.

    No host sync: any given mask is compacted (for a mask with no padding, the same result as none, one gather
    more), so that building a state never waits for the device (a sync per layer and sequence would stall the
    kernel launches of a GPU's first step). A batch with nothing padded usually comes with no mask at all:
    transformers' SDPA path drops an all-ones encoder mask.

    An example whose mask is all zero (an empty document) has length 0; the attention modules
    define its output as that of an empty memory, 0 (``docs/design.md``, "Empty encoder inputs").

    Args:
        key_valid: (batch, k) bool, True at real positions, or None when nothing is padded.
        batch: number of examples.
        key_length: ``k``, the padded encoder length in tokens.
        device: device of the returned tensor.

    Returns:
        ``(lengths, padded)``: (batch,) long lengths in tokens, and whether positions must be
        compacted (True for any given mask).
    """
    if key_valid is None:
        return torch.full((batch,), key_length, dtype=torch.long, device=device), False
    return key_valid.to(device=device, dtype=torch.bool).sum(dim=1), True
