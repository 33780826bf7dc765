"""``srformer summarize``: its options; the command is :mod:`srformer.cli.summarize_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import CHECKPOINT_HELP, add_conversion_arguments, add_generation_arguments


def add_parser(subparsers) -> None:
    """Register ``srformer summarize`` and its options on ``subparsers``."""
    parser = subparsers.add_parser("summarize", help="summarize documents with a trained checkpoint")
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("input", nargs="?", default="-", help="a text file (one document), a .jsonl file with "
                        "a `document` field per line, or - for standard input (default)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--do-sample", action="store_true", help="sample instead of greedy/beam search")
    parser.add_argument("--seed", type=int, default=0, help="with --do-sample: batch b is sampled after seeding "
                        "torch with SEED + b, so samples do not depend on the number of processes")
    parser.add_argument("--output", default=None, help="JSONL file of the summaries ({id, summary} per line, in "
                        "input order) instead of printing them; finished batches are kept in OUTPUT.partial, so the "
                        "same command resumes after a kill")
    add_conversion_arguments(parser)
    add_generation_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer summarize`` (:func:`srformer.cli.summarize_command.run`)."""
    from srformer.cli import summarize_command

    return summarize_command.run(args)
