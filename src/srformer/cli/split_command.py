"""``srformer split``: a fixed train/validation/test split of one file by a stable hash of each id."""

from __future__ import annotations

from srformer.data.pairs import load_pairs
from srformer.data.split import parse_split_spec, split_by_id, write_split


def run(args) -> int:
    """Split ``--data`` into the parts of ``--fractions`` under ``--output-dir``; returns 0."""
    fractions = parse_split_spec(args.fractions)
    pairs = load_pairs(args.data, document_field=args.document_field, summary_field=args.summary_field)
    parts = split_by_id(pairs, fractions)
    try:
        paths = write_split(parts, args.output_dir)
    except FileExistsError as error:
        raise ValueError(str(error)) from None
    for name, path in paths.items():
        print(f"{name}: {len(parts[name])} examples -> {path}")
    return 0
