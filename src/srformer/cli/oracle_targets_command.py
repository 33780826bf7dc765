"""``srformer oracle-targets``: each training document's greedy ROUGE oracle as its summary."""

from __future__ import annotations

from srformer.cli.data_source import load_data
from srformer.cli.output_files import check_output_file
from srformer.training.oracle_targets import write_oracle_targets


def run(args) -> int:
    """Load the data (and the tokenizer), write the oracle targets to ``--output`` and print their sizes; returns 0.

    Raises:
        ValueError: ``--max-source-length`` without ``--tokenizer`` or below 1, an unwritable ``--output``, bad data,
            and the errors of :func:`srformer.training.oracle_targets.write_oracle_targets`.
        FileNotFoundError: a ``--tokenizer`` that is neither a local checkpoint nor a reachable hub id.
    """
    output = check_output_file(args.output, "--output")
    if args.max_source_length is not None and args.max_source_length < 1:
        raise ValueError(f"--max-source-length must be at least 1, got {args.max_source_length}.")
    if args.max_source_length is not None and args.tokenizer is None:
        raise ValueError("--max-source-length counts the model's tokens: pass --tokenizer CHECKPOINT as well.")
    tokenizer = None
    if args.tokenizer is not None:
        from transformers import AutoTokenizer

        from srformer.models.factory import load_pretrained

        tokenizer = load_pretrained(AutoTokenizer.from_pretrained, args.tokenizer)
    pairs = load_data(args, default_split="train")
    stats = write_oracle_targets(pairs, output, tokenizer=tokenizer, max_source_length=args.max_source_length,
                                 source_prefix=args.source_prefix, progress=not args.no_progress)
    print(f"{stats['written']} of {stats['documents']} documents have an oracle target (the others share no "
          f"word pair with their reference); {stats['target_words']:.0f} words per target against "
          f"{stats['reference_words']:.0f} per reference; written to {output}")
    return 0
