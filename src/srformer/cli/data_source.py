"""Resolve ``--data`` (a file, a hub dataset name, or the embedded ``aclsum``) to summary pairs."""

from __future__ import annotations

from srformer.data.pairs import SummaryPair, load_aclsum, load_pairs
from srformer.data.split import select_split


def load_data(args, default_split: str) -> list[SummaryPair]:
    """Pairs for ``args.data`` (``aclsum`` reads the ACLSum split shipped by the ``aclsum`` package).

    With ``args.split_by_id`` (a spec such as ``"train=0.8,validation=0.1,test=0.1"``) the file is
    split by a stable hash of each id (:mod:`srformer.data.split`) and the part ``args.split`` (or
    ``default_split``) is returned; ``max_examples`` then keeps the first examples of that part.

    Raises:
        ValueError / FileNotFoundError: from the loaders, naming the file and the fix.
    """
    split = args.split or default_split
    spec = getattr(args, "split_by_id", None)
    if spec is not None:
        if args.data == "aclsum":
            raise ValueError("--split-by-id splits one local file; 'aclsum' has its own splits (use --split)")
        pairs = load_pairs(args.data, document_field=args.document_field, summary_field=args.summary_field)
        limit = getattr(args, "max_examples", None)
        return select_split(pairs, spec, split)[:limit]
    if args.data == "aclsum":
        return load_aclsum(split)
    return load_pairs(
        args.data, split=split, document_field=args.document_field, summary_field=args.summary_field,
        max_examples=getattr(args, "max_examples", None),
    )
