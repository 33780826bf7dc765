"""Every Triton kernel of the package against its torch form under Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, set before Triton is imported, hence a child process): the RAF scan
(:mod:`srformer.attention.raf_scan`), the fused gathered products (:mod:`srformer.attention.gathered_triton`) and
the clusters' assignment (:mod:`srformer.attention.nearest_centres`). One child for all of them: importing srformer
is most of its time."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SOURCE = str(Path(__file__).resolve().parents[2] / "src")
ROOT = str(Path(SOURCE).parent)

#: The RAF scan in float64: the loop's readouts, for both neurons, with skipped segments and an entry count that is
#: not a multiple of the kernel's block (H*d*d = 2*6*6 = 72 < 1024). Prints the largest difference.
RAF = """
import torch
from srformer.attention import raf_scan
raf_scan.TRITON_BLOCK = 32  # several programs per example, the last one partly masked
generator = torch.Generator().manual_seed(1)
worst = 0.0
for two_sided in (False, True):
    inputs = torch.randn(3, 9, 2, 6, 6, generator=generator, dtype=torch.float64) * 2.0
    visited = torch.rand(3, 9, generator=generator) > 0.3
    factor = torch.rand(3, 2, 1, 6, generator=generator, dtype=torch.float64) + 0.5
    leak, threshold = torch.tensor(0.7, dtype=torch.float64), torch.tensor(0.9, dtype=torch.float64)
    expected = inputs.clone()
    raf_scan.raf_scan_loop(expected, visited, factor, leak, threshold, two_sided)
    kernel = inputs.clone()
    raf_scan.raf_scan_triton(kernel, visited, factor, leak, threshold, two_sided)
    assert expected.abs().max() > 0
    worst = max(worst, float((kernel - expected).abs().max()))
print('raf', worst)
"""

#: The fused gathered products in float64, with blocks smaller than the candidates (13 > 8), the chosen rows
#: (11 > 8), the columns (40 > 16) and the page slots (28 > 8), so that several programs and loop passes run and the
#: last ones are partly masked; strided rows; and a float32 run with bfloat16 rows and table. Prints the worst error
#: over its rounding bound.
GATHERED = """
import torch
from srformer.attention import gathered, gathered_triton as kernels
kernels.BLOCK, kernels.COLUMNS = 8, 16
generator = torch.Generator().manual_seed(2)
worst = 0.0
for wide, low in ((torch.float64, torch.float64), (torch.float32, torch.bfloat16)):
    rows = torch.randn(50, 2, 40, generator=generator, dtype=wide).transpose(0, 1).to(low)
    positions = torch.randint(0, 50, (6, 13), generator=generator)
    queries = torch.randn(6, 40, generator=generator, dtype=wide)
    chosen = torch.stack([torch.randperm(13, generator=generator)[:11] for _ in range(6)])
    weights = torch.rand(6, 11, generator=generator, dtype=wide)
    table = torch.randn(6, 10, 7, 4, generator=generator, dtype=wide).to(low)
    channels = torch.stack([torch.randperm(10, generator=generator)[:3] for _ in range(6)])
    values = torch.rand(6, 3, generator=generator, dtype=wide).to(low)
    pages = torch.stack([torch.randperm(7, generator=generator)[:5] for _ in range(6)])
    magnitude = [  # the same sums of absolute values: what bounds the rounding of either order
        gathered.gathered_scores_torch(rows.abs(), positions, queries.abs()),
        gathered.gathered_mix_torch(rows.abs(), positions, chosen, weights.abs()),
        gathered.channel_sums_torch(table.abs(), channels, values.abs(), None),
        gathered.channel_sums_torch(table.abs(), channels, values.abs(), pages),
    ]
    pairs = [
        (kernels.gathered_scores_triton(rows, positions, queries),
         gathered.gathered_scores_torch(rows, positions, queries), 40),
        (kernels.gathered_mix_triton(rows, positions, chosen, weights),
         gathered.gathered_mix_torch(rows, positions, chosen, weights), 11),
        (kernels.channel_sums_triton(table, channels, values, None),
         gathered.channel_sums_torch(table, channels, values, None), 3),
        (kernels.channel_sums_triton(table, channels, values, pages),
         gathered.channel_sums_torch(table, channels, values, pages), 3),
    ]
    for (kernel, torch_form, terms), bound in zip(pairs, magnitude):
        assert kernel.shape == torch_form.shape and kernel.dtype == torch_form.dtype
        assert torch_form.abs().max() > 0
        error = (kernel.double() - torch_form.double()).abs()
        # each side within gamma_n * sum |terms| of the exact sum (Higham Eq. 3.5), n terms, u = eps / 2
        allowed = terms * torch.finfo(wide).eps * bound.double()
        worst = max(worst, float((error / allowed).max()))
print('gathered', worst)
"""

#: The nearest centre, with blocks smaller than the points (21 > 8), the centres (6 > 4) and the coordinates (5 > 4),
#: strided points, two groups and two examples, in float64 and float32: the torch form's centres wherever the nearest
#: is clear of the next (``tests.attention.test_nearest_centres._case``); and a centre repeated later (equal computed
#: distances in the kernel, which walks both the same way) never chosen over the first.
NEAREST = """
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
print("nearest ok")
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_triton_kernels_equal_the_torch_forms_under_the_interpreter():
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{SOURCE}:{ROOT}", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", "\n".join([RAF, GATHERED, NEAREST])], capture_output=True, text=True,
                            env=environment, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    raf = [float(line.split()[1]) for line in lines if line.startswith("raf ")]
    # float64: the kernel may fuse leak * mem + x (one rounding fewer per segment); 9 segments of values of order 10
    assert len(raf) == 1 and raf[0] <= 9 * 4 * 10 * torch.finfo(torch.float64).eps
    worst = [float(line.split()[1]) for line in lines if line.startswith("gathered ")]
    assert len(worst) == 1 and worst[0] <= 1.0
    assert lines[-1] == "nearest ok"
