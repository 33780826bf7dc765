"""``srformer fidelity``: its options; the command is :mod:`srformer.cli.fidelity_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import (
    CHECKPOINT_HELP,
    add_data_arguments,
    add_variant_settings_argument,
    segment_size_argument,
)
from srformer.core import NAMED_SETTINGS


def add_parser(subparsers) -> None:
    """Register ``srformer fidelity`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "fidelity",
        help="teacher-forced fidelity of converted cross attentions to full attention",
        description=(
            "Convert a plain checkpoint to each named setting with no fine-tuning, feed every document with its "
            "reference summary (teacher forcing), and compare each mechanism with the reference (full): perplexity "
            "of the references, and how often the next-token argmax agrees, with paired bootstrap intervals over "
            "documents. Independent of how well the base summarises. Writes OUTPUT/fidelity.json (each "
            "mechanism's per-document scores as it finishes; a rerun resumes there) and OUTPUT/fidelity.md."
        ),
    )
    parser.add_argument("--checkpoint", required=True,
                        help=CHECKPOINT_HELP + " (a plain model, or one trained with --variant full; not another "
                                               "conversion)")
    add_data_arguments(parser)
    parser.add_argument("--variants", nargs="+", choices=list(NAMED_SETTINGS), required=True,
                        help="named settings to score; the reference is added when missing")
    parser.add_argument("--reference", default="full", choices=list(NAMED_SETTINGS),
                        help="the mechanism the others are compared with (default full)")
    parser.add_argument("--segment-size", type=segment_size_argument, default=64,
                        help="encoder tokens per segment (s), or auto")
    parser.add_argument("--target-length", type=int, default=128, help="fixed decoder length T of the schedule")
    add_variant_settings_argument(parser, stored=(
        "is stored as VARIANT@NAME=VALUE beside the mechanism without it (e.g. --setting knn-loki:top_keys=128); a "
        "later call into the same --output adds its mechanisms, and the summary covers all"))
    parser.add_argument("--max-source-length", type=int, default=512, help="input tokens kept per document")
    parser.add_argument("--max-target-length", type=int, default=128, help="reference tokens scored per document")
    parser.add_argument("--source-prefix", default="", help="text put before every document (T5: 'summarize: ')")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-examples", type=int, default=None, help="score the first N documents only")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer fidelity`` (:func:`srformer.cli.fidelity_command.run`)."""
    from srformer.cli import fidelity_command

    return fidelity_command.run(args)
