"""Resolve ``--data`` (a file, a hub dataset name, or the embedded ``aclsum``) to summary pairs."""

from __future__ import annotations

from srformer.data.pairs import SummaryPair, load_aclsum, load_pairs


def load_data(args, default_split: str) -> list[SummaryPair]:
    """Pairs for ``args.data`` (``aclsum`` reads the ACLSum split shipped by the ``aclsum`` package).

    Raises:
        ValueError / FileNotFoundError: from the loaders, naming the file and the fix.
    """
    split = args.split or default_split
    if args.data == "aclsum":
        return load_aclsum(split)
    return load_pairs(
        args.data, split=split, document_field=args.document_field, summary_field=args.summary_field,
        max_examples=getattr(args, "max_examples", None),
    )
