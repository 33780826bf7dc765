"""``srformer long-probe``: recall at inputs far longer than training, from a finished ``srformer probe`` run."""

from __future__ import annotations

import sys

from srformer.probe.long_input import LongProbeSettings, run_long_probe, write_long_probe


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
    parser.add_argument("--knn-index", choices=("flat", "ivf"), default=None,
                        help="knn cells: search a faiss index of the encoder output at every length, decoding one "
                             "position at a time as generate() does (default: the exact search, teacher-forced)")
    parser.add_argument("--index-probes", type=int, default=None,
                        help="with --knn-index ivf: cells scanned per query (default 32)")
    parser.set_defaults(run=run)


def run(args) -> int:
    """Score, write the outputs; returns 0."""
    options = {name: getattr(args, name)
               for name in ("encoder_window", "examples", "batch_size", "knn_index", "index_probes")
               if getattr(args, name) is not None}
    for name in ("lengths", "seeds"):
        if getattr(args, name):
            options[name] = tuple(getattr(args, name))
    settings = LongProbeSettings(runs=tuple(args.runs), variants=tuple(args.variants), **options)
    run_long_probe(settings, args.output, log=lambda line: print(line, file=sys.stderr, flush=True))
    written = write_long_probe(args.output)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0
