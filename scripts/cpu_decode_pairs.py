"""Per-token decoding time of long-input settings side by side, interleaved, in one process: a measure of the ratio
of their times that a run's drift (another job, a neighbour on shared cores) moves less than one timing per variant.

For each length: a randomly initialised model of ``--shape`` (seeded) and one random encoder output (standard normal
rows: synthetic, costs only; the encoder is not run), each variant converted from the same model (the long-input
benchmark's settings, ``srformer long-bench --variants``) and its state built by a first ``generate()``; then
``--rounds`` rounds, each one greedy ``generate()`` of ``--tokens`` tokens per variant in turn. Each step after the
first is one timing (the time between two of generate()'s stopping-criteria calls, so the whole decoder and
generate()'s own work count). Reported per variant: the median and quartiles of its step times over all rounds, and
each round's median as a ratio to the first variant's in the same round (min / median / max over rounds).

Usage (from a checkout; one thread is the measure of the aims):
    OMP_NUM_THREADS=1 python scripts/cpu_decode_pairs.py --output runs/cpu-pairs \\
        [--lengths 16384 65536 262144] [--variants segmented knn-loki-pages] [--tokens 32] [--rounds 3]
Writes ``pairs.json`` and ``pairs.md`` in ``--output`` (a length already there is skipped: rerun after a stop).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers.modeling_outputs import BaseModelOutput

from srformer.benchmarks.long_input_probe import StepClock
from srformer.benchmarks.long_input_variants import LONG_INPUT_VARIANTS
from srformer.benchmarks.variants import MODEL_SHAPES, quiet_schedule_warnings, shape_model
from srformer.core import SRformerConfig
from srformer.models.convert import convert


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="folder for pairs.json and pairs.md")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16384, 65536, 262144], help="input tokens")
    parser.add_argument("--variants", nargs="+", default=["segmented", "knn-loki-pages"],
                        help="long-bench settings; the first is the one the others are divided by")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per generate() (at least 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of one generate() per variant")
    parser.add_argument("--shape", default="t5-small", help="model shape")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def _check(args: argparse.Namespace) -> None:
    unknown = [name for name in args.variants if name not in LONG_INPUT_VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(LONG_INPUT_VARIANTS)}")
    if args.shape not in MODEL_SHAPES:
        raise SystemExit(f"--shape: unknown {args.shape!r}; known: {', '.join(MODEL_SHAPES)}")
    if args.tokens < 3 or args.rounds < 1 or any(length < 1 for length in args.lengths):
        raise SystemExit("--tokens must be at least 3, --rounds at least 1 and --lengths positive")


def _steps(model: Any, encoded: torch.Tensor, tokens: int) -> list[float]:
    """Seconds of each step after the first of one greedy generate()."""
    clock = StepClock()
    model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=encoded), max_new_tokens=tokens,
                   min_new_tokens=tokens, do_sample=False, num_beams=1, use_cache=True, stopping_criteria=[clock])
    return [after - before for before, after in itertools.pairwise(clock.times)]


def measure_length(length: int, variants: Sequence[str], tokens: int, rounds: int, shape: str,
                   seed: int) -> dict[str, Any]:
    """One length's record: per variant its step times (seconds) by round, their median and quartiles (ms), and
    each round's median as a ratio to the first variant's."""
    torch.manual_seed(seed)
    base = shape_model(shape)
    encoded = torch.randn(1, length, base.config.d_model, generator=torch.Generator().manual_seed(seed))
    models: dict[str, Any] = {}
    with quiet_schedule_warnings(), torch.no_grad():
        for name in variants:
            models[name] = convert(copy.deepcopy(base), SRformerConfig(**LONG_INPUT_VARIANTS[name]))
            _steps(models[name], encoded, 2)  # the first call's one-time work out of the timings
        steps: dict[str, list[list[float]]] = {name: [] for name in variants}
        for round_index in range(rounds):
            for name in variants:
                steps[name].append(_steps(models[name], encoded, tokens))
            print(f"{length:,} tokens: round {round_index + 1}/{rounds}", file=sys.stderr, flush=True)
    first = variants[0]
    record: dict[str, Any] = {"length": length, "variants": {}}
    for name in variants:
        every = [value for one in steps[name] for value in one]
        quartiles = statistics.quantiles(every, n=4)
        ratios = [statistics.median(mine) / statistics.median(theirs)
                  for mine, theirs in zip(steps[name], steps[first], strict=True)]
        record["variants"][name] = {
            "median_ms": 1e3 * statistics.median(every), "quartiles_ms": [1e3 * quartiles[0], 1e3 * quartiles[2]],
            "ratio_to_first": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
            "steps_seconds": steps[name]}
    return record


def table(records: Sequence[dict[str, Any]], variants: Sequence[str]) -> str:
    """The Markdown table of the records: per variant and length, the median ms per token and the rounds' ratios."""
    heads = [f"`{name}` ms per token (× `{variants[0]}`: min / median / max of rounds)" for name in variants]
    lines = [f"| tokens | {' | '.join(heads)} |",
             "| --- |" + " --- |" * len(variants)]
    for record in records:
        cells = []
        for name in variants:
            entry = record["variants"][name]
            ratio = entry["ratio_to_first"]
            cells.append(f"{entry['median_ms']:.1f} ({ratio['min']:.2f} / {ratio['median']:.2f} / {ratio['max']:.2f})")
        lines.append(f"| {record['length']:,} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _check(args)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "pairs.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    settings = {"variants": args.variants, "tokens": args.tokens, "rounds": args.rounds, "shape": args.shape,
                "seed": args.seed, "threads": torch.get_num_threads()}
    if stored and stored["settings"] != settings:
        raise SystemExit(f"{path} holds another measurement ({stored['settings']}); give another --output")
    records = stored.get("records", [])
    for length in args.lengths:
        if any(record["length"] == length for record in records):
            continue
        records.append(measure_length(length, args.variants, args.tokens, args.rounds, args.shape, args.seed))
        path.write_text(json.dumps({"settings": settings, "records": records}, indent=1) + "\n")
    (output / "pairs.md").write_text(table(sorted(records, key=lambda record: record["length"]), args.variants))
    print(f"wrote {path} and {output / 'pairs.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
