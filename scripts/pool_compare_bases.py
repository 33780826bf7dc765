"""Pool ``srformer compare`` grids decoded from different base models over the same test documents.

A grid converted with 0 fine-tuning steps has nothing to seed for the parameter-free settings (``full``, ``knn``,
``quest-tree``): a second seed is a second base, trained from other random weights, and its own grid. This script
reads the grids' ``results.json`` (each cell's per-document ROUGE F1) and reports, for every setting found in all
of them, its score on each base, its paired difference to the reference on each base, and the difference pooled
over the bases: per document, the mean over the bases of ``reference - setting``, with a paired bootstrap interval
over the documents (:func:`srformer.evaluation.statistics.paired_difference`; the documents are resampled, each
keeping its bases together). A setting with several seeds in one grid is averaged over them first.

Usage: ``python scripts/pool_compare_bases.py GRID GRID [GRID ...] --output DIR [--reference full] [--labels ...]``
(``GRID``: a run folder or an exported results folder, each holding ``results.json``). Writes ``DIR/pooled.json``
and ``DIR/pooled.md``.

Raises SystemExit, before anything is written, for fewer than two grids, a grid without ``results.json``, grids
that score different numbers of documents, or grids whose exported predictions list other document ids, and when
the reference is not in every grid.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from srformer.evaluation.statistics import paired_difference

KEYS = ("rouge1", "rouge2")


def load_grid(folder: Path) -> dict[str, dict[str, list[float]]]:
    """``{setting: {"rouge1": per-document scores, "rouge2": ...}}`` of a grid, seeds averaged per document.

    Raises:
        SystemExit: without ``results.json``.
    """
    path = folder / "results.json"
    if not path.is_file():
        raise SystemExit(f"{path} not found: give finished compare runs or exported results folders")
    cells = json.loads(path.read_text())["cells"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        by_name.setdefault(cell["name"], []).append(cell["per_document"])
    return {name: {key: np.mean([scores[key] for scores in seeds], axis=0).tolist() for key in KEYS}
            for name, seeds in by_name.items()}


def document_ids(folder: Path, reference: str) -> list[str] | None:
    """The test document ids of the reference's exported predictions (``predictions/<reference>-seed0.jsonl``), or
    None where the folder has none (a run folder keeps them in its cells)."""
    found = (sorted((folder / "predictions").glob(f"{reference}-seed*.jsonl"))
             or sorted((folder / "cells").glob(f"{reference}-seed*/test_predictions.jsonl")))
    if not found:
        return None
    return [json.loads(line)["id"] for line in found[0].read_text().splitlines() if line.strip()]


def pool(grids: list[dict[str, dict[str, list[float]]]], reference: str) -> dict[str, Any]:
    """Per-base scores and differences to ``reference``, and the differences pooled over the bases.

    Returns:
        ``{"reference", "bases", "settings": [{"name", "per_base": [{"rouge1", "rouge2", "minus": {key: paired
        difference}}], "pooled": {"rouge1", "rouge2", "minus": {...}}}], "left_out": [names not in every grid]}``.

    Raises:
        SystemExit: the reference missing from a grid, or grids of different document counts.
    """
    if any(reference not in grid for grid in grids):
        raise SystemExit(f"the reference {reference!r} is not in every grid: run it there or pick another --reference")
    counts = {len(grid[reference]["rouge1"]) for grid in grids}
    if len(counts) != 1:
        raise SystemExit(f"the grids score different numbers of documents ({sorted(counts)}): pool grids of the same "
                         "test set")
    names = [name for name in grids[0] if all(name in grid for grid in grids)]
    left_out = sorted({name for grid in grids for name in grid} - set(names))
    mean_reference = {key: np.mean([grid[reference][key] for grid in grids], axis=0) for key in KEYS}
    settings = []
    for name in names:
        per_base = []
        for grid in grids:
            row: dict[str, Any] = {key: float(np.mean(grid[name][key])) for key in KEYS}
            if name != reference:
                row["minus"] = {key: paired_difference(grid[reference][key], grid[name][key]).to_dict() for key in KEYS}
            per_base.append(row)
        mean_setting = {key: np.mean([grid[name][key] for grid in grids], axis=0) for key in KEYS}
        pooled: dict[str, Any] = {key: float(mean_setting[key].mean()) for key in KEYS}
        if name != reference:
            pooled["minus"] = {key: paired_difference(mean_reference[key], mean_setting[key]).to_dict() for key in KEYS}
        settings.append({"name": name, "per_base": per_base, "pooled": pooled})
    return {"reference": reference, "bases": len(grids), "settings": settings, "left_out": left_out}


def _interval(difference: dict[str, Any]) -> str:
    star = "*" if difference["significant"] else ""
    return f"{difference['mean']:+.2f} [{difference['low']:.2f}, {difference['high']:.2f}]{star}"


def markdown(pooled: dict[str, Any], labels: list[str]) -> str:
    """The table of :func:`pool`'s result, one row per setting (``labels``: the grids' names)."""
    reference = pooled["reference"]
    head = (["setting", *(f"ROUGE-1, {label}" for label in labels),
             *(f"`{reference}` − this, R-1, {label} [95% CI]" for label in labels),
             f"`{reference}` − this, pooled R-1 [95% CI]", f"`{reference}` − this, pooled R-2 [95% CI]"])
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for setting in pooled["settings"]:
        scores = [f"{base['rouge1']:.2f}" for base in setting["per_base"]]
        if setting["name"] == reference:
            differences = ["-"] * (len(labels) + 2)
        else:
            differences = [_interval(base["minus"]["rouge1"]) for base in setting["per_base"]]
            differences += [_interval(setting["pooled"]["minus"][key]) for key in KEYS]
        lines.append("| " + " | ".join([f"`{setting['name']}`", *scores, *differences]) + " |")
    note = (f"\nPaired differences over the same documents; pooled: per document, the mean over the {pooled['bases']} "
            "bases, resampled by document (* : the interval excludes 0).")
    if pooled["left_out"]:
        note += f" Not in every grid, left out: {', '.join(pooled['left_out'])}."
    return "\n".join(lines) + "\n" + note + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grids", nargs="+", type=Path, help="compare run folders or exported results folders")
    parser.add_argument("--output", type=Path, required=True, help="folder for pooled.json and pooled.md")
    parser.add_argument("--reference", default="full", help="the setting every other is compared with")
    parser.add_argument("--labels", nargs="+", help="a short name per grid for the table (default: folder names)")
    args = parser.parse_args(argv)
    if len(args.grids) < 2:
        raise SystemExit("give at least two grids to pool")
    labels = args.labels or [folder.name for folder in args.grids]
    if len(labels) != len(args.grids):
        raise SystemExit(f"--labels: give one per grid ({len(args.grids)}), got {len(labels)}")
    ids = [document_ids(folder, args.reference) for folder in args.grids]
    known = [found for found in ids if found is not None]
    if any(found != known[0] for found in known[1:]):
        raise SystemExit("the grids' predictions list other test documents or another order: pool grids of the "
                         "same test set")
    pooled = pool([load_grid(folder) for folder in args.grids], args.reference)
    pooled["grids"] = [str(folder) for folder in args.grids]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "pooled.json").write_text(json.dumps(pooled, indent=1) + "\n")
    (args.output / "pooled.md").write_text(markdown(pooled, labels))
    print(f"pooled {len(pooled['settings'])} settings over {len(args.grids)} grids into {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
