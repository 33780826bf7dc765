"""Write a ``srformer probe`` run's finished cells into one ``results.json``, without the training-time diagnostics.

A probe run writes ``results.json`` when its whole grid is done; a grid run in several invocations has finished
cells before that. This collects every ``cells/*/*/*/cell.json`` of the run (the ``full`` bases' cells included),
adds the share of the segmented-to-full gap each recovers, and writes ``{"records": [...]}``, the form
``srformer pick`` reads, and its tables next to it (``OUTPUT.md``, as the probe's ``results.md``).

Usage: python scripts/collect_probe_cells.py RUN_DIR OUTPUT.json [PROTOCOL ...]

With protocols (``convert``, ``scratch``), only cells of those are collected: a convert-only run folder also holds
the ``full`` scratch cell its conversions start from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from srformer.probe.report import results_markdown
from srformer.probe.runner import add_gap_recovered


def collect(run: Path, protocols: list[str] | None = None) -> list[dict]:
    """Every finished cell record of ``run`` (of ``protocols`` when given), sorted by key, with ``gap_recovered``
    and without ``diagnostics``."""
    records = []
    for record_file in sorted(run.glob("cells/*/*/*/cell.json")):
        if protocols and record_file.parts[-4] not in protocols:
            continue
        record = json.loads(record_file.read_text())
        record.pop("diagnostics", None)
        records.append(record)
    add_gap_recovered(records)
    return records


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    records = collect(Path(argv[0]), argv[2:] or None)
    output = Path(argv[1])
    output.write_text(json.dumps({"records": records}, indent=2) + "\n")
    table = output.with_suffix(".md")
    table.write_text(results_markdown(records, f"Collected from the finished cells of `{Path(argv[0]).name}`."))
    print(f"{len(records)} cells -> {output}, {table}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
