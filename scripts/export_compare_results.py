"""Copy a finished ``srformer compare`` run into a results folder that can be kept in a repository.

A run directory holds every cell's checkpoint (megabytes each); a results folder keeps what a reader needs and what
re-scoring needs: ``results.json``, ``results.md``, the plots, and ``predictions/<cell>.jsonl`` with each test
document's ``id`` and ``prediction`` (the references and documents are the dataset's, not copied). ``srformer
compare`` re-scores cells from such predictions, so the folder is enough to redo every table without retraining.

Usage: ``python scripts/export_compare_results.py RUN_DIR RESULTS_DIR``

Raises SystemExit, before anything is written, when ``RUN_DIR`` holds no ``results.json`` or a cell has no
``test_predictions.jsonl`` (the grid has not finished).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

REPORT_FILES = ("results.json", "results.md")


def cell_name(directory: Path) -> str:
    """A cell folder's name without its settings suffix (``knn-seed0@encoder_window=512`` -> ``knn-seed0``)."""
    return directory.name.split("@", 1)[0]


def export(run: Path, destination: Path) -> list[str]:
    """Copy the report, the plots and every cell's predictions (``id``, ``prediction``) of ``run`` into
    ``destination``; return the cell names copied."""
    if not (run / "results.json").is_file():
        raise SystemExit(f"{run}/results.json not found: the grid has not finished (rerun srformer compare there)")
    cells = sorted(path for path in (run / "cells").iterdir() if path.is_dir())
    unfinished = [cell.name for cell in cells if not (cell / "test_predictions.jsonl").is_file()]
    if unfinished:
        raise SystemExit(f"cells without test_predictions.jsonl in {run}/cells: {', '.join(unfinished)}; "
                         "finish the grid first (rerun srformer compare there)")
    predictions = destination / "predictions"
    predictions.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        shutil.copy2(run / name, destination / name)
    for plot in sorted(run.glob("*.png")):
        shutil.copy2(plot, destination / plot.name)
    names = []
    for cell in cells:
        text = (cell / "test_predictions.jsonl").read_text()
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        kept = "".join(json.dumps({"id": row["id"], "prediction": row["prediction"]}) + "\n" for row in rows)
        (predictions / f"{cell_name(cell)}.jsonl").write_text(kept)
        names.append(cell_name(cell))
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the --output directory of a finished srformer compare run")
    parser.add_argument("destination", type=Path, help="the results folder to write (created)")
    args = parser.parse_args()
    names = export(args.run, args.destination)
    print(f"{len(names)} cells -> {args.destination}: {', '.join(names)}")


if __name__ == "__main__":
    main()
