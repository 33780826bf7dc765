"""``srformer aclsum``: its options; the command is :mod:`srformer.cli.aclsum_command`."""

from __future__ import annotations

import argparse
from dataclasses import fields

from srformer.cli.parsers.settings_fields import ACLSUM_OWN_OPTIONS
from srformer.core.registry import TABLE1_VARIANTS
from srformer.experiments.aclsum_settings import ComparisonSettings


def add_parser(subparsers) -> None:
    """Register ``srformer aclsum`` and its options on ``subparsers``: one per :class:`ComparisonSettings` field."""
    defaults = ComparisonSettings()
    parser = subparsers.add_parser(
        "aclsum", help="train full/segmented/SRformer models on ACLSum and compare ROUGE and decode time"
    )
    parser.add_argument("--output", default="runs/aclsum", help="results directory (resumable)")
    for field in fields(ComparisonSettings):
        if field.name in ACLSUM_OWN_OPTIONS:
            continue
        value = getattr(defaults, field.name)
        kind = type(value) if value is not None else int
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=value)
    parser.add_argument(
        "--variants", nargs="+", default=list(defaults.variants), choices=list(TABLE1_VARIANTS)
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer aclsum`` (:func:`srformer.cli.aclsum_command.run`)."""
    from srformer.cli import aclsum_command

    return aclsum_command.run(args)
