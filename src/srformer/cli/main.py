"""``srformer`` command line: train, evaluate, summarize, the ACLSum main job, compare, bench, probe, long-bench,
long-probe, pick, split, pretrain, oracle-targets and copy-reach.

The parsers come from :mod:`srformer.cli.parsers`, which import no torch or transformers, so ``srformer --help`` and
``srformer COMMAND --help`` answer at once; a sub-command imports its implementation when it runs."""

from __future__ import annotations

import argparse
import sys

from srformer.cli.parsers import (
    aclsum,
    bench,
    compare,
    copy_reach,
    evaluate,
    long_bench,
    long_probe,
    oracle_targets,
    pick,
    pretrain,
    probe,
    split,
    summarize,
    train,
)

COMMANDS = (train, evaluate, summarize, aclsum, compare, bench, probe, long_bench, long_probe, pick, split, pretrain,
            oracle_targets, copy_reach)


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
