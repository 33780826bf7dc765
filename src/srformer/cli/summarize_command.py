"""``srformer summarize``: summarize a text file, a JSONL file of documents, or standard input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from srformer.cli.arguments import apply_runtime_options
from srformer.evaluation.evaluate import load_summarizer
from srformer.evaluation.generation import generate_summaries
from srformer.training.pipeline import read_run


def _documents(source: str, field: str) -> list[str]:
    if source == "-":
        return [sys.stdin.read()]
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"Input file {source} does not exist.")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        documents = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                record = json.loads(line)
                if field not in record:
                    raise ValueError(f"{source} line {number} has no `{field}` field; pass --document-field.")
                documents.append(record[field])
        return documents
    return [text]


def run(args) -> int:
    """Load the checkpoint, summarize the input and print one summary per document; returns 0."""
    model, tokenizer = load_summarizer(args.checkpoint)  # before reading the input: a missing checkpoint fails fast
    model = apply_runtime_options(model, args)
    run_info = read_run(args.checkpoint) or {}
    documents = _documents(args.input, args.document_field)
    result = generate_summaries(
        model, tokenizer, documents, max_source_length=args.max_source_length or run_info.get("max_source_length", 512),
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, num_beams=args.num_beams,
        do_sample=args.do_sample, source_prefix=run_info.get("source_prefix", ""), progress=not args.no_progress,
    )
    for summary in result.summaries:
        print(summary)
    return 0
