"""Re-score the lead-3 row of a ``srformer compare`` results folder whose run directory is gone.

``srformer compare`` re-scores finished cells from their saved predictions when it is run again on its run
directory (length baselines included). A results folder copied out of a run keeps no predictions or per-document
scores, so only what needs no model output can be redone: the lead-3 row, from the test documents, with the current
sentence split (:mod:`srformer.data.sentences`). The paired differences to lead-3 need the cells' per-document
scores and are removed. ``results.json``, ``results.md`` and the plots are rewritten.

``--words N`` also records, under ``fixed_length_baselines``, the lead cut at ``N`` words and the greedy oracle capped
at ``N`` words for every document: a stand-in for the cells' own-length baselines when their outputs are gone (the
same ``N`` for every document, not each output's own length).

Usage: ``python scripts/rescore_lead3.py RESULTS_DIR TEST.jsonl [--split-by-id SPEC --part test] [--words N]``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from srformer.data.pairs import load_pairs
from srformer.data.split import select_split
from srformer.evaluation.baselines import BASELINE_NAMES, baseline_scores, lead_sentences, word_count
from srformer.evaluation.rouge import ROUGE_KEYS
from srformer.experiments.compare import LEAD, lead3_row, lead_baseline
from srformer.experiments.compare_report import write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a compare results folder (results.json)")
    parser.add_argument("data", help="the test documents (JSONL/JSON/CSV with document and summary)")
    parser.add_argument("--split-by-id", default=None, help="the grid's --split-by-id, when it used one")
    parser.add_argument("--part", default="test", help="the part of --split-by-id the grid tested on")
    parser.add_argument("--words", type=int, default=None,
                        help="also score the lead and the oracle cut at this many words per document")
    args = parser.parse_args()
    payload = json.loads((args.results / "results.json").read_text())
    pairs = load_pairs(args.data)
    if args.split_by_id:
        pairs = select_split(pairs, args.split_by_id, args.part)
    expected = payload["groups"][0]["num_documents"] if payload["groups"] else len(pairs)
    if len(pairs) != expected:
        raise SystemExit(f"{args.data} gives {len(pairs)} test documents; the grid scored {expected}")
    old = payload.get("lead3") or {}
    payload["lead3"] = lead3_row(lead_baseline(pairs),
                                 float(np.mean([word_count(lead_sentences(pair.document)) for pair in pairs])))
    payload["paired"] = [row for row in payload["paired"] if row.get("other") != LEAD]
    if args.words is not None:
        outputs = [" ".join(["w"] * args.words)] * len(pairs)  # only the word count of an output is used
        rows = baseline_scores([p.document for p in pairs], [p.summary for p in pairs], outputs)
        payload["fixed_length_baselines"] = {"words": args.words, **{
            name: {key: float(np.mean(rows[name][key])) for key in ROUGE_KEYS} for name in BASELINE_NAMES[1:]}}
    # indent 1, as the results folders keep it
    (args.results / "results.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    write_report(payload, args.results)
    before = f"{old['rouge1']:.2f}" if old else "none"
    print(f"{args.results}: lead-3 ROUGE-1 {before} -> {payload['lead3']['rouge1']:.2f} "
          f"({payload['lead3']['words']:.0f} words on average)")


if __name__ == "__main__":
    main()
