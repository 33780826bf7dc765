"""``srformer copy-reach``: its options; the command is :mod:`srformer.cli.copy_reach_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import CHECKPOINT_HELP, add_data_arguments


def add_parser(subparsers) -> None:
    """Register ``srformer copy-reach`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "copy-reach",
        help="can a checkpoint go on copying a passage that starts anywhere in its input (in windows too)?",
        description=(
            "Teacher-forced accuracy of continuing a passage of --span tokens of each document after its first --cue "
            "tokens, for passages starting every --stride tokens. A base that finds a passage by its content scores "
            "the same everywhere; one that copies by position scores at the start (and at window starts) only, and "
            "cannot extract from beyond its lead. Writes --output (JSON), a table (.md) and a plot (.png) beside it."
        ),
    )
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    add_data_arguments(parser)
    parser.add_argument("--output", required=True, help="JSON path (missing folders are created)")
    parser.add_argument("--max-source-length", type=int, default=None,
                        help="input tokens per document; only documents this long are used (default: the training "
                             "run's, else 512)")
    parser.add_argument("--documents", type=int, default=24, help="documents scored (default 24)")
    parser.add_argument("--span", type=int, default=64, help="passage length in tokens (default 64)")
    parser.add_argument("--cue", type=int, default=8,
                        help="leading passage tokens given to the decoder and not scored (default 8)")
    parser.add_argument("--stride", type=int, default=None,
                        help="tokens between passage starts (default: half the encoder window when the input is read "
                             "in windows, else an eighth of the input)")
    parser.add_argument("--batch-size", type=int, default=8, help="documents per forward pass (default 8)")
    parser.add_argument("--encoder-window", type=int, default=None,
                        help="tokens per encoder window (default: the checkpoint's); a plain checkpoint is read as "
                             "full attention over the windows")
    parser.add_argument("--window-overlap", type=float, default=None,
                        help="share of a window shared with the next, in [0, 1) (default 0.5)")
    parser.add_argument("--window-batch-size", type=int, default=None, help="windows per encoder call (default 8)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer copy-reach`` (:func:`srformer.cli.copy_reach_command.run`)."""
    from srformer.cli import copy_reach_command

    return copy_reach_command.run(args)
