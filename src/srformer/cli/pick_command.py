"""``srformer pick``: one table of quality (probe) and cost (bench) per cross attention, with its Pareto front."""

from __future__ import annotations

import argparse

from srformer.experiments.pick import (
    CostColumns,
    load_long_probe_records,
    load_probe_records,
    parse_length,
    pick_table,
    write_pick,
)


def _length(text: str) -> int:
    try:
        return parse_length(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(subparsers) -> None:
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


def run(args) -> int:
    where = CostColumns(args.encoder_length, args.segment_size, args.batch_size, args.device)
    if args.long_lengths and not (args.long_probe or args.long_bench):
        raise ValueError("--long-lengths chooses the columns of --long-probe and --long-bench: give one of them.")
    payload = pick_table(load_probe_records(args.probe), args.bench, where,
                         long_probe_records=load_long_probe_records(args.long_probe), long_bench=args.long_bench,
                         long_lengths=args.long_lengths)
    folder = write_pick(payload, args.output)
    long_input = payload["long_input"]
    extra = len(long_input["recall_columns"]) + len(long_input["time_columns"])
    print(f"{len(payload['rows'])} mechanisms, {len(payload['columns'])} quality columns"
          + (f", {extra} long-input columns" if extra else "") + f" -> {folder / 'pick.md'}")
    return 0
