"""``srformer led-from-bart``: its options; the command is :mod:`srformer.cli.led_from_bart_command`."""

from __future__ import annotations

import argparse

from srformer.cli.arguments import CHECKPOINT_HELP


def add_parser(subparsers) -> None:
    """Register ``srformer led-from-bart`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "led-from-bart",
        help="an LED (long-input encoder) made from a BART checkpoint as LED was made from BART, for fine-tuning",
        description=(
            "Write --output: an LEDForConditionalGeneration with the BART checkpoint's weights (Beltagy et al., "
            "2020): the encoder's self attention becomes local attention in windows of --attention-window tokens "
            "(its query, key and value projections copied to LED's local and global ones), the encoder's learned "
            "positions are repeated across --max-positions rows, the decoder is unchanged; the tokenizer is "
            "copied. Inputs longer than the window or the period need fine-tuning at their length (srformer train "
            "--model OUTPUT --max-source-length N)."
        ),
    )
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP + " (BART, plain or converted to full)")
    parser.add_argument("--output", required=True, help="folder for the LED (an existing model there is an error)")
    parser.add_argument("--max-positions", type=int, required=True,
                        help="the LED encoder's positions: the longest input it reads, in tokens")
    parser.add_argument("--attention-window", type=int, default=512,
                        help="tokens of each local attention window, even; half on each side (default: %(default)s)")
    parser.add_argument("--position-period", type=int, default=None,
                        help="how many of BART's positions are repeated across the table, in tokens (default: all "
                             "of them, LED's choice; give the input length BART was trained on if shorter, e.g. the "
                             "encoder_window of a BART read by chunked encoding)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer led-from-bart`` (:func:`srformer.cli.led_from_bart_command.run`)."""
    from srformer.cli import led_from_bart_command

    return led_from_bart_command.run(args)
