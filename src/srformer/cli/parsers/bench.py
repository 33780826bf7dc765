"""``srformer bench``: its options; the command is :mod:`srformer.cli.bench_command`."""

from __future__ import annotations

import argparse

from srformer.benchmarks.records import BENCH_VARIANTS, DEFAULT_BENCH_VARIANTS
from srformer.benchmarks.suite_settings import SECTIONS


def _positive_ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _names(choices):
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(part for part in text.replace(",", " ").split() if part)
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"unknown {unknown or text!r}; choose from {', '.join(choices)}")
        return values

    return parse


def add_parser(subparsers) -> None:
    """Register ``srformer bench`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark cross-attention variants: step time, generate() throughput, training step, memory, FLOPs",
        description=(
            "Measure full (sdpa, eager), segmented and SRformer cross attention (and their lean-cache modes) side by "
            "side in one run, on a randomly initialised t5-small-sized model: cross-attention time per decoder step, "
            "generate() throughput (encoder excluded), training step time, peak memory and cache bytes, "
            "FlopCounterMode FLOPs next to the paper's Table 1, and the operator calls and host syncs of generate()'s "
            "first step and of each token (an eager GPU pays about one launch per call). Writes bench.json, bench.md, "
            "step_time.png, operators.png and figure5.png. Lists take spaces or commas: --encoder-lengths 512 1024 "
            "or 512,1024."
        ),
    )
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--quick", action="store_true",
                        help="CI mode: t5-tiny-sized model, k in {64, 128}, s = 16, batch 1, 1 repeat (seconds)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="default: cuda when available")
    parser.add_argument("--encoder-lengths", type=_positive_ints, nargs="+", default=None,
                        help="k values (default 512 1024 4096 16384)")
    parser.add_argument("--segment-sizes", type=_positive_ints, nargs="+", default=None,
                        help="s values (default 16 64)")
    parser.add_argument("--batch-sizes", type=_positive_ints, nargs="+", default=None, help="batch sizes (default 1 8)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (default 5; medians)")
    parser.add_argument("--variants", type=_names(BENCH_VARIANTS), nargs="+", default=None,
                        help=f"subset of {', '.join(BENCH_VARIANTS)} (default: {' '.join(DEFAULT_BENCH_VARIANTS)}; "
                             "the paper's baselines are opt-in)")
    parser.add_argument("--sections", type=_names(SECTIONS), nargs="+", default=None,
                        help=f"subset of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--target-length", type=int, default=None, help="T of the segment schedule (default 128)")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per sequence in generate() (default 64)")
    parser.add_argument("--step-positions", type=int, default=None, help="decoder positions per step run (default 32)")
    parser.add_argument("--training-batch-size", type=int, default=None, help="sequences per training step (default 1)")
    parser.add_argument("--memory-one-process", action="store_true", default=None,
                        help="CPU peak memory: one child process for all variants (faster) instead of one per variant")
    parser.add_argument("--compiled", action="store_true", default=None,
                        help="also time the step and generate() compiled (torch.compile, inductor, fullgraph; "
                             "generate() with a static cache): a `compiled` column in bench.md; compiling every "
                             "variant and shape adds seconds to minutes each")
    parser.add_argument("--setting", action="append", default=[], metavar="VARIANT:NAME=VALUE",
                        help="an SRformerConfig setting of one converted variant of --variants, repeatable, on top "
                             "of its named setting's (e.g. --setting knn-loki:index_rank=11); each of its records "
                             "says so in its note, and bench.md lists them")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar; one line per measurement instead")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer bench`` (:func:`srformer.cli.bench_command.run`)."""
    from srformer.cli import bench_command

    return bench_command.run(args)
