"""``srformer compare``: the paper's baselines and ablations on one dataset (Table 2, Figure 4, Table 3)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from srformer.cli.arguments import parse_variant_settings
from srformer.cli.parsers.settings_fields import COMPARE_SKIPPED, COMPARE_TUPLES
from srformer.data.pairs import load_aclsum, load_pairs
from srformer.data.split import select_split
from srformer.experiments.compare import CompareSettings, grid_cells, run_compare
from srformer.training.distributed import process_state


def _load(source: str, split: str, args, limit: int | None):
    if args.split_by_id is not None:
        if source == "aclsum":
            raise ValueError("--split-by-id splits one local file; 'aclsum' has its own splits (use --train-split)")
        pairs = load_pairs(source, document_field=args.document_field, summary_field=args.summary_field)
        return select_split(pairs, args.split_by_id, split)[:limit]
    if source == "aclsum":
        return load_aclsum(split)[:limit]
    return load_pairs(source, split=split, document_field=args.document_field, summary_field=args.summary_field,
                      max_examples=limit)


def settings_from_args(args) -> CompareSettings:
    """The grid and budget of ``args``, with the ``--setting`` items of every named setting checked against
    its configs (before any data is loaded or any model trained).

    Raises:
        ValueError: a bad grid, or a ``--setting`` that cannot apply (see
            :func:`srformer.cli.arguments.parse_variant_settings` and :class:`CompareSettings`).
    """
    values = {f.name: getattr(args, f.name) for f in fields(CompareSettings) if f.name not in COMPARE_SKIPPED}
    values = {k: tuple(v) if k in COMPARE_TUPLES else v for k, v in values.items()}
    settings = CompareSettings(
        **values, ablation_segment_size=args.ablation_segment_size, progress=not args.no_progress,
        data=f"train {args.train_data} ({args.train_split}), test {args.test_data} ({args.test_split})"
        + (f", split by id {args.split_by_id}" if args.split_by_id else ""),
    )
    names = list(dict.fromkeys(cell.name for cell in grid_cells(settings)))
    return replace(settings, variant_settings=parse_variant_settings(args.setting, names))


def run(args) -> int:
    """Check the grid, load the train and test data, run the comparison into ``--output`` and print its table;
    returns 0."""
    settings = settings_from_args(args)
    train_pairs = _load(args.train_data, args.train_split, args, args.max_train_examples)
    test_pairs = _load(args.test_data, args.test_split, args, args.max_test_examples)
    payload = run_compare(args.output, train_pairs, test_pairs, settings)
    if process_state().is_main_process:
        print((Path(args.output) / "results.md").read_text())
        print(f"{len(payload['cells'])} cells; results in {args.output}")
    return 0
