"""``srformer pick``: one table of quality (probe) and cost (bench) per cross attention, with its Pareto front."""

from __future__ import annotations

from srformer.experiments.pick import CostColumns, load_probe_records, pick_table, write_pick


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "pick", help="which cross attention to pick: probe accuracy next to bench cost, with the Pareto front",
        description=(
            "Read `srformer probe` results (off- and on-segment recall accuracy per problem, protocol and "
            "fine-tuning budget) and `srformer bench` runs (step and generate() time against full attention, "
            "decode state per layer) and write OUTPUT/pick.md, pick.json and pick.png (off-segment accuracy after "
            "conversion against step time, Pareto front marked)."
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
    parser.set_defaults(run=run)


def run(args) -> int:
    where = CostColumns(args.encoder_length, args.segment_size, args.batch_size, args.device)
    payload = pick_table(load_probe_records(args.probe), args.bench, where)
    folder = write_pick(payload, args.output)
    print(f"{len(payload['rows'])} mechanisms, {len(payload['columns'])} quality columns -> {folder / 'pick.md'}")
    return 0
