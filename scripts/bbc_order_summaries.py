"""Put the extractive summaries of the BBC News Summary corpus in document order (data preparation for the BBC
experiment of docs/results.md; not part of the package).

Each summary of that corpus is a set of the article's own sentences, joined with no space ("...$10.9bn.For the
full-year...") and listed in an arbitrary order: the first summary sentence is the article's n-th sentence for
no reason an article shows, so no model can predict which sentence a reference starts with. This script writes
the same records with the summary sentences in the order they appear in the article, joined by one space, as an
extractive summariser would emit them. Everything else (``id``, ``document``, ``title``, ``category``) is copied
unchanged, so ``--split-by-id`` gives the same split as on the original file.

A summary sentence (pysbd's sentences, once the corpus' missing spaces are put back) is located by its first 40
characters after any opening quote in the article (newlines read as spaces); sentences that cannot be located keep
their relative order after the located ones (the script prints how many summaries have all located: 2,191 of
2,225).

Usage: ``python scripts/bbc_order_summaries.py ALL.jsonl OUT.jsonl``
"""

from __future__ import annotations

import json
import re
import sys

from srformer.data.sentences import split_sentences

#: Where the corpus joined two summary sentences with no space: end punctuation (possibly closing quote) directly
#: followed by the next sentence's capital letter. Not a digit ("$1.13bn" is one number), and not before a quote,
#: which may close the sentence before it.
MISSING_SPACE = re.compile(r"(?<=[.!?])(?=[A-Z])|(?<=[.!?][\"'])(?=[A-Z])")


def summary_sentences(summary: str) -> list[str]:
    """The sentences of a summary in the corpus' own order: the missing spaces put back, then pysbd's sentences
    (:func:`srformer.data.sentences.split_sentences`)."""
    return split_sentences(MISSING_SPACE.sub(" ", summary))


def document_order(document: str, summary: str) -> tuple[str, bool]:
    """The summary with its sentences in document order (one space between them), and whether every sentence was
    located in the document."""
    text = document.replace("\n", " ")
    located: list[tuple[int, int, str]] = []
    missing: list[tuple[int, int, str]] = []
    for index, sentence in enumerate(summary_sentences(summary)):
        position = text.find(sentence.lstrip("\"' ")[:40])
        (located if position >= 0 else missing).append((position, index, sentence))
    ordered = [sentence for _, _, sentence in sorted(located)] + [sentence for _, _, sentence in missing]
    return " ".join(ordered), not missing


def main(source: str, target: str) -> None:
    with open(source, encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    complete = 0
    with open(target, "w", encoding="utf-8") as out:
        for record in records:
            record["summary"], found = document_order(record["document"], record["summary"])
            complete += found
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"{len(records)} records written to {target}; every summary sentence located in {complete} of them")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
