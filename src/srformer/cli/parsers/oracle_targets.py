"""``srformer oracle-targets``: its options; the command is :mod:`srformer.cli.oracle_targets_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import add_data_arguments


def add_parser(subparsers) -> None:
    """Register ``srformer oracle-targets`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "oracle-targets",
        help="a data file whose summaries are each document's greedy ROUGE oracle (what to copy), for training",
        description=(
            "Write --output (JSONL: id, document, summary = the oracle's sentences in document order, reference = "
            "the original summary). The oracle picks sentences greedily for the mean of ROUGE-1 and ROUGE-2 F1 "
            "against the reference, within the reference's words, from the part of the document the encoder reads "
            "(--max-source-length tokens of --tokenizer). Train on it with srformer train --data OUTPUT. A stopped "
            "run resumes where it stopped."
        ),
    )
    add_data_arguments(parser)
    parser.add_argument("--output", required=True, help="JSONL file of the targets (missing folders are created)")
    parser.add_argument("--tokenizer", default=None,
                        help="the checkpoint (or hub id) whose tokenizer the model reads with; with "
                             "--max-source-length the oracle picks only from what the encoder reads")
    parser.add_argument("--max-source-length", type=int, default=None,
                        help="encoder input length in tokens (default: the whole document)")
    parser.add_argument("--source-prefix", default="", help="text the model puts before each document")
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer oracle-targets`` (:func:`srformer.cli.oracle_targets_command.run`)."""
    from srformer.cli import oracle_targets_command

    return oracle_targets_command.run(args)
