"""``srformer long-probe``: its options; the command is :mod:`srformer.cli.long_probe_command`."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    """Register ``srformer long-probe`` and its options on ``subparsers``."""
    parser = subparsers.add_parser(
        "long-probe", help="score finished recall probe cells on inputs far longer than they were trained on",
        description=(
            "Take the finished recall cells (convert protocol, of each --seeds seed) of `srformer probe` runs, "
            "encode longer held-out documents in windows of the trained length, and score off- and on-segment "
            "recall at each length without further training. Writes OUTPUT/long_probe.json (one row per cell, "
            "length and seed; resumable), long_probe.md and long_probe.png (the mean over the seeds). Synthetic."
        ),
    )
    parser.add_argument("--runs", nargs="+", required=True, help="`srformer probe --output` folders")
    parser.add_argument("--variants", nargs="+", required=True, help="named settings whose cells are scored")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="probe seeds whose cells are scored (default 0); the table shows their mean")
    parser.add_argument("--output", required=True, help="output folder (finished lengths there are kept)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="test input lengths in tokens (default 2048 4096 8192 16384)")
    parser.add_argument("--encoder-window", type=int, default=None,
                        help="tokens per encoder window (default: the trained input length)")
    parser.add_argument("--examples", type=int, default=None, help="documents per length (default 128)")
    parser.add_argument("--batch-size", type=int, default=None, help="documents per forward pass (default 16)")
    parser.add_argument("--knn-index", choices=("flat", "ivf", "rows", "loki"), default=None,
                        help="knn cells: search a faiss index of the encoder output (flat, ivf), its rows in torch "
                             "(rows), or those rows through low-rank keys first (loki) at every length, decoding one "
                             "position at a time as generate() does (default: the exact search, teacher-forced)")
    parser.add_argument("--index-rank", type=int, default=None,
                        help="with --knn-index loki: principal channels of each head's keys read per query "
                             "(default 12)")
    parser.add_argument("--index-candidates", type=int, default=None,
                        help="with --knn-index loki: keys per head scored exactly (default 256)")
    parser.add_argument("--index-page", type=int, default=None,
                        help="with --knn-index loki: keys per page of the first stage, which then reads only the "
                             "pages of best bound (default: no pages, every key)")
    parser.add_argument("--index-pages", type=int, default=None,
                        help="with --index-page: pages per head whose keys are scored (default 256)")
    parser.add_argument("--index-key-rank", type=int, default=None,
                        help="with --index-page: channels the keys of the pages read are scored on (default: "
                             "--index-rank)")
    parser.add_argument("--top-keys", type=int, default=None,
                        help="keys each head of a knn cell attends to (default: the cell's own, 32)")
    parser.add_argument("--index-probes", type=int, default=None,
                        help="with --knn-index ivf: cells scanned per query (default 32)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``srformer long-probe`` (:func:`srformer.cli.long_probe_command.run`)."""
    from srformer.cli import long_probe_command

    return long_probe_command.run(args)
