"""``srformer`` command line: train, evaluate, summarize, the ACLSum main job, compare, bench, probe, long-bench,
long-probe, pick, split and pretrain."""

from __future__ import annotations

import argparse
import sys

from srformer.cli import (
    aclsum_command,
    bench_command,
    compare_command,
    evaluate_command,
    long_bench_command,
    long_probe_command,
    pick_command,
    pretrain_command,
    probe_command,
    split_command,
    summarize_command,
    train_command,
)

COMMANDS = (
    train_command, evaluate_command, summarize_command, aclsum_command, compare_command, bench_command, probe_command,
    long_bench_command, long_probe_command, pick_command, split_command, pretrain_command,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per module in :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="srformer", description="Segmented Recurrent Transformer cross attention for seq2seq summarizers."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the exit status: 0 on success, 2 on bad input (the message says why)."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except (ValueError, FileNotFoundError) as error:
        print(f"srformer {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
