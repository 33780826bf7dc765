"""Gathered products as single operators: a step reads the rows it picks and nothing it copied.

A long-input step of ``knn-loki`` (:mod:`srformer.attention.knn_loki`) reads a few hundred of the encoder's rows
and a few dozen of the pages' channels per head. Written as torch calls, each read is an indexing call that copies
what it picks and a product that reads the copy: the bytes picked move three times. These three operators fuse the
pick into the product, so they move what they pick once, plus their small inputs and outputs:

- :func:`gathered_scores`: the exact scores of a head's candidates, ``q . h_j`` for the rows ``h_j`` it names;
- :func:`gathered_mix`: the softmax's mix of the rows chosen among them, ``sum_s w_s h_{j_s}``;
- :func:`channel_sums`: a query's sums over the ``r`` signed channels it weighs, of every page's bound or of the keys
  of the pages it reads (:mod:`srformer.attention.loki_pages`): the ``r`` rows an ``embedding_bag`` would read,
  out of the ``2m`` a dense product over every channel reads.

Each is a :func:`torch.library.custom_op`: one call for the operator count
(:mod:`srformer.benchmarks.operator_count`), one opaque node under ``torch.compile`` (its fake implementation makes
the output's shape), and for the byte count (:mod:`srformer.benchmarks.byte_count`) a call that reads what
:data:`PICKED_BYTES` says it picks. On CUDA with Triton (it comes with PyTorch's CUDA wheels on Linux) each is one
Triton kernel (:mod:`srformer.attention.gathered_triton`); elsewhere (the CPU, or a device without Triton) the
indexing and product it fuses, which are also the reference the kernels are tested against (through Triton's
interpreter on the CPU). No operator syncs with the host. No autograd: a step that records gradients reads its rows
with torch calls.

:data:`USE_TRITON` False runs the torch forms on CUDA too (to rule the kernels out when a result looks wrong); a
kernel that fails to compile or launch warns once and leaves the torch forms in its place for the process.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from srformer.attention.gathered_triton import (
    channel_sums_triton,
    gathered_mix_triton,
    gathered_scores_triton,
    triton_available,
)

__all__ = ["PICKED_BYTES", "USE_TRITON", "channel_sums", "gathered_mix", "gathered_scores", "kernel_or_torch"]

#: Whether CUDA tensors go through the Triton kernels (when Triton is installed); False: the torch forms everywhere.
USE_TRITON = True


def _use_triton(tensor: torch.Tensor) -> bool:
    return USE_TRITON and tensor.device.type == "cuda" and triton_available()


def _kernel_failed(error: Exception) -> None:
    """A Triton kernel raised (a device it cannot compile for): warn, and turn :data:`USE_TRITON` off for the
    process."""
    global USE_TRITON
    USE_TRITON = False
    warnings.warn(f"srformer's fused Triton kernels failed ({type(error).__name__}: {error}); torch indexing and "
                  "products are used instead (the same results up to rounding, more bytes moved).", stacklevel=3)


def kernel_or_torch(kernel: Callable[..., torch.Tensor], torch_form: Callable[..., torch.Tensor],
                    *args: Any) -> torch.Tensor:
    """``kernel(*args)`` when ``args[0]`` is on CUDA and Triton may run (:data:`USE_TRITON`), else (or when the kernel
    raises: a warning, and the torch forms for the rest of the process) ``torch_form(*args)``. Every fused
    operator's dispatch (this module's, and :mod:`srformer.attention.nearest_centres`')."""
    if _use_triton(args[0]):
        try:
            return kernel(*args)
        except Exception as error:  # the torch form, once warned
            _kernel_failed(error)
    return torch_form(*args)


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype: float64 for float64, float32 for anything narrower."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---- torch forms (the CPU's operators and the kernels' reference) -------------------------------------------------


