"""``srformer split``: its options; the command is :mod:`srformer.cli.split_command`."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    """Register ``srformer split`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "split",
        help="split one data file into parts by a stable hash (SHA-256) of each example's id",
        description=(
            "Write OUTPUT_DIR/<part>.jsonl (fields id, document, summary) for every part of --fractions. An example "
            "goes to a part by the SHA-256 of its id, so the split is the same on every machine and for any file "
            "order; part sizes follow the fractions up to sampling noise. The same split is available without "
            "files as --split-by-id in train, evaluate and compare."
        ),
    )
    parser.add_argument("--data", required=True, help="JSONL/JSON/CSV file whose records have a unique 'id' field")
    parser.add_argument("--output-dir", required=True, help="folder for the part files (existing files are an error)")
    parser.add_argument("--fractions", default="train=0.8,validation=0.1,test=0.1",
                        help="comma-separated name=fraction, summing to 1 (default: %(default)s)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--summary-field", default="summary")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer split`` (:func:`srformer.cli.split_command.run`)."""
    from srformer.cli import split_command

    return split_command.run(args)
