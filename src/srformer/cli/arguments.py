"""Argument groups shared by several sub-commands."""

from __future__ import annotations

import argparse

from srformer.config import NAMED_SETTINGS


def add_variant_arguments(parser: argparse.ArgumentParser, *, variant_required: bool = True) -> None:
    """``--variant`` (a variant, ablation or mix name of :data:`srformer.config.NAMED_SETTINGS`),
    ``--segment-size`` (tokens), ``--target-length`` (tokens)."""
    parser.add_argument("--variant", choices=list(NAMED_SETTINGS), required=variant_required,
                        help="cross-attention variant, or an ablation (ablation-I..IV) / the Eq. 10 mix "
                             "(srformer-sigma)")
    parser.add_argument("--segment-size", type=int, default=64, help="encoder tokens per segment (s)")
    parser.add_argument("--target-length", type=int, default=128, help="fixed decoder length T of the segment schedule")


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data`` and the field names."""
    parser.add_argument("--data", required=True, help="JSONL/JSON/CSV file, a hub dataset name, or 'aclsum'")
    parser.add_argument("--split", default=None,
                        help="split for hub datasets and 'aclsum' (train/val/test), or a part name of --split-by-id")
    parser.add_argument("--split-by-id", default=None, metavar="SPEC",
                        help="split the --data file by a stable hash of each example's id, e.g. "
                             "'train=0.8,validation=0.1,test=0.1', and use the part named by --split "
                             "(default: train for `train`, test for `evaluate`)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--summary-field", default="summary")


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """Decoding options of ``evaluate`` and ``summarize``."""
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-source-length", type=int, default=None, help="default: the training run's")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
