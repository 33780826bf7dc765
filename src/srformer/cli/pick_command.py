"""``srformer pick``: one table of quality (probe) and cost (bench) per cross attention, with its Pareto front."""

from __future__ import annotations

from srformer.experiments.pick import (
    CostColumns,
    load_long_probe_records,
    load_probe_records,
    pick_table,
    write_pick,
)


def run(args) -> int:
    """Read the probe and bench results, write the pick table into ``--output``; returns 0."""
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
