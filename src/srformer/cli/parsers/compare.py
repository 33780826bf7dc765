"""``srformer compare``: its options; the command is :mod:`srformer.cli.compare_command`."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from srformer.cli.arguments import MODEL_HELP, add_variant_settings_argument
from srformer.cli.parsers.settings_fields import COMPARE_SKIPPED, COMPARE_TUPLES
from srformer.core import NAMED_SETTINGS
from srformer.experiments.compare_settings import CompareSettings


def add_parser(subparsers) -> None:
    """Register ``srformer compare`` and its options on ``subparsers``: one per :class:`CompareSettings` field."""
    defaults = CompareSettings()
    parser = subparsers.add_parser(
        "compare",
        help="fine-tune and score a grid of variants x segment sizes x seeds from one full-attention base model",
        description=(
            "Train a full-attention base model (or use --model CHECKPOINT with --base-steps 0), convert it to every "
            "named variant, fine-tune each per segment size and seed, score ROUGE on the test data, and write "
            "results.json, results.md, figure4.png and table3.png. Finished cells are skipped on a re-run. "
            f"Names: {', '.join(NAMED_SETTINGS)}."
        ),
    )
    parser.add_argument("--train-data", required=True, help="JSONL/JSON/CSV file, hub dataset name, or 'aclsum'")
    parser.add_argument("--test-data", required=True, help="JSONL/JSON/CSV file, hub dataset name, or 'aclsum'")
    parser.add_argument("--train-split", default="train",
                        help="split for hub datasets and 'aclsum', or a part name of --split-by-id")
    parser.add_argument("--test-split", default="test",
                        help="split for hub datasets and 'aclsum', or a part name of --split-by-id")
    parser.add_argument("--split-by-id", default=None, metavar="SPEC",
                        help="split one file by a stable hash of each example's id, e.g. "
                             "'train=0.8,validation=0.1,test=0.1'; --train-split/--test-split pick the parts "
                             "(pass the same file as --train-data and --test-data)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--summary-field", default="summary")
    parser.add_argument("--max-train-examples", type=int, default=None, help="use the first N training pairs")
    parser.add_argument("--max-test-examples", type=int, default=None, help="score the first N test pairs")
    parser.add_argument("--output", required=True, help="results directory (resumable)")
    for field in fields(CompareSettings):
        if field.name in COMPARE_SKIPPED:
            continue
        flag = f"--{field.name.replace('_', '-')}"
        value = getattr(defaults, field.name)
        if field.name in COMPARE_TUPLES:
            kwargs: dict[str, Any] = {"choices": list(NAMED_SETTINGS)} if COMPARE_TUPLES[field.name] is str else {}
            if field.name == "ablations":
                kwargs["help"] = ("named settings run at --ablation-segment-size only (the paper's Table 3 and the "
                                  "settings beyond it); default: every named setting not in --variants, so a grid "
                                  "of a few variants decodes dozens of cells unless --ablations is given with no "
                                  "name (none) or with the ones wanted")
            parser.add_argument(flag, type=COMPARE_TUPLES[field.name], nargs="*" if field.name == "ablations" else "+",
                                default=list(value), **kwargs)
        else:
            parser.add_argument(flag, type=type(value), default=value,
                                help=MODEL_HELP if field.name == "model" else None)
    parser.add_argument("--ablation-segment-size", type=int, default=None,
                        help="segment size of the ablations (default: the largest --segment-sizes)")
    add_variant_settings_argument(parser)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer compare`` (:func:`srformer.cli.compare_command.run`)."""
    from srformer.cli import compare_command

    return compare_command.run(args)
