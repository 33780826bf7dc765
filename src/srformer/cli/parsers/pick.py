"""``srformer pick``: its options; the command is :mod:`srformer.cli.pick_command`."""

from __future__ import annotations

import argparse


def _length(text: str) -> int:
    from srformer.experiments.pick import parse_length  # only when --long-lengths is given

    try:
        return parse_length(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(subparsers) -> None:
    """Register ``srformer pick`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "pick", help="which cross attention to pick: probe accuracy next to bench cost, with the Pareto front",
        description=(
            "Read `srformer probe` results (off- and on-segment recall accuracy per problem, protocol and "
            "fine-tuning budget) and `srformer bench` runs (step and generate() time against full attention, "
            "decode state per layer) and write OUTPUT/pick.md, pick.json and pick.png (off-segment accuracy after "
            "conversion against step time, Pareto front marked). With --long-probe and --long-bench, also "
            "long-input columns (synthetic recall, random-weight timings): off-segment recall of `srformer "
            "long-probe` per input length and fine-tuning budget, and `srformer long-bench`'s ms per generated "
            "token per input length with its multiple of segmented's; a mechanism only those files measure (knn "
            "with a faiss index: `knn (ivf index)`) is an extra row."
        ),
    )
    parser.add_argument("--probe", nargs="+", required=True,
                        help="`srformer probe --output` folders or their results.json (a cell found twice: the last "
                             "one counts)")
    parser.add_argument("--bench", nargs="+", required=True,
                        help="bench.json of `srformer bench` (sections step and generate); several runs: a setting's "
                             "cost comes from the first that measured it, as ratios to that run's full-sdpa")
    parser.add_argument("--output", required=True, help="folder for pick.md, pick.json and pick.png")
    parser.add_argument("--encoder-length", type=int, default=4096, help="k of the bench records (default: 4096)")
    parser.add_argument("--segment-size", type=int, default=64, help="s of the bench records (default: 64)")
    parser.add_argument("--batch-size", type=int, default=8, help="batch of the bench records (default: 8)")
    parser.add_argument("--device", default="cpu", help="device of the bench records (default: cpu)")
    parser.add_argument("--long-probe", nargs="+", action="extend", default=[], metavar="PATH",
                        help="`srformer long-probe --output` folders or their long_probe.json: one column 'recall "
                             "16k (convert+400)' per input length and fine-tuning budget (off-segment accuracy, "
                             "mean over seeds; a record found twice: the last file counts)")
    parser.add_argument("--long-bench", nargs="+", action="extend", default=[], metavar="PATH",
                        help="`srformer long-bench --output` folders or their long_input.json: one column 'ms/token "
                             "256k (× segmented)' per input length (a variant's time from the first file that "
                             "measured it, as a multiple of that file's segmented)")
    parser.add_argument("--long-lengths", nargs="+", action="extend", type=_length, default=None, metavar="N",
                        help="input lengths of the long-input columns, in tokens or with k/M (k = 1024: 16k is "
                             "16384, 1M is 1048576); each must be in a --long-probe or --long-bench file, and "
                             "applies to both (default: every length present)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer pick`` (:func:`srformer.cli.pick_command.run`)."""
    from srformer.cli import pick_command

    return pick_command.run(args)
