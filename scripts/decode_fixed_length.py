"""Decode speed of the main job's t5-tiny model with every sequence forced to the same length.

`srformer aclsum` reports tokens/s of generate() with each model's own output lengths, which differ
between variants (a model that stops early spends a larger share of its time in the encoder and the
first step). This script converts the trained `full` checkpoint to `segmented` and `srformer` (the
settings of the main job: s=32, T=128; the weights do not change the cost) and times greedy generate()
of exactly N new tokens on random 512-token inputs, encoder included as in `srformer evaluate`.

    OMP_NUM_THREADS=1 python scripts/decode_fixed_length.py runs/aclsum/full --output out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from transformers import AutoModelForSeq2SeqLM

import srformer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="the main job's trained full-attention model (runs/aclsum/full)")
    parser.add_argument("--output", required=True, help="JSON path for the results")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = AutoModelForSeq2SeqLM.from_pretrained(args.checkpoint).eval()
    models = {"full": base}
    for variant in ("segmented", "srformer"):
        model = copy.deepcopy(base)
        srformer.convert(model, srformer.SRformerConfig(variant=variant, segment_size=32, target_length=128))
        models[variant] = model.eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, base.config.vocab_size, (args.batch_size, args.source_length), generator=generator)
    mask = torch.ones_like(ids)

    def generate(model, tokens: int) -> float:
        started = time.perf_counter()
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                       do_sample=False, num_beams=1)
        return time.perf_counter() - started

    results = {}
    for name, model in models.items():
        generate(model, 4)  # warm-up
        seconds = statistics.median(generate(model, args.new_tokens) for _ in range(args.repeats))
        results[name] = {"seconds": seconds, "tokens_per_second": args.batch_size * args.new_tokens / seconds}
        print(f"{name}: {seconds:.3f} s, {results[name]['tokens_per_second']:.0f} new tokens/s", flush=True)
    for name in ("segmented", "srformer"):
        results[name]["vs_full"] = results[name]["tokens_per_second"] / results["full"]["tokens_per_second"]
    with open(args.output, "w") as handle:
        json.dump({"settings": vars(args), "results": results}, handle, indent=2)


if __name__ == "__main__":
    main()
