"""``srformer::nearest_centres``: the torch form against a float64 brute force, one operator call, its errors (the
Triton kernel under Triton's interpreter: ``test_triton_kernels.py``)."""

from __future__ import annotations

import pytest
import torch

from srformer.attention.nearest_centres import nearest_centres, nearest_centres_torch
from srformer.benchmarks.operator_count import OperatorCounter


def _case(seed: int = 0):
    """Two examples, two groups, 37 points of 3 parts of 5 coordinates, as a permuted view (strided, not
    contiguous); 6 centres per group. Each point's nearest centre is ahead of the next by far more than the rounding
    of a float32 distance (checked), so every correct evaluation finds the same centres on any machine."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(2, 3, 2, 37, 5, generator=generator, dtype=torch.float64)  # (B, P, G, n, m)
    points = base.permute(0, 2, 3, 1, 4)  # (B, G, n, P, m), a view
    centres = torch.randn(2, 2, 6, 15, generator=generator, dtype=torch.float64)
    distances = ((points.reshape(2, 2, 37, 1, 15) - centres[:, :, None]) ** 2).sum(-1)  # (B, G, n, C)
    best, second = distances.topk(2, dim=-1, largest=False).values.unbind(-1)
    # float32: |c|^2 - 2 x . c over 15 coordinates of magnitude < 5, each side within 15 u sum|terms| < 1e-3
    keep = (second - best) > 1e-3
    return points, centres, distances.argmin(-1), keep


def test_the_nearest_centre_by_brute_force():
    points, centres, expected, keep = _case()
    assert not points.is_contiguous()
    assert torch.equal(nearest_centres(points, centres)[keep], expected[keep])
    assert torch.equal(nearest_centres_torch(points, centres, chunk=8)[keep], expected[keep])  # chunks of points
    assert keep.float().mean() > 0.9


def test_one_operator_call_and_the_custom_op_checks():
    points, centres, _, _ = _case()
    with OperatorCounter() as counter:
        nearest_centres(points, centres)
    assert counter.total == 1, counter.calls
    torch.library.opcheck(torch.ops.srformer.nearest_centres.default, (points, centres))


def test_bad_shapes_name_the_arguments():
    points, centres, _, _ = _case()
    for bad in ((points[..., 0], centres), (points, centres[..., :-1]), (points, centres[:, :, :0])):
        with pytest.raises(ValueError, match="`points`.*`centres`"):
            nearest_centres(*bad)
