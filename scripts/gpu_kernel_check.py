"""The fused gathered products' Triton kernels (``srformer.attention.gathered_triton``) and the clusters' assignment
kernel (``srformer.attention.nearest_centres``) against their torch forms on one device, at the sizes a long-input
step and build run them at: t5-small's 8 heads and rows of 512, 256 candidates and 32 chosen per head, pages of 16
keys with 256 read, 12 of 48 signed channels; float32 queries and weights over float32 and bfloat16 rows and tables;
1,024 centres of 8 heads' 24 principal coordinates. For every output of the products the kernel's error against the
torch form must stay within the bound either order of summation keeps (``n`` terms: ``n · eps`` times the sum of the
terms' absolute values, Higham Eq. 3.5, both sides rounding); for the assignment, each point's centre from the kernel
must be as near, in float64, as the torch form's up to that bound. Prints one JSON line per case and exits 1 when
any case fails.

Usage (from a checkout, ``PYTHONPATH=src``):
    python scripts/gpu_kernel_check.py [--device cuda] [--lengths 65536 262144] [--batch 8]
On a CPU only under Triton's interpreter (``TRITON_INTERPRET=1`` set before the run), at small sizes (tests).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import torch

from srformer.attention import gathered, nearest_centres
from srformer.attention import gathered_triton as kernels


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--lengths", type=int, nargs="+", default=[65536, 262144], help="encoder positions k")
    parser.add_argument("--batch", type=int, default=8, help="examples B")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--width", type=int, default=512, help="D, the encoder output's width")
    parser.add_argument("--candidates", type=int, default=256)
    parser.add_argument("--chosen", type=int, default=32)
    parser.add_argument("--page", type=int, default=16, help="keys per page b")
    parser.add_argument("--pages", type=int, default=256, help="pages read P")
    parser.add_argument("--channels", type=int, default=48, help="signed channels 2m")
    parser.add_argument("--read", type=int, default=12, help="channels read r")
    parser.add_argument("--clusters", type=int, default=1024, help="centres C of the assignment")
    parser.add_argument("--coordinates", type=int, default=24, help="principal coordinates per head m")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def check_case(args: argparse.Namespace, length: int, low: torch.dtype) -> dict[str, float]:
    """One length and storage dtype: each kernel's worst error over its bound (at most 1 passes)."""
    device = torch.device(args.device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    count, total = args.batch * args.heads, -(-length // args.page)

    def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, device=device).to(dtype)

    def pick(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=generator, device=device)

    rows = rand(args.batch, length, args.width, dtype=low)
    positions, queries = pick(length, count, args.candidates), rand(count, args.width)
    chosen = torch.rand(count, args.candidates, generator=generator, device=device).argsort(-1)[:, :args.chosen]
    weights = rand(count, args.chosen).abs()
    table = rand(count, args.channels, total, args.page, dtype=low)
    channels = torch.rand(count, args.channels, generator=generator, device=device).argsort(-1)[:, :args.read]
    values = rand(count, args.read, dtype=low).abs()
    read = torch.rand(count, total, generator=generator, device=device).argsort(-1)[:, :min(args.pages, total)]
    bounds = table.amax(-1, keepdim=True)
    cases = {
        "gathered_scores": (kernels.gathered_scores_triton(rows, positions, queries),
                            gathered.gathered_scores_torch(rows, positions, queries),
                            gathered.gathered_scores_torch(rows.abs(), positions, queries.abs()), args.width),
        "gathered_mix": (kernels.gathered_mix_triton(rows, positions, chosen, weights),
                         gathered.gathered_mix_torch(rows, positions, chosen, weights),
                         gathered.gathered_mix_torch(rows.abs(), positions, chosen, weights), args.chosen),
        "channel_sums(bounds)": (kernels.channel_sums_triton(bounds, channels, values, None),
                                 gathered.channel_sums_torch(bounds, channels, values, None),
                                 gathered.channel_sums_torch(bounds.abs(), channels, values, None), args.read),
        "channel_sums(pages)": (kernels.channel_sums_triton(table, channels, values, read),
                                gathered.channel_sums_torch(table, channels, values, read),
                                gathered.channel_sums_torch(table.abs(), channels, values, read), args.read),
    }
    worst = {}
    for name, (kernel, reference, magnitude, terms) in cases.items():
        if kernel.shape != reference.shape or kernel.dtype != reference.dtype:
            raise AssertionError(f"{name}: kernel {tuple(kernel.shape)} {kernel.dtype}, torch form "
                                 f"{tuple(reference.shape)} {reference.dtype}")
        eps = torch.finfo(reference.dtype).eps
        error = (kernel.double() - reference.double()).abs()
        allowed = terms * eps * magnitude.double()
        worst[name] = float((error / allowed.clamp_min(torch.finfo(torch.float64).tiny)).max())
    return worst


def check_assignment(args: argparse.Namespace, length: int) -> float:
    """One example's assignment of ``length`` points (the heads' coordinates side by side, a permuted view): the
    worst excess, over its bound, of the kernel's centre's float64 distance over the torch form's (at most 1
    passes)."""
    device = torch.device(args.device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    projected = torch.randn(1, args.heads, length, args.coordinates, generator=generator, device=device)
    points = projected.permute(0, 2, 1, 3)[:, None]  # (1, 1, k, H, m)
    width = args.heads * args.coordinates
    centres = torch.randn(1, 1, args.clusters, width, generator=generator, device=device)
    kernel = nearest_centres.nearest_centres_triton(points, centres)
    torch_form = nearest_centres.nearest_centres_torch(points, centres)
    flat = points.reshape(length, width).double()

    def distance(chosen: torch.Tensor) -> torch.Tensor:
        return ((flat - centres[0, 0].double()[chosen.view(-1)]) ** 2).sum(-1)

    # |c|^2 - 2 x . c in float32 over `width` coordinates, on each side: within width * eps * (|c|^2 + 2 |x| |c|)
    scale = (centres[0, 0].double() ** 2).sum(-1).max() + 2 * flat.norm(dim=-1) * centres[0, 0].double().norm(
        dim=-1).max()
    allowed = 2 * width * torch.finfo(torch.float32).eps * scale
    return float(((distance(kernel) - distance(torch_form)) / allowed).max().clamp_min(0.0))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    failed = False
    for length in args.lengths:
        for low in (torch.float32, torch.bfloat16):
            worst = check_case(args, length, low)
            ok = all(value <= 1.0 for value in worst.values())
            failed |= not ok
            print(json.dumps({"device": args.device, "length": length, "batch": args.batch, "storage": str(low),
                              "worst_error_over_bound": worst, "ok": ok}), flush=True)
        excess = check_assignment(args, length)
        failed |= excess > 1.0
        print(json.dumps({"device": args.device, "length": length, "assignment_excess_over_bound": excess,
                          "ok": excess <= 1.0}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
