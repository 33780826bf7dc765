"""``srformer evaluate``: its options; the command is :mod:`srformer.cli.evaluate_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import (
    CHECKPOINT_HELP,
    add_conversion_arguments,
    add_data_arguments,
    add_generation_arguments,
)


def add_parser(subparsers) -> None:
    """Register ``srformer evaluate`` and its options on ``subparsers``."""
    parser = subparsers.add_parser("evaluate", help="generate summaries and score them with ROUGE")
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    add_data_arguments(parser)
    parser.add_argument("--output", required=True,
                        help="metrics JSON path (missing folders are created); finished batches are kept in "
                             "OUTPUT.partial until it is written, so the same command resumes after a kill")
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--predictions", default=None,
                        help="optional JSONL path for the generated summaries (missing folders are created)")
    add_conversion_arguments(parser)
    add_generation_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer evaluate`` (:func:`srformer.cli.evaluate_command.run`)."""
    from srformer.cli import evaluate_command

    return evaluate_command.run(args)
