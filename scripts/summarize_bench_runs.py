"""Min / median / max of the generation-cost ratios over repeated `srformer bench` runs (the table of
docs/benchmarks.md, "Generation cost"; not part of the package).

Each argument is a ``bench.json`` of one run at one encoder length (the records of ``srformer bench``); a run of
several segment sizes counts once per size; runs are grouped by (encoder_length, segment_size, batch size of the
step records); the training step is timed at ``--training-batch-size`` (default 1) whatever that batch size.
Ratios are taken within a run, against that run's ``full-sdpa`` (or ``segmented``), so machine load shared by all
variants of a run cancels out.

Usage: ``python scripts/summarize_bench_runs.py [--json OUT.json] runs/run1-k4096/bench.json ...``; ``--json``
also writes the table as ``{"k=K, s=S, batch B": {label: {"min", "median", "max", "runs"}}}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

#: (label, metric, numerator variant, denominator variant, whether the ratio is denominator / numerator).
RATIOS = [
    ("step: full time / srformer time", "cross_attention_step_time", "srformer", "full-sdpa", True),
    ("state build: srformer time / full cache fill", "cross_attention_prefill_time", "srformer", "full-sdpa", False),
    ("generate(): srformer tokens/s / full", "generate_throughput", "srformer", "full-sdpa", False),
    ("generate(): srformer tokens/s / segmented", "generate_throughput", "srformer", "segmented", False),
    ("generate(): segmented tokens/s / full", "generate_throughput", "segmented", "full-sdpa", False),
    ("generate(): srformer-lean tokens/s / full", "generate_throughput", "srformer-lean", "full-sdpa", False),
    ("step: full time / srformer-lean time", "cross_attention_step_time", "srformer-lean", "full-sdpa", True),
    ("training step: srformer time / full", "training_step_time", "srformer", "full-sdpa", False),
    ("training step: segmented time / full", "training_step_time", "segmented", "full-sdpa", False),
]


def ratios_of(records: list[dict]) -> dict[str, float]:
    """Every ratio of :data:`RATIOS` that the records of one run allow."""
    value = {(r["variant"], r["metric"]): r["value"] for r in records}
    out = {}
    for label, metric, variant, reference, inverted in RATIOS:
        if (variant, metric) in value and (reference, metric) in value:
            a, b = value[(variant, metric)], value[(reference, metric)]
            out[label] = b / a if inverted else a / b
    return out


def main(paths: list[str], json_path: str | None = None) -> None:
    by_shape: dict[tuple, list[dict[str, float]]] = defaultdict(list)
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            records = json.load(handle)
        for size in sorted({r["segment_size"] for r in records if r["segment_size"] is not None}):
            mine = [r for r in records if r["segment_size"] in (size, None)]  # full attention has no segments
            shape = next((r["encoder_length"], size, r["batch_size"]) for r in mine
                         if r["metric"] == "cross_attention_step_time")
            by_shape[shape].append(ratios_of(mine))
    print("| shape | ratio | min / median / max | runs |\n| --- | --- | --- | --- |")
    table: dict[str, dict[str, dict[str, float]]] = {}
    for (k, s, b), runs in sorted(by_shape.items()):
        for label, *_ in RATIOS:
            values = [run[label] for run in runs if label in run]
            if values:
                print(f"| k={k}, s={s}, batch {b} | {label} | {min(values):.2f} / {statistics.median(values):.2f} / "
                      f"{max(values):.2f} | {len(values)} |")
                table.setdefault(f"k={k}, s={s}, batch {b}", {})[label] = {
                    "min": min(values), "median": statistics.median(values), "max": max(values), "runs": len(values)}
    if json_path is not None:
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(table, handle, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench_json", nargs="+", help="bench.json of one run")
    parser.add_argument("--json", metavar="OUT.json", help="also write the table here")
    arguments = parser.parse_args()
    main(arguments.bench_json, arguments.json)
