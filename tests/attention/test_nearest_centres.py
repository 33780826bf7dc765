"""``srformer::nearest_centres``: the torch form against a float64 brute force, the Triton kernel against the torch
form under Triton's interpreter, one operator call, its errors."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from srformer.attention.nearest_centres import nearest_centres, nearest_centres_torch
from srformer.benchmarks.operator_count import OperatorCounter

SOURCE = str(Path(__file__).resolve().parents[2] / "src")


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


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_triton_kernel_equals_the_torch_form_under_the_interpreter():
    """Under ``TRITON_INTERPRET=1`` (a child process), with blocks smaller than the points (21 > 8), the centres
    (6 > 4) and the coordinates (5 > 4), strided points, two groups and two examples, in float64 and float32: the
    torch form's centres wherever the nearest is clear of the next (:func:`_case`); and a centre repeated later
    (equal computed distances in the kernel, which walks both the same way) never chosen over the first."""
    script = """
import torch
from srformer.attention import nearest_centres as module
from tests.attention.test_nearest_centres import _case
module.POINTS, module.CENTRES, module.COORDINATES = 8, 4, 4
for dtype in (torch.float64, torch.float32):
    points, centres, expected, keep = _case(3)
    points, centres = points.to(dtype)[:, :, :21], centres.to(dtype)  # 21 points: three programs, one part full
    expected, keep = expected[:, :, :21], keep[:, :, :21]
    kernel = module.nearest_centres_triton(points, centres)
    torch_form = module.nearest_centres_torch(points, centres)
    assert torch.equal(kernel[keep], torch_form[keep]) and torch.equal(kernel[keep], expected[keep])
    if dtype == torch.float32:
        repeated = module.nearest_centres_triton(points, centres[:, :, [0, 1, 2, 3, 4, 1]])
        assert not (repeated == 5).any()
print("ok")
"""
    root = str(Path(SOURCE).parent)
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{SOURCE}:{root}", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                            timeout=600, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
