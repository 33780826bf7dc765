"""Mix passage targets into oracle-extract targets (the passage stage of results/recipe/sumpubmed-extract; data
preparation, not part of the package).

For every paper of an oracle-target file (``srformer oracle-targets``), ``PASSAGES`` passages of 16-48 tokens at
uniformly random offsets of the first ``--max-source-length`` tokens (the tokenizer's), decoded back to text, each
as a target of the same document; then the paper's oracle target itself. Trained with ``srformer train`` and the
windows of the oracle stage, a passage target asks for the skill ``srformer copy-reach`` measures, at the length
and windows the summarizer reads, instead of on single 128-token windows as in ``srformer pretrain``.

Usage: ``python scripts/passage_mix.py ORACLE.jsonl TOKENIZER_DIR OUT.jsonl [PASSAGES] [--max-source-length N]``
(3 passages a paper and 2,048 tokens by default; seed 0).
"""

from __future__ import annotations

import argparse
import json
import random


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("oracle", help="JSONL of srformer oracle-targets (id, document, summary)")
    parser.add_argument("tokenizer", help="the base's directory (its tokenizer)")
    parser.add_argument("output", help="JSONL to write (id, document, summary)")
    parser.add_argument("passages", nargs="?", type=int, default=3, help="passages per paper (default 3)")
    parser.add_argument("--max-source-length", type=int, default=2048)
    args = parser.parse_args()
    if args.passages < 0:
        parser.error(f"PASSAGES must be 0 or more, got {args.passages}")
    from srformer.models.factory import load_tokenizer  # after the arguments: a refusal is immediate

    tokenizer = load_tokenizer(args.tokenizer)
    rng = random.Random(0)
    written = 0
    with open(args.oracle, encoding="utf-8") as source, open(args.output, "w", encoding="utf-8") as out:
        for line in source:
            row = json.loads(line)
            ids = tokenizer(row["document"], max_length=args.max_source_length, truncation=True,
                            add_special_tokens=False).input_ids
            for k in range(args.passages):
                length = rng.randint(16, 48)
                start = rng.randint(0, max(0, len(ids) - length))
                target = str(tokenizer.decode(ids[start:start + length])).strip()
                record = {"id": f"{row['id']}-p{k}", "document": row["document"], "summary": target}
                out.write(json.dumps(record) + "\n")
                written += 1
            out.write(json.dumps({"id": row["id"], "document": row["document"], "summary": row["summary"]}) + "\n")
    print(f"{written} passage targets and the oracle targets written to {args.output}")


if __name__ == "__main__":
    main()