def _examples(count: int, batch: int, device: torch.device) -> torch.Tensor:
    """(B·H, 1) long: each example-and-head row's example, ``i // H``."""
    return torch.arange(count, device=device).div(count // batch, rounding_mode="floor")[:, None]


def gathered_scores_torch(rows: torch.Tensor, positions: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """:func:`gathered_scores` as an indexing and a batched product."""
    count, pool = positions.shape
    picked = rows[_examples(count, rows.shape[0], rows.device), positions].to(queries.dtype)  # (B·H, C, D)
    return torch.bmm(queries[:, None, :], picked.mT).view(count, pool)  # the query as one row: faster on a CPU


def gathered_mix_torch(rows: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                       weights: torch.Tensor) -> torch.Tensor:
    """:func:`gathered_mix` as two indexings and a batched product."""
    count, width = chosen.shape
    picked = rows[_examples(count, rows.shape[0], rows.device), positions.gather(1, chosen)].to(weights.dtype)
    return torch.bmm(weights.view(count, 1, width), picked)


def channel_sums_torch(table: torch.Tensor, channels: torch.Tensor, weights: torch.Tensor,
                       pages: torch.Tensor | None) -> torch.Tensor:
    """:func:`channel_sums` as an indexing and a batched product."""
    count, _, total, page = table.shape
    heads = torch.arange(count, device=table.device)[:, None, None]
    which = torch.arange(total, device=table.device)[None, None, :] if pages is None else pages[:, None, :]
    picked = table[heads, channels[:, :, None], which]  # (B·H, r, P, b)
    wide = _wide(table.dtype)
    sums = torch.bmm(weights.to(wide)[:, None, :], picked.to(wide).flatten(2))  # (B·H, 1, P·b)
    return sums.view(count, -1)


# ---- the operators ----------------------------------------------------------------------------------------------


@torch.library.custom_op("srformer::gathered_scores", mutates_args=())
def _gathered_scores_op(rows: torch.Tensor, positions: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    return kernel_or_torch(gathered_scores_triton, gathered_scores_torch, rows, positions, queries)


@_gathered_scores_op.register_fake
def _gathered_scores_fake(rows: torch.Tensor, positions: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    return queries.new_empty(positions.shape)


@torch.library.custom_op("srformer::gathered_mix", mutates_args=())
def _gathered_mix_op(rows: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                     weights: torch.Tensor) -> torch.Tensor:
    return kernel_or_torch(gathered_mix_triton, gathered_mix_torch, rows, positions, chosen, weights)


@_gathered_mix_op.register_fake
def _gathered_mix_fake(rows: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                       weights: torch.Tensor) -> torch.Tensor:
    return weights.new_empty(chosen.shape[0], 1, rows.shape[-1])


@torch.library.custom_op("srformer::channel_sums", mutates_args=())
def _channel_sums_op(table: torch.Tensor, channels: torch.Tensor, weights: torch.Tensor,
                     pages: torch.Tensor | None) -> torch.Tensor:
    return kernel_or_torch(channel_sums_triton, channel_sums_torch, table, channels, weights, pages)


@_channel_sums_op.register_fake
def _channel_sums_fake(table: torch.Tensor, channels: torch.Tensor, weights: torch.Tensor,
                       pages: torch.Tensor | None) -> torch.Tensor:
    read = table.shape[2] if pages is None else pages.shape[1]
    return table.new_empty(table.shape[0], read * table.shape[3], dtype=_wide(table.dtype))


def _check_rows(rows: torch.Tensor, positions: torch.Tensor, count_name: str, count: int) -> None:
    if rows.dim() != 3:
        raise ValueError(f"`rows` must be the (B, k, D) encoder output, got shape {tuple(rows.shape)}.")
    if positions.dim() != 2 or positions.dtype != torch.long:
        raise ValueError(f"`positions` must be (B·H, C) long, got {tuple(positions.shape)} {positions.dtype}.")
    if positions.shape[0] != count or count % rows.shape[0]:
        raise ValueError(f"`positions` and `{count_name}` must have the same first axis B·H, a multiple of `rows`' "
                         f"B = {rows.shape[0]}; got {positions.shape[0]} and {count}.")


def gathered_scores(rows: torch.Tensor, positions: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Each head's scores of the rows it names: ``scores[e·H + h, c] = queries[e·H + h] . rows[e, positions[e·H + h,
    c]]``, in ``queries``' dtype (the rows cast to it). One operator (module docstring); it reads ``B·H·C`` rows.

    Args:
        rows: (B, k, D) the encoder output, any strides.
        positions: (B·H, C) long positions in ``[0, k)``.
        queries: (B·H, D) float32 or float64 (``scale · W_k^T Q_t`` in
            :func:`~srformer.attention.knn_loki.loki_step`), any strides.

    Returns:
        (B·H, C) in ``queries``' dtype.

    Raises:
        ValueError: for shapes that do not match, or ``positions`` not long.
    """
    _check_rows(rows, positions, "queries", queries.shape[0])
    if queries.dim() != 2 or queries.shape[1] != rows.shape[2] or queries.stride(1) != 1:
        raise ValueError(f"`queries` must be (B·H, D) with D = {rows.shape[2]} and unit stride along D, got "
                         f"{tuple(queries.shape)} with strides {queries.stride()}.")
    return _gathered_scores_op(rows, positions, queries)


def gathered_mix(rows: torch.Tensor, positions: torch.Tensor, chosen: torch.Tensor,
                 weights: torch.Tensor) -> torch.Tensor:
    """The rows a head chose, mixed: ``mixed[e·H + h] = sum_s weights[e·H + h, s] rows[e, positions[e·H + h,
    chosen[e·H + h, s]]]``, in ``weights``' dtype. One operator (module docstring); it reads ``B·H·S`` rows.

    Args:
        rows: (B, k, D) the encoder output, any strides.
        positions: (B·H, C) long positions in ``[0, k)`` (the candidates).
        chosen: (B·H, S) long, indices in ``[0, C)`` of the rows mixed.
        weights: (B·H, S) float32 or float64, their weights (the softmax's).

    Returns:
        (B·H, 1, D) in ``weights``' dtype.

    Raises:
        ValueError: for shapes that do not match, or indices not long.
    """
    _check_rows(rows, positions, "chosen", chosen.shape[0])
    if chosen.dtype != torch.long or chosen.dim() != 2 or tuple(weights.shape) != tuple(chosen.shape):
        raise ValueError(f"`chosen` must be (B·H, S) long and `weights` the same shape, got {tuple(chosen.shape)} "
                         f"{chosen.dtype} and {tuple(weights.shape)}.")
    return _gathered_mix_op(rows, positions, chosen, weights)


def channel_sums(table: torch.Tensor, channels: torch.Tensor, weights: torch.Tensor,
                 pages: torch.Tensor | None = None) -> torch.Tensor:
    """A query's weighted sums over the channels it reads, for every page or for the pages it names:
    ``sums[i, p·b + s] = sum_c weights[i, c] table[i, channels[i, c], page_p, s]``, ``page_p = pages[i, p]`` (or
    ``p`` for every page), accumulated in float32 (float64 for a float64 table). One operator (module docstring); it
    reads ``r`` channels of ``P·b`` entries per row ``i``.

    Args:
        table: (B·H, 2m, n, b) per example and head, signed channel, page and slot (a bound per page is ``b = 1``).
        channels: (B·H, r) long, the signed channels read.
        weights: (B·H, r) their weights, in any float dtype (cast to the accumulation's).
        pages: (B·H, P) long pages in ``[0, n)``, or None for every page.

    Returns:
        (B·H, P·b), or (B·H, n·b) without ``pages``, float32 (float64 for a float64 ``table``).

    Raises:
        ValueError: for shapes that do not match, or indices not long.
    """
    if table.dim() != 4:
        raise ValueError(f"`table` must be (B·H, 2m, n, b), got shape {tuple(table.shape)}.")
    if channels.dtype != torch.long or channels.dim() != 2 or tuple(weights.shape) != tuple(channels.shape) \
            or channels.shape[0] != table.shape[0]:
        raise ValueError(f"`channels` must be (B·H, r) long with B·H = {table.shape[0]} and `weights` the same shape, "
                         f"got {tuple(channels.shape)} {channels.dtype} and {tuple(weights.shape)}.")
    if pages is not None and (pages.dtype != torch.long or pages.dim() != 2 or pages.shape[0] != table.shape[0]):
        raise ValueError(f"`pages` must be (B·H, P) long with B·H = {table.shape[0]}, got {tuple(pages.shape)} "
                         f"{pages.dtype}.")
    return _channel_sums_op(table, channels, weights, pages)


def _row_bytes(table: torch.Tensor, skip: int) -> int:
    """Bytes of one entry of ``table`` past its first ``skip`` axes."""
    count = 1
    for size in table.shape[skip:]:
        count *= size
    return count * table.element_size()


#: Operator name (as the dispatcher prints it) -> bytes of its first argument a call reads, from the call's
#: arguments: the rows or channel entries it picks (the byte count's rule for an operator that fuses its pick).
PICKED_BYTES: dict[str, Callable[[tuple[Any, ...]], int]] = {
    "srformer.gathered_scores": lambda args: args[1].numel() * _row_bytes(args[0], 2),
    "srformer.gathered_mix": lambda args: args[2].numel() * _row_bytes(args[0], 2),
    "srformer.channel_sums": lambda args: args[1].numel() * (
        args[0].shape[2] if args[3] is None else args[3].shape[1]) * _row_bytes(args[0], 3),
}
