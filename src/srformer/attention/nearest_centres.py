"""Each point's nearest centre as one operator: ``srformer::nearest_centres``, the assignment of
:func:`srformer.attention.key_clusters.cluster_keys` (every encoder position of a layer to one of ``C`` centres, at
the state build of ``tail_clusters``).

Written as torch calls, the assignment writes every point's distance to every centre and reads it back for the
``argmin``: at 65,536 positions and 1,024 centres, 256 MiB per layer each way, in chunks whose calls grow with the
input. As one operator:

- on CUDA with Triton (:data:`srformer.attention.gathered.USE_TRITON`), one kernel: each program owns a block of
  points, walks the centres in blocks, and keeps the running least distance and its centre in registers (the lowest
  index among equal distances), so it reads the points and centres and writes one index per point;
- elsewhere, the products and ``argmin`` it fuses, a chunk of points at a time (the reference the kernel is tested
  against, through Triton's interpreter on the CPU).

The points may be any strided view (the heads' principal coordinates side by side are a permuted view of the
projected keys, not a copy). Distances are ``|c|^2 - 2 x . c`` (``|x|^2`` is the same for every centre) in float32
or wider; the kernel sums in another order than the products, so at a near tie the two may pick different centres.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from srformer.attention.gathered import kernel_or_torch

__all__ = ["nearest_centres", "nearest_centres_torch"]

#: Points per program, centres per pass, and coordinates per load of the kernel.
POINTS, CENTRES, COORDINATES = 32, 32, 16


def nearest_centres_torch(points: torch.Tensor, centres: torch.Tensor, chunk: int = 32768) -> torch.Tensor:
    """:func:`nearest_centres` as batched products and ``argmin``, ``chunk`` points at a time (bounding the
    (B·G, chunk, C) distances)."""
    batch, groups, count, parts, width = points.shape
    flat = centres.reshape(batch * groups, -1, parts * width)
    norms = (flat * flat).sum(-1)[:, None, :]  # (B·G, 1, C)
    pieces = []
    for start in range(0, count, chunk):
        piece = points[:, :, start:start + chunk].reshape(batch * groups, -1, parts * width)
        pieces.append(torch.baddbmm(norms, piece, flat.mT, alpha=-2.0).argmin(dim=-1))
    return torch.cat(pieces, dim=-1).view(batch, groups, count)


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def nearest_kernel(points_ptr, centres_ptr, norms_ptr, out_ptr, count, clusters, groups, parts, width,
                       point_example, point_group, point_row, point_part, point_column,
                       WIDE: tl.constexpr, POINTS: tl.constexpr, CENTRES: tl.constexpr, COORDINATES: tl.constexpr):
        """out[g, i] = argmin_c norms[g, c] - 2 points[g, i] . centres[g, c] (the lowest c at a tie)."""
        g = tl.program_id(0).to(tl.int64)
        point = tl.program_id(1) * POINTS + tl.arange(0, POINTS)
        inside = point < count
        start = points_ptr + (g // groups) * point_example + (g % groups) * point_group \
            + point.to(tl.int64) * point_row  # (POINTS,)
        dimension = parts * width
        best = tl.full([POINTS], float("inf"), dtype=WIDE)
        where = tl.zeros([POINTS], dtype=tl.int64)
        for first in range(0, clusters, CENTRES):
            centre = first + tl.arange(0, CENTRES)
            present = centre < clusters
            dots = tl.zeros([POINTS, CENTRES], dtype=WIDE)
            for part in range(0, parts):
                for column0 in range(0, width, COORDINATES):
                    column = column0 + tl.arange(0, COORDINATES)
                    used = column < width
                    x = tl.load(start[:, None] + part * point_part + column[None, :] * point_column,
                                mask=inside[:, None] & used[None, :], other=0.0).to(WIDE)
                    c = tl.load(centres_ptr + (g * clusters + centre[:, None]) * dimension + part * width
                                + column[None, :], mask=present[:, None] & used[None, :], other=0.0).to(WIDE)
                    dots += tl.sum(x[:, None, :] * c[None, :, :], axis=2)
            norm = tl.load(norms_ptr + g * clusters + centre, mask=present, other=float("inf")).to(WIDE)
            distance = norm[None, :] - 2.0 * dots
            local = tl.argmin(distance, axis=1, tie_break_left=True)  # (POINTS,)
            least = tl.min(distance, axis=1)
            closer = least < best  # strictly: an earlier block keeps a tie
            best = tl.where(closer, least, best)
            where = tl.where(closer, first + local.to(tl.int64), where)
        tl.store(out_ptr + g * count + point, where, mask=inside)

    return nearest_kernel


def nearest_centres_triton(points: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """:func:`nearest_centres` in one kernel launch (on the CPU only under ``TRITON_INTERPRET=1``, tests)."""
    import triton.language as tl

    batch, groups, count, parts, width = points.shape
    flat = centres.reshape(batch * groups, -1, parts * width).contiguous()
    clusters = flat.shape[1]
    norms = (flat * flat).sum(-1).contiguous()  # (B·G, C)
    out = torch.empty(batch, groups, count, dtype=torch.long, device=points.device)
    if batch * groups and count:
        grid = (batch * groups, -(-count // POINTS))
        _kernel()[grid](points, flat, norms, out, count, clusters, groups, parts, width, points.stride(0),
                        points.stride(1), points.stride(2), points.stride(3), points.stride(4),
                        WIDE=tl.float64 if centres.dtype == torch.float64 else tl.float32,
                        POINTS=POINTS, CENTRES=CENTRES, COORDINATES=COORDINATES)
    return out


@torch.library.custom_op("srformer::nearest_centres", mutates_args=())
def _nearest_centres_op(points: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    return kernel_or_torch(nearest_centres_triton, nearest_centres_torch, points, centres)


@_nearest_centres_op.register_fake
def _nearest_centres_fake(points: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    return points.new_empty(points.shape[:3], dtype=torch.long)


def nearest_centres(points: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """Each point's nearest centre (module docstring): ``argmin_c |x - c|^2``, the lowest ``c`` among equal computed
    distances (a product may round two equal centres' distances apart).

    Args:
        points: (B, G, n, P, m) float32 or wider, any strides: ``n`` points per example and group, each the ``P·m``
            coordinates of its ``P`` parts (the heads' principal coordinates side by side: ``P = H``, ``G = 1``).
        centres: (B, G, C, P·m) in ``points``' dtype, ``C >= 1``.

    Returns:
        (B, G, n) long in ``[0, C)``.

    Raises:
        ValueError: for shapes that do not match or no centre.
    """
    if points.dim() != 5 or centres.dim() != 4 or centres.shape[:2] != points.shape[:2] \
            or centres.shape[3] != points.shape[3] * points.shape[4] or centres.shape[2] < 1:
        raise ValueError(f"`points` must be (B, G, n, P, m) and `centres` (B, G, C, P·m) with C >= 1, got "
                         f"{tuple(points.shape)} and {tuple(centres.shape)}.")
    return _nearest_centres_op(points, centres)
