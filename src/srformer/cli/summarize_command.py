"""``srformer summarize``: summarize a text file, a JSONL file of documents, or standard input."""

from __future__ import annotations

import sys
from pathlib import Path

from srformer.cli.arguments import loading_settings
from srformer.cli.output_files import check_output_file, partial_path
from srformer.data.documents import load_documents
from srformer.data.file_reading import data_extension, open_text
from srformer.evaluation.corpus import discard_partial, generate_corpus
from srformer.evaluation.evaluate import load_summarizer
from srformer.evaluation.report import write_jsonl
from srformer.training.distributed import process_state
from srformer.training.pipeline import read_run


def _documents(source: str, field: str) -> tuple[list[str], list]:
    """The documents of ``source`` and their ids (a record's ``id``, else its position among the documents): a
    JSONL file, plain or compressed (:func:`srformer.data.documents.load_documents`, with the data files' checks and
    messages), any other file as one document, or ``-`` for standard input.

    Raises:
        FileNotFoundError: ``source`` is not a file.
        ValueError: a malformed data file, or a record without ``field`` (the message names the line and the fix).
    """
    if source == "-":
        return [sys.stdin.read()], [0]
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"Input file {source} does not exist.")
    if data_extension(path) != ".jsonl":
        with open_text(path) as handle:
            return [handle.read()], [0]
    pairs = load_documents(path, document_field=field)
    ids = [index if pair.id is None else pair.id for index, pair in enumerate(pairs)]
    return [pair.document for pair in pairs], ids


def run(args) -> int:
    """Load the checkpoint, summarize the input across the launch's processes, and print one summary per document
    or write them to ``--output`` (JSON lines ``{"id", "summary"}`` in input order); returns 0.

    With ``--output``, finished batches are kept in ``<--output>.partial`` until the output is written, so the same
    command started again after a kill resumes there (:func:`srformer.evaluation.corpus.generate_corpus`).

    Raises:
        ValueError / FileNotFoundError: an output path that cannot be written, a checkpoint or input that is not
            there, a malformed input, or a partial file of another run's inputs (the CLI prints it and exits 2).
    """
    output = check_output_file(args.output, "--output") if args.output else None
    state = process_state()
    # before reading the input: a missing checkpoint fails fast
    model, tokenizer = load_summarizer(args.checkpoint, *loading_settings(args))
    model = model.to(state.device)
    run_info = read_run(args.checkpoint) or {}
    documents, ids = _documents(args.input, args.document_field)
    partial = partial_path(output) if output is not None else None
    result = generate_corpus(
        model, tokenizer, documents, ids=[str(i) for i in ids], partial_file=partial,
        max_source_length=args.max_source_length or run_info.get("max_source_length", 512),
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, num_beams=args.num_beams,
        do_sample=args.do_sample, seed=args.seed, source_prefix=run_info.get("source_prefix", ""),
        progress=not args.no_progress,
        **({"no_repeat_ngram_size": args.no_repeat_ngram_size} if args.no_repeat_ngram_size else {}),
    )
    if state.is_main_process:
        if output is None:
            for summary in result.summaries:
                print(summary)
        else:
            write_jsonl(output, [{"id": i, "summary": s} for i, s in zip(ids, result.summaries, strict=True)])
            print(f"{len(documents)} summaries written to {output}", file=sys.stderr)
    discard_partial(partial)
    return 0
