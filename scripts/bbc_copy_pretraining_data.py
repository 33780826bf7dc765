"""Copy-pretraining data for the BBC experiment of docs/results.md (data preparation; not part of the package).

A tiny encoder-decoder trained from scratch on the 1,744 BBC training articles learns the language of the summaries
long before it learns to read its input: it writes one summary for every article (docs/results.md, "BBC News with
extractive summaries"). This script turns the *training part* of the corpus into many copying examples, so that the
base model learns to read its input before it learns to summarise: for every sentence start of every training
article, the source is the article from that sentence on, and the target is that sentence and the next one. Each
article gives one example per sentence (about 20), and no two examples share a source, so the only way to lower the
loss is to copy from the encoder.

Only the records of the file passed in are used: pass the ``train`` part written by
``srformer split --data ordered.jsonl --output-dir split`` so that nothing of the validation or test articles
reaches the base model.

Usage: ``python scripts/bbc_copy_pretraining_data.py split/train.jsonl copy.jsonl``
"""

from __future__ import annotations

import json
import re
import sys

#: A sentence start inside an article: after end punctuation (possibly a closing quote) and white space.
SENTENCE_START = re.compile(r"(?<=[.!?])[\"']?\s+(?=[A-Z\"'])")


def sentence_starts(document: str) -> list[int]:
    """Character offsets at which the sentences of ``document`` start (the first is 0)."""
    return [0] + [match.end() for match in SENTENCE_START.finditer(document)]


def copy_examples(record: dict) -> list[dict]:
    """One example per sentence start of ``record['document']``: the article from there on, and its first two
    sentences as the target."""
    document = record["document"].replace("\n", " ")
    starts = sentence_starts(document)
    examples = []
    for index, start in enumerate(starts):
        end = starts[index + 2] if index + 2 < len(starts) else len(document)
        target = document[start:end].strip()
        if len(target.split()) >= 5:
            examples.append({"id": f"{record['id']}-copy{index}", "document": document[start:],
                             "summary": target})
    return examples


def main(source: str, target: str) -> None:
    with open(source, encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    count = 0
    with open(target, "w", encoding="utf-8") as out:
        for record in records:
            for example in copy_examples(record):
                out.write(json.dumps(example, ensure_ascii=False) + "\n")
                count += 1
    print(f"{count} copy examples from {len(records)} articles written to {target}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
