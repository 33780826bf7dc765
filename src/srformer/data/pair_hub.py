"""Summary pairs from a Hugging Face hub dataset (``xsum``, ``cnn_dailymail``, ``EdinburghNLP/xsum``), loaded with
:func:`datasets.load_dataset` (needs network access or a warm local cache).
"""

from __future__ import annotations

from srformer.data.pair_record import SummaryPair, make_pair


def load_hub(
    name: str,
    split: str | None,
    document_field: str,
    summary_field: str,
    max_examples: int | None,
) -> list[SummaryPair]:
    """Load a hub dataset with :func:`datasets.load_dataset`; see :func:`~srformer.data.pairs.load_pairs`."""
    split = split or "train"
    config = None
    if name.rsplit("/", 1)[-1].lower() == "cnn_dailymail":
        config = "3.0.0"
        if document_field == "document" and summary_field == "summary":
            document_field, summary_field = "article", "highlights"
    described = f"hub dataset {name!r}" + (f" (config {config!r})" if config else "")
    try:
        import datasets

        dataset = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # network, unknown name, unknown split, missing cache, ...
        raise RuntimeError(
            f"could not load {described}, split {split!r}: {type(exc).__name__}: "
            f"{str(exc).rstrip('. ')}. "
            "If this machine is offline (or the name is wrong), save the data as a local "
            "JSONL or CSV file with 'document' and 'summary' fields and pass its path instead"
        ) from exc
    if max_examples is not None:
        dataset = dataset.select(range(min(max_examples, len(dataset))))
    pairs = [
        make_pair(
            record, document_field, summary_field, f"{described}, split {split!r}, row {row_no}"
        )
        for row_no, record in enumerate(dataset, start=1)
    ]
    if not pairs:
        raise ValueError(f"{described}, split {split!r}: the split holds no examples")
    return pairs
