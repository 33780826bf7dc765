"""Zero-step recall of one trained full-attention probe model converted to ``quest`` with given settings, at one
input length (synthetic; the measurement behind the choice of ``quest-tree``, docs/mechanisms.md).

The model is a cell of ``srformer probe`` (a folder with ``cell.json`` and ``model.pt``: the trained full-attention
base, e.g. ``RUN/cells/scratch/recall-n4-k512/full-seed0``). It is converted with the settings given as JSON, with no
fine-tuning, and scored teacher-forced on held-out recall documents of ``--length`` tokens encoded in windows of
512 (the documents ``srformer long-probe`` draws for that length). One line per settings:

    OMP_NUM_THREADS=1 python scripts/quest_settings_recall.py RUN/cells/scratch/recall-n4-k512/full-seed0 \
        --length 65536 --examples 32 --settings '{"leaf_size": 2, "top_leaves": 64, "group_size": 16, "top_groups": 64}'
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from srformer.config import named_config
from srformer.models.convert import convert
from srformer.probe.metrics import score
from srformer.probe.tasks import ProbeVocabulary, TaskSpec, generate_examples
from srformer.probe.training import ModelShape, build_model, predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cell", type=Path, help="a probe cell folder with cell.json and model.pt")
    parser.add_argument("--length", type=int, required=True, help="test input length (tokens)")
    parser.add_argument("--examples", type=int, default=32, help="documents (default 32)")
    parser.add_argument("--variant", default="quest", help="named setting converted to (default quest)")
    parser.add_argument("--settings", nargs="*", default=["{}"], help="JSON settings, one conversion each")
    parser.add_argument("--segment-size", type=int, default=32, help="s of the conversion (default 32)")
    args = parser.parse_args()
    record = json.loads((args.cell / "cell.json").read_text())
    budget = record["budget"]
    vocabulary = ProbeVocabulary(**budget["vocabulary"])
    examples = generate_examples(TaskSpec("recall", record["n"]), vocabulary, count=args.examples, length=args.length,
                                 segment_size=args.segment_size, target_length=record["target_length"],
                                 seed=20_000 + args.length)
    for text in args.settings:
        settings = json.loads(text)
        model = build_model(vocabulary, ModelShape(**budget["shape"]), record["seed"])
        model.load_state_dict(torch.load(args.cell / "model.pt", weights_only=True, map_location="cpu"))
        config = named_config(args.variant, segment_size=args.segment_size, target_length=record["target_length"],
                              encoder_window=512, **settings)
        model = convert(model, config).eval()
        started = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="An encoder input has .* segments")
            predictions = predict(model, examples, vocabulary, batch_size=8)
        metrics = score(predictions, examples, segment_size=args.segment_size, target_length=record["target_length"])
        print(f"{args.variant} {settings} at {args.length:,} tokens: off-segment "
              f"{100 * metrics['off_token_accuracy']:.1f}% ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
