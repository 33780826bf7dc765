"""``srformer compare``: the paper's baselines and ablations on one dataset (Table 2, Figure 4, Table 3)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from srformer.cli.arguments import MODEL_HELP, add_variant_settings_argument, parse_variant_settings
from srformer.config import NAMED_SETTINGS
from srformer.data.pairs import load_aclsum, load_pairs
from srformer.data.split import select_split
from srformer.experiments.compare import CompareSettings, grid_cells, run_compare

_TUPLES = {"variants": str, "segment_sizes": int, "ablations": str, "seeds": int}
_SKIPPED = {"progress", "data", "ablation_segment_size", "variant_settings"}


def add_parser(subparsers) -> None:
    defaults = CompareSettings()
    parser = subparsers.add_parser(
        "compare",
        help="fine-tune and score a grid of variants x segment sizes x seeds from one full-attention base model",
        description=(
            "Train a full-attention base model (or use --model CHECKPOINT with --base-steps 0), convert it to every "
            "named variant, fine-tune each per segment size and seed, score ROUGE on the test data, and write "
            "results.json, results.md, figure4.png and table3.png. Finished cells are skipped on a re-run. "
            f"Names: {', '.join(NAMED_SETTINGS)}."
        ),
    )
    parser.add_argument("--train-data", required=True, help="JSONL/JSON/CSV file, hub dataset name, or 'aclsum'")
    parser.add_argument("--test-data", required=True, help="JSONL/JSON/CSV file, hub dataset name, or 'aclsum'")
    parser.add_argument("--train-split", default="train",
                        help="split for hub datasets and 'aclsum', or a part name of --split-by-id")
    parser.add_argument("--test-split", default="test",
                        help="split for hub datasets and 'aclsum', or a part name of --split-by-id")
    parser.add_argument("--split-by-id", default=None, metavar="SPEC",
                        help="split one file by a stable hash of each example's id, e.g. "
                             "'train=0.8,validation=0.1,test=0.1'; --train-split/--test-split pick the parts "
                             "(pass the same file as --train-data and --test-data)")
    parser.add_argument("--document-field", default="document")
    parser.add_argument("--summary-field", default="summary")
    parser.add_argument("--max-train-examples", type=int, default=None, help="use the first N training pairs")
    parser.add_argument("--max-test-examples", type=int, default=None, help="score the first N test pairs")
    parser.add_argument("--output", required=True, help="results directory (resumable)")
    for field in fields(CompareSettings):
        if field.name in _SKIPPED:
            continue
        flag = f"--{field.name.replace('_', '-')}"
        value = getattr(defaults, field.name)
        if field.name in _TUPLES:
            kwargs = {"choices": list(NAMED_SETTINGS)} if _TUPLES[field.name] is str else {}
            parser.add_argument(flag, type=_TUPLES[field.name], nargs="*" if field.name == "ablations" else "+",
                                default=list(value), **kwargs)
        else:
            parser.add_argument(flag, type=type(value), default=value,
                                help=MODEL_HELP if field.name == "model" else None)
    parser.add_argument("--ablation-segment-size", type=int, default=None,
                        help="segment size of the ablations (default: the largest --segment-sizes)")
    add_variant_settings_argument(parser)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run)


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
    values = {f.name: getattr(args, f.name) for f in fields(CompareSettings) if f.name not in _SKIPPED}
    values = {k: tuple(v) if k in _TUPLES else v for k, v in values.items()}
    settings = CompareSettings(
        **values, ablation_segment_size=args.ablation_segment_size, progress=not args.no_progress,
        data=f"train {args.train_data} ({args.train_split}), test {args.test_data} ({args.test_split})"
        + (f", split by id {args.split_by_id}" if args.split_by_id else ""),
    )
    names = list(dict.fromkeys(cell.name for cell in grid_cells(settings)))
    return replace(settings, variant_settings=parse_variant_settings(args.setting, names))


def run(args) -> int:
    settings = settings_from_args(args)
    train_pairs = _load(args.train_data, args.train_split, args, args.max_train_examples)
    test_pairs = _load(args.test_data, args.test_split, args, args.max_test_examples)
    payload = run_compare(args.output, train_pairs, test_pairs, settings)
    print((Path(args.output) / "results.md").read_text())
    print(f"{len(payload['cells'])} cells; results in {args.output}")
    return 0
